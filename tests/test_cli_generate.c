/* amp generate and the GPT loader against bad input, each case reproduced
 * from issue 23:
 *   - a checkpoint of another model is refused naming that model (the name
 *     was printed after the checkpoint was closed: "(model zTc...)");
 *   - non-finite weights (a NaN in a state_dict or a checkpoint, a 7e4
 *     weight under fp16) and non-finite logits are refused naming the
 *     tensor or the step and the precision (garbage text and exit 0 before),
 *     by amp_gpt_generate itself for a library user; a temperature so small
 *     that logits / T overflows samples the greedy token ("yyyy..." before);
 *   - a state_dict's lm_head.weight is checked: equal to the embedding it is
 *     the tied head, anything else (other values, shape, dtype) is refused,
 *     since amp's GPT ties them (it was ignored whatever it held);
 *   - a checkpoint's gpt.config is checked against its tensors' shapes before
 *     the model is made (an edited block_size=2^24 allocated gigabytes first).
 * AMP_TEST_PER_CPU_PATH: CTest also runs this file once per CPU path (the
 * amp processes inherit AMP_CPU): the refusals and the greedy sampling on
 * every path.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_support.h"

/* defect 6: the model named in the refusal is the checkpoint's */
static void t_other_model_named(void **state) {
    (void)state;
    char dir[1100], *err;
    snprintf(dir, sizeof dir, "%s/mlp", test_tmpdir);
    test_free_all(test_run_cli_expect(0, NULL, "train --limit 256 --batch 64 --test-limit 100 --quiet --threads 2 --stop-after 1 --checkpoint %s", dir), test_run_cli_expect(1, &err, "generate --checkpoint %s", dir));
    if (!strstr(err, "(model mlp)")) fail_msg("the refusal does not name the checkpoint's model mlp:\n%s", err);
    free(err);
}

#define GOLDEN AMP_TEST_DATA_DIR "/gpt/gpt_small.safetensors"

/* Writes the golden state_dict (2 layers, 4 heads, 64 wide, block 32, byte
 * vocabulary) to test_tmpdir/name with edit(tensor name, tensor) applied to each
 * tensor, plus one more tensor when extra_name is given. Returns the path. */
static char *write_variant(const char *name, void (*edit)(const char *, amp_tensor *), const char *extra_name, amp_tensor *extra) {
    amp_safetensors *f = amp_safetensors_read(GOLDEN);
    if (!f) fail_msg("%s", amp_last_error());
    int n = amp_safetensors_count(f);
    amp_tensor *ts[64];
    const char *names[64];
    assert_true(n < 63);
    for (int i = 0; i < n; i++) {
        amp_safetensors_info in;
        amp_safetensors_info_at(f, i, &in);
        names[i] = in.name;
        ts[i] = amp_safetensors_get(f, in.name);
        assert_non_null(ts[i]);
        if (edit) edit(in.name, ts[i]);
    }
    if (extra_name) {
        names[n] = extra_name;
        ts[n++] = extra;
    }
    char *path = malloc(1200);
    snprintf(path, 1200, "%s/%s", test_tmpdir, name);
    if (amp_safetensors_write(path, ts, names, n, NULL, 0) != AMP_OK) fail_msg("%s", amp_last_error());
    for (int i = 0; i < n; i++) amp_tensor_free(ts[i]);
    amp_safetensors_free(f);
    return path;
}

static void set_elem(amp_tensor *t, int64_t i, float v) { ((float *)amp_tensor_data(t))[i] = v; }
static void fill(amp_tensor *t, float v) {
    for (int64_t i = 0; i < amp_tensor_numel(t); i++) set_elem(t, i, v);
}

static void nan_in_fc(const char *name, amp_tensor *t) {
    if (!strcmp(name, "transformer.h.1.mlp.c_fc.weight")) set_elem(t, 77, NAN);
}
static void big_in_wte(const char *name, amp_tensor *t) {
    if (!strcmp(name, "transformer.wte.weight")) set_elem(t, 5, 7e4f);
}
/* finite weights whose logits are 64 x 6e4 = 3.8e6: past fp16's 65504 */
static void huge_logits(const char *name, amp_tensor *t) {
    if (!strcmp(name, "transformer.ln_f.weight") || !strcmp(name, "transformer.ln_f.bias")) fill(t, 6e4f);
    if (!strcmp(name, "transformer.wte.weight")) fill(t, 1.0f);
}

