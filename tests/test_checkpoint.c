/* safetensors reader/writer, model save/load, checkpoint directories and
 * training-state restore through the library API:
 *   - round trips for every dtype amp stores, 0-d, empty and strided tensors;
 *     the written layout (sorted names, header padded to 8 bytes, CRC);
 *   - each kind of malformed file is refused with a message naming the
 *     problem (and the tensor);
 *   - model load: missing / unexpected / misshapen tensors, dtype conversion,
 *     nothing changed on failure;
 *   - checkpoints: restore reproduces optimizer, scaler, generator and loader
 *     state exactly; mismatched optimizers are refused; inconsistent pairs
 *     are detected and an interrupted commit is rolled forward. */
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

/* ---- round trips ---------------------------------------------------------------------------- */
static void t_roundtrip_all_dtypes(void **state) {
    (void)state;
    amp_dtype dts[] = {AMP_F32, AMP_F16, AMP_BF16, AMP_F8E4M3, AMP_F8E5M2, AMP_F64, AMP_I32, AMP_I64, AMP_U8};
    const int nd = (int)(sizeof dts / sizeof dts[0]);
    amp_tensor *ts[16];
    const char *names[16];
    char nbuf[16][32];
    test_rng r = {42};
    for (int i = 0; i < nd; i++) {
        ts[i] = amp_tensor_empty(dts[i], 2, AMP_SHAPE(3, 5));
        unsigned char *p = amp_tensor_data(ts[i]);
        for (size_t b = 0; b < amp_tensor_nbytes(ts[i]); b++) p[b] = (unsigned char)test_rng_u32(&r);
        /* names deliberately out of order: the writer sorts */
        snprintf(nbuf[i], sizeof nbuf[i], "t%d.%s", nd - i, amp_dtype_name(dts[i]));
        names[i] = nbuf[i];
    }
    ts[nd] = amp_tensor_full(AMP_F32, 0, NULL, 3.5); /* 0-d */
    names[nd] = "scalar";
    ts[nd + 1] = amp_tensor_empty(AMP_F32, 2, AMP_SHAPE(0, 4)); /* empty */
    names[nd + 1] = "empty";
    amp_tensor *base = amp_tensor_arange(0, 12, 1, AMP_F32);
    amp_tensor *m = amp_reshape(base, 2, AMP_SHAPE(3, 4));
    ts[nd + 2] = amp_transpose(m, 0, 1); /* strided */
    names[nd + 2] = "strided";
    int n = nd + 3;
    amp_kv meta[] = {{"model", "test"}, {"note", "ünïcødé \"quoted\"\n"}};
    const char *p = test_tmp_path("all.safetensors");
    assert_int_equal(amp_safetensors_write(p, ts, names, n, meta, 2), AMP_OK);
    /* no temporary file left behind */
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp", p);
    assert_int_not_equal(access(tmp, F_OK), 0);

    size_t len;
    unsigned char *raw = (unsigned char *)test_read_file(p, &len);
    assert_non_null(raw);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = (hl << 8) | raw[i];
    assert_int_equal(hl % 8, 0);
    assert_int_equal(raw[8], '{');
    assert_true(8 + hl <= len);

    amp_safetensors *f = amp_safetensors_read(p);
    assert_non_null(f);
    assert_true(amp_safetensors_has_crc(f));
    assert_int_equal(amp_safetensors_count(f), n);
    assert_string_equal(amp_safetensors_meta(f, "model"), "test");
    assert_string_equal(amp_safetensors_meta(f, "note"), "ünïcødé \"quoted\"\n");
    assert_null(amp_safetensors_meta(f, "absent"));
    assert_int_equal(amp_safetensors_header_bytes(f), hl);
    assert_int_equal(amp_safetensors_file_bytes(f), len);
    /* data order = name order (the writer assigns offsets after sorting) */
    const char *prev = "";
    for (int i = 0; i < n; i++) {
        amp_safetensors_info info;
        assert_int_equal(amp_safetensors_info_at(f, i, &info), AMP_OK);
        assert_true(strcmp(prev, info.name) < 0);
        prev = info.name;
    }
    for (int i = 0; i < n; i++) {
        amp_tensor *t = amp_safetensors_get(f, names[i]);
        assert_non_null(t);
        assert_int_equal(amp_tensor_dtype(t), amp_tensor_dtype(ts[i]));
        assert_int_equal(amp_tensor_ndim(t), amp_tensor_ndim(ts[i]));
        for (int d = 0; d < amp_tensor_ndim(t); d++) assert_int_equal(amp_tensor_dim(t, d), amp_tensor_dim(ts[i], d));
        size_t nb = amp_tensor_nbytes(t);
        unsigned char *want = malloc(nb + 1);
        assert_int_equal(amp_tensor_copy_out(ts[i], want, amp_tensor_dtype(ts[i])), AMP_OK);
        assert_memory_equal(amp_tensor_data(t), want, nb);
        free(want);
        amp_tensor_free(t);
    }
    /* the strided tensor was stored transposed: [4,3] with element [1,0] = 1 */
    amp_tensor *st = amp_safetensors_get(f, "strided");
    assert_int_equal(amp_tensor_dim(st, 0), 4);
    assert_true(amp_tensor_get(st, AMP_SHAPE(1, 0)) == 1.0);
    amp_tensor_free(st);
    assert_null(amp_safetensors_get(f, "nope"));
    expect_error("no tensor named 'nope'");

    /* encode gives the same bytes as the file */
    void *buf;
    size_t blen;
    assert_int_equal(amp_safetensors_encode(ts, names, n, meta, 2, &buf, &blen), AMP_OK);
    assert_int_equal(blen, len);
    assert_memory_equal(buf, raw, len);
    amp_safetensors *g = amp_safetensors_parse(buf, blen, "mem");
    assert_non_null(g);
    amp_safetensors_free(g);
    test_free_all(buf, raw);
    amp_safetensors_free(f);
    for (int i = 0; i < n; i++) amp_tensor_free(ts[i]);
    test_free_tensors(m, base);
}

