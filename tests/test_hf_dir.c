/* Hugging Face model directories (amp/pretrained.h) on small directories the
 * test writes itself (amp_safetensors_write): config.json getters (nested
 * keys, every type, errors naming key and file), a single model.safetensors,
 * a sharded model and its index, and each kind of broken directory refused
 * with a message naming the file and the problem; then the installed
 * all-MiniLM-L6-v2 directory. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_support.h"

static void expect_error(const char *substr) {
    const char *e = amp_last_error();
    if (!strstr(e, substr)) fail_msg("expected an error containing \"%s\", got \"%s\"", substr, e);
}

static const char *CONFIG = "{\"model_type\": \"bert\", \"hidden_size\": 8, \"layer_norm_eps\": 1e-12, \"big\": 4e15,"
                            " \"frac\": 2.5, \"flag\": true, \"none\": null, \"text_config\": {\"vocab_size\": 30522,"
                            " \"inner\": {\"deep\": \"yes\"}}, \"list\": [1, 2]}";

/* A fresh directory under the group's temporary one, with config.json holding config (NULL: none). */
static const char *new_dir(const char *name, const char *config) {
    const char *d = test_tmp_path(name);
    assert_int_equal(mkdir(d, 0755), 0);
    if (config) {
        char p[1200];
        snprintf(p, sizeof p, "%s/config.json", d);
        test_write_file(p, config, strlen(config));
    }
    return d;
}

static void write_text(const char *dir, const char *file, const char *text) {
    char p[1200];
    snprintf(p, sizeof p, "%s/%s", dir, file);
    test_write_file(p, text, strlen(text));
}

/* Tensors a ([2, 3] f32 0..5), b ([4] f16 0.5, 1.5, ...) and c ([3] bf16) in dir/file, as named by na/nb/nc (NULL: left out). */
static void write_st(const char *dir, const char *file, const char *na, const char *nb, const char *nc) {
    amp_tensor *ts[3];
    const char *names[3];
    int n = 0;
    if (na) {
        ts[n] = amp_reshape(amp_tensor_arange(0, 6, 1, AMP_F32), 2, AMP_SHAPE(2, 3));
        names[n++] = na;
    }
    if (nb) {
        ts[n] = amp_to(amp_add_scalar(amp_tensor_arange(0, 4, 1, AMP_F32), 0.5), AMP_F16);
        names[n++] = nb;
    }
    if (nc) {
        ts[n] = amp_to(amp_mul_scalar(amp_tensor_arange(1, 4, 1, AMP_F32), 1.0 / 3.0), AMP_BF16);
        names[n++] = nc;
    }
    char p[1200];
    snprintf(p, sizeof p, "%s/%s", dir, file);
    assert_int_equal(amp_safetensors_write(p, ts, names, n, NULL, 0), AMP_OK);
}

