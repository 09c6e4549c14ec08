/* amp train: train a built-in model (mlp or cnn on Fashion-MNIST, a GPT on
 * text) in any precision mode. */
#include <float.h>
#include <math.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/cli_internal.h"
#include "cli/trainer.h"

void cmd_train_usage(FILE *f) {
    fprintf(f,
            "usage: amp train [OPTIONS]\n\n"
            "Train the mlp (784-512-512-10) or cnn on Fashion-MNIST (Debian package\n"
            "dataset-fashion-mnist, or $AMP_DATA_DIR), or a GPT-2 style transformer on a\n"
            "text file (default: the Shakespeare corpus scripts/deps.sh text installs), and\n"
            "print a summary.\n\n"
            "  --model mlp|cnn|gpt        model (default mlp)\n"
            "  --precision fp32|fp16|bf16 compute precision (default fp32). fp16 uses autocast\n"
            "                             and the GradScaler; bf16 uses autocast, no scaler\n"
            "  --opt-level O0|O1|O2|O3    Apex opt level with the --precision half type:\n"
            "                             O1 autocast; O2 half params + f32 master weights,\n"
            "                             norms kept f32; O3 pure half, bf16 only (pure fp16 has\n"
            "                             neither loss scaling nor the inf/nan guard); default O1\n"
            "  --policy STRING            jmp-style policy, e.g. params=float32,compute=bfloat16,\n"
            "                             output=float32 (short keys p/c/o; replaces the two above)\n"
            "  --epochs N                 epochs (default 1)\n"
            "  --batch B                  batch size (default 128)\n"
            "  --lr X                     learning rate (default 1e-3)\n"
            "  --optimizer sgd|adam|adamw optimizer (default adamw; sgd uses momentum 0.9)\n"
            "  --schedule cosine|constant learning-rate schedule (default cosine: linear warmup\n"
            "                             for --warmup steps (default 100, at most 10%% of the\n"
            "                             run), then cosine decay\n"
            "                             to 0 at the last step)\n"
            "  --warmup N                 warmup steps for --schedule cosine\n"
            "  --rounding nearest|stochastic  how O2 writes half params from the f32 masters\n"
            "  --seed S                   seed for init, shuffling and dropout (default 0)\n"
            "  --threads T                threads (default: OpenMP's, OMP_NUM_THREADS)\n"
            "  --matmul-precision P       highest|high|medium: internal precision of products of\n"
            "                             f32 operands (amp_set_matmul_precision; default highest).\n"
            "                             medium: one bf16 pass on CPUs with a bf16 dot product\n"
            "  --device cpu|cuda          where the model, the batches and the optimizer live\n"
            "                             (default cpu; cuda: --model gpt, one process, no\n"
            "                             checkpoints yet; docs/cuda.md)\n"
            "  --limit N                  train on the first N images only\n"
            "  --test-limit N             evaluate on the first N test images only\n"
            "  --max-steps N              stop after N optimizer steps\n"
            "  --metrics FILE.csv         per-step metrics: step,epoch,loss,scale,skipped,lr,ms\n"
            "                             (ms: the step, its batch drawn before the clock starts)\n"
            "  --log-every N              progress line period when not on a terminal (default 100)\n"
            "  --quiet                    no progress output (summary only)\n"
            "  --inject-nonfinite-every K debugging aid: write inf/nan into a gradient every K\n"
            "                             steps to exercise skipping and scale backoff\n"
            "  --inject-value V           ... write V instead (inf, nan or a number: 1e38 with\n"
            "                             --init-scale 0.25 is finite scaled, inf unscaled)\n"
            "  --init-scale X             fp16 loss scaling: initial scale (default 65536)\n"
            "  --max-consecutive-overflows N  stop, with a diagnosis and exit 1, after N skipped\n"
            "                             (inf/nan) steps in a row or when the loss scale cannot\n"
            "                             back off further (default 40; 0: never)\n"
            "  --checkpoint DIR           save a checkpoint (DIR/model.safetensors and\n"
            "                             DIR/training_state.safetensors) at the end of training\n"
            "  --save-every N             ... and every N steps (needs --checkpoint or --resume)\n"
            "  --resume DIR               continue the run saved in DIR exactly where it stopped\n"
            "                             (same --model, precision, --optimizer, --rounding, --batch,\n"
            "                             --seed and --limit; --epochs/--max-steps count from the\n"
            "                             start of the run). --checkpoint defaults to DIR\n"
            "  --stop-after N             stop at step N without changing the learning-rate schedule\n"
            "                             (a run split into jobs: save with --checkpoint, then --resume)\n"
            "\n"
            "--model gpt (nanoGPT's GPT-2: tied embeddings, pre-LayerNorm blocks, tanh GELU):\n"
            "  --preset NAME              tiny (default: 4 layers, 4 heads, 128 wide, block 128),\n"
            "                             shakespeare-char (nanoGPT's: 6, 6, 384, block 256, dropout\n"
            "                             0.2) or gpt2-124m (12, 12, 768, block 1024, gpt2 tokens);\n"
            "                             the flags below change single values\n"
            "  --n-layer N --n-head N --n-embd N --block-size N --dropout P --bias true|false\n"
            "  --tokenizer byte|gpt2      byte-level (vocab 256, default) or GPT-2 BPE (50257)\n"
            "  --data FILE                any UTF-8 text file; the last 10%% (from a line start) is\n"
            "                             validation, tokens are cached in ~/.cache/amp\n"
            "  --eval-every N             validation loss every N steps (default: at the end only)\n"
            "  --eval-windows N           validation windows of block-size tokens per evaluation\n"
            "                             (default 128; 0: the whole validation split)\n"
            "  --grad-clip X              clip the global gradient norm (default 1.0; 0: off)\n"
            "  --weight-decay X           AdamW decay of the block matrices (default 0.1); biases,\n"
            "                             LayerNorms and embeddings are not decayed unless\n"
            "  --decay-embeddings         (today's nanoGPT: every parameter with dim >= 2)\n"
            "  --beta2 X                  Adam beta2 (default 0.95)\n"
            "  --checkpoint-activations   recompute each block's forward in backward (same\n"
            "                             gradients bit for bit, less activation memory)\n"
            "  Batch default 16; an epoch is train tokens / (batch x block) steps; the cosine\n"
            "  schedule ends at lr / 10. Progress shows tokens/s; the summary the validation\n"
            "  loss beside the unigram entropy of the validation text.\n"
            "\n"
            "Data parallel: mpirun -np N amp train ... trains one model on N processes (add\n"
            "--allow-run-as-root as root, --oversubscribe for more processes than cores). --batch\n"
            "is the global batch: each rank takes its shard of every batch, gradients are averaged\n"
            "during backward, every rank skips or steps together; rank 0 prints and writes the\n"
            "checkpoint, which resumes on any number of ranks (docs/distributed.md).\n"
            "  --zero 0|1                 1: ZeRO-1, f32 master weights and optimizer moments\n"
            "                             sharded across ranks (default 0: replicated)\n"
            "  --grad-comm param|bf16     gradients sent in the parameters' dtype (default) or\n"
            "                             rounded to bf16 (half the bytes; summed in f32)\n"
            "  --bucket-mb X              gradient bucket size in MiB (default 25; the first 1)\n"
            "  --no-overlap               send the buckets after the backward, not during it\n"
            "  --dist-timeout S           fail a collective after S seconds without a peer\n"
            "                             (default $AMP_DIST_TIMEOUT or 300)\n"
            "\n"
            "A batch whose input holds NaN/inf stops the run with a report naming the step and batch,\n"
            "before the weights are touched. SIGINT (Ctrl-C) or SIGTERM: the current step is finished\n"
            "and saved to --checkpoint DIR (continue with --resume DIR), exit 130 / 143; a second\n"
            "signal exits at once. Exit status: 0 success, 1 failure, 2 bad usage.\n");
}