/* defect 7: non-finite weights or logits are refused, naming what */
static void t_nonfinite_refused(void **state) {
    (void)state;
    char *err;
    const char *gen = "generate --n-head 4 --tokens 8 --temperature 0";
    char *p = write_variant("nan.safetensors", nan_in_fc, NULL, NULL);
    free(test_run_cli_expect(1, &err, "%s --checkpoint %s", gen, p));
    if (!strstr(err, "transformer.h.1.mlp.c_fc.weight") || !strstr(err, "nan"))
        fail_msg("a NaN weight is not refused by name:\n%s", err);
    test_free_all(err, p);
    /* 7e4 is finite in f32 and bf16, inf in fp16 */
    p = write_variant("big.safetensors", big_in_wte, NULL, NULL);
    test_free_all(test_run_cli_expect(0, NULL, "%s --checkpoint %s", gen, p), test_run_cli_expect(0, NULL, "%s --checkpoint %s --precision bf16", gen, p), test_run_cli_expect(1, &err, "%s --checkpoint %s --precision fp16", gen, p));
    if (!strstr(err, "transformer.wte.weight") || !strstr(err, "65504") || !strstr(err, "bf16"))
        fail_msg("a weight beyond fp16's range is not refused by name with the way out:\n%s", err);
    test_free_all(err, p);
    /* finite weights, logits beyond fp16: refused at step 1, naming the step and the precision */
    p = write_variant("huge.safetensors", huge_logits, NULL, NULL);
    free(test_run_cli_expect(0, NULL, "%s --checkpoint %s", gen, p));
    char *out = test_run_cli_expect(1, &err, "%s --checkpoint %s --precision fp16", gen, p);
    if (!strstr(err, "step 1") || !strstr(err, "f16") || !strstr(err, "not finite") || !strstr(err, "bf16"))
        fail_msg("non-finite logits are not refused naming the step and the precision:\n%s", err);
    assert_string_equal(out, ""); /* no garbage text */
    test_free_all(out, err, p);
}

/* Rewrites a checkpoint file in place with edit applied to each tensor and
 * metadata key set to value (when key is given): the checkpoint stays intact
 * (the same checkpoint_id, a new data_crc32), as an edit of a user would. */
static void rewrite(const char *dir, const char *file, void (*edit)(const char *, amp_tensor *), const char *key, const char *value) {
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    amp_safetensors *f = amp_safetensors_read(path);
    if (!f) fail_msg("%s", amp_last_error());
    int n = amp_safetensors_count(f), nm = amp_safetensors_meta_count(f), k = 0;
    amp_tensor **ts = calloc((size_t)n, sizeof *ts);
    const char **names = calloc((size_t)n, sizeof *names);
    amp_kv meta[64];
    assert_true(nm <= 64);
    for (int i = 0; i < n; i++) {
        amp_safetensors_info in;
        amp_safetensors_info_at(f, i, &in);
        names[i] = in.name;
        ts[i] = amp_safetensors_get(f, in.name);
        if (edit) edit(in.name, ts[i]);
    }
    for (int i = 0; i < nm; i++) {
        const char *mk = amp_safetensors_meta_key(f, i);
        if (strcmp(mk, "data_crc32")) meta[k++] = (amp_kv){mk, key && !strcmp(mk, key) ? value : amp_safetensors_meta(f, mk)};
    }
    assert_int_equal(amp_safetensors_write(path, ts, names, n, meta, k), AMP_OK);
    for (int i = 0; i < n; i++) amp_tensor_free(ts[i]);
    test_free_all(ts, names);
    amp_safetensors_free(f);
}