static void t_writer_refuses(void **state) {
    (void)state;
    amp_tensor *a = amp_tensor_zeros(AMP_F32, 1, AMP_SHAPE(2));
    amp_tensor *ts[] = {a, a};
    const char *dup[] = {"x", "x"};
    assert_int_equal(amp_safetensors_write(test_tmp_path("bad.safetensors"), ts, dup, 2, NULL, 0), AMP_ERR_ARG);
    expect_error("amp_safetensors_write: tensor name 'x' is used twice");
    const char *meta_name[] = {"__metadata__"};
    assert_int_equal(amp_safetensors_write(test_tmp_path("bad.safetensors"), ts, meta_name, 1, NULL, 0), AMP_ERR_ARG);
    amp_kv reserved[] = {{"data_crc32", "00000000"}};
    const char *one[] = {"x"};
    assert_int_equal(amp_safetensors_write(test_tmp_path("bad.safetensors"), ts, one, 1, reserved, 1), AMP_ERR_ARG);
    expect_error("reserved");
    assert_int_equal(amp_safetensors_write("/nonexistent-dir/x.safetensors", ts, one, 1, NULL, 0), AMP_ERR_IO);
    expect_error("amp_safetensors_write: cannot create /nonexistent-dir/x.safetensors.tmp");
    assert_int_not_equal(access(test_tmp_path("bad.safetensors"), F_OK), 0);
    amp_tensor_free(a);
}

/* ---- malformed files ----------------------------------------------------------------------------- */
static unsigned char *image(const char *json, const void *data, size_t dlen, size_t *len) {
    size_t jl = strlen(json);
    *len = 8 + jl + dlen;
    unsigned char *b = malloc(*len);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)jl >> (8 * i));
    memcpy(b + 8, json, jl);
    if (dlen) memcpy(b + 8 + jl, data, dlen);
    return b;
}

typedef struct {
    const char *json;
    size_t dlen;
    const char *err;
} bad_case;