/* The flags that set a count (an int64_t of trainer_cfg) and nothing else:
 * the least value each takes (the most: 2^40). */
static const struct {
    const char *name;
    long lo;
    size_t off;
} g_counts[] = {
    {"--limit", 1, offsetof(trainer_cfg, limit)},
    {"--test-limit", 1, offsetof(trainer_cfg, test_limit)},
    {"--max-steps", 1, offsetof(trainer_cfg, max_steps)},
    {"--log-every", 1, offsetof(trainer_cfg, log_every)},
    {"--inject-nonfinite-every", 1, offsetof(trainer_cfg, inject_nonfinite_every)},
    {"--max-consecutive-overflows", 0, offsetof(trainer_cfg, max_consecutive_overflows)},
};

/* Whether v is one of three words; if not, says so ("amp: FLAG 'v' is not w0, w1 or w2"). */
static bool one_of3(const char *flag, const char *v, const char *w0, const char *w1, const char *w2) {
    if (!strcmp(v, w0) || !strcmp(v, w1) || !strcmp(v, w2)) return true;
    fprintf(stderr, "amp: %s '%s' is not %s, %s or %s\n", flag, v, w0, w1, w2);
    return false;
}

/* Shared by train and compare: one flag; returns 1 if consumed, 0 if not
 * ours, -1 on a bad value (message printed). */