static const char *gpt_checkpoint(const char *name) {
    static char dir[1100];
    snprintf(dir, sizeof dir, "%s/%s", test_tmpdir, name);
    free(test_run_cli_expect(0, NULL, "train --model gpt --n-layer 2 --n-head 4 --n-embd 64 --block-size 32 --batch 8 --threads 2 --max-steps 2 "
                      "--eval-windows 4 --quiet --checkpoint %s", dir));
    return dir;
}

static void nan_in_proj(const char *name, amp_tensor *t) {
    if (!strcmp(name, "transformer.h.0.attn.c_proj.weight")) set_elem(t, 3, NAN);
}

/* defect 7: a NaN in a checkpoint directory's weights */
static void t_nonfinite_checkpoint(void **state) {
    (void)state;
    const char *dir = gpt_checkpoint("gck");
    rewrite(dir, "model.safetensors", nan_in_proj, NULL, NULL);
    char *err;
    free(test_run_cli_expect(1, &err, "generate --checkpoint %s --tokens 4", dir));
    if (!strstr(err, "transformer.h.0.attn.c_proj.weight") || !strstr(err, "nan"))
        fail_msg("a NaN weight in a checkpoint is not refused by name:\n%s", err);
    free(err);
}

/* defect 7: amp_gpt_load refuses a NaN in an f64 state_dict too (read
 * through amp_tensor_copy_out, not in place), and loads the finite file */
static void t_nonfinite_f64_file(void **state) {
    (void)state;
    amp_safetensors *f = amp_safetensors_read(GOLDEN);
    assert_non_null(f);
    int n = amp_safetensors_count(f);
    amp_tensor *ts[64];
    const char *names[64];
    for (int i = 0; i < n; i++) {
        amp_safetensors_info in;
        amp_safetensors_info_at(f, i, &in);
        names[i] = in.name;
        amp_tensor *t = amp_safetensors_get(f, in.name);
        ts[i] = amp_tensor_keep(amp_to(t, AMP_F64));
        amp_tensor_free(t);
    }
    char path[1200];
    snprintf(path, sizeof path, "%s/f64.safetensors", test_tmpdir);
    assert_int_equal(amp_safetensors_write(path, ts, names, n, NULL, 0), AMP_OK);
    amp_gpt_config c = {2, 4, 64, 32, 256, 0.0, true};
    amp_module *m = amp_gpt_new(&c, NULL);
    if (amp_gpt_load(m, path) != AMP_OK) fail_msg("%s", amp_last_error());
    int k = amp_safetensors_find(f, "transformer.h.0.mlp.c_proj.weight");
    assert_true(k >= 0);
    assert_int_equal(amp_tensor_set(ts[k], AMP_SHAPE(1, 2), -INFINITY), AMP_OK);
    assert_int_equal(amp_safetensors_write(path, ts, names, n, NULL, 0), AMP_OK);
    assert_int_not_equal(amp_gpt_load(m, path), AMP_OK);
    if (!strstr(amp_last_error(), "transformer.h.0.mlp.c_proj.weight element 258 is -inf")) fail_msg("%s", amp_last_error());
    for (int i = 0; i < n; i++) amp_tensor_free(ts[i]);
    amp_module_free(m);
    amp_safetensors_free(f);
}

/* defect 7: --temperature 1e-310 (logits / T overflows a double) is greedy */
static void t_tiny_temperature(void **state) {
    (void)state;
    const char *gen = "generate --checkpoint " GOLDEN " --n-head 4 --tokens 24 --prompt ROMEO:";
    char *greedy = test_run_cli_expect(0, NULL, "%s --temperature 0", gen);
    char *tiny = test_run_cli_expect(0, NULL, "%s --temperature 1e-310", gen);
    assert_string_equal(tiny, greedy);
    test_free_all(tiny, greedy);
}

/* defect 7, the library: amp_gpt_generate refuses a non-finite weight by name
 * and leaves the model alone */
