/* amp memory: the seeds' memory arithmetic for a model beside the bytes the
 * allocator measured during real training steps in each mode. */
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/trainer.h"

void cmd_memory_usage(FILE *f) {
    fprintf(f,
            "usage: amp memory [--model mlp|cnn] [--batch B] [--optimizer sgd|adam|adamw] [--threads T]\n"
            "       amp memory --model gpt [--preset NAME] [--batch B] [--block-size T] [GPT OPTIONS]\n\n"
            "Prints the seeds' memory arithmetic for the model (fp32 + Adam: 4 bytes params +\n"
            "4 grads + 8 optimizer = 16 bytes/param; mixed with f32 master weights: 4 master +\n"
            "2 half params + 2 half grads + 8 optimizer = 16) beside the peak bytes per\n"
            "category the allocator measured during two real training steps in each mode\n"
            "(fp32 O0, fp16 O1, bf16 O1, fp16 O2, bf16 O2), and says where they differ and why.\n\n"
            "--model gpt (any GPT option of 'amp train': --preset, --n-layer, --block-size, --tokenizer,\n"
            "--max-steps (default 2) ...): the same for fp32, fp16 O1, bf16 O1 and bf16 O2, each also with\n"
            "--checkpoint-activations, and the activations the arithmetic expects per token and dtype.\n"
            "GPT-2 124M where activations dominate: --preset gpt2-124m --batch 16 --block-size 256.\n");
}

typedef struct {
    const char *label, *precision, *opt_level;
} mode_row;

/* --model gpt: the seeds' arithmetic (static bytes per parameter, the
 * activations autograd keeps per token by dtype) beside the allocator's
 * peaks for fp32, fp16/bf16 O1, bf16 O2, each also with activation
 * checkpointing. */
void trainer_print_mem_categories(FILE *f, int n, const char *const *labels, const trainer_result *res) {
    char b[32];
    for (int k = 0; k < n; k++) fprintf(f, " %s |", labels[k]);
    fprintf(f, "\n|---|");
    for (int k = 0; k < n; k++) fprintf(f, "---|");
    fprintf(f, "\n");
    for (int c = 0; c < AMP_MEM_CATEGORY_COUNT; c++) {
        fprintf(f, "| %s |", amp_mem_category_name((amp_mem_category)c));
        for (int k = 0; k < n; k++) fprintf(f, " %s |", fmt_bytes(res[k].mem.peak[c], b, sizeof b));
        fprintf(f, "\n");
    }
}