int train_parse_flag(trainer_cfg *cfg, int argc, char **argv, int *i, const char **precision, const char **opt_level,
                     const char **policy) {
    const char *a = argv[*i];
    const char *v = *i + 1 < argc ? argv[*i + 1] : NULL;
#define NEED_VALUE()                                                  \
    do {                                                              \
        if (!v) {                                                     \
            fprintf(stderr, "amp: %s needs a value\n", a);             \
            return -1;                                                \
        }                                                             \
        (*i)++;                                                       \
    } while (0)
    long lv;
    double dv;
    for (size_t k = 0; k < sizeof g_counts / sizeof g_counts[0]; k++) {
        if (strcmp(a, g_counts[k].name)) continue;
        NEED_VALUE();
        if (cli_parse_long(v, g_counts[k].lo, 1L << 40, &lv)) goto bad;
        *(int64_t *)((char *)cfg + g_counts[k].off) = lv;
        return 1;
    }
    if (!strcmp(a, "--model")) {
        NEED_VALUE();
        if (!one_of3(a, v, "mlp", "cnn", "gpt")) return -1;
        cfg->model = v;
    } else if (!strcmp(a, "--preset")) {
        NEED_VALUE();
        if (trainer_gpt_preset(cfg, v)) {
            fprintf(stderr, "amp: --preset '%s' is not tiny, shakespeare-char or gpt2-124m\n", v);
            return -1;
        }
        cfg->gpt_flags++;
    } else if (!strcmp(a, "--n-layer") || !strcmp(a, "--n-head") || !strcmp(a, "--n-embd") || !strcmp(a, "--block-size")) {
        NEED_VALUE();
        if (cli_parse_long(v, 1, !strcmp(a, "--block-size") ? 1L << 20 : 1L << 16, &lv)) goto bad;
        if (!strcmp(a, "--n-layer")) cfg->gpt.n_layer = lv;
        else if (!strcmp(a, "--n-head")) cfg->gpt.n_head = lv;
        else if (!strcmp(a, "--n-embd")) cfg->gpt.n_embd = lv;
        else cfg->gpt.block_size = lv;
        cfg->gpt_flags++;
    } else if (!strcmp(a, "--dropout")) {
        NEED_VALUE();
        if (cli_parse_double(v, &dv) || !(dv >= 0 && dv < 1)) goto bad;
        cfg->gpt.dropout = dv;
        cfg->gpt_flags++;
    } else if (!strcmp(a, "--bias")) {
        NEED_VALUE();
        if (!strcmp(v, "true")) cfg->gpt.bias = true;
        else if (!strcmp(v, "false")) cfg->gpt.bias = false;
        else goto bad;
        cfg->gpt_flags++;
    } else if (!strcmp(a, "--tokenizer")) {
        NEED_VALUE();
        if (strcmp(v, "byte") && strcmp(v, "gpt2")) goto bad;
        cfg->tokenizer = v;
        cfg->gpt_flags++;
    } else if (!strcmp(a, "--data")) {
        NEED_VALUE();
        cfg->data_path = v;
        cfg->gpt_flags++;
    } else if (!strcmp(a, "--eval-every") || !strcmp(a, "--eval-windows")) {
        NEED_VALUE();
        if (cli_parse_long(v, 0, 1L << 40, &lv)) goto bad;
        if (!strcmp(a, "--eval-every")) cfg->eval_every = lv;
        else cfg->eval_windows = lv;
        cfg->gpt_flags++;
    } else if (!strcmp(a, "--grad-clip") || !strcmp(a, "--weight-decay") || !strcmp(a, "--beta2")) {
        NEED_VALUE();
        if (cli_parse_double(v, &dv) || !(dv >= 0 && dv < 1e6) || (!strcmp(a, "--beta2") && !(dv < 1))) goto bad;
        if (!strcmp(a, "--grad-clip")) cfg->grad_clip = dv;
        else if (!strcmp(a, "--weight-decay")) cfg->weight_decay = dv;
        else cfg->beta2 = dv;
        cfg->gpt_flags++;
    } else if (!strcmp(a, "--decay-embeddings")) {
        cfg->decay_embeddings = true;
        cfg->gpt_flags++;
    } else if (!strcmp(a, "--checkpoint-activations")) {
        cfg->checkpoint_activations = true;
        cfg->gpt_flags++;
    } else if (!strcmp(a, "--precision")) {
        NEED_VALUE();
        *precision = v;
    } else if (!strcmp(a, "--opt-level")) {
        NEED_VALUE();
        *opt_level = v;
    } else if (!strcmp(a, "--policy")) {
        NEED_VALUE();
        *policy = v;
    } else if (!strcmp(a, "--epochs")) {
        NEED_VALUE();
        if (cli_parse_long(v, 1, 1000, &lv)) goto bad;
        cfg->epochs = (int)lv;
    } else if (!strcmp(a, "--batch")) {
        NEED_VALUE();
        if (cli_parse_long(v, 1, 1 << 20, &lv)) goto bad;
        cfg->batch = lv;
        cfg->batch_set = true;
    } else if (!strcmp(a, "--lr")) {
        NEED_VALUE();
        if (cli_parse_double(v, &dv) || !(dv >= 0) || dv > 1e3) goto bad;
        cfg->lr = dv;
    } else if (!strcmp(a, "--optimizer")) {
        NEED_VALUE();
        if (!strcmp(v, "sgd")) cfg->optimizer = AMP_OPTIM_SGD;
        else if (!strcmp(v, "adam")) cfg->optimizer = AMP_OPTIM_ADAM;
        else if (!strcmp(v, "adamw")) cfg->optimizer = AMP_OPTIM_ADAMW;
        else goto bad;
    } else if (!strcmp(a, "--schedule")) {
        NEED_VALUE();
        if (!strcmp(v, "constant")) cfg->schedule.kind = AMP_LR_CONSTANT, cfg->schedule.warmup_steps = 0;
        else if (!strcmp(v, "cosine")) {
            cfg->schedule.kind = AMP_LR_COSINE;
            if (!cfg->schedule.warmup_steps) cfg->schedule.warmup_steps = 100;
        } else goto bad;
    } else if (!strcmp(a, "--warmup")) {
        NEED_VALUE();
        if (cli_parse_long(v, 0, 1L << 40, &lv)) goto bad;
        cfg->schedule.warmup_steps = lv;
        cfg->warmup_set = true;
    } else if (!strcmp(a, "--rounding")) {
        NEED_VALUE();
        if (!strcmp(v, "nearest")) cfg->rounding = AMP_ROUND_NEAREST;
        else if (!strcmp(v, "stochastic")) cfg->rounding = AMP_ROUND_STOCHASTIC;
        else goto bad;
    } else if (!strcmp(a, "--seed")) {
        NEED_VALUE();
        if (cli_parse_long(v, 0, 0x7fffffffffffffffL, &lv)) goto bad;
        cfg->seed = (uint64_t)lv;
    } else if (!strcmp(a, "--threads")) {
        NEED_VALUE();
        if (cli_parse_long(v, 1, 1024, &lv)) goto bad;
        cfg->threads = (int)lv;
    } else if (!strcmp(a, "--matmul-precision")) {
        NEED_VALUE();
        if (!one_of3(a, v, "highest", "high", "medium")) return -1;
        cfg->matmul_precision = v;
    } else if (!strcmp(a, "--device")) {
        NEED_VALUE();
        if (amp_device_parse(v, &cfg->device) != AMP_OK) {
            fprintf(stderr, "amp: --device: %s\n", amp_last_error());
            return -1;
        }
    } else if (!strcmp(a, "--metrics")) {
        NEED_VALUE();
        cfg->metrics_path = v;
    } else if (!strcmp(a, "--quiet")) {
        cfg->progress = false;
    } else if (!strcmp(a, "--inject-value")) {
        NEED_VALUE();
        if (!strcasecmp(v, "inf")) dv = INFINITY;
        else if (!strcasecmp(v, "nan")) dv = NAN;
        else if (cli_parse_double(v, &dv)) goto bad;
        cfg->inject_value = dv;
        cfg->inject_value_set = true;
    } else if (!strcmp(a, "--init-scale")) {
        NEED_VALUE();
        /* the scale is an f32: 1e-300 would be 0 and 1e300 inf */
        if (cli_parse_double(v, &dv) || !(dv >= (double)FLT_MIN && dv <= (double)FLT_MAX)) {
            fprintf(stderr, "amp: --init-scale '%s' must be a number in the f32 range [%g, %g]\n", v, (double)FLT_MIN, (double)FLT_MAX);
            return -1;
        }
        cfg->init_scale = dv;
    } else {
        return 0;
    }
    return 1;
bad:
    fprintf(stderr, "amp: %s: invalid value '%s'\n", a, v);
    return -1;
#undef NEED_VALUE
}