static void t_single_file_and_config(void **state) {
    (void)state;
    const char *dir = new_dir("single", CONFIG);
    write_st(dir, "model.safetensors", "enc.b", "enc.a", "emb");
    amp_hf_dir *d = amp_hf_dir_open(dir);
    assert_non_null(d);
    assert_string_equal(amp_hf_dir_path(d), dir);
    int64_t i;
    double f;
    const char *s;
    bool b;
    assert_int_equal(amp_hf_config_int(d, "hidden_size", &i), AMP_OK);
    assert_int_equal(i, 8);
    assert_int_equal(amp_hf_config_int(d, "big", &i), AMP_OK);
    assert_true(i == 4000000000000000LL);
    assert_int_equal(amp_hf_config_int(d, "text_config.vocab_size", &i), AMP_OK);
    assert_int_equal(i, 30522);
    assert_int_equal(amp_hf_config_float(d, "layer_norm_eps", &f), AMP_OK);
    assert_true(f == 1e-12);
    assert_int_equal(amp_hf_config_float(d, "hidden_size", &f), AMP_OK); /* an integer is a number */
    assert_true(f == 8.0);
    assert_int_equal(amp_hf_config_str(d, "model_type", &s), AMP_OK);
    assert_string_equal(s, "bert");
    assert_int_equal(amp_hf_config_str(d, "text_config.inner.deep", &s), AMP_OK);
    assert_string_equal(s, "yes");
    assert_int_equal(amp_hf_config_bool(d, "flag", &b), AMP_OK);
    assert_true(b);
    assert_true(amp_hf_config_has(d, "text_config.inner"));
    assert_false(amp_hf_config_has(d, "none")); /* null is absent */
    assert_false(amp_hf_config_has(d, "text_config.nope"));
    assert_false(amp_hf_config_has(d, "model_type.x")); /* through a string */
    /* errors name the function, the key and the file */
    assert_int_equal(amp_hf_config_int(d, "frac", &i), AMP_ERR_FORMAT);
    expect_error("amp_hf_config_int");
    expect_error("\"frac\" is a number, not an integer");
    expect_error("config.json");
    assert_int_equal(amp_hf_config_int(d, "num_layers", &i), AMP_ERR_FORMAT);
    expect_error("has no key \"num_layers\"");
    assert_int_equal(amp_hf_config_str(d, "hidden_size", &s), AMP_ERR_FORMAT);
    expect_error("\"hidden_size\" is a number, not a string");
    assert_int_equal(amp_hf_config_bool(d, "list", &b), AMP_ERR_FORMAT);
    expect_error("\"list\" is an array, not a boolean");
    assert_int_equal(amp_hf_config_float(d, "none", &f), AMP_ERR_FORMAT);
    expect_error("has no key \"none\"");
    assert_int_equal(amp_hf_config_int(d, "text_config..vocab_size", &i), AMP_ERR_FORMAT);
    assert_int_equal(amp_hf_config_int(d, "", &i), AMP_ERR_FORMAT);

    /* tensors sorted by name */
    assert_int_equal(amp_hf_dir_tensor_count(d), 3);
    assert_string_equal(amp_hf_dir_tensor_name(d, 0), "emb");
    assert_string_equal(amp_hf_dir_tensor_name(d, 1), "enc.a");
    assert_string_equal(amp_hf_dir_tensor_name(d, 2), "enc.b");
    assert_null(amp_hf_dir_tensor_name(d, 3));
    assert_true(amp_hf_dir_has_tensor(d, "enc.a"));
    assert_false(amp_hf_dir_has_tensor(d, "enc"));
    amp_safetensors_info in;
    assert_int_equal(amp_hf_dir_tensor_info(d, "enc.a", &in), AMP_OK);
    assert_int_equal(in.dtype, AMP_F16);
    assert_int_equal(in.shape[0], 4);

    /* converted to the load dtype; exact values */
    amp_tensor *a = amp_hf_dir_get(d, "enc.b", AMP_BF16, 2, AMP_SHAPE(2, 3));
    assert_non_null(a);
    assert_int_equal(amp_tensor_dtype(a), AMP_BF16);
    for (int k = 0; k < 6; k++) assert_true(amp_tensor_get(a, (int64_t[]){k / 3, k % 3}) == k);
    amp_tensor *h = amp_hf_dir_get(d, "enc.a", AMP_F32, 0, NULL);
    assert_non_null(h);
    assert_int_equal(amp_tensor_dtype(h), AMP_F32);
    for (int k = 0; k < 4; k++) assert_true(amp_tensor_get(h, (int64_t[]){k}) == k + 0.5);
    amp_tensor *c = amp_hf_dir_get(d, "emb", AMP_F16, 1, AMP_SHAPE(3)); /* bf16 -> f16 */
    assert_non_null(c);
    float want = 0;
    amp_tensor *c0 = amp_to(amp_mul_scalar(amp_tensor_arange(1, 4, 1, AMP_F32), 1.0 / 3.0), AMP_BF16);
    for (int k = 0; k < 3; k++) {
        want = (float)amp_tensor_get(c0, (int64_t[]){k});
        assert_true(amp_tensor_get(c, (int64_t[]){k}) == want); /* every bf16 of this range is an f16 */
    }
    /* shape checked, before allocating */
    assert_null(amp_hf_dir_get(d, "enc.b", AMP_F32, 2, AMP_SHAPE(3, 2)));
    expect_error("tensor 'enc.b' has shape [2,3]; the model expects [3,2]");
    expect_error("model.safetensors");
    assert_null(amp_hf_dir_get(d, "enc.b", AMP_F32, 1, AMP_SHAPE(6)));
    expect_error("has shape [2,3]; the model expects [6]");
    assert_null(amp_hf_dir_get(d, "missing.weight", AMP_F32, 0, NULL));
    expect_error("has no tensor 'missing.weight'");
    assert_null(amp_hf_dir_get(d, "enc.b", AMP_I64, 0, NULL));
    expect_error("f32, f16 or bf16");
    test_free_tensors(a, h, c, c0);
    amp_hf_dir_close(d);
}