static void t_malformed(void **state) {
    (void)state;
    static const bad_case cases[] = {
        {"[1,2]", 0, "must start with '{'"},
        {"{\"a\":", 0, "not valid JSON"},
        {"{} x", 0, "unexpected bytes after the JSON header"},
        {"{\"a\":{\"dtype\":\"F99\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "tensor 'a': unknown dtype \"F99\""},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, "tensor 'a': shape entry 0 is not a non-negative integer"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4, "shape entry 0"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":\"1\",\"data_offsets\":[0,4]}}", 4, "\"shape\" is missing or not an array"},
        {"{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "\"dtype\" is missing"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 4, "end before they begin"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4, "\"data_offsets\" is not [begin, end]"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, "run past the data section"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, "tensor 'a': F32 [2] needs a different number of bytes"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1000000,1000000],\"data_offsets\":[0,4]}}", 4, "needs more bytes"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[2,6]}}", 8,
         "tensors 'a' and 'b' overlap"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", 12,
         "a gap of 4 bytes between tensors 'a' and 'b'"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "the data section must start with a tensor"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 6, "the data section holds 6 bytes but the tensors cover 4"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8,
         "tensor 'a' appears twice"},
        {"{\"__metadata__\":{\"k\":1}}", 0, "metadata value of \"k\" is not a string"},
        {"{\"__metadata__\":[]}", 0, "\"__metadata__\" is not an object"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4, "rank 9 is more than"},
        {"{\"a\":7}", 0, "tensor 'a': entry is not an object"},
        {"{\"__metadata__\":{\"data_crc32\":\"00000000\"},\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
         "checksum mismatch"},
        {"{\"__metadata__\":{\"data_crc32\":\"xyz\"}}", 0, "is not 8 hex digits"},
        {"{\"\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "empty name"},
    };
    unsigned char data[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t len;
        unsigned char *b = image(cases[i].json, data, cases[i].dlen, &len);
        amp_safetensors *f = amp_safetensors_parse(b, len, "case.st");
        if (f) fail_msg("case %zu (%s) was accepted", i, cases[i].json);
        if (!strstr(amp_last_error(), cases[i].err) || !strstr(amp_last_error(), "amp_safetensors_parse: case.st"))
            fail_msg("case %zu: expected \"%s\", got \"%s\"", i, cases[i].err, amp_last_error());
        free(b);
    }
    /* a header length beyond the limit, past the end, and a short file */
    unsigned char hb[16] = {0};
    uint64_t big = AMP_SAFETENSORS_MAX_HEADER + 1;
    for (int i = 0; i < 8; i++) hb[i] = (unsigned char)(big >> (8 * i));
    assert_null(amp_safetensors_parse(hb, sizeof hb, "big"));
    expect_error("exceeds the limit");
    hb[0] = 200;
    for (int i = 1; i < 8; i++) hb[i] = 0;
    assert_null(amp_safetensors_parse(hb, sizeof hb, "past"));
    expect_error("header length 200 runs past the end of the file (16 bytes)");
    assert_null(amp_safetensors_parse(hb, 5, "short"));
    expect_error("truncated: 5 bytes");
    assert_null(amp_safetensors_parse(NULL, 0, "empty"));
    expect_error("truncated: 0 bytes");
    /* a valid empty file and valid padding */
    size_t len;
    unsigned char *b = image("{}      ", NULL, 0, &len);
    amp_safetensors *f = amp_safetensors_parse(b, len, "ok");
    assert_non_null(f);
    assert_int_equal(amp_safetensors_count(f), 0);
    assert_false(amp_safetensors_has_crc(f));
    amp_safetensors_free(f);
    free(b);
    /* a corrupted byte in a file we wrote */
    amp_tensor *t = amp_tensor_ones(AMP_F32, 1, AMP_SHAPE(64));
    const char *nm[] = {"w"};
    const char *p = test_tmp_path("crc.safetensors");
    assert_int_equal(amp_safetensors_write(p, &t, nm, 1, NULL, 0), AMP_OK);
    size_t fl;
    char *raw = test_read_file(p, &fl);
    raw[fl - 3] ^= 0x10;
    test_write_file(p, raw, fl);
    assert_null(amp_safetensors_read(p));
    expect_error("checksum mismatch");
    free(raw);
    amp_tensor_free(t);
    assert_null(amp_safetensors_read(test_tmp_path("missing.safetensors")));
    expect_error("amp_safetensors_read: cannot open");
}

