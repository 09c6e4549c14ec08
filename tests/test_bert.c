/* The BERT encoder (amp/bert.h) on the installed all-MiniLM-L6-v2 against
 * tools/ref_minilm.py's float64 reference (tests/data/minilm_golden.safetensors,
 * computed in numpy from the model's files, not by amp):
 *   - f32 sentence embeddings within 1e-5 cosine of the reference, each
 *     sentence, in one padded batch; the similarity matrix to 1e-4;
 *   - padding does not change a sentence's embedding;
 *   - bf16 / f16 loads under autocast within the bound the reference's own
 *     emulation of that rounding gives;
 *   - quantized loads' cosine to f32 (reported, loosely bounded);
 * and on tiny directories the test writes: bad directories named (missing
 * config, unknown model_type, wrong shapes, missing tensors), the "bert."
 * prefix, amp_bert_forward's argument checks. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_support.h"

#define GOLDEN AMP_TEST_DATA_DIR "/minilm_golden.safetensors"

static void expect_error(const char *substr) {
    const char *e = amp_last_error();
    if (!strstr(e, substr)) fail_msg("expected an error containing \"%s\", got \"%s\"", substr, e);
}

static const char *minilm_dir(void) {
    const char *dir = amp_models_path("all-MiniLM-L6-v2");
    struct stat sb;
    if (!dir || stat(dir, &sb) != 0)
        fail_msg("the all-MiniLM-L6-v2 model is not installed (%s): scripts/deps.sh models installs it", dir ? dir : "?");
    return dir;
}

/* ---- the golden data ---------------------------------------------------------------------------- */
typedef struct {
    amp_safetensors *f;
    int n;
    int32_t *ids[16];
    int64_t lens[16];
    double *emb, *sim, *emb_bf16, *emb_f16; /* [n, 384], [n, n] */
} golden;

static double *get_f64(const golden *g, const char *name) {
    amp_tensor *t = amp_safetensors_get(g->f, name);
    if (!t) fail_msg("%s: %s", GOLDEN, amp_last_error());
    double *p = malloc(amp_tensor_nbytes(t));
    assert_int_equal(amp_tensor_copy_out(t, p, AMP_F64), AMP_OK);
    amp_tensor_free(t);
    return p;
}

static void golden_load(golden *g) {
    memset(g, 0, sizeof *g);
    g->f = amp_safetensors_read(GOLDEN);
    if (!g->f) fail_msg("%s", amp_last_error());
    g->n = atoi(amp_safetensors_meta(g->f, "n"));
    assert_true(g->n >= 2 && g->n <= 16);
    for (int i = 0; i < g->n; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "ids.%d", i);
        amp_tensor *t = amp_safetensors_get(g->f, nm);
        assert_non_null(t);
        g->lens[i] = amp_tensor_numel(t);
        g->ids[i] = malloc(sizeof(int32_t) * (size_t)g->lens[i]);
        assert_int_equal(amp_tensor_copy_out(t, g->ids[i], AMP_I32), AMP_OK);
        amp_tensor_free(t);
    }
    g->emb = get_f64(g, "emb");
    g->sim = get_f64(g, "sim");
    g->emb_bf16 = get_f64(g, "emb_bf16");
    g->emb_f16 = get_f64(g, "emb_f16");
}

static void golden_free(golden *g) {
    for (int i = 0; i < g->n; i++) free(g->ids[i]);
    test_free_all(g->emb, g->sim, g->emb_bf16, g->emb_f16);
    amp_safetensors_free(g->f);
}

static const int64_t H = 384;

/* cosine of row i of a (f32 [n, H]) with row i of ref (f64) */
static double cos_row(const float *a, const double *ref, int i) {
    double d = 0, na = 0, nb = 0;
    for (int64_t k = 0; k < H; k++) {
        double x = a[i * H + k], y = ref[i * H + k];
        d += x * y;
        na += x * x;
        nb += y * y;
    }
    return d / sqrt(na * nb);
}

static double cos_ref(const double *a, const double *b, int i) {
    double d = 0, na = 0, nb = 0;
    for (int64_t k = 0; k < H; k++) {
        d += a[i * H + k] * b[i * H + k];
        na += a[i * H + k] * a[i * H + k];
        nb += b[i * H + k] * b[i * H + k];
    }
    return d / sqrt(na * nb);
}

