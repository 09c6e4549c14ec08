/* amp embed on the installed all-MiniLM-L6-v2 (scripts/deps.sh models):
 *   - the text output: token counts, the first values, the similarity
 *     matrix of sentence-transformers' README example (0.6660, 0.1046, 0.1411);
 *   - --json: every embedding in full, equal to tools/ref_minilm.py's
 *     float64 reference (tests/data/minilm_golden.safetensors) to 1e-6;
 *   - load dtypes and precisions, truncation shown;
 *   - bad arguments named (exit 2), a missing model directory (exit 1). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "test_support.h"

static const char *model_dir(void) {
    const char *dir = amp_models_path("all-MiniLM-L6-v2");
    struct stat sb;
    if (!dir || stat(dir, &sb) != 0)
        fail_msg("the all-MiniLM-L6-v2 model is not installed (%s): scripts/deps.sh models installs it", dir ? dir : "?");
    return dir;
}

static void expect_in(const char *out, const char *s) {
    if (!strstr(out, s)) fail_msg("expected \"%s\" in:\n%s", s, out);
}

static void t_text_output(void **state) {
    (void)state;
    model_dir();
    char *out = test_run_cli_expect(0, NULL, "embed --threads 2 'The weather is lovely today.' \"It's so sunny outside!\" 'He drove to the stadium.'");
    expect_in(out, "load dtype f32, precision fp32");
    expect_in(out, "[1] 8 tokens  [0.0192, 0.1201, 0.1596, 0.0671, 0.0501, ...]  The weather is lovely today.");
    expect_in(out, "[2] 9 tokens  ");
    expect_in(out, "[  1]  1.0000  0.6660  0.1046\n");
    expect_in(out, "[  2]  0.6660  1.0000  0.1411\n");
    expect_in(out, "[  3]  0.1046  0.1411  1.0000\n");
    expect_in(out, "3 texts in ");
    free(out);
    /* truncation shown; --values */
    out = test_run_cli_expect(0, NULL, "embed --max-seq-length 4 --values 2 'one two three four five' 'one'");
    expect_in(out, "[1] 4 tokens (truncated)  [");
    expect_in(out, "[2] 3 tokens  [");
    free(out);
    /* other load dtypes and precisions: the same matrix to the 4 digits shown, or nearly */
    out = test_run_cli_expect(0, NULL, "embed --load-dtype bf16 --precision bf16 'The weather is lovely today.' \"It's so sunny outside!\"");
    expect_in(out, "load dtype bf16, precision bf16");
    expect_in(out, "[  1]  1.0000  0.66");
    free(out);
    out = test_run_cli_expect(0, NULL, "embed --load-dtype q8_0 'The weather is lovely today.' \"It's so sunny outside!\"");
    expect_in(out, "load dtype q8_0, precision fp32");
    expect_in(out, "[  1]  1.0000  0.6");
    free(out);
}

/* The values of the JSON array after `key` in s (at most max), parsed with strtod. */
static int json_numbers(const char *s, const char *key, double *v, int max) {
    const char *p = strstr(s, key);
    if (!p) return 0;
    p = strchr(p, '[');
    while (p && p[1] == '[') p++; /* the first row of a matrix */
    int n = 0;
    while (p && *p != ']' && n < max) {
        char *end;
        v[n++] = strtod(p + 1, &end);
        p = end;
    }
    return n;
}

static void t_json_matches_reference(void **state) {
    (void)state;
    model_dir();
    amp_safetensors *g = amp_safetensors_read(AMP_TEST_DATA_DIR "/minilm_golden.safetensors");
    if (!g) fail_msg("%s", amp_last_error());
    amp_tensor *emb = amp_safetensors_get(g, "emb");
    assert_non_null(emb);
    char *out = test_run_cli_expect(0, NULL, "embed --json '%s' '%s'", amp_safetensors_meta(g, "text.0"), amp_safetensors_meta(g, "text.1"));
    expect_in(out, "\"load_dtype\":\"f32\"");
    expect_in(out, "\"precision\":\"fp32\"");
    expect_in(out, "\"tokens\":7");
    double v[400];
    const char *second = strstr(out, "\"tokens\":6");
    assert_non_null(second);
    for (int row = 0; row < 2; row++) {
        int n = json_numbers(row ? second : out, "\"embedding\":", v, 400);
        assert_int_equal(n, 384);
        for (int k = 0; k < n; k++) assert_close(v[k], amp_tensor_get(emb, (int64_t[]){row, k}), 0, 1e-6, "--json embedding value");
    }
    int n = json_numbers(out, "\"similarity\":", v, 4); /* the first row */
    assert_int_equal(n, 2);
    assert_close(v[1], 0.40459, 0, 1e-4, "similarity of the model card's two sentences");
    free(out);
    amp_tensor_free(emb);
    amp_safetensors_free(g);
}

static void t_bad_arguments(void **state) {
    (void)state;
    char *err;
    free(test_run_cli_expect(2, &err, "embed --load-dtype q5_9 text"));
    expect_in(err, "embed: --load-dtype 'q5_9' is not keep, f32, f16, bf16, q8_0, q4_0 or q4_1");
    free(err);
    free(test_run_cli_expect(2, &err, "embed --precision fp8 text"));
    expect_in(err, "embed: --precision 'fp8' is not fp32, fp16 or bf16");
    free(err);
    free(test_run_cli_expect(2, &err, "embed --batch-size 0 text"));
    expect_in(err, "embed: bad option or value: --batch-size 0");
    free(err);
    free(test_run_cli_expect(2, &err, "embed --json"));
    expect_in(err, "embed: no TEXT given");
    free(err);
    free(test_run_cli_expect(2, &err, "embed --model"));
    expect_in(err, "embed: --model needs a value");
    free(err);
    free(test_run_cli_expect(1, &err, "embed --model %s/nowhere text", test_tmpdir));
    expect_in(err, "cannot open model directory");
    free(err);
    free(test_run_cli_expect(1, &err, "embed --model %s --max-seq-length 600 text", model_dir()));
    expect_in(err, "max_seq_length 600 is outside [2, max_position_embeddings 512]");
    free(err);
}

AMP_TEST_MAIN_FIXTURES(test_tmpdir_setup, test_tmpdir_teardown, t_text_output, t_json_matches_reference, t_bad_arguments)