static void t_generate_api_nonfinite(void **state) {
    (void)state;
    amp_gpt_config c = {2, 2, 16, 16, 32, 0.0, true};
    amp_module *m = test_gpt_new(&c, 3);
    amp_tensor *w = amp_module_get_parameter(m, "transformer.h.1.attn.c_attn.weight");
    assert_non_null(w);
    set_elem(w, 11, INFINITY);
    int64_t prompt[2] = {1, 2}, out[4], n = -1;
    amp_gpt_generate_opts o = AMP_GPT_GENERATE_DEFAULTS;
    o.max_new_tokens = 4;
    assert_int_not_equal(amp_gpt_generate(m, prompt, 2, out, &n, &o), AMP_OK);
    assert_int_equal(n, 0);
    if (!strstr(amp_last_error(), "amp_gpt_generate") || !strstr(amp_last_error(), "transformer.h.1.attn.c_attn.weight") ||
        !strstr(amp_last_error(), "element 11") || !strstr(amp_last_error(), "inf"))
        fail_msg("%s", amp_last_error());
    set_elem(w, 11, 0.0f);
    assert_int_equal(amp_gpt_generate(m, prompt, 2, out, &n, &o), AMP_OK);
    assert_int_equal(n, 4);
    amp_module_free(m);
}

/* amp_gpt_generate names the first non-finite weight in parameter order
 * from the backend's one multi-tensor check over parameters of two dtypes
 * (bf16, the norms kept in f32 by amp_module_to), then the element */
static void t_generate_api_first_nonfinite(void **state) {
    (void)state;
    amp_gpt_config c = {2, 2, 16, 16, 32, 0.0, true};
    amp_module *m = test_gpt_new(&c, 3);
    assert_int_equal(amp_module_to(m, AMP_BF16, true), AMP_OK);
    amp_tensor *ln0 = amp_module_get_parameter(m, "transformer.h.0.ln_1.weight"),
               *ln1 = amp_module_get_parameter(m, "transformer.h.1.ln_1.weight"),
               *fc0 = amp_module_get_parameter(m, "transformer.h.0.mlp.c_fc.weight");
    assert_non_null(ln0);
    assert_non_null(ln1);
    assert_non_null(fc0);
    assert_int_equal(amp_tensor_dtype(ln0), AMP_F32);
    assert_int_equal(amp_tensor_dtype(fc0), AMP_BF16);
    int64_t prompt[2] = {1, 2}, out[4], n = -1;
    amp_gpt_generate_opts o = AMP_GPT_GENERATE_DEFAULTS;
    o.max_new_tokens = 4;
    struct {
        amp_tensor *t;
        int64_t at;
        const char *want;
    } cases[] = {
        {ln1, 9, "transformer.h.1.ln_1.weight element 9 is nan (f32)"},
        {fc0, 700, "transformer.h.0.mlp.c_fc.weight element 700 is nan (bf16)"}, /* a bf16 one before it */
        {ln0, 3, "transformer.h.0.ln_1.weight element 3 is nan (f32)"}, /* an f32 one before that */
    };
    for (int k = 0; k < 3; k++) {
        if (amp_tensor_dtype(cases[k].t) == AMP_BF16) ((uint16_t *)amp_tensor_data(cases[k].t))[cases[k].at] = 0x7fc0; /* nan */
        else set_elem(cases[k].t, cases[k].at, NAN);
        assert_int_not_equal(amp_gpt_generate(m, prompt, 2, out, &n, &o), AMP_OK);
        if (!strstr(amp_last_error(), cases[k].want)) fail_msg("case %d: %s", k, amp_last_error());
    }
    amp_module_free(m);
}

static amp_tensor *g_wte; /* the golden embedding */
static void keep_wte(const char *name, amp_tensor *t) {
    if (!strcmp(name, "transformer.wte.weight")) g_wte = amp_clone(t);
}