/* The embeddings of the golden ids (f32 [n, H], malloc'd), batch_size bs. */
static float *embed(amp_module *m, const golden *g, int64_t bs) {
    amp_embed_opts o = AMP_EMBED_DEFAULTS;
    o.batch_size = bs;
    amp_tensor *e = NULL;
    if (amp_bert_embed_ids(m, (const int32_t *const *)g->ids, g->lens, g->n, &o, &e)) fail_msg("%s", amp_last_error());
    assert_int_equal(amp_tensor_dim(e, 0), g->n);
    assert_int_equal(amp_tensor_dim(e, 1), H);
    float *p = malloc(sizeof(float) * (size_t)(g->n * H));
    assert_int_equal(amp_tensor_copy_out(e, p, AMP_F32), AMP_OK);
    amp_tensor_free(e);
    return p;
}

static amp_module *load(const char *dt) {
    amp_bert_load_opts o = AMP_BERT_LOAD_DEFAULTS;
    assert_int_equal(amp_load_dtype_parse(dt, &o.load_dtype), AMP_OK);
    amp_module *m = amp_bert_from_pretrained(minilm_dir(), &o);
    if (!m) fail_msg("amp_bert_from_pretrained(%s): %s", dt, amp_last_error());
    return m;
}

static void t_f32_matches_reference(void **state) {
    (void)state;
    golden g;
    golden_load(&g);
    amp_module *m = load("keep");
    amp_bert_config c;
    assert_int_equal(amp_bert_get_config(m, &c), AMP_OK);
    assert_int_equal(c.hidden_size, H);
    assert_int_equal(c.num_layers, 6);
    assert_int_equal(c.max_seq_length, 256); /* sentence_bert_config.json */
    assert_int_equal(c.load_dtype.kind, AMP_LOAD_FLOAT);
    assert_int_equal(c.load_dtype.dtype, AMP_F32);
    float *e = embed(m, &g, 32); /* all in one batch, padded to 256 */
    double worst = 1, maxabs = 0;
    for (int i = 0; i < g.n; i++) {
        double cs = cos_row(e, g.emb, i);
        if (cs < worst) worst = cs;
        for (int64_t k = 0; k < H; k++) maxabs = fmax(maxabs, fabs(e[i * H + k] - g.emb[i * H + k]));
        if (!(cs >= 1 - 1e-5)) fail_msg("sentence %d: cosine to the reference %.9f < 1 - 1e-5", i, cs);
    }
    print_message("f32: worst cosine to the float64 reference 1 - %.2e, max |diff| %.2e\n", 1 - worst, maxabs);
    assert_true(maxabs < 1e-4);
    /* the similarity matrix (the README's examples among them) to 1e-4 */
    for (int i = 0; i < g.n; i++)
        for (int j = 0; j < g.n; j++) {
            double s = 0;
            for (int64_t k = 0; k < H; k++) s += (double)e[i * H + k] * e[j * H + k];
            if (!(fabs(s - g.sim[i * g.n + j]) <= 1e-4)) fail_msg("similarity [%d][%d] = %.6f, reference %.6f", i, j, s, g.sim[i * g.n + j]);
        }
    /* the sentence-transformers README's similarity of "The weather is lovely today." and "It's so sunny outside!" */
    assert_true(fabs(g.sim[2 * g.n + 3] - 0.6660) < 5e-5);
    free(e);
    amp_module_free(m);
    golden_free(&g);
}

static void t_padding_invariant(void **state) {
    (void)state;
    golden g;
    golden_load(&g);
    amp_module *m = load("f32");
    float *batched = embed(m, &g, 32), *alone = embed(m, &g, 1), *pairs = embed(m, &g, 3);
    double d1 = 0, d3 = 0;
    for (int64_t k = 0; k < g.n * H; k++) {
        d1 = fmax(d1, fabs(batched[k] - alone[k]));
        d3 = fmax(d3, fabs(pairs[k] - alone[k]));
    }
    print_message("padding: max |batch of 8 - alone| %.2e, |batches of 3 - alone| %.2e\n", d1, d3);
    assert_true(d1 <= 1e-6);
    assert_true(d3 <= 1e-6);
    test_free_all(batched, alone, pairs);
    amp_module_free(m);
    golden_free(&g);
}

