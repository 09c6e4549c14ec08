/* amp bench infer (issue 25), its structure only, never a timing: one short
 * round on the installed models (required: scripts/deps.sh models installs
 * them) writes the table rows of each load dtype asked for and the JSON
 * cells: positive speeds, the weight bytes of each dtype in the order of
 * their sizes (q8_0 below bf16 below f32; what decode speed follows), a
 * decode bound equal to the triad bandwidth measured beside that dtype's
 * runs over the bytes a step reads;
 * without llama.cpp (no --peers) or PyTorch (--no-torch) no peer column is
 * filled. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "test_support.h"

static double num(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsNumber(v)) fail_msg("JSON has no number '%s'", k);
    return v->valuedouble;
}

static void require_model(const char *name) {
    const char *p = amp_models_path(name);
    struct stat sb;
    if (!p || stat(p, &sb) != 0)
        fail_msg("%s is not installed (%s): scripts/deps.sh models installs it", name, p ? p : amp_last_error());
}

static cJSON *run(const char *extra, char **out) {
    char *dir = test_mkdtemp(), json[600];
    snprintf(json, sizeof json, "%s/infer.json", dir);
    *out = test_run_cli_expect(0, NULL, "bench infer --rounds 1 --threads 2 --no-torch --no-ort --json %s %s", json, extra);
    char *text = test_read_file(json, NULL);
    assert_non_null(text);
    cJSON *root = cJSON_Parse(text);
    assert_non_null(root);
    free(text);
    test_rmtree(dir);
    free(dir);
    return root;
}

static void t_llama(void **s) {
    (void)s;
    require_model("SmolLM2-135M-Instruct/SmolLM2-135M-Instruct.Q4_1.gguf");
    char *out;
    cJSON *root = run("--no-bert --prompt-tokens 16 --decode-tokens 4 --load-dtypes f32,bf16,q8_0", &out);
    assert_non_null(strstr(out, "SmolLM2-135M-Instruct.Q4_1.gguf: prefill 16 tokens, decode 4 tokens from an empty context, 2 threads"));
    assert_non_null(strstr(out, "| load dtype | weights MiB | prefill tok/s | decode tok/s | decode bound | of bound | peak MiB |\n"));
    assert_null(strstr(out, "llama.cpp prefill"));
    const cJSON *l = cJSON_GetObjectItemCaseSensitive(root, "llama");
    assert_int_equal(cJSON_GetArraySize(l), 3);
    assert_true(num(root, "triad_gbps") > 0);
    double wb[3];
    static const char *names[] = {"f32", "bf16", "q8_0"};
    for (int i = 0; i < 3; i++) {
        const cJSON *o = cJSON_GetArrayItem(l, i);
        assert_string_equal(cJSON_GetObjectItemCaseSensitive(o, "load_dtype")->valuestring, names[i]);
        char row[64];
        snprintf(row, sizeof row, "\n| %s | ", names[i]);
        assert_non_null(strstr(out, row));
        wb[i] = num(o, "weight_bytes");
        assert_true(num(o, "prefill_tokens_per_s") > 0 && num(o, "decode_tokens_per_s") > 0);
        /* the bound: bandwidth over the weights plus the KV cache at the mean position (30 layers,
         * 3 kv heads of 64, 4 tokens / 2, 4 bytes, 2 for bf16) */
        const double kv = 30.0 * 2 * 3 * 64 * 2 * (i == 1 ? 2 : 4);
        assert_close(num(o, "decode_bound_tokens_per_s"), num(o, "triad_gbps") * 1e9 / (wb[i] + kv), 1e-9, 0, "decode bound");
        assert_null(cJSON_GetObjectItemCaseSensitive(o, "llamacpp_decode_tokens_per_s"));
    }
    /* SmolLM2-135M: 134.5 M weights (the tied head counted once) */
    assert_true(wb[0] > 4 * 130e6 && wb[0] < 4 * 140e6);
    assert_true(wb[1] > 0.49 * wb[0] && wb[1] < 0.51 * wb[0]);
    assert_true(wb[2] > 0.25 * wb[0] && wb[2] < 0.30 * wb[0]);
    cJSON_Delete(root);
    free(out);
}

static void t_bert(void **s) {
    (void)s;
    require_model("all-MiniLM-L6-v2");
    char *out;
    cJSON *root = run("--no-llama --bert-seq 8 --load-dtypes f32,bf16", &out);
    assert_non_null(strstr(out, "all-MiniLM-L6-v2: sentence embeddings of batches of 8-token sentences"));
    assert_non_null(strstr(out, "PyTorch: not run (--no-torch)"));
    assert_non_null(strstr(out, "ONNX Runtime: not run (--no-ort)"));
    assert_non_null(strstr(out, "\n| f32 | "));
    assert_non_null(strstr(out, "\n| bf16 | "));
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(root, "bert");
    assert_int_equal(cJSON_GetArraySize(b), 2);
    for (int i = 0; i < 2; i++) {
        const cJSON *o = cJSON_GetArrayItem(b, i);
        assert_true(num(o, "sentences_per_s_batch1") > 0 && num(o, "sentences_per_s_batch32") > 0);
        assert_null(cJSON_GetObjectItemCaseSensitive(o, "torch_sentences_per_s_batch32"));
    }
    assert_null(cJSON_GetObjectItemCaseSensitive(root, "llama"));
    cJSON_Delete(root);
    free(out);
}

AMP_TEST_MAIN(t_llama, t_bert)