/* defect 11: lm_head.weight equal to wte loads (tied); anything else is refused by name */
static void t_lm_head(void **state) {
    (void)state;
    free(write_variant("plain.safetensors", keep_wte, NULL, NULL));
    assert_non_null(g_wte);
    amp_gpt_config c = {2, 4, 64, 32, 256, 0.0, true};
    struct {
        const char *file, *want;
        amp_tensor *head;
    } cases[] = {
        {"tied.safetensors", NULL, amp_clone(g_wte)},
        {"untied.safetensors", "differs", amp_add_scalar(g_wte, 1.0)},
        {"shape.safetensors", "shape", amp_tensor_zeros(AMP_F32, 2, AMP_SHAPE(10, 64))},
        {"int.safetensors", "i64", amp_tensor_zeros(AMP_I64, 2, AMP_SHAPE(256, 64))},
    };
    char *plain_text = test_run_cli_expect(0, NULL, "generate --checkpoint %s/plain.safetensors --n-head 4 --tokens 12 --temperature 0", test_tmpdir);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_non_null(cases[i].head);
        char *p = write_variant(cases[i].file, NULL, "lm_head.weight", cases[i].head);
        amp_module *m = amp_gpt_new(&c, NULL);
        amp_status st = amp_gpt_load(m, p);
        if (!cases[i].want) {
            if (st != AMP_OK) fail_msg("%s: %s", cases[i].file, amp_last_error());
            char *text = test_run_cli_expect(0, NULL, "generate --checkpoint %s --n-head 4 --tokens 12 --temperature 0", p);
            assert_string_equal(text, plain_text);
            free(text);
        } else {
            if (st == AMP_OK || !strstr(amp_last_error(), "lm_head.weight") || !strstr(amp_last_error(), cases[i].want))
                fail_msg("%s: loaded, or not refused naming lm_head.weight and '%s': %s", cases[i].file, cases[i].want,
                         st == AMP_OK ? "(loaded)" : amp_last_error());
            char *err;
            free(test_run_cli_expect(1, &err, "generate --checkpoint %s --n-head 4 --tokens 4", p));
            if (!strstr(err, "lm_head.weight")) fail_msg("amp generate %s:\n%s", cases[i].file, err);
            free(err);
        }
        amp_module_free(m);
        free(p);
    }
    free(plain_text);
    amp_tensor_free(g_wte);
}

/* defect 15: an edited gpt.config is refused against the tensors' shapes before
 * the model is made (under a 2 GB address-space limit: the model of the edited
 * config would need 4 GiB for its position table alone, and failed with "out of
 * memory" after trying) */
static void t_config_checked_first(void **state) {
    (void)state;
    const char *edits[][2] = {
        {"n_layer=2 n_head=4 n_embd=64 block_size=16777216 vocab_size=256 dropout=0 bias=1", "block_size"},
        {"n_layer=40 n_head=4 n_embd=64 block_size=32 vocab_size=256 dropout=0 bias=1", "n_layer"},
        {"n_layer=2 n_head=4 n_embd=64 block_size=32 vocab_size=256 dropout=0 bias=0", "bias"},
        {"n_layer=2 n_head=3 n_embd=64 block_size=32 vocab_size=256 dropout=0 bias=1", "n_head"},
    };
    for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
        const char *dir = gpt_checkpoint("cfg");
        rewrite(dir, "model.safetensors", NULL, "gpt.config", edits[i][0]);
        rewrite(dir, "training_state.safetensors", NULL, "gpt.config", edits[i][0]);
        char *out = NULL, *err = NULL, args[1300];
        snprintf(args, sizeof args, "generate --checkpoint %s --tokens 4", dir);
        /* (AddressSanitizer reserves terabytes of address space: no limit under make test-asan, which sets AMP_ASAN) */
        int rc = test_run_cli(getenv("AMP_ASAN") ? NULL : "ulimit -v 2000000;", args, &out, &err);
        if (rc != 1 || !strstr(err, "gpt.config") || !strstr(err, edits[i][1]))
            fail_msg("gpt.config \"%s\": exit %d, expected 1 with a message on gpt.config and %s:\n%s", edits[i][0], rc, edits[i][1], err);
        test_free_all(out, err);
        test_rmtree(dir);
    }
}

/* amp generate --model (a pretrained Llama): each bad argument named, before
 * the model is loaded where it can be. */