/* amp's embeddings in load dtype ld under autocast ac (AMP_F32: none) against the f64 reference:
 * 1 - cos must stay within k times what the reference's emulation of that rounding loses. */
static void half_case(const golden *g, const char *ld, amp_dtype ac, const double *ref_emul, double k) {
    amp_module *m = load(ld);
    if (ac != AMP_F32) assert_int_equal(amp_autocast_enter(ac), AMP_OK);
    float *e = embed(m, g, 32);
    if (ac != AMP_F32) assert_int_equal(amp_autocast_exit(), AMP_OK);
    double worst = 0, worst_ref = 0;
    for (int i = 0; i < g->n; i++) {
        double loss = 1 - cos_row(e, g->emb, i), ref_loss = 1 - cos_ref(ref_emul, g->emb, i);
        worst = fmax(worst, loss);
        worst_ref = fmax(worst_ref, ref_loss);
        if (!(loss <= k * ref_loss + 1e-7))
            fail_msg("load %s, autocast %s, sentence %d: 1 - cos = %.3e, more than %g x the reference's %.3e", ld, amp_dtype_name(ac), i,
                     loss, k, ref_loss);
    }
    print_message("load %-4s autocast %-4s: worst 1 - cos to f64 %.2e (the reference's same rounding: %.2e)\n", ld, amp_dtype_name(ac), worst,
                  worst_ref);
    free(e);
    amp_module_free(m);
}

static void t_half_within_reference_bounds(void **state) {
    (void)state;
    golden g;
    golden_load(&g);
    half_case(&g, "bf16", AMP_BF16, g.emb_bf16, 2.0);
    half_case(&g, "f16", AMP_F16, g.emb_f16, 2.0);
    half_case(&g, "f32", AMP_BF16, g.emb_bf16, 2.0); /* f32 weights cast by autocast: the same rounding */
    half_case(&g, "bf16", AMP_F32, g.emb_bf16, 2.0); /* pure bf16 (no autocast): norms on bf16 activations */
    golden_free(&g);
}

/* From the texts: amp_bert_tokenizer's ids are the reference's (Hugging Face tokenizers on tokenizer.json,
 * truncated to 256), and amp_bert_embed gives amp_bert_embed_ids' embeddings; the vocab.txt fallback too. */
