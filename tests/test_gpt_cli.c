/* The GPT through the amp command, on the Shakespeare corpus the project's
 * setup installs: `amp train --model gpt` (summary with tokens/s, periodic
 * validation loss, metrics CSV, every precision mode), bit-exact resume
 * (fp32 with dropout, fp16 O1 with the GradScaler, bf16 O2 with master
 * weights, f32 norms and stochastic rounding, and a resumed run that
 * switches activation checkpointing on: the gradients are the same bits),
 * the refusals of a resume with another model, tokenizer or data,
 * `amp generate` (deterministic for a seed; the KV cache gives the tokens
 * of the uncached path; half inference; a PyTorch-written state_dict),
 * `amp compare --model gpt` and `amp memory --model gpt`, usage errors.
 * AMP_TEST_PER_CPU_PATH: CTest also runs this file once per CPU path (the
 * amp processes inherit AMP_CPU). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

/* small and fast: 2 layers, 64 wide, block 32, batch 8 */
#define SMALL "--model gpt --n-layer 2 --n-head 4 --n-embd 64 --block-size 32 --batch 8 --threads 2 --eval-windows 16"


static void t_train_summary(void **s) {
    (void)s;
    char csv[1100];
    snprintf(csv, sizeof csv, "%s/m.csv", test_tmpdir);
    char *out = test_run_cli_expect(0, NULL, "train " SMALL " --max-steps 12 --log-every 4 --eval-every 6 --metrics %s", csv);
    assert_non_null(strstr(out, "step 4/12 loss"));
    assert_non_null(strstr(out, "tokens/s"));
    assert_non_null(strstr(out, "step 6: val loss"));
    double vl = test_field(out, "val loss   "), ent = test_field(out, "unigram entropy of the validation text");
    assert_true(vl > 0 && vl < 6.0);
    assert_true(fabs(ent - 3.319) < 0.01); /* the byte corpus's validation split */
    assert_true(test_field(out, "throughput") > 0);
    assert_int_equal((int)test_field(out, "\n  steps"), 12);
    assert_true(test_field(out, "\n  parameters") == 256 * 64 + 32 * 64 + 2 * (12 * 64 * 64 + 13 * 64) + 2 * 64);
    char *m = test_read_file(csv, NULL);
    assert_non_null(m);
    assert_int_equal(strncmp(m, "step,loss,val_loss,scale,skipped,lr,grad_norm,ms\n", 49), 0);
    int rows = 0;
    for (char *l = strchr(m, '\n'); l && l[1]; l = strchr(l + 1, '\n')) rows++;
    assert_int_equal(rows, 12);
    test_free_all(m, out);
    /* every precision mode runs and learns something */
    const char *modes[] = {"--precision fp16", "--precision bf16", "--precision bf16 --opt-level O2",
                           "--precision fp16 --opt-level O2", "--precision bf16 --opt-level O3",
                           "--policy params=float32,compute=bfloat16,output=float32", "--checkpoint-activations"};
    for (size_t k = 0; k < sizeof modes / sizeof modes[0]; k++) {
        out = test_run_cli_expect(0, NULL, "train " SMALL " --max-steps 6 --quiet %s", modes[k]);
        double v = test_field(out, "val loss   ");
        if (!(v > 0 && v < 6.0)) fail_msg("%s: val loss %g", modes[k], v);
        free(out);
    }
}

static void resume_case(const char *mode, const char *extra_resume) {
    char straight[1100], split[1100];
    snprintf(straight, sizeof straight, "%s/straight", test_tmpdir);
    snprintf(split, sizeof split, "%s/split", test_tmpdir);
    test_rmtree(straight);
    test_rmtree(split);
    test_free_all(test_run_cli_expect(0, NULL, "train " SMALL " --dropout 0.1 --max-steps 14 --quiet %s --checkpoint %s", mode, straight), test_run_cli_expect(0, NULL, "train " SMALL " --dropout 0.1 --max-steps 14 --quiet %s --checkpoint %s --stop-after 5", mode, split));
    char *out = test_run_cli_expect(0, NULL, "train " SMALL " --dropout 0.1 --max-steps 14 %s %s --resume %s --log-every 100", mode, extra_resume, split);
    assert_non_null(strstr(out, "resumed from"));
    free(out);
    /* every tensor byte-identical; the metadata too except the checkpoint id */
    test_assert_same_checkpoint(straight, split, (const char *const[]){"checkpoint_id", "data_crc32", NULL}, false);
    print_message("resume %s%s: bit-exact\n", mode, extra_resume);
}