static void t_model_refusals(void **state) {
    (void)state;
    static const struct {
        const char *args;
        int rc; /* 2: a usage error; 1: a failure */
        const char *want;
    } cases[] = {
        {"--model %s", 2, "--model needs --prompt TEXT"},
        {"--model %s --prompt hi --load-dtype q3", 2, "--load-dtype 'q3' is not keep, f32, f16, bf16, q8_0, q4_0 or q4_1"},
        {"--model %s --prompt hi --precision fp8", 2, "--precision 'fp8' is not fp32, bf16 or fp16"},
        {"--model %s --prompt hi --system 'be brief'", 2, "--system needs --chat"},
        {"--model %s --prompt hi --top-p 0", 2, "bad option or value for the --model path: --top-p 0"},
        {"--model %s --prompt hi --temperature -1", 2, "bad option or value for the --model path: --temperature -1"},
        {"--model %s --prompt hi --max-new-tokens x", 2, "bad option or value for the --model path: --max-new-tokens x"},
        {"--model %s/nonexistent.gguf --prompt hi", 1, "nonexistent.gguf: No such file or directory"},
        /* the tiny test model has no tokenizer */
        {"--model %s/llama_tiny.gguf --prompt hi", 1, "amp_llama_tokenizer: this model has no tokenizer"},
        {"--model %s/llama_tiny_hf/config.json --prompt hi", 1, "amp_llama_from_gguf"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *err = NULL, args[2048];
        snprintf(args, sizeof args, cases[i].args, AMP_TEST_DATA_DIR);
        free(test_run_cli_expect(cases[i].rc, &err, "generate %s", args));
        if (!err || !strstr(err, cases[i].want)) fail_msg("amp generate %s:\n%s\nwants: %s", args, err ? err : "", cases[i].want);
        free(err);
    }
}

/* amp generate --model on SmolLM2-135M-Instruct (scripts/deps.sh models):
 * the greedy text names Paris, the tokens/s line follows on stderr; --chat
 * formats the ChatML turn with the file's default system message (37
 * tokens, as llama.cpp's llama-tokenize gives for that text) and stops at
 * <|im_end|>; a bf16 load under bf16 autocast runs too. */
static void t_model_smollm2(void **state) {
    (void)state;
    const char *p = amp_models_path("SmolLM2-135M-Instruct/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert_non_null(p);
    char model[4096], *err = NULL;
    snprintf(model, sizeof model, "%s", p);
    if (access(model, R_OK) != 0) fail_msg("%s is missing: `scripts/deps.sh models` installs it (make test does)", model);
    char *out = test_run_cli_expect(0, &err, "generate --model %s --prompt 'The capital of France is' --max-new-tokens 4 --threads 2",
                                    model);
    if (strncmp(out, "The capital of France is Paris", 30)) fail_msg("stdout: %s", out);
    if (!strstr(err, "prefill 5 tokens") || !strstr(err, "decode 3 tokens") || !strstr(err, "tokens/s") || !strstr(err, "load keep"))
        fail_msg("stderr: %s", err);
    free(out);
    free(err);
    out = test_run_cli_expect(0, &err, "generate --model %s --chat --prompt 'What is the capital of France?' --max-new-tokens 64", model);
    if (!strstr(err, "prefill 37 tokens") || strstr(out, "<|im_end|>") || strlen(out) < 2) fail_msg("stdout: %s\nstderr: %s", out, err);
    free(out);
    free(err);
    out = test_run_cli_expect(0, &err, "generate --model %s --prompt 'The capital of France is' --max-new-tokens 2 --load-dtype bf16 "
                                       "--precision bf16", model);
    if (!strstr(out, "Paris") || !strstr(err, "load bf16, bf16")) fail_msg("stdout: %s\nstderr: %s", out, err);
    free(out);
    free(err);
}

AMP_TEST_MAIN_FIXTURES(test_tmpdir_setup, test_tmpdir_teardown, t_other_model_named, t_nonfinite_refused,
                       t_nonfinite_checkpoint, t_tiny_temperature, t_generate_api_nonfinite,
                       t_generate_api_first_nonfinite, t_nonfinite_f64_file, t_lm_head, t_config_checked_first,
                       t_model_refusals, t_model_smollm2)