static void t_texts_through_the_tokenizer(void **state) {
    (void)state;
    golden g;
    golden_load(&g);
    amp_module *m = load("keep");
    amp_tokenizer *t = amp_bert_tokenizer(minilm_dir());
    if (!t) fail_msg("%s", amp_last_error());
    const char *texts[16];
    for (int i = 0; i < g.n; i++) {
        char k[32];
        snprintf(k, sizeof k, "text.%d", i);
        texts[i] = amp_safetensors_meta(g.f, k);
        assert_non_null(texts[i]);
        int32_t *ids;
        size_t n;
        amp_encode_opts eo = {true, true};
        assert_int_equal(amp_tokenizer_encode_ex(t, texts[i], strlen(texts[i]), &eo, &ids, &n), AMP_OK);
        size_t want = (size_t)g.lens[i] < n ? (size_t)g.lens[i] : n; /* the reference's are cut to 256 */
        if (n > 256) {
            assert_int_equal(g.lens[i], 256);
            assert_int_equal(g.ids[i][255], ids[n - 1]); /* [SEP] kept */
            want = 255;
        } else {
            assert_int_equal((int64_t)n, g.lens[i]);
        }
        for (size_t k2 = 0; k2 < want; k2++)
            if (ids[k2] != g.ids[i][k2]) fail_msg("text %d token %zu: id %d, the reference's %d", i, k2, ids[k2], g.ids[i][k2]);
        free(ids);
    }
    amp_tensor *e = NULL;
    assert_int_equal(amp_bert_embed(m, t, texts, g.n, NULL, &e), AMP_OK);
    float *ref = embed(m, &g, 32), *got = malloc(sizeof(float) * (size_t)(g.n * H));
    assert_int_equal(amp_tensor_copy_out(e, got, AMP_F32), AMP_OK);
    for (int64_t k = 0; k < g.n * H; k++) assert_true(got[k] == ref[k]);
    /* bad arguments named */
    amp_tensor *e2 = NULL;
    assert_int_equal(amp_bert_embed(m, t, (const char *[]){"a", NULL}, 2, NULL, &e2), AMP_ERR_ARG);
    expect_error("amp_bert_embed: texts[1] is NULL");
    amp_embed_opts bad = AMP_EMBED_DEFAULTS;
    bad.max_seq_length = 513;
    assert_int_equal(amp_bert_embed(m, t, texts, 1, &bad, &e2), AMP_ERR_ARG);
    expect_error("max_seq_length 513 is outside [2, max_position_embeddings 512]");
    assert_int_equal(amp_bert_embed_ids(m, (const int32_t *const[]){(const int32_t[]){101, 30522, 102}}, (const int64_t[]){3}, 1, NULL, &e2),
                     AMP_ERR_RANGE);
    expect_error("amp_bert_embed_ids: text 0: token id 30522 at 1 is outside the vocabulary [0, 30522)");
    assert_null(e2);
    test_free_all(ref, got);
    amp_tensor_free(e);
    amp_tokenizer_free(t);

    /* a directory without tokenizer.json: vocab.txt, lowercased (tokenizer_config.json's do_lower_case) */
    const char *dir = test_tmp_path("vocab_only");
    assert_int_equal(mkdir(dir, 0755), 0);
    char from[1200], to[1200];
    static const char *files[] = {"config.json", "model.safetensors", "vocab.txt", "tokenizer_config.json"};
    for (int i = 0; i < 4; i++) {
        snprintf(from, sizeof from, "%s/%s", minilm_dir(), files[i]);
        snprintf(to, sizeof to, "%s/%s", dir, files[i]);
        assert_int_equal(symlink(from, to), 0);
    }
    t = amp_bert_tokenizer(dir);
    if (!t) fail_msg("%s", amp_last_error());
    assert_string_equal(amp_tokenizer_name(t), "wordpiece");
    int32_t *ids;
    size_t n;
    amp_encode_opts eo = {true, false};
    assert_int_equal(amp_tokenizer_encode_ex(t, texts[0], strlen(texts[0]), &eo, &ids, &n), AMP_OK);
    assert_int_equal((int64_t)n, g.lens[0]);
    for (size_t k = 0; k < n; k++) assert_int_equal(ids[k], g.ids[0][k]);
    free(ids);
    amp_tokenizer_free(t);
    assert_null(amp_bert_tokenizer(test_tmp_path("none")));
    expect_error("amp_bert_tokenizer");
    amp_module_free(m);
    golden_free(&g);
}

/* q8_0 / q4_0 / q4_1 loads: the linear layers and the token embedding quantized (amp_qlinear,
 * amp_qembedding), the rest f32. Their cosine to the f32 embeddings is reported; the bounds are loose
 * (what llama.cpp's formats cost a 6-layer encoder: measured worst 1 - cos 1e-3 for q8_0 (activations quantized too), 5e-2 for
 * the 4-bit ones), there to catch a broken path (a wrong block layout gives cosines near 0). */
static void t_quantized_loads(void **state) {
    (void)state;
    golden g;
    golden_load(&g);
    static const struct {
        const char *ld;
        double max_loss;
    } Q[] = {{"q8_0", 2e-3}, {"q4_0", 0.1}, {"q4_1", 0.1}};
    for (size_t q = 0; q < sizeof Q / sizeof Q[0]; q++) {
        amp_module *m = load(Q[q].ld);
        amp_bert_config c;
        assert_int_equal(amp_bert_get_config(m, &c), AMP_OK);
        assert_int_equal(c.load_dtype.kind, AMP_LOAD_QUANT);
        /* quantized weights are not parameters: the f32 ones left are norms, biases, position and type embeddings */
        assert_null(amp_module_get_parameter(m, "encoder.layer.0.attention.self.query.weight"));
        assert_non_null(amp_module_get_parameter(m, "encoder.layer.0.attention.self.query.bias"));
        assert_int_equal(amp_module_num_params(m), 512 * 384 + 2 * 384 + 2 * 384 + 6 * (4 * 384 + 1536 + 384 + 4 * 384));
        float *e = embed(m, &g, 32);
        double worst = 0, mean = 0;
        for (int i = 0; i < g.n; i++) {
            double loss = 1 - cos_row(e, g.emb, i);
            worst = fmax(worst, loss);
            mean += loss / g.n;
        }
        print_message("load %s: 1 - cos to the f32 reference: mean %.2e, worst %.2e\n", Q[q].ld, mean, worst);
        if (!(worst <= Q[q].max_loss)) fail_msg("load %s: worst 1 - cos %.3e > %g", Q[q].ld, worst, Q[q].max_loss);
        free(e);
        amp_module_free(m);
    }
    golden_free(&g);
}