/* ---- models --------------------------------------------------------------------------------------- */
static void assert_same_state(amp_module *a, amp_module *b) {
    amp_tensor *ta[64], *tb[64];
    int n = amp_module_state(a, ta, NULL, 64);
    assert_int_equal(amp_module_state(b, tb, NULL, 64), n);
    for (int i = 0; i < n; i++) {
        assert_int_equal(amp_tensor_dtype(ta[i]), amp_tensor_dtype(tb[i]));
        assert_int_equal(amp_tensor_nbytes(ta[i]), amp_tensor_nbytes(tb[i]));
        assert_memory_equal(amp_tensor_data(ta[i]), amp_tensor_data(tb[i]), amp_tensor_nbytes(ta[i]));
    }
}

static void t_model_save_load(void **state) {
    (void)state;
    amp_generator g1 = amp_generator_make(1), g2 = amp_generator_make(2);
    amp_module *a = amp_model_build("cnn", &g1), *b = amp_model_build("cnn", &g2);
    amp_tensor *nb[64];
    const char *nn[64];
    int n = amp_module_state(a, nb, nn, 64);
    for (int i = 0; i < n; i++)
        if (!strcmp(nn[i], "4.num_batches_tracked")) *(int64_t *)amp_tensor_data(nb[i]) = 17;
    amp_kv meta[] = {{"model", "cnn"}};
    const char *p = test_tmp_path("cnn.safetensors");
    assert_int_equal(amp_model_save(a, p, meta, 1), AMP_OK);
    assert_int_equal(amp_model_load(b, p), AMP_OK);
    assert_same_state(a, b);

    /* an mlp file into a cnn: the first missing tensor is named */
    amp_module *mlp = amp_model_build("mlp", &g1);
    const char *pm = test_tmp_path("mlp.safetensors");
    assert_int_equal(amp_model_save(mlp, pm, NULL, 0), AMP_OK);
    assert_int_equal(amp_model_load(b, pm), AMP_ERR_FORMAT);
    expect_error("amp_module_load_safetensors: ");
    expect_error("tensor '0.weight' is missing (the Sequential model expects it, shape [32,1,3,3]) (then: amp_model_load)");
    assert_same_state(a, b); /* unchanged */

    /* wrong shape */
    amp_tensor *w = amp_tensor_zeros(AMP_F32, 2, AMP_SHAPE(512, 700));
    amp_tensor *ts[16];
    const char *names[16];
    int k = amp_module_state(mlp, ts, names, 16);
    ts[0] = w;
    const char *pw = test_tmp_path("wrong.safetensors");
    assert_int_equal(amp_safetensors_write(pw, ts, names, k, NULL, 0), AMP_OK);
    amp_module *mlp2 = amp_model_build("mlp", &g2);
    assert_int_equal(amp_model_load(mlp2, pw), AMP_ERR_SHAPE);
    expect_error("tensor '1.weight' has shape [512,700] in the file; the model expects [512,784]");
    /* unexpected extra tensor */
    amp_module_state(mlp, ts, names, 16);
    ts[k] = w;
    names[k] = "extra.weight";
    assert_int_equal(amp_safetensors_write(pw, ts, names, k + 1, NULL, 0), AMP_OK);
    assert_int_equal(amp_model_load(mlp2, pw), AMP_ERR_FORMAT);
    expect_error("unexpected tensor 'extra.weight'");
    /* f32 file into a bf16 model: converted with round-to-nearest-even */
    assert_int_equal(amp_module_to(mlp2, AMP_BF16, false), AMP_OK);
    assert_int_equal(amp_model_load(mlp2, pm), AMP_OK);
    amp_tensor *p32[8], *p16[8];
    int np = amp_module_parameters(mlp, p32, NULL, 8);
    amp_module_parameters(mlp2, p16, NULL, 8);
    for (int i = 0; i < np; i++) {
        assert_int_equal(amp_tensor_dtype(p16[i]), AMP_BF16);
        int64_t cnt = amp_tensor_numel(p32[i]);
        const float *src = amp_tensor_data(p32[i]);
        const uint16_t *dst = amp_tensor_data(p16[i]);
        for (int64_t j = 0; j < cnt; j += 97) assert_int_equal(dst[j], amp_f32_to_bf16(src[j]));
    }
    amp_tensor_free(w);
    amp_module_free(a);
    amp_module_free(b);
    amp_module_free(mlp);
    amp_module_free(mlp2);
}

/* ---- checkpoints ------------------------------------------------------------------------------------ */
typedef struct {
    amp_generator gen;
    amp_module *model;
    amp_optim *opt;
    amp_scaler *sc;
    amp_dataset ds;
    amp_loader *loader;
} rig;