/* Other JSON files of the directory: sentence_bert_config.json, tokenizer_config.json. */
static void t_other_json_files(void **state) {
    (void)state;
    const char *dir = new_dir("other_json", CONFIG);
    write_st(dir, "model.safetensors", "a", NULL, NULL);
    write_text(dir, "sentence_bert_config.json", "{\"max_seq_length\": 256, \"do_lower_case\": false}");
    write_text(dir, "broken.json", "[1]");
    amp_hf_dir *d = amp_hf_dir_open(dir);
    assert_non_null(d);
    int64_t v = 0;
    bool b = true;
    assert_int_equal(amp_hf_file_int(d, "sentence_bert_config.json", "max_seq_length", &v), AMP_OK);
    assert_int_equal(v, 256);
    assert_int_equal(amp_hf_file_bool(d, "sentence_bert_config.json", "do_lower_case", &b), AMP_OK);
    assert_false(b);
    assert_int_equal(amp_hf_file_int(d, "tokenizer_config.json", "model_max_length", &v), AMP_ERR_IO); /* absent: a default applies */
    expect_error("amp_hf_file_int");
    expect_error("has no tokenizer_config.json");
    assert_int_equal(amp_hf_file_int(d, "sentence_bert_config.json", "do_lower_case", &v), AMP_ERR_FORMAT);
    expect_error("sentence_bert_config.json: \"do_lower_case\" is a boolean, not an integer");
    assert_int_equal(amp_hf_file_bool(d, "sentence_bert_config.json", "nope", &b), AMP_ERR_FORMAT);
    expect_error("sentence_bert_config.json has no key \"nope\"");
    assert_int_equal(amp_hf_file_int(d, "broken.json", "x", &v), AMP_ERR_FORMAT);
    expect_error("broken.json: the top level is not a JSON object");
    assert_int_equal(amp_hf_file_int(d, "../config.json", "x", &v), AMP_ERR_ARG);
    expect_error("is not a file name in the directory");
    amp_hf_dir_close(d);
}

static void t_integer_tensor_refused(void **state) {
    (void)state;
    const char *dir = new_dir("ints", CONFIG);
    amp_tensor *ids = amp_tensor_arange(0, 4, 1, AMP_I64);
    char p[1200];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    assert_int_equal(amp_safetensors_write(p, &ids, (const char *[]){"position_ids"}, 1, NULL, 0), AMP_OK);
    amp_hf_dir *d = amp_hf_dir_open(dir);
    assert_non_null(d);
    assert_null(amp_hf_dir_get(d, "position_ids", AMP_F32, 0, NULL));
    expect_error("tensor 'position_ids' has dtype I64, not a floating-point dtype");
    amp_hf_dir_close(d);
    amp_tensor_free(ids);
}

static const char *index_json(const char *a, const char *b, const char *c) {
    static char buf[1024];
    snprintf(buf, sizeof buf,
             "{\"metadata\": {\"total_size\": 52}, \"weight_map\": {\"enc.b\": \"%s\", \"enc.a\": \"%s\", \"emb\": \"%s\"}}", a, b,
             c);
    return buf;
}