static int memory_gpt(trainer_cfg *base) {
    static const struct {
        const char *label, *precision, *opt_level;
        bool ckpt;
    } rows[] = {{"fp32", "fp32", NULL, false},        {"fp16 O1", "fp16", "O1", false},    {"bf16 O1", "bf16", "O1", false},
                {"bf16 O2", "bf16", "O2", false},     {"fp32 ckpt", "fp32", NULL, true},   {"bf16 O1 ckpt", "bf16", "O1", true},
                {"bf16 O2 ckpt", "bf16", "O2", true}};
    enum { NR = sizeof rows / sizeof rows[0] };
    base->progress = false;
    if (!base->max_steps) base->max_steps = 2;
    base->eval_windows = 1;
    amp_tokenizer *tok = amp_tokenizer_by_name(base->tokenizer);
    if (!tok) return cli_fail("%s", amp_last_error());
    amp_gpt_config g = base->gpt;
    g.vocab_size = amp_tokenizer_vocab_size(tok);
    amp_tokenizer_free(tok);
    double C = (double)g.n_embd, L = (double)g.n_layer, V = (double)g.vocab_size, nh = (double)g.n_head;
    double P = (double)(g.vocab_size * g.n_embd + g.block_size * g.n_embd) + L * (12 * C * C + 13 * C) + 2 * C;
    if (!g.bias) P -= L * (9 * C) + C;
    double tokens = (double)(base->batch * g.block_size);
    /* elements autograd keeps per token: per block ln_1's input, its output
     * (the c_attn input), qkv 3C, the attention output and its logsumexp
     * (nh floats), the output's [B, T, C] copy (c_proj's input), the
     * residual h (ln_2's input), ln_2's output, c_fc's output 4C (GELU's
     * input), GELU's output 4C (c_proj's input): 17C + nh; at the head
     * ln_f's input and output and the logits: 2C + V */
    double per_layer = 17 * C + nh, head = 2 * C + V;
    double act = tokens * (L * per_layer + head), act_ck = tokens * (L * C + per_layer + head);
    char b[6][32];
    FILE *f = stdout;
    fprintf(f, "model gpt: %lld layers, %lld heads, %lld wide, block %lld, vocab %lld (%s): %.0f parameters; AdamW; batch %lld x %lld "
               "tokens\n\n",
            (long long)g.n_layer, (long long)g.n_head, (long long)g.n_embd, (long long)g.block_size, (long long)g.vocab_size,
            base->tokenizer, P, (long long)base->batch, (long long)g.block_size);
    fprintf(f, "static memory by the seeds' arithmetic (bytes per parameter x %.0f):\n", P);
    fprintf(f, "  fp32:                 4 params + 4 grads + 8 Adam = 16 B/param = %s\n", fmt_bytes((size_t)(16 * P), b[0], 32));
    fprintf(f, "  mixed, O1 (autocast): 4 params + 4 grads + 8 Adam + 2 cast cache = 18 B/param = %s\n",
            fmt_bytes((size_t)(18 * P), b[0], 32));
    fprintf(f, "  mixed, O2 (master):   2 half params + 2 half grads + 4 master + 8 Adam = 16 B/param = %s\n"
               "                        (+4 B/param of f32 master gradients while the step unscales and clips)\n",
            fmt_bytes((size_t)(16 * P), b[0], 32));
    fprintf(f, "activations by the seeds' arithmetic (4 bytes -> 2 bytes per element): autograd keeps\n"
               "  17C + nh = %.0f elements per token per layer and 2C + V = %.0f at the head: %.0f elements\n"
               "  for %.0f tokens = %s in fp32, %s in half; with activation checkpointing C per layer\n"
               "  (the block inputs) + one block's + the head's = %s in fp32, %s in half\n\n",
            per_layer, head, act, tokens, fmt_bytes((size_t)(4 * act), b[0], 32), fmt_bytes((size_t)(2 * act), b[1], 32),
            fmt_bytes((size_t)(4 * act_ck), b[2], 32), fmt_bytes((size_t)(2 * act_ck), b[3], 32));
    trainer_result res[NR];
    for (int k = 0; k < NR; k++) {
        trainer_cfg cfg = *base;
        if (trainer_resolve_mode(&cfg, rows[k].precision, rows[k].opt_level, NULL)) return CLI_USAGE;
        cfg.checkpoint_activations = rows[k].ckpt;
        fprintf(stderr, "amp memory: %s ...\n", rows[k].label);
        if (trainer_run(&cfg, &res[k], false) != 0) return cli_fail("%s", amp_last_error());
    }
    fprintf(f, "measured peak bytes per category over %lld training steps (each category's own peak):\n\n| category |",
            (long long)base->max_steps);
    const char *labels[NR];
    for (int k = 0; k < NR; k++) labels[k] = rows[k].label;
    trainer_print_mem_categories(f, NR, labels, res);
    fprintf(f, "| **total** (peak of the sum) |");
    for (int k = 0; k < NR; k++) fprintf(f, " **%s** |", fmt_bytes(res[k].mem.peak_total, b[4], 32));
    fprintf(f, "\n| saving vs fp32 |");
    for (int k = 0; k < NR; k++)
        fprintf(f, " %+.1f%% |", 100.0 * (1.0 - (double)res[k].mem.peak_total / (double)res[0].mem.peak_total));
    fprintf(f, "\n| activations: arithmetic |");
    for (int k = 0; k < NR; k++) {
        double e = rows[k].ckpt ? act_ck : act;
        fprintf(f, " %s |", fmt_bytes((size_t)(e * (strcmp(rows[k].precision, "fp32") ? 2 : 4)), b[4], 32));
    }
    fprintf(f, "\n\nwhere measurement and arithmetic differ, and why:\n"
               "- activation (O1): autocast keeps in half only what the half ops produce (matmuls, attention,\n"
               "  GELU of a half input); the LayerNorms are fp32 ops, so their inputs (the f32 residual\n"
               "  stream) and outputs stay f32, and the half copy of each LayerNorm output that the next\n"
               "  matmul reads is kept too. Logits stay half: cross-entropy widens them inside its kernel.\n"
               "- activation (O2): everything is half except the LayerNorms, kept in f32 (Apex's\n"
               "  keep_batchnorm_fp32): each keeps an f32 copy of its input.\n"
               "- cast_cache: O1 casts each f32 weight to half once per forward (2 B/param); O2 needs none.\n"
               "- grad: O2's half gradients plus the f32 master gradients of the unscale before clipping.\n"
               "- optimizer: Adam's two moments, and under O2 the f32 master weights.\n"
               "- checkpointing keeps each block's input and recomputes the block during backward: the\n"
               "  activation peak is one block's activations plus the inputs of all blocks.\n"
               "- workspace: kernel scratch and backward temporaries (gradients in flight), which no\n"
               "  textbook arithmetic counts.\n");
    return CLI_OK;
}