static void rig_make(rig *r, uint64_t seed, amp_optim_kind kind, bool master) {
    memset(r, 0, sizeof *r);
    r->gen = amp_generator_make(seed);
    r->model = amp_model_build("cnn", &r->gen);
    assert_non_null(r->model);
    if (master) assert_int_equal(amp_module_to(r->model, AMP_BF16, false), AMP_OK);
    amp_tensor *ps[16];
    int n = amp_module_parameters(r->model, ps, NULL, 16);
    amp_optim_opts o = kind == AMP_OPTIM_SGD ? amp_sgd_opts(0.1) : amp_adamw_opts(1e-3);
    if (kind == AMP_OPTIM_SGD) o.momentum = 0.9;
    o.master_weights = master;
    o.rounding = master ? AMP_ROUND_STOCHASTIC : AMP_ROUND_NEAREST;
    o.seed = 99;
    r->opt = amp_optim_new(ps, n, &o);
    assert_non_null(r->opt);
    r->sc = amp_scaler_new(&(amp_scaler_opts){.growth_interval = 3, .hysteresis = 2});
    r->ds.n = 10;
    r->ds.h = r->ds.w = 28;
    r->ds.num_classes = 10;
    r->ds.images = calloc(10 * 28 * 28, 1);
    r->ds.labels = calloc(10, 1);
    for (int i = 0; i < 10 * 28 * 28; i++) r->ds.images[i] = (uint8_t)(i * 7 + seed);
    for (int i = 0; i < 10; i++) r->ds.labels[i] = (uint8_t)(i % 10);
    amp_loader_opts lo = {.batch = 4, .shuffle = true, .seed = seed};
    r->loader = amp_loader_new(&r->ds, &lo);
}

static void rig_free(rig *r) {
    amp_loader_free(r->loader);
    amp_dataset_free(&r->ds);
    amp_scaler_free(r->sc);
    amp_optim_free(r->opt);
    amp_module_free(r->model);
}

/* Two real training steps so every piece of state is non-trivial. */
static void rig_train(rig *r, int steps) {
    amp_module_train(r->model, true);
    for (int s = 0; s < steps; s++) {
        amp_scope *sc = amp_scope_begin();
        amp_tensor *x, *y;
        if (!amp_loader_next(r->loader, &x, &y)) {
            int64_t e;
            amp_loader_position(r->loader, &e, NULL);
            amp_loader_start_epoch(r->loader, e + 1);
            assert_true(amp_loader_next(r->loader, &x, &y));
        }
        amp_optim_zero_grad(r->opt);
        if (amp_tensor_dtype(amp_optim_param(r->opt, 0)) != AMP_F32) x = amp_to(x, amp_tensor_dtype(amp_optim_param(r->opt, 0)));
        amp_tensor *loss = amp_cross_entropy(amp_to(amp_module_forward(r->model, x), AMP_F32), y, NULL);
        assert_non_null(loss);
        assert_int_equal(amp_backward(amp_scaler_scale(r->sc, loss)), AMP_OK);
        bool skipped;
        assert_int_equal(amp_scaler_step(r->sc, r->opt, &skipped), AMP_OK);
        assert_int_equal(amp_scaler_update(r->sc), AMP_OK);
        amp_scope_end(sc);
    }
}

static void assert_same_optim(amp_optim *a, amp_optim *b) {
    assert_int_equal(amp_optim_steps(a), amp_optim_steps(b));
    assert_true(amp_optim_sr_counter(a) == amp_optim_sr_counter(b));
    const char *names[] = {"exp_avg", "exp_avg_sq", "momentum_buffer", "master"};
    for (int i = 0; i < amp_optim_num_params(a); i++) {
        assert_int_equal(amp_optim_param_steps(a, i), amp_optim_param_steps(b, i));
        for (int j = 0; j < 4; j++) {
            amp_tensor *x = amp_optim_state(a, i, names[j]), *y = amp_optim_state(b, i, names[j]);
            assert_true((x == NULL) == (y == NULL));
            if (x) assert_memory_equal(amp_tensor_data(x), amp_tensor_data(y), amp_tensor_nbytes(x));
        }
    }
}