/* ---- tiny directories ------------------------------------------------------------------------------ */
static const char *TINY_CONFIG = "{\"model_type\": \"bert\", \"vocab_size\": 10, \"hidden_size\": 8, \"num_hidden_layers\": 1,"
                                 " \"num_attention_heads\": 2, \"intermediate_size\": 16, \"max_position_embeddings\": 12,"
                                 " \"type_vocab_size\": 2, \"layer_norm_eps\": 1e-12, \"hidden_act\": \"gelu\"}";

/* A random BERT of TINY_CONFIG's sizes in dir (prefix before every name; skip: a name left out; bad: a name given shape [3]). */
static void write_tiny(const char *dir, const char *config, const char *prefix, const char *skip, const char *bad) {
    static const struct {
        const char *name;
        int64_t d0, d1;
    } T[] = {{"embeddings.word_embeddings.weight", 10, 8},
             {"embeddings.position_embeddings.weight", 12, 8},
             {"embeddings.token_type_embeddings.weight", 2, 8},
             {"embeddings.LayerNorm.weight", 8, 0},
             {"embeddings.LayerNorm.bias", 8, 0},
             {"encoder.layer.0.attention.self.query.weight", 8, 8},
             {"encoder.layer.0.attention.self.query.bias", 8, 0},
             {"encoder.layer.0.attention.self.key.weight", 8, 8},
             {"encoder.layer.0.attention.self.key.bias", 8, 0},
             {"encoder.layer.0.attention.self.value.weight", 8, 8},
             {"encoder.layer.0.attention.self.value.bias", 8, 0},
             {"encoder.layer.0.attention.output.dense.weight", 8, 8},
             {"encoder.layer.0.attention.output.dense.bias", 8, 0},
             {"encoder.layer.0.attention.output.LayerNorm.weight", 8, 0},
             {"encoder.layer.0.attention.output.LayerNorm.bias", 8, 0},
             {"encoder.layer.0.intermediate.dense.weight", 16, 8},
             {"encoder.layer.0.intermediate.dense.bias", 16, 0},
             {"encoder.layer.0.output.dense.weight", 8, 16},
             {"encoder.layer.0.output.dense.bias", 8, 0},
             {"encoder.layer.0.output.LayerNorm.weight", 8, 0},
             {"encoder.layer.0.output.LayerNorm.bias", 8, 0}};
    const int nt = (int)(sizeof T / sizeof T[0]);
    amp_tensor *ts[32];
    const char *names[32];
    char nb[32][128];
    int n = 0;
    for (int i = 0; i < nt; i++) {
        if (skip && !strcmp(T[i].name, skip)) continue;
        bool b = bad && !strcmp(T[i].name, bad);
        ts[n] = T[i].d1 && !b ? amp_test_randn(AMP_F32, 2, AMP_SHAPE(T[i].d0, T[i].d1), 100 + (uint64_t)i, 0.5, 0)
                              : amp_test_randn(AMP_F32, 1, AMP_SHAPE(b ? 3 : T[i].d0), 100 + (uint64_t)i, 0.5, strstr(T[i].name, "LayerNorm.weight") ? 1 : 0);
        snprintf(nb[n], sizeof nb[n], "%s%s", prefix, T[i].name);
        names[n] = nb[n];
        n++;
    }
    assert_int_equal(mkdir(dir, 0755), 0);
    char p[1200];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    assert_int_equal(amp_safetensors_write(p, ts, names, n, NULL, 0), AMP_OK);
    for (int i = 0; i < n; i++) amp_tensor_free(ts[i]);
    if (config) {
        snprintf(p, sizeof p, "%s/config.json", dir);
        test_write_file(p, config, strlen(config));
    }
}