int cmd_memory(int argc, char **argv) {
    trainer_cfg base;
    trainer_defaults(&base);
    base.optimizer = AMP_OPTIM_ADAMW;
    long lv;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc && !strcmp(argv[i + 1], "gpt")) {
            const char *precision = NULL, *opt_level = NULL, *policy = NULL;
            for (int j = 1; j < argc; j++) {
                int r = train_parse_flag(&base, argc, argv, &j, &precision, &opt_level, &policy);
                if (r < 0) return cli_usage_error(cmd_memory_usage, "memory: bad option");
                if (r == 0) return cli_usage_error(cmd_memory_usage, "memory: unknown option '%s'", argv[j]);
            }
            if (precision || opt_level || policy)
                return cli_usage_error(cmd_memory_usage, "memory: the precision modes are chosen by memory itself");
            if (base.device != AMP_DEVICE_CPU)
                return cli_usage_error(cmd_memory_usage, "memory: --device %s is not supported yet (amp bench gpt --device "
                                                         "cuda reports peak GPU memory by category)", amp_device_name(base.device));
            if (train_check_model_flags(&base)) return cli_usage_error(cmd_memory_usage, "memory: bad GPT options");
            return memory_gpt(&base);
        }
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--model") && v) {
            if (strcmp(v, "mlp") && strcmp(v, "cnn")) return cli_usage_error(cmd_memory_usage, "memory: bad --model '%s'", v);
            base.model = v;
            i++;
        } else if (!strcmp(a, "--batch") && v) {
            if (cli_parse_long(v, 1, 1 << 20, &lv)) return cli_usage_error(cmd_memory_usage, "memory: bad --batch '%s'", v);
            base.batch = lv;
            i++;
        } else if (!strcmp(a, "--optimizer") && v) {
            if (!strcmp(v, "sgd")) base.optimizer = AMP_OPTIM_SGD;
            else if (!strcmp(v, "adam")) base.optimizer = AMP_OPTIM_ADAM;
            else if (!strcmp(v, "adamw")) base.optimizer = AMP_OPTIM_ADAMW;
            else return cli_usage_error(cmd_memory_usage, "memory: bad --optimizer '%s'", v);
            i++;
        } else if (!strcmp(a, "--threads") && v) {
            if (cli_parse_long(v, 1, 1024, &lv)) return cli_usage_error(cmd_memory_usage, "memory: bad --threads '%s'", v);
            base.threads = (int)lv;
            i++;
        } else {
            return cli_usage_error(cmd_memory_usage, "memory: unknown option '%s'", a);
        }
    }
    base.progress = false;
    base.max_steps = 2;
    base.limit = base.batch * 2;
    base.test_limit = 100;
    amp_generator g = amp_generator_make(0);
    amp_module *m = amp_model_build(base.model, &g);
    if (!m) return cli_fail("%s", amp_last_error());
    int64_t P = amp_module_num_params(m);
    amp_module_free(m);
    double opt_bytes = base.optimizer == AMP_OPTIM_SGD ? 4.0 : 8.0; /* momentum 0.9 / Adam moments */
    char b[5][32];
    FILE *f = stdout;
    fprintf(f, "model %s: %lld parameters; optimizer %s%s (%g bytes of state per parameter); batch %lld\n\n", base.model,
            (long long)P, trainer_optim_name(base.optimizer), base.optimizer == AMP_OPTIM_SGD ? " (momentum)" : "", opt_bytes,
            (long long)base.batch);
    fprintf(f, "static memory by the seeds' arithmetic (bytes per parameter x %lld):\n", (long long)P);
    fprintf(f, "  fp32:                 4 params + 4 grads + %g optimizer = %g B/param = %s\n", opt_bytes, 8 + opt_bytes,
            fmt_bytes((size_t)((8 + opt_bytes) * (double)P), b[0], 32));
    fprintf(f, "  mixed, O1 (autocast): 4 params + 4 grads + %g optimizer + 2 cast cache = %g B/param = %s\n", opt_bytes,
            10 + opt_bytes, fmt_bytes((size_t)((10 + opt_bytes) * (double)P), b[0], 32));
    fprintf(f, "  mixed, O2 (master):   2 half params + 2 half grads + 4 master + %g optimizer = %g B/param = %s\n", opt_bytes,
            8 + opt_bytes, fmt_bytes((size_t)((8 + opt_bytes) * (double)P), b[0], 32));
    fprintf(f, "  (the seeds' 003 table: 4a + 2a + 2a + 8a = 16a, the same as fp32: mixed precision\n"
               "   does not shrink static memory; its saving is in activations, 2 bytes not 4)\n\n");

    static const mode_row rows[] = {
        {"fp32 O0", "fp32", NULL}, {"fp16 O1", "fp16", "O1"}, {"bf16 O1", "bf16", "O1"}, {"fp16 O2", "fp16", "O2"},
        {"bf16 O2", "bf16", "O2"},
    };
    enum { NR = sizeof rows / sizeof rows[0] };
    trainer_result res[NR];
    for (int k = 0; k < NR; k++) {
        trainer_cfg cfg = base;
        if (trainer_resolve_mode(&cfg, rows[k].precision, rows[k].opt_level, NULL)) return CLI_USAGE;
        if (trainer_run(&cfg, &res[k], false) != 0) return cli_fail("%s", amp_last_error());
    }
    fprintf(f, "measured peak bytes per category over two training steps:\n\n| category | arithmetic (fp32 / O1 / O2) |");
    for (int k = 0; k < NR; k++) fprintf(f, " %s |", rows[k].label);
    fprintf(f, "\n|---|---|");
    for (int k = 0; k < NR; k++) fprintf(f, "---|");
    fprintf(f, "\n");
    const double arith[AMP_MEM_CATEGORY_COUNT][3] = {
        [AMP_MEM_PARAM] = {4, 4, 2}, [AMP_MEM_GRAD] = {4, 4, 2}, [AMP_MEM_OPTIM] = {0, 0, 4},
        [AMP_MEM_CAST_CACHE] = {0, 2, 0},
    };
    for (int c = 0; c < AMP_MEM_CATEGORY_COUNT; c++) {
        double o0 = arith[c][0], o1 = arith[c][1], o2 = arith[c][2];
        if (c == AMP_MEM_OPTIM) {
            o0 += opt_bytes;
            o1 += opt_bytes;
            o2 += opt_bytes;
        }
        fprintf(f, "| %s | ", amp_mem_category_name((amp_mem_category)c));
        if (o0 || o1 || o2)
            fprintf(f, "%s / %s / %s |", fmt_bytes((size_t)(o0 * (double)P), b[0], 32), fmt_bytes((size_t)(o1 * (double)P), b[1], 32),
                    fmt_bytes((size_t)(o2 * (double)P), b[2], 32));
        else
            fprintf(f, "- |");
        for (int k = 0; k < NR; k++) fprintf(f, " %s |", fmt_bytes(res[k].mem.peak[c], b[3], 32));
        fprintf(f, "\n");
    }
    fprintf(f, "| total (peak of the sum) | |");
    for (int k = 0; k < NR; k++) fprintf(f, " %s |", fmt_bytes(res[k].mem.peak_total, b[4], 32));
    fprintf(f, "\n\nwhere measurement and arithmetic differ, and why:\n"
               "- activation: the arithmetic above counts static memory only; activations are\n"
               "  measured (forward outputs kept for backward): they scale with the batch and halve\n"
               "  under autocast only for the ops that run in half (matmul/conv outputs); softmax,\n"
               "  losses and f32-list ops stay f32, and O2 keeps them in half throughout.\n"
               "- cast_cache: O1 casts each f32 weight to half once per forward (2 bytes/param),\n"
               "  which the seeds' 16a/16a comparison leaves out; O2 needs no cache.\n"
               "- optimizer: O2's figure includes the f32 master copy (4 B/param) next to the Adam\n"
               "  moments; the half parameters count under param.\n"
               "- grad: a master-weight optimizer that unscales before clipping also holds f32\n"
               "  master gradients (4 B/param) during the step.\n"
               "- workspace: kernel scratch (im2col, packing, backward temporaries) is transient and\n"
               "  not in any textbook arithmetic; data is the input batch.\n");
    return CLI_OK;
}