/* After parsing: GPT flags only with --model gpt; the GPT's defaults. 0 or -1 (message printed). */
int train_check_model_flags(trainer_cfg *cfg) {
    if (cfg->device != AMP_DEVICE_CPU) {
        const char *why = strcmp(cfg->model, "gpt")          ? "--model mlp and cnn train on the CPU only so far"
                          : cfg->checkpoint_dir || cfg->resume_dir ? "--checkpoint/--resume are not supported there yet"
                          : cfg->inject_nonfinite_every       ? "--inject-nonfinite-every writes into gradients on the host"
                          : amp__dist_launched()              ? "data parallel runs (mpirun) use the CPU only so far"
                                                              : NULL;
        if (why) {
            fprintf(stderr, "amp: --device %s: %s (docs/cuda.md)\n", amp_device_name(cfg->device), why);
            return -1;
        }
        if (amp_device_check(cfg->device) != AMP_OK) {
            fprintf(stderr, "amp: --device %s: %s\n", amp_device_name(cfg->device), amp_last_error());
            return -1;
        }
    }
    if (strcmp(cfg->model, "gpt")) {
        if (cfg->gpt_flags) {
            fprintf(stderr, "amp: --preset, --n-layer, --tokenizer, --data ... are options of --model gpt\n");
            return -1;
        }
        return 0;
    }
    if (!cfg->batch_set) cfg->batch = 16;
    if (cfg->gpt.n_embd % cfg->gpt.n_head) {
        fprintf(stderr, "amp: --n-embd %lld is not a multiple of --n-head %lld\n", (long long)cfg->gpt.n_embd,
                (long long)cfg->gpt.n_head);
        return -1;
    }
    if (cfg->limit || cfg->test_limit) {
        fprintf(stderr, "amp: --limit and --test-limit are Fashion-MNIST options (the GPT takes --data, --eval-windows)\n");
        return -1;
    }
    return 0;
}