static void t_resume_bitexact(void **s) {
    (void)s;
    resume_case("--precision fp32", "");
    resume_case("--precision fp16", "");
    resume_case("--precision bf16 --opt-level O2 --rounding stochastic", "");
    /* checkpointing changes no bit: a run may switch it on when resuming */
    resume_case("--precision bf16", " --checkpoint-activations");
}

static void t_resume_refusals(void **s) {
    (void)s;
    char dir[1100], other[1100];
    snprintf(dir, sizeof dir, "%s/r", test_tmpdir);
    snprintf(other, sizeof other, "%s/other.txt", test_tmpdir);
    free(test_run_cli_expect(0, NULL, "train " SMALL " --max-steps 3 --quiet --checkpoint %s", dir));
    char *err;
    free(test_run_cli_expect(1, &err, "train --model gpt --n-layer 3 --n-head 4 --n-embd 64 --block-size 32 --batch 8 --max-steps 4 --quiet --resume %s", dir));
    assert_non_null(strstr(err, "gpt.config"));
    test_free_all(err, test_run_cli_expect(1, &err, "train " SMALL " --tokenizer gpt2 --max-steps 4 --quiet --resume %s", dir));
    assert_non_null(strstr(err, "tokenizer"));
    free(err);
    FILE *f = fopen(other, "w");
    for (int i = 0; i < 400; i++) fprintf(f, "line %d of another text, long enough for windows\n", i);
    fclose(f);
    free(test_run_cli_expect(1, &err, "train " SMALL " --data %s --max-steps 4 --quiet --resume %s", other, dir));
    assert_non_null(strstr(err, "data.crc32"));
    test_free_all(err, test_run_cli_expect(1, &err, "train " SMALL " --precision bf16 --max-steps 4 --quiet --resume %s", dir));
    assert_non_null(strstr(err, "mode"));
    free(err);
    /* --data: any text file trains */
    char *out = test_run_cli_expect(0, NULL, "train " SMALL " --data %s --max-steps 3 --quiet", other);
    assert_non_null(strstr(out, "val loss"));
    free(out);
}

static void t_generate(void **s) {
    (void)s;
    char dir[1100];
    snprintf(dir, sizeof dir, "%s/g", test_tmpdir);
    free(test_run_cli_expect(0, NULL, "train " SMALL " --max-steps 30 --quiet --checkpoint %s", dir));
    const char *base = "generate --checkpoint %s --prompt ROMEO: --tokens 50 --temperature 0.9 --top-k 40 --threads 2";
    char fmt[512];
    snprintf(fmt, sizeof fmt, "%s --seed 7", base);
    char *a = test_run_cli_expect(0, NULL, fmt, dir), *b = test_run_cli_expect(0, NULL, fmt, dir);
    assert_string_equal(a, b); /* deterministic for a seed */
    assert_int_equal(strncmp(a, "ROMEO:", 6), 0);
    assert_true(strlen(a) >= 6 + 50 + 1); /* 50 byte tokens */
    snprintf(fmt, sizeof fmt, "%s --seed 7 --no-kv-cache", base);
    char *c = test_run_cli_expect(0, NULL, fmt, dir);
    assert_string_equal(a, c); /* the KV cache gives the tokens of recomputing the prefix */
    snprintf(fmt, sizeof fmt, "%s --seed 8", base);
    char *d = test_run_cli_expect(0, NULL, fmt, dir);
    assert_true(strcmp(a, d) != 0);
    char *e = test_run_cli_expect(0, NULL, "generate --checkpoint %s --tokens 20 --precision bf16 --seed 1", dir);
    char *e2 = test_run_cli_expect(0, NULL, "generate --checkpoint %s --tokens 20 --precision bf16 --seed 1 --no-kv-cache", dir);
    assert_string_equal(e, e2);
    char *h = test_run_cli_expect(0, NULL, "generate --checkpoint %s --tokens 20 --precision fp16 --temperature 0", dir);
    test_free_all(a, b, c, d, e, e2, h);
    /* the PyTorch-written state_dict of the golden data (nanoGPT's names; Hugging Face's layout) */
    char *err;
    char *p1 = test_run_cli_expect(0, &err, "generate --checkpoint " AMP_TEST_DATA_DIR "/gpt/gpt_small.safetensors --n-head 4 --tokens 16 "
                            "--temperature 0 --stats");
    assert_non_null(strstr(err, "model 2L/4H/64 block 32 vocab 256"));
    free(err);
    char *p2 = test_run_cli_expect(0, NULL, "generate --checkpoint " AMP_TEST_DATA_DIR "/gpt/gpt_small_hf.safetensors --n-head 4 --tokens 16 "
                            "--temperature 0");
    assert_string_equal(p1, p2);
    test_free_all(p1, p2, test_run_cli_expect(2, NULL, "generate --checkpoint " AMP_TEST_DATA_DIR "/gpt/gpt_small.safetensors --tokens 4"), test_run_cli_expect(1, NULL, "generate --checkpoint %s/nonexistent", test_tmpdir), test_run_cli_expect(2, NULL, "generate --prompt x"));
}