static void expect_load_fails(const char *dir, const char *s1, const char *s2) {
    amp_module *m = amp_bert_from_pretrained(dir, NULL);
    if (m) fail_msg("amp_bert_from_pretrained(%s) succeeded; expected an error containing \"%s\"", dir, s1);
    expect_error("amp_bert_from_pretrained");
    expect_error(s1);
    if (s2) expect_error(s2);
}

/* TINY_CONFIG with `from` replaced by `to` (same length) in directory `name` fails to load with s1 and s2. */
static void bad_config(const char *name, const char *from, const char *to, const char *s1, const char *s2) {
    char cfg[1024];
    snprintf(cfg, sizeof cfg, "%s", TINY_CONFIG);
    assert_int_equal(strlen(from), strlen(to));
    memcpy(strstr(cfg, from), to, strlen(to));
    write_tiny(test_tmp_path(name), cfg, "", NULL, NULL);
    expect_load_fails(test_tmp_path(name), s1, s2);
}

static void t_bad_directories(void **state) {
    (void)state;
    write_tiny(test_tmp_path("noconfig"), NULL, "", NULL, NULL);
    expect_load_fails(test_tmp_path("noconfig"), "has no config.json", NULL);

    bad_config("gpt2", "\"bert\"", "\"gpt2\"", "model_type \"gpt2\" is not a BERT", "config.json");

    write_tiny(test_tmp_path("shape"), TINY_CONFIG, "", NULL, "encoder.layer.0.intermediate.dense.weight");
    expect_load_fails(test_tmp_path("shape"), "tensor 'encoder.layer.0.intermediate.dense.weight' has shape [3]; config.json implies [16,8]",
                      NULL);

    write_tiny(test_tmp_path("missing"), TINY_CONFIG, "", "encoder.layer.0.output.LayerNorm.bias", NULL);
    expect_load_fails(test_tmp_path("missing"), "has no tensor 'encoder.layer.0.output.LayerNorm.bias'", NULL);

    bad_config("heads", "\"num_attention_heads\": 2", "\"num_attention_heads\": 3", "hidden_size 8 is not a multiple of num_attention_heads 3", NULL);

    bad_config("act", "\"gelu\"", "\"silu\"", "hidden_act \"silu\" is not supported", NULL);

    bad_config("layers", "\"num_hidden_layers\": 1", "\"num_hidden_layers\": 0", "num_hidden_layers = 0 is outside [1, 1024]", NULL);

    bad_config("layers2", "\"num_hidden_layers\": 1", "\"num_hidden_layers\": 2", "has no tensor 'encoder.layer.1.attention.self.query.weight'", "2 layers");

    write_tiny(test_tmp_path("msl"), TINY_CONFIG, "", NULL, NULL);
    char p[1200];
    snprintf(p, sizeof p, "%s/sentence_bert_config.json", test_tmp_path("msl"));
    test_write_file(p, "{\"max_seq_length\": 13}", 22);
    expect_load_fails(test_tmp_path("msl"), "max_seq_length 13 is outside [2, 12]", NULL);

    expect_load_fails(test_tmp_path("nowhere"), "cannot open model directory", NULL);
    assert_null(amp_bert_from_pretrained(NULL, NULL));
    expect_error("amp_bert_from_pretrained: dir is NULL");
}