static void roundtrip_case(amp_optim_kind kind, bool master) {
    rig a, b;
    rig_make(&a, 5, kind, master);
    rig_train(&a, 4); /* crosses an epoch (3 batches per epoch) */
    amp_kv meta[] = {{"model", "cnn"}, {"trainer.note", "x"}};
    amp_train_state s = {a.model, &a.opt, 1, a.sc, &a.gen, a.loader, 4, meta, 2};
    const char *dir = test_tmp_path(master ? "ck_master" : kind == AMP_OPTIM_SGD ? "ck_sgd" : "ck_adamw");
    if (amp_checkpoint_save(dir, &s) != AMP_OK) fail_msg("%s", amp_last_error());

    rig_make(&b, 6, kind, master); /* different init and loader seed... */
    b.gen.offset = 12345;
    amp_loader_free(b.loader);
    amp_loader_opts lo = {.batch = 4, .shuffle = true, .seed = 5}; /* ...the loader's seed is configuration, not state */
    b.loader = amp_loader_new(&b.ds, &lo);
    memcpy(b.ds.images, a.ds.images, 10 * 28 * 28);
    amp_checkpoint *c = amp_checkpoint_open(dir);
    assert_non_null(c);
    assert_int_equal(amp_checkpoint_step(c), 4);
    assert_string_equal(amp_checkpoint_meta(c, "trainer.note"), "x");
    assert_string_equal(amp_safetensors_meta(amp_checkpoint_model_file(c), "model"), "cnn");
    amp_train_state t = {b.model, &b.opt, 1, b.sc, &b.gen, b.loader, 0, NULL, 0};
    if (amp_checkpoint_restore(c, &t) != AMP_OK) fail_msg("%s", amp_last_error());
    assert_int_equal(t.step, 4);
    amp_checkpoint_close(c);
    assert_same_state(a.model, b.model);
    assert_same_optim(a.opt, b.opt);
    amp_scaler_state sa, sb;
    amp_scaler_state_get(a.sc, &sa);
    amp_scaler_state_get(b.sc, &sb);
    assert_memory_equal(&sa, &sb, sizeof sa);
    assert_true(a.gen.seed == b.gen.seed && a.gen.offset == b.gen.offset);
    int64_t e1, b1, e2, b2;
    amp_loader_position(a.loader, &e1, &b1);
    amp_loader_position(b.loader, &e2, &b2);
    assert_int_equal(e1, e2);
    assert_int_equal(b1, b2);
    /* and they continue identically */
    rig_train(&a, 2);
    rig_train(&b, 2);
    assert_same_state(a.model, b.model);
    assert_same_optim(a.opt, b.opt);
    rig_free(&a);
    rig_free(&b);
}

static void t_checkpoint_roundtrip_adamw(void **state) {
    (void)state;
    roundtrip_case(AMP_OPTIM_ADAMW, false);
}

static void t_checkpoint_roundtrip_sgd_momentum(void **state) {
    (void)state;
    roundtrip_case(AMP_OPTIM_SGD, false);
}

static void t_checkpoint_roundtrip_master_sr(void **state) {
    (void)state;
    roundtrip_case(AMP_OPTIM_ADAMW, true);
}

static void t_checkpoint_refuses_mismatch(void **state) {
    (void)state;
    rig a, b;
    rig_make(&a, 5, AMP_OPTIM_ADAMW, false);
    rig_train(&a, 1);
    amp_train_state s = {a.model, &a.opt, 1, a.sc, &a.gen, a.loader, 1, NULL, 0};
    const char *dir = test_tmp_path("ck_mismatch");
    assert_int_equal(amp_checkpoint_save(dir, &s), AMP_OK);
    amp_checkpoint *c = amp_checkpoint_open(dir);
    assert_non_null(c);

    rig_make(&b, 5, AMP_OPTIM_SGD, false);
    amp_tensor *before = amp_clone(amp_optim_param(b.opt, 0));
    amp_train_state t = {b.model, &b.opt, 1, b.sc, &b.gen, b.loader, 0, NULL, 0};
    assert_int_equal(amp_checkpoint_restore(c, &t), AMP_ERR_STATE);
    expect_error("amp_checkpoint_restore: ");
    expect_error("optimizer 0 was adamw when saved; this one is sgd");
    /* nothing changed, the model included */
    assert_memory_equal(amp_tensor_data(before), amp_tensor_data(amp_optim_param(b.opt, 0)), amp_tensor_nbytes(before));
    rig_free(&b);
    rig_make(&b, 5, AMP_OPTIM_ADAMW, true);
    amp_train_state t2 = {b.model, &b.opt, 1, b.sc, &b.gen, b.loader, 0, NULL, 0};
    assert_int_not_equal(amp_checkpoint_restore(c, &t2), AMP_OK);
    expect_error("tensor '0.weight' is F32 [32,1,3,3] in the checkpoint; the model has bf16 [32,1,3,3]");
    rig_free(&b);
    /* a different model */
    amp_generator g = amp_generator_make(0);
    amp_module *mlp = amp_model_build("mlp", &g);
    amp_train_state t3 = {mlp, NULL, 0, NULL, NULL, NULL, 0, NULL, 0};
    assert_int_not_equal(amp_checkpoint_restore(c, &t3), AMP_OK);
    expect_error("tensors; the model has");
    amp_module_free(mlp);
    amp_tensor_free(before);
    amp_checkpoint_close(c);
    rig_free(&a);
}