int cmd_train(int argc, char **argv) {
    trainer_cfg cfg;
    trainer_defaults(&cfg);
    /* under mpirun the ranks' stdout is Open MPI's pseudo-terminal even when
     * mpirun's own output goes to a file: progress is printed as lines there */
    cfg.tty = isatty(fileno(stdout)) && !amp__dist_launched();
    const char *precision = NULL, *opt_level = NULL, *policy = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (cli_is_help(a)) { /* anywhere: `amp train --model gpt --help` */
            cmd_train_usage(stdout);
            return CLI_OK;
        }
        if (!strcmp(a, "--checkpoint") || !strcmp(a, "--resume") || !strcmp(a, "--save-every") || !strcmp(a, "--stop-after")) {
            if (!v || !*v) return cli_usage_error(cmd_train_usage, "train: %s needs a value", a);
            i++;
            long lv;
            if (!strcmp(a, "--checkpoint")) cfg.checkpoint_dir = v;
            else if (!strcmp(a, "--resume")) cfg.resume_dir = v;
            else if (cli_parse_long(v, 1, 1L << 40, &lv)) return cli_usage_error(cmd_train_usage, "train: %s: invalid value '%s'", a, v);
            else if (!strcmp(a, "--save-every")) cfg.save_every = lv;
            else cfg.stop_after = lv;
            continue;
        }
        if (!strcmp(a, "--zero") || !strcmp(a, "--grad-comm") || !strcmp(a, "--bucket-mb") || !strcmp(a, "--dist-timeout")) {
            if (!v || !*v) return cli_usage_error(cmd_train_usage, "train: %s needs a value", a);
            i++;
            long lv;
            double dv;
            if (!strcmp(a, "--zero")) {
                if (cli_parse_long(v, 0, 1, &lv))
                    return cli_usage_error(cmd_train_usage, "train: --zero '%s' is not 0 or 1 (ZeRO-2/3 are not implemented)", v);
                cfg.zero_stage = (int)lv;
            } else if (!strcmp(a, "--grad-comm")) {
                if (!strcmp(v, "param")) cfg.grad_comm = AMP_GRAD_COMM_PARAM;
                else if (!strcmp(v, "bf16")) cfg.grad_comm = AMP_GRAD_COMM_BF16;
                else return cli_usage_error(cmd_train_usage, "train: --grad-comm '%s' is not param or bf16", v);
            } else if (cli_parse_double(v, &dv) || !(dv > 0) || dv > 1e6) {
                return cli_usage_error(cmd_train_usage, "train: %s: invalid value '%s'", a, v);
            } else if (!strcmp(a, "--bucket-mb")) {
                cfg.bucket_mb = dv;
            } else {
                cfg.dist_timeout = dv;
            }
            continue;
        }
        if (!strcmp(a, "--no-overlap")) {
            cfg.no_overlap = true;
            continue;
        }
        int r = train_parse_flag(&cfg, argc, argv, &i, &precision, &opt_level, &policy);
        if (r < 0) return cli_usage_error(cmd_train_usage, "train: bad option");
        if (r == 0) return cli_usage_error(cmd_train_usage, "train: unknown option '%s'", argv[i]);
    }
    if (trainer_resolve_mode(&cfg, precision, opt_level, policy)) return cli_usage_error(cmd_train_usage, "train: bad precision mode");
    if (train_check_model_flags(&cfg)) return cli_usage_error(cmd_train_usage, "train: bad options for --model %s", cfg.model);
    if (!cfg.checkpoint_dir) cfg.checkpoint_dir = cfg.resume_dir;
    if (cfg.save_every > 0 && !cfg.checkpoint_dir)
        return cli_usage_error(cmd_train_usage, "train: --save-every needs --checkpoint DIR (or --resume DIR)");
    if (cfg.schedule.kind == AMP_LR_COSINE) {
        /* total steps are known only after loading; the trainer clamps */
        cfg.schedule.total_steps = 0;
    }
    /* under mpirun: one rank of a data-parallel run; rank 0 prints */
    if (trainer_dist_init() != 0) return CLI_FAIL;
    amp_dist_group *world = amp_dist_world();
    bool root = amp_dist_rank(world) == 0;
    if (!root) cfg.progress = false;
    if (root) {
        if (cfg.device != AMP_DEVICE_CPU) {
            amp_cuda_info di;
            fprintf(cfg.out, "amp train: %s, %s, on %s", cfg.model, cfg.mode_name,
                    amp_cuda_get_info(&di) == AMP_OK ? di.name : amp_device_name(cfg.device));
        } else {
            fprintf(cfg.out, "amp train: %s, %s, cpu path %s, %d threads", cfg.model, cfg.mode_name,
                    amp_cpu_path_name(amp_cpu_active()), cfg.threads ? cfg.threads : amp_get_num_threads());
        }
        if (amp_dist_world_size(world) > 1) fprintf(cfg.out, " per rank, %d ranks", amp_dist_world_size(world));
        fputc('\n', cfg.out);
    }
    trainer_result r;
    cfg.handle_signals = true; /* Ctrl-C keeps the steps done: the run stops after the current one and saves */
    if (trainer_run(&cfg, &r, false) != 0) return trainer_dist_fail(amp_last_error());
    const char *sig = r.interrupted == SIGINT ? "SIGINT" : "SIGTERM";
    if (r.stopped_early) {
        if (root) {
            fflush(cfg.out);
            if (cfg.checkpoint_dir)
                fprintf(stderr, "amp train: stopped by %s after step %lld; the checkpoint in %s holds that step: run the same command "
                                "with --resume %s to continue\n", sig, (long long)r.steps, cfg.checkpoint_dir, cfg.checkpoint_dir);
            else
                fprintf(stderr, "amp train: stopped by %s after step %lld; without --checkpoint DIR nothing is kept (a run that "
                                "saves can be continued with --resume DIR)\n", sig, (long long)r.steps);
        }
        fflush(cfg.out);
        if (amp_dist_finalize() != AMP_OK) return cli_fail("%s", amp_last_error());
        return 128 + r.interrupted;
    }
    if (root) {
        trainer_print_summary(cfg.out, &cfg, &r);
        trainer_dist_print_summary(cfg.out, &cfg, &r);
        if (cfg.checkpoint_dir)
            fprintf(cfg.out, "  checkpoint        %s (step %lld; %lld saved by this run%s)\n", cfg.checkpoint_dir, (long long)r.steps,
                    (long long)r.checkpoints, r.resumed_step ? ", resumed" : "");
    }
    fflush(cfg.out);
    if (r.interrupted && root)
        fprintf(stderr, "amp train: %s arrived after the last step: the run is complete%s\n", sig, cfg.checkpoint_dir ? " and saved" : "");
    if (amp_dist_finalize() != AMP_OK) return cli_fail("%s", amp_last_error());
    return r.interrupted ? 128 + r.interrupted : CLI_OK;
}