static void t_sharded(void **state) {
    (void)state;
    const char *dir = new_dir("sharded", CONFIG);
    write_st(dir, "model-00001-of-00002.safetensors", "enc.b", NULL, "emb");
    write_st(dir, "model-00002-of-00002.safetensors", NULL, "enc.a", NULL);
    write_text(dir, "model.safetensors.index.json",
               index_json("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "model-00001-of-00002.safetensors"));
    amp_hf_dir *d = amp_hf_dir_open(dir);
    if (!d) fail_msg("%s", amp_last_error());
    assert_int_equal(amp_hf_dir_tensor_count(d), 3);
    assert_string_equal(amp_hf_dir_tensor_name(d, 1), "enc.a");
    amp_tensor *a = amp_hf_dir_get(d, "enc.a", AMP_F32, 1, AMP_SHAPE(4));
    amp_tensor *b = amp_hf_dir_get(d, "enc.b", AMP_F32, 2, AMP_SHAPE(2, 3));
    assert_non_null(a);
    assert_non_null(b);
    assert_true(amp_tensor_get(a, (int64_t[]){3}) == 3.5);
    assert_true(amp_tensor_get(b, (int64_t[]){1, 2}) == 5);
    test_free_tensors(a, b);
    amp_hf_dir_close(d);

    /* model.safetensors beside an index: the single file is used (as transformers does) */
    write_st(dir, "model.safetensors", "only", NULL, NULL);
    d = amp_hf_dir_open(dir);
    assert_non_null(d);
    assert_int_equal(amp_hf_dir_tensor_count(d), 1);
    assert_string_equal(amp_hf_dir_tensor_name(d, 0), "only");
    amp_hf_dir_close(d);
}

/* Opening dir fails with an error containing each of the substrings. */
static void expect_open_fails(const char *dir, const char *s1, const char *s2) {
    amp_hf_dir *d = amp_hf_dir_open(dir);
    if (d) fail_msg("amp_hf_dir_open(%s) succeeded; expected an error containing \"%s\"", dir, s1);
    expect_error("amp_hf_dir_open");
    expect_error(s1);
    if (s2) expect_error(s2);
}

static void t_sharded_broken(void **state) {
    (void)state;
    const char *S1 = "s1.safetensors", *S2 = "s2.safetensors";
    /* a tensor in two shards (the index names one of them) */
    const char *dir = new_dir("two_shards", CONFIG);
    write_st(dir, S1, "enc.b", NULL, "emb");
    write_st(dir, S2, "enc.b", "enc.a", NULL);
    write_text(dir, "model.safetensors.index.json", index_json(S1, S2, S1));
    expect_open_fails(dir, "tensor 'enc.b' is in two shards", "s1.safetensors and");

    /* a shard missing */
    dir = new_dir("missing_shard", CONFIG);
    write_st(dir, S1, "enc.b", NULL, "emb");
    write_text(dir, "model.safetensors.index.json", index_json(S1, S2, S1));
    expect_open_fails(dir, "names shard s2.safetensors, which is missing", "model.safetensors.index.json");

    /* a tensor the index names that its shard lacks */
    dir = new_dir("absent_tensor", CONFIG);
    write_st(dir, S1, "enc.b", NULL, NULL);
    write_st(dir, S2, NULL, "enc.a", NULL);
    write_text(dir, "model.safetensors.index.json", index_json(S1, S2, S1));
    expect_open_fails(dir, "names tensor 'emb' in shard s1.safetensors, which does not hold it", NULL);

    /* a shard holding a tensor the index does not name */
    dir = new_dir("unnamed_tensor", CONFIG);
    write_st(dir, S1, "enc.b", NULL, "emb");
    write_st(dir, S2, NULL, "enc.a", "extra");
    write_text(dir, "model.safetensors.index.json", index_json(S1, S2, S1));
    expect_open_fails(dir, "holds tensor 'extra', which", "does not name");

    /* a tensor in the shard the index does not place it in */
    dir = new_dir("wrong_shard", CONFIG);
    write_st(dir, S1, "enc.b", NULL, NULL);
    write_st(dir, S2, NULL, "enc.a", "emb");
    write_text(dir, "model.safetensors.index.json", index_json(S1, S2, S1));
    expect_open_fails(dir, "tensor 'emb' is in shard", "places it in s1.safetensors");

    /* a shard outside the directory, a non-string shard, no weight_map, a tensor named twice, bad JSON */
    dir = new_dir("escape", CONFIG);
    write_st(dir, S1, "enc.b", "enc.a", "emb");
    write_text(dir, "model.safetensors.index.json", index_json(S1, "../s1.safetensors", S1));
    expect_open_fails(dir, "shard \"../s1.safetensors\" is not a file name in the directory", NULL);
    write_text(dir, "model.safetensors.index.json", "{\"weight_map\": {\"emb\": 3}}");
    expect_open_fails(dir, "the shard of tensor 'emb' is not a string", NULL);
    write_text(dir, "model.safetensors.index.json", "{\"metadata\": {}}");
    expect_open_fails(dir, "\"weight_map\" is missing or not an object", NULL);
    write_text(dir, "model.safetensors.index.json", "{\"weight_map\": {}}");
    expect_open_fails(dir, "\"weight_map\" names no tensor", NULL);
    write_text(dir, "model.safetensors.index.json",
               "{\"weight_map\": {\"emb\": \"s1.safetensors\", \"enc.a\": \"s1.safetensors\", \"enc.b\": \"s1.safetensors\", "
               "\"emb\": \"s1.safetensors\"}}");
    expect_open_fails(dir, "tensor 'emb' is named twice in \"weight_map\"", NULL);
    write_text(dir, "model.safetensors.index.json", "{\"weight_map\": {\"emb\": ");
    expect_open_fails(dir, "model.safetensors.index.json: not valid JSON", NULL);

    /* a corrupt shard: the safetensors reader's message, then which directory */
    dir = new_dir("corrupt_shard", CONFIG);
    write_st(dir, S1, "enc.b", NULL, "emb");
    write_text(dir, S2, "\x10\0\0\0\0\0\0\0{\"a\":");
    write_text(dir, "model.safetensors.index.json", index_json(S1, S2, S1));
    expect_open_fails(dir, "s2.safetensors", "amp_safetensors_read");
}

static void t_bad_directories(void **state) {
    (void)state;
    expect_open_fails(test_tmp_path("does-not-exist"), "cannot open model directory", "does-not-exist");
    const char *dir = new_dir("plain_file_parent", NULL);
    write_text(dir, "f", "x");
    char p[1200];
    snprintf(p, sizeof p, "%s/f", dir);
    expect_open_fails(p, "is not a directory", NULL);

    dir = new_dir("no_config", NULL);
    write_st(dir, "model.safetensors", "a", NULL, NULL);
    expect_open_fails(dir, "has no config.json", NULL);

    dir = new_dir("bad_config", "{\"hidden_size\": 8,");
    write_st(dir, "model.safetensors", "a", NULL, NULL);
    expect_open_fails(dir, "config.json: not valid JSON", NULL);
    dir = new_dir("array_config", "[1, 2]");
    expect_open_fails(dir, "config.json: the top level is not a JSON object", NULL);
    dir = new_dir("nul_config", NULL);
    write_text(dir, "config.json", "{}");
    snprintf(p, sizeof p, "%s/config.json", dir);
    test_write_file(p, "{}\0{}", 5);
    expect_open_fails(dir, "a NUL byte", NULL);

    dir = new_dir("no_weights", CONFIG);
    expect_open_fails(dir, "has neither model.safetensors nor model.safetensors.index.json", NULL);
    write_text(dir, "pytorch_model.bin", "PK");
    expect_open_fails(dir, "pytorch_model.bin, a pickle, is not read", NULL);

    dir = new_dir("truncated_weights", CONFIG);
    write_st(dir, "model.safetensors", "a", "b", "c");
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    assert_int_equal(truncate(p, 40), 0);
    expect_open_fails(dir, "model.safetensors", "amp_safetensors_read");

    dir = new_dir("weights_dir", CONFIG);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    assert_int_equal(mkdir(p, 0755), 0); /* a directory where the file should be */
    expect_open_fails(dir, "has neither", NULL);

    assert_null(amp_hf_dir_open(NULL));
    expect_error("amp_hf_dir_open: dir is NULL");
    assert_null(amp_hf_dir_open(""));
    expect_error("dir is empty");
}

/* The installed all-MiniLM-L6-v2 (scripts/deps.sh models). */
static void t_minilm_dir(void **state) {
    (void)state;
    const char *dir = amp_models_path("all-MiniLM-L6-v2");
    struct stat sb;
    if (!dir || stat(dir, &sb) != 0)
        fail_msg("the all-MiniLM-L6-v2 model is not installed (%s): scripts/deps.sh models installs it", dir ? dir : "?");
    amp_hf_dir *d = amp_hf_dir_open(dir);
    if (!d) fail_msg("%s", amp_last_error());
    int64_t h, l;
    double eps;
    const char *mt;
    assert_int_equal(amp_hf_config_int(d, "hidden_size", &h), AMP_OK);
    assert_int_equal(amp_hf_config_int(d, "num_hidden_layers", &l), AMP_OK);
    assert_int_equal(amp_hf_config_float(d, "layer_norm_eps", &eps), AMP_OK);
    assert_int_equal(amp_hf_config_str(d, "model_type", &mt), AMP_OK);
    assert_int_equal(h, 384);
    assert_int_equal(l, 6);
    assert_true(eps == 1e-12);
    assert_string_equal(mt, "bert");
    assert_int_equal(amp_hf_dir_tensor_count(d), 104);
    amp_tensor *w = amp_hf_dir_get(d, "encoder.layer.5.intermediate.dense.weight", AMP_BF16, 2, AMP_SHAPE(1536, 384));
    assert_non_null(w);
    amp_tensor_free(w);
    amp_hf_dir_close(d);
}

AMP_TEST_MAIN_FIXTURES(test_tmpdir_setup, test_tmpdir_teardown, t_single_file_and_config, t_other_json_files, t_integer_tensor_refused, t_sharded,
                       t_sharded_broken, t_bad_directories, t_minilm_dir)