static void t_compare_memory(void **s) {
    (void)s;
    char *out = test_run_cli_expect(0, NULL, "compare " SMALL " --max-steps 3 --quiet");
    const char *rows[] = {"| fp32 |", "| fp16 O1 |", "| bf16 O1 |", "| bf16 O2 |", "| activation |", "| cast_cache |", "saving"};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        if (!strstr(out, rows[i])) fail_msg("compare lacks '%s':\n%s", rows[i], out);
    free(out);
    out = test_run_cli_expect(0, NULL, "memory " SMALL " --max-steps 1");
    const char *mrows[] = {"16 B/param", "18 B/param", "| fp32 ckpt |", "| bf16 O2 ckpt |", "| activations: arithmetic |",
                           "saving vs fp32"};
    for (size_t i = 0; i < sizeof mrows / sizeof mrows[0]; i++)
        if (!strstr(out, mrows[i])) fail_msg("memory lacks '%s':\n%s", mrows[i], out);
    free(out);
}

/* fp16 loss scaling on the GPT: poisoned steps are skipped and halve the
 * scale (every 3rd of 12: 4 skipped, 65536 / 2^4), and a storm of them
 * (every step, --max-consecutive-overflows 5) stops the run at step 5 with
 * the diagnosis naming the first parameter, the last save (step 4) kept. */
static void t_overflow_storm(void **s) {
    (void)s;
    char *out = test_run_cli_expect(0, NULL, "train " SMALL " --precision fp16 --max-steps 12 --quiet --inject-nonfinite-every 3");
    if (!strstr(out, "steps             12 (4 skipped for inf/nan gradients)") || !strstr(out, "final loss scale  4096\n"))
        fail_msg("expected 4 of 12 steps skipped and the scale 4096:\n%s", out);
    free(out);
    char dir[1200], *err;
    snprintf(dir, sizeof dir, "%s/storm", test_tmpdir);
    free(test_run_cli_expect(1, &err, "train " SMALL " --precision fp16 --max-steps 20 --quiet --inject-nonfinite-every 1 "
                                      "--max-consecutive-overflows 5 --checkpoint %s --save-every 2", dir));
    const char *want[] = {"stopped at step 5: 5 consecutive steps overflowed", "backed off to 2048",
                          "overflowed first in the gradient of transformer.wte.weight", "--precision bf16"};
    for (int i = 0; i < 4; i++)
        if (!strstr(err, want[i])) fail_msg("expected \"%s\" in the diagnosis:\n%s", want[i], err);
    free(err);
    amp_checkpoint *c = amp_checkpoint_open(dir);
    if (!c) fail_msg("%s", amp_last_error());
    assert_int_equal(amp_checkpoint_step(c), 4);
    amp_checkpoint_close(c);
}

static void t_usage(void **s) {
    (void)s;
    test_free_all(test_run_cli_expect(2, NULL, "train --model mlp --n-layer 2"), test_run_cli_expect(2, NULL, "train --model gpt --n-embd 10 --n-head 3"), test_run_cli_expect(2, NULL, "train --model gpt --tokenizer words"), test_run_cli_expect(2, NULL, "train --model gpt --preset huge"), test_run_cli_expect(2, NULL, "train --model gpt --limit 5"));
    char *h = test_run_cli_expect(0, NULL, "bench gpt --help");
    assert_non_null(strstr(h, "shakespeare-char"));
    assert_non_null(strstr(h, "llm.c"));
    test_free_all(h, test_run_cli_expect(2, NULL, "bench train --model gpt --preset nope"));
    char *err;
    free(test_run_cli_expect(1, &err, "train " SMALL " --data /nonexistent-amp-dir/t.txt --max-steps 2"));
    assert_non_null(strstr(err, "/nonexistent-amp-dir/t.txt"));
    free(err);
}

AMP_TEST_MAIN_FIXTURES(test_tmpdir_setup, test_tmpdir_teardown, t_train_summary, t_resume_bitexact, t_resume_refusals,
                       t_generate, t_compare_memory, t_usage, t_overflow_storm)