static void t_checkpoint_consistency(void **state) {
    (void)state;
    rig a;
    rig_make(&a, 5, AMP_OPTIM_ADAMW, false);
    amp_train_state s = {a.model, &a.opt, 1, a.sc, &a.gen, a.loader, 1, NULL, 0};
    char d1[1100], d2[1100], p1[1200], p2[1200];
    snprintf(d1, sizeof d1, "%s", test_tmp_path("ck_one"));
    snprintf(d2, sizeof d2, "%s", test_tmp_path("ck_two"));
    assert_int_equal(amp_checkpoint_save(d1, &s), AMP_OK);
    rig_train(&a, 1);
    s.step = 2;
    assert_int_equal(amp_checkpoint_save(d2, &s), AMP_OK);

    /* a model from one save with the state of another: refused */
    snprintf(p1, sizeof p1, "%s/model.safetensors", d1);
    snprintf(p2, sizeof p2, "%s/model.safetensors", d2);
    test_copy_file(p2, p1);
    assert_null(amp_checkpoint_open(d1));
    expect_error("is inconsistent: model.safetensors is checkpoint");
    expect_error("(step 2) but training_state.safetensors is checkpoint");

    /* the same, with the new state's temporary file complete: the commit was
       interrupted between the two renames; open() reads the new checkpoint
       from the temporary file and changes nothing (issue 12: a reader must
       never rename a running writer's file); the next save rolls it forward */
    snprintf(p1, sizeof p1, "%s/training_state.safetensors.tmp", d1);
    snprintf(p2, sizeof p2, "%s/training_state.safetensors", d2);
    test_copy_file(p2, p1);
    amp_checkpoint *c = amp_checkpoint_open(d1);
    assert_non_null(c);
    assert_int_equal(amp_checkpoint_step(c), 2);
    amp_checkpoint_close(c);
    assert_int_equal(access(p1, F_OK), 0); /* still there: open is read-only */

    /* a stale, unrelated temporary file is ignored */
    test_copy_file(p2, p1);
    s.step = 3;
    assert_int_equal(amp_checkpoint_save(d1, &s), AMP_OK);
    c = amp_checkpoint_open(d1);
    assert_non_null(c);
    assert_int_equal(amp_checkpoint_step(c), 3);
    amp_checkpoint_close(c);

    /* missing pieces */
    assert_null(amp_checkpoint_open(test_tmp_path("nothing-here")));
    expect_error("amp_checkpoint_open: cannot open checkpoint directory");
    mkdir(test_tmp_path("empty-ck"), 0755);
    assert_null(amp_checkpoint_open(test_tmp_path("empty-ck")));
    expect_error("holds no complete checkpoint");
    rig_free(&a);
}

AMP_TEST_MAIN_FIXTURES(test_tmpdir_setup, test_tmpdir_teardown, t_roundtrip_all_dtypes, t_writer_refuses, t_malformed,
                       t_model_save_load, t_checkpoint_roundtrip_adamw, t_checkpoint_roundtrip_sgd_momentum,
                       t_checkpoint_roundtrip_master_sr, t_checkpoint_refuses_mismatch, t_checkpoint_consistency)