static void t_prefix_and_forward_checks(void **state) {
    (void)state;
    write_tiny(test_tmp_path("plain"), TINY_CONFIG, "", NULL, NULL);
    write_tiny(test_tmp_path("prefixed"), TINY_CONFIG, "bert.", NULL, NULL);
    amp_module *a = amp_bert_from_pretrained(test_tmp_path("plain"), NULL);
    amp_module *b = amp_bert_from_pretrained(test_tmp_path("prefixed"), NULL);
    if (!a || !b) fail_msg("%s", amp_last_error());
    /* HF's state_dict names */
    assert_non_null(amp_module_get_parameter(a, "encoder.layer.0.attention.self.query.weight"));
    assert_non_null(amp_module_get_parameter(a, "embeddings.LayerNorm.bias"));
    assert_int_equal(amp_module_num_params(a), 10 * 8 + 12 * 8 + 2 * 8 + 16 + 4 * (64 + 8) + 16 + 16 * 8 + 16 + 8 * 16 + 8 + 16);
    amp_tensor *ids = amp_tensor_from_data((const int64_t[]){1, 2, 3, 4, 5, 6, 0, 0}, AMP_I64, 2, AMP_SHAPE(2, 4));
    amp_tensor *mask = amp_tensor_from_data((const int64_t[]){1, 1, 1, 1, 1, 1, 0, 0}, AMP_I64, 2, AMP_SHAPE(2, 4));
    amp_tensor *ya = amp_bert_forward(a, ids, NULL, mask), *yb = amp_bert_forward(b, ids, NULL, mask);
    if (!ya || !yb) fail_msg("%s", amp_last_error());
    assert_int_equal(amp_tensor_ndim(ya), 3);
    assert_int_equal(amp_tensor_dim(ya, 2), 8);
    for (int64_t k = 0; k < 2 * 4 * 8; k++) {
        int64_t ix[3] = {k / 32, (k / 8) % 4, k % 8};
        assert_true(amp_tensor_get(ya, ix) == amp_tensor_get(yb, ix)); /* the same weights, whatever their prefix */
    }
    /* the second row's first two tokens do not see the padding: the same as the row of 2 alone */
    amp_tensor *ids2 = amp_tensor_from_data((const int64_t[]){5, 6}, AMP_I64, 2, AMP_SHAPE(1, 2));
    amp_tensor *y2 = amp_bert_forward(a, ids2, NULL, NULL);
    assert_non_null(y2);
    for (int64_t k = 0; k < 16; k++)
        assert_close(amp_tensor_get(ya, (int64_t[]){1, k / 8, k % 8}), amp_tensor_get(y2, (int64_t[]){0, k / 8, k % 8}), 0, 1e-6,
                     "padded row vs alone");
    /* argument checks name the argument */
    amp_tensor *bad = amp_tensor_from_data((const int64_t[]){1, 10}, AMP_I64, 2, AMP_SHAPE(1, 2));
    assert_null(amp_bert_forward(a, bad, NULL, NULL));
    expect_error("amp_bert_forward: ids[0][1] = 10 is outside [0, 9]");
    amp_tensor *m2 = amp_tensor_from_data((const int64_t[]){1, 2}, AMP_I64, 2, AMP_SHAPE(1, 2));
    assert_null(amp_bert_forward(a, ids2, NULL, m2));
    expect_error("attn_mask[0][1] = 2 is outside [0, 1]");
    assert_null(amp_bert_forward(a, ids2, mask, NULL));
    expect_error("token_types has shape [2,4]; want [B, T] as ids, [1,2]");
    amp_tensor *fl = amp_tensor_zeros(AMP_F32, 2, AMP_SHAPE(1, 2));
    assert_null(amp_bert_forward(a, fl, NULL, NULL));
    expect_error("ids has dtype f32; want i64 or i32");
    amp_tensor *longer = amp_tensor_zeros(AMP_I64, 2, AMP_SHAPE(1, 13));
    assert_null(amp_bert_forward(a, longer, NULL, NULL));
    expect_error("13 tokens is outside 1..max_position_embeddings 12");
    amp_module *lin = amp_nn_linear(2, 2, true, NULL);
    assert_null(amp_bert_forward(lin, ids, NULL, NULL));
    expect_error("m is a Linear, not a BertModel");
    test_free_tensors(ids, mask, ya, yb, ids2, y2, bad, m2, fl, longer);
    amp_module_free(lin);
    amp_module_free(a);
    amp_module_free(b);
}

AMP_TEST_MAIN_FIXTURES(test_tmpdir_setup, test_tmpdir_teardown, t_f32_matches_reference, t_padding_invariant,
                       t_half_within_reference_bounds, t_texts_through_the_tokenizer, t_quantized_loads, t_bad_directories, t_prefix_and_forward_checks)
