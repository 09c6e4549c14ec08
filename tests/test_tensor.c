/* Tensors: creation, views, ownership and scopes, memory accounting, random
 * generators, element access, errors. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "op_check.h"

static void t_create(void **state) {
    (void)state;
    amp_tensor *z = amp_tensor_zeros(AMP_F32, 2, AMP_SHAPE(3, 4));
    assert_non_null(z);
    assert_int_equal(amp_tensor_ndim(z), 2);
    assert_int_equal(amp_tensor_dim(z, 0), 3);
    assert_int_equal(amp_tensor_dim(z, -1), 4);
    assert_int_equal(amp_tensor_numel(z), 12);
    assert_true(amp_tensor_is_contiguous(z));
    assert_int_equal(amp_tensor_strides(z)[0], 4);
    for (int i = 0; i < 12; i++) assert_true(((float *)amp_tensor_data(z))[i] == 0.0f);
    amp_tensor *o = amp_tensor_full(AMP_BF16, 1, AMP_SHAPE(5), 0.1);
    /* 0.1 rounds to the nearest bf16: 0.10009765625 */
    assert_true(amp_tensor_get(o, AMP_SHAPE(3)) == 0.10009765625);
    amp_tensor *a = amp_tensor_arange(0, 10, 3, AMP_I64);
    assert_int_equal(amp_tensor_numel(a), 4);
    assert_true(amp_tensor_get(a, AMP_SHAPE(3)) == 9.0);
    amp_tensor *s = amp_tensor_full(AMP_F16, 0, NULL, 2.5);
    assert_int_equal(amp_tensor_numel(s), 1);
    assert_true(amp_tensor_item(s) == 2.5);
    amp_tensor *e = amp_tensor_zeros(AMP_F32, 2, AMP_SHAPE(0, 7));
    assert_non_null(e);
    assert_int_equal(amp_tensor_numel(e), 0);
    float buf[6] = {1, 2, 3, 4, 5, 6};
    amp_tensor *c = amp_tensor_from_data(buf, AMP_F32, 2, AMP_SHAPE(2, 3));
    buf[0] = 100;
    assert_true(amp_tensor_get(c, AMP_SHAPE(0, 0)) == 1.0); /* copied */
    amp_tensor *b = amp_tensor_borrow(buf, AMP_F32, 2, AMP_SHAPE(2, 3));
    buf[1] = 200;
    assert_true(amp_tensor_get(b, AMP_SHAPE(0, 1)) == 200.0); /* borrowed */
    assert_int_equal(amp_tensor_set(b, AMP_SHAPE(1, 2), -1.0), AMP_OK);
    assert_true(buf[5] == -1.0f);
    amp_tensor *ts[] = {z, o, a, s, e, c, b};
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) amp_tensor_free(ts[i]);
}

static void t_errors(void **state) {
    (void)state;
    tc_assert_fails(amp_tensor_zeros(AMP_F32, 9, AMP_SHAPE(1, 1, 1, 1, 1, 1, 1, 1, 1)), "amp_tensor_zeros");
    tc_assert_fails(amp_tensor_zeros(AMP_F32, 2, AMP_SHAPE(3, -1)), "negative");
    tc_assert_fails(amp_tensor_empty(AMP_F32, 3, AMP_SHAPE(1LL << 40, 1LL << 40, 4)), "too large");
    tc_assert_fails(amp_tensor_empty((amp_dtype)42, 1, AMP_SHAPE(3)), "amp_tensor_empty");
    tc_assert_fails(amp_tensor_from_data(NULL, AMP_F32, 1, AMP_SHAPE(3)), "amp_tensor_from_data");
    tc_assert_fails(amp_tensor_arange(0, 1, 0, AMP_F32), "amp_tensor_arange");
    tc_assert_fails(amp_tensor_uniform(AMP_F32, 1, AMP_SHAPE(3), 2, 1, NULL), "amp_tensor_uniform");
    tc_assert_fails(amp_tensor_randn(AMP_I32, 1, AMP_SHAPE(3), NULL), "amp_tensor_randn");
    amp_tensor *t = amp_tensor_zeros(AMP_F32, 2, AMP_SHAPE(2, 2));
    assert_true(isnan(amp_tensor_item(t)));
    assert_non_null(strstr(amp_last_error(), "amp_tensor_item"));
    assert_true(isnan(amp_tensor_get(t, AMP_SHAPE(2, 0))));
    assert_non_null(strstr(amp_last_error(), "out of range"));
    amp_tensor *it = amp_tensor_arange(0, 3, 1, AMP_I64);
    assert_int_equal(amp_tensor_set_requires_grad(it, true), AMP_ERR_DTYPE);
    amp_clear_error();
    test_free_tensors(it, t);
}

static void t_views(void **state) {
    (void)state;
    amp_tensor *x = amp_tensor_arange(0, 24, 1, AMP_F32);
    amp_tensor *r = amp_reshape(x, 3, AMP_SHAPE(2, 3, 4));
    assert_ptr_equal(amp_tensor_data(r), amp_tensor_data(x)); /* a view */
    amp_tensor *r2 = amp_reshape(x, 2, AMP_SHAPE(-1, 6));
    assert_int_equal(amp_tensor_dim(r2, 0), 4);
    tc_assert_fails(amp_reshape(x, 2, AMP_SHAPE(5, -1)), "amp_reshape");
    tc_assert_fails(amp_reshape(x, 2, AMP_SHAPE(-1, -1)), "only one");
    amp_tensor *t = amp_transpose(r, 0, 2); /* [4,3,2] */
    assert_false(amp_tensor_is_contiguous(t));
    assert_ptr_equal(amp_tensor_data(t), amp_tensor_data(x));
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < 2; k++) assert_true(amp_tensor_get(t, AMP_SHAPE(i, j, k)) == k * 12 + j * 4 + i);
    amp_tensor *c = amp_contiguous(t);
    assert_true(amp_tensor_is_contiguous(c));
    assert_true(((float *)amp_tensor_data(c))[1] == 12.0f); /* [0,0,1] */
    amp_tensor *rt = amp_reshape(t, 1, AMP_SHAPE(24)); /* non-contiguous: copies */
    assert_true(amp_tensor_get(rt, AMP_SHAPE(1)) == 12.0);
    int perm[3] = {2, 0, 1};
    amp_tensor *p = amp_permute(r, perm); /* [4,2,3] */
    assert_true(amp_tensor_get(p, AMP_SHAPE(3, 1, 2)) == 1 * 12 + 2 * 4 + 3);
    int bad[3] = {0, 0, 1};
    tc_assert_fails(amp_permute(r, bad), "twice");
    amp_tensor *s = amp_slice(r, 2, 1, 4, 2); /* [2,3,2]: k = 1, 3 */
    tc_assert_shape(s, 3, AMP_SHAPE(2, 3, 2), "slice");
    assert_true(amp_tensor_get(s, AMP_SHAPE(1, 2, 1)) == 12 + 8 + 3);
    amp_tensor *sn = amp_slice(r, -1, -2, 100, 1); /* python-style clamping */
    tc_assert_shape(sn, 3, AMP_SHAPE(2, 3, 2), "negative slice");
    assert_true(amp_tensor_get(sn, AMP_SHAPE(0, 0, 0)) == 2);
    amp_tensor *ar = amp_tensor_arange(0, 3, 1, AMP_F32);
    amp_tensor *col = amp_reshape(ar, 2, AMP_SHAPE(3, 1));
    amp_tensor *ex = amp_expand(col, 3, AMP_SHAPE(2, 3, 4));
    assert_int_equal(amp_tensor_strides(ex)[0], 0);
    assert_true(amp_tensor_get(ex, AMP_SHAPE(1, 2, 3)) == 2);
    tc_assert_fails(amp_expand(col, 2, AMP_SHAPE(4, 4)), "amp_expand");
    amp_tensor *u = amp_unsqueeze(x, 0);
    tc_assert_shape(u, 2, AMP_SHAPE(1, 24), "unsqueeze");
    amp_tensor *q = amp_squeeze(u, 0);
    tc_assert_shape(q, 1, AMP_SHAPE(24), "squeeze");
    amp_tensor *f = amp_flatten(r, 1, 2);
    tc_assert_shape(f, 2, AMP_SHAPE(2, 12), "flatten");
    amp_tensor *h = amp_to(r, AMP_F16);
    assert_int_equal(amp_tensor_dtype(h), AMP_F16);
    assert_true(amp_tensor_get(h, AMP_SHAPE(1, 2, 3)) == 23);
    amp_tensor *parts[3] = {x, x, x};
    amp_tensor *cat = amp_cat(parts, 3, 0);
    tc_assert_shape(cat, 1, AMP_SHAPE(72), "cat");
    assert_true(amp_tensor_get(cat, AMP_SHAPE(30)) == 6);
    amp_tensor *st = amp_stack(parts, 3, 1);
    tc_assert_shape(st, 2, AMP_SHAPE(24, 3), "stack");
    assert_true(amp_tensor_get(st, AMP_SHAPE(5, 2)) == 5);
    amp_tensor *mixed[2] = {x, h};
    tc_assert_fails(amp_cat(mixed, 2, 0), "amp_cat"); /* shapes differ */
    amp_tensor *hf = amp_to(x, AMP_F16);
    amp_tensor *mixed2[2] = {x, hf};
    amp_tensor *pm = amp_cat(mixed2, 2, 0);
    assert_int_equal(amp_tensor_dtype(pm), AMP_F32); /* promotion */
    amp_tensor *all[] = {ar, x, r, r2, t, c, rt, p, s, sn, col, ex, u, q, f, h, cat, st, hf, pm};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) amp_tensor_free(all[i]);
}

static void t_scope_and_memory(void **state) {
    (void)state;
    amp_mem_stats s0 = amp_memory_stats();
    amp_tensor *kept = NULL;
    size_t live_after_first = 0;
    for (int step = 0; step < 1000; step++) {
        amp_scope *sc = amp_scope_begin();
        amp_tensor *a = amp_tensor_ones(AMP_F32, 2, AMP_SHAPE(16, 16));
        amp_tensor *b = amp_transpose(a, 0, 1);
        amp_tensor *c = amp_contiguous(b);
        amp_tensor *d = amp_to(c, AMP_BF16);
        if (step == 0) kept = amp_tensor_keep(amp_clone(d));
        (void)d;
        assert_int_equal(amp_scope_end(sc), AMP_OK);
        size_t live = amp_memory_stats().live_total;
        if (step == 0) live_after_first = live;
        else assert_int_equal(live, live_after_first);
    }
    assert_non_null(kept);
    assert_true(amp_tensor_get(kept, AMP_SHAPE(3, 3)) == 1.0);
    amp_tensor_free(kept);
    assert_int_equal(amp_memory_stats().live_total, s0.live_total);

    /* categories: user tensors are data, op outputs activation */
    amp_mem_stats m1 = amp_memory_stats();
    amp_tensor *x = amp_tensor_zeros(AMP_F32, 1, AMP_SHAPE(1000));
    amp_mem_stats m2 = amp_memory_stats();
    assert_int_equal(m2.live[AMP_MEM_DATA] - m1.live[AMP_MEM_DATA], 4000);
    amp_tensor *y = amp_to(x, AMP_F16);
    amp_mem_stats m3 = amp_memory_stats();
    assert_int_equal(m3.live[AMP_MEM_ACTIVATION] - m2.live[AMP_MEM_ACTIVATION], 2000);
    amp_mem_push_category(AMP_MEM_PARAM);
    amp_tensor *p = amp_tensor_zeros(AMP_F32, 1, AMP_SHAPE(10));
    amp_mem_pop_category();
    assert_int_equal(amp_memory_stats().live[AMP_MEM_PARAM] - m3.live[AMP_MEM_PARAM], 40);
    assert_int_equal(amp_tensor_set_category(p, AMP_MEM_OPTIM), AMP_OK);
    assert_int_equal(amp_memory_stats().live[AMP_MEM_PARAM], m3.live[AMP_MEM_PARAM]);
    amp_memory_reset_peak();
    amp_tensor *big = amp_tensor_zeros(AMP_F32, 1, AMP_SHAPE(1 << 20));
    amp_tensor_free(big);
    amp_mem_stats m4 = amp_memory_stats();
    assert_true(m4.peak[AMP_MEM_DATA] >= m4.live[AMP_MEM_DATA] + (4u << 20));
    assert_true(m4.peak_total >= m4.live_total + (4u << 20));
    test_free_tensors(x, y, p);
    assert_int_equal(amp_memory_stats().live_total, m1.live_total);

    /* freeing a scoped tensor early is fine; ending the wrong scope is an error */
    amp_scope *outer = amp_scope_begin();
    amp_tensor *e = amp_tensor_zeros(AMP_F32, 1, AMP_SHAPE(3));
    amp_tensor_free(e);
    amp_scope *inner = amp_scope_begin();
    assert_int_equal(amp_scope_end(outer), AMP_ERR_STATE);
    assert_non_null(strstr(amp_last_error(), "amp_scope_end"));
    assert_int_equal(amp_scope_end(inner), AMP_OK);
    assert_int_equal(amp_scope_end(outer), AMP_OK);
}

static void t_views_keep_storage_alive(void **state) {
    (void)state;
    size_t base = amp_memory_stats().live_total;
    amp_tensor *x = amp_tensor_ones(AMP_F32, 2, AMP_SHAPE(4, 4));
    amp_tensor *v = amp_slice(x, 0, 1, 3, 1);
    amp_tensor_free(x);
    assert_true(amp_tensor_get(v, AMP_SHAPE(1, 3)) == 1.0); /* storage still alive */
    amp_tensor_free(v);
    assert_int_equal(amp_memory_stats().live_total, base);
}

static void t_block_cache(void **state) {
    (void)state;
    amp_memory_empty_cache();
    assert_int_equal(amp_memory_stats().cached, 0);
    amp_mem_stats m0 = amp_memory_stats();
    amp_tensor *a = amp_tensor_zeros(AMP_F32, 1, AMP_SHAPE(100000));
    void *pa = amp_tensor_data(a);
    amp_tensor_free(a);
    amp_mem_stats m1 = amp_memory_stats();
    assert_int_equal(m1.live_total, m0.live_total); /* live counts tensors only */
#if !defined(__SANITIZE_ADDRESS__)
    if (!getenv("AMP_CACHE_MB")) {
        assert_int_equal(m1.cached, 400000);          /* the block is kept ... */
        amp_tensor *b = amp_tensor_zeros(AMP_F32, 1, AMP_SHAPE(100000));
        assert_ptr_equal(amp_tensor_data(b), pa);     /* ... and reused for the same size */
        assert_int_equal(amp_memory_stats().cached, 0);
        for (int i = 0; i < 100000; i++) assert_true(((float *)amp_tensor_data(b))[i] == 0.0f);
        amp_tensor_free(b);
    }
#endif
    (void)pa;
    amp_memory_empty_cache();
    assert_int_equal(amp_memory_stats().cached, 0);
}

static void t_random(void **state) {
    (void)state;
    amp_generator g1 = amp_generator_make(1234), g2 = amp_generator_make(1234);
    amp_tensor *a = amp_tensor_randn(AMP_F32, 1, AMP_SHAPE(200000), &g1);
    omp_set_num_threads(1);
    amp_tensor *b = amp_tensor_randn(AMP_F32, 1, AMP_SHAPE(200000), &g2);
    omp_set_num_threads(2);
    assert_memory_equal(amp_tensor_data(a), amp_tensor_data(b), 200000 * 4); /* thread-count independent */
    assert_true(g1.offset == 200000 && g2.offset == 200000);
    double *v = tc_values(a), mean = 0, var = 0;
    for (int i = 0; i < 200000; i++) mean += v[i];
    mean /= 200000;
    for (int i = 0; i < 200000; i++) var += (v[i] - mean) * (v[i] - mean);
    var /= 199999;
    /* mean within 4 standard errors, variance within 4 SE (sd of s^2 ~ sqrt(2/n)) */
    assert_true(fabs(mean) < 4.0 / sqrt(200000.0));
    assert_true(fabs(var - 1.0) < 4.0 * sqrt(2.0 / 200000.0));
    free(v);
    amp_tensor *c = amp_tensor_randn(AMP_F32, 1, AMP_SHAPE(100), &g1); /* next call differs */
    assert_true(memcmp(amp_tensor_data(c), amp_tensor_data(a), 400) != 0);
    amp_tensor *u = amp_tensor_uniform(AMP_F64, 1, AMP_SHAPE(100000), -2, 3, &g1);
    double *uv = tc_values(u), um = 0;
    for (int i = 0; i < 100000; i++) {
        assert_true(uv[i] >= -2 && uv[i] < 3);
        um += uv[i];
    }
    um /= 100000;
    assert_true(fabs(um - 0.5) < 4.0 * (5.0 / sqrt(12.0)) / sqrt(100000.0));
    free(uv);
    amp_tensor *bern = amp_tensor_bernoulli(AMP_U8, 1, AMP_SHAPE(100000), 0.3, &g1);
    double *bv = tc_values(bern), bm = 0;
    for (int i = 0; i < 100000; i++) bm += bv[i];
    bm /= 100000;
    assert_true(fabs(bm - 0.3) < 4.0 * sqrt(0.3 * 0.7 / 100000));
    free(bv);
    int64_t perm[1000];
    assert_int_equal(amp_randperm(1000, perm, &g1), AMP_OK);
    int seen[1000] = {0};
    int moved = 0;
    for (int i = 0; i < 1000; i++) {
        assert_true(perm[i] >= 0 && perm[i] < 1000);
        seen[perm[i]]++;
        moved += perm[i] != i;
    }
    for (int i = 0; i < 1000; i++) assert_int_equal(seen[i], 1);
    assert_true(moved > 900);
    amp_tensor *ts[] = {a, b, c, u, bern};
    for (int i = 0; i < 5; i++) amp_tensor_free(ts[i]);
}

static void t_copy_and_convert(void **state) {
    (void)state;
    test_rng r = {7};
    amp_tensor *x = tc_randn(&r, AMP_F32, 2, AMP_SHAPE(5, 7), 3.0);
    amp_tensor *xt = amp_transpose(x, 0, 1);
    amp_tensor *h = amp_tensor_empty(AMP_BF16, 2, AMP_SHAPE(7, 5));
    assert_int_equal(amp_tensor_copy_(h, xt), AMP_OK);
    for (int i = 0; i < 7; i++)
        for (int j = 0; j < 5; j++) {
            float f = (float)amp_tensor_get(x, AMP_SHAPE(j, i));
            assert_true(amp_tensor_get(h, AMP_SHAPE(i, j)) == amp_bf16_to_f32(amp_f32_to_bf16(f)));
        }
    amp_tensor *row = amp_tensor_arange(0, 5, 1, AMP_F32);
    amp_tensor *m = amp_tensor_zeros(AMP_F64, 2, AMP_SHAPE(3, 5));
    assert_int_equal(amp_tensor_copy_(m, row), AMP_OK); /* broadcast */
    assert_true(amp_tensor_get(m, AMP_SHAPE(2, 4)) == 4);
    assert_int_equal(amp_tensor_copy_(row, m), AMP_ERR_SHAPE);
    amp_clear_error();
    int32_t out[35];
    amp_tensor *ints = amp_tensor_arange(-3, 32, 1, AMP_F32);
    assert_int_equal(amp_tensor_copy_out(ints, out, AMP_I32), AMP_OK);
    assert_int_equal(out[0], -3);
    assert_int_equal(out[34], 31);
    amp_tensor *ts[] = {x, xt, h, row, m, ints};
    for (int i = 0; i < 6; i++) amp_tensor_free(ts[i]);
}

/* A value an integer dtype cannot hold (NaN, an infinity, out of range) is
 * refused, naming the call, the value, the dtype and the problem, as torch's
 * checked_convert refuses torch.full((2,), nan, dtype=torch.int64) ("value
 * cannot be converted to type int64_t without overflow"); it used to give 0 and
 * u8 1e10 gave 255 silently. In range, a fraction is truncated toward zero (as
 * torch); the limits themselves are accepted. */
static void t_int_values_checked(void **state) {
    (void)state;
    tc_assert_fails(amp_tensor_full(AMP_I64, 1, AMP_SHAPE(2), NAN), "amp_tensor_full: value nan cannot be stored in i64 (NaN has no integer value)");
    tc_assert_fails(amp_tensor_full(AMP_U8, 1, AMP_SHAPE(2), 1e10), "amp_tensor_full: value 10000000000 is outside the u8 range [0, 255]");
    tc_assert_fails(amp_tensor_full(AMP_I32, 1, AMP_SHAPE(2), -INFINITY), "amp_tensor_full: value -inf cannot be stored in i32 (an integer has no infinity)");
    tc_assert_fails(amp_tensor_full(AMP_U8, 1, AMP_SHAPE(2), -1), "value -1 is outside the u8 range [0, 255]");
    tc_assert_fails(amp_tensor_full(AMP_I32, 1, AMP_SHAPE(2), 2147483648.0), "outside the i32 range [-2147483648, 2147483647]");
    tc_assert_fails(amp_tensor_full(AMP_I64, 1, AMP_SHAPE(2), 9223372036854775808.0),
                    "outside the i64 range [-9223372036854775808, 9223372036854775807]");
    tc_assert_fails(amp_tensor_full_on(AMP_DEVICE_CPU, AMP_I64, 1, AMP_SHAPE(2), NAN), "amp_tensor_full_on: value nan");
    amp_tensor *u = amp_tensor_full(AMP_U8, 1, AMP_SHAPE(2), 255), *i = amp_tensor_full(AMP_I64, 1, AMP_SHAPE(2), -2.7);
    amp_tensor *l = amp_tensor_full(AMP_I64, 1, AMP_SHAPE(1), -9223372036854775808.0);
    assert_non_null(u);
    assert_non_null(i);
    assert_non_null(l);
    assert_true(amp_tensor_get(u, AMP_SHAPE(1)) == 255.0);
    assert_true(amp_tensor_get(i, AMP_SHAPE(1)) == -2.0);
    assert_true(((int64_t *)amp_tensor_data(l))[0] == INT64_MIN);
    assert_int_equal(amp_tensor_fill_(u, 256), AMP_ERR_RANGE);
    assert_non_null(strstr(amp_last_error(), "amp_tensor_fill_: value 256 is outside the u8 range"));
    assert_int_equal(amp_tensor_set(u, AMP_SHAPE(0), 1e10), AMP_ERR_RANGE);
    assert_non_null(strstr(amp_last_error(), "amp_tensor_set: value 10000000000 is outside the u8 range"));
    assert_int_equal(amp_tensor_set(i, AMP_SHAPE(0), NAN), AMP_ERR_RANGE);
    assert_true(amp_tensor_get(u, AMP_SHAPE(0)) == 255.0); /* unchanged */
    assert_true(amp_tensor_get(i, AMP_SHAPE(0)) == -2.0);
    /* arange: every value must fit (250 .. 259 in u8 used to end in 255, 255, 255, 255) */
    tc_assert_fails(amp_tensor_arange(250, 260, 1, AMP_U8), "amp_tensor_arange: value 259 is outside the u8 range [0, 255]");
    tc_assert_fails(amp_tensor_arange(3, -2, -1, AMP_U8), "amp_tensor_arange: value -1 is outside the u8 range");
    amp_tensor *a = amp_tensor_arange(250, 256, 1, AMP_U8);
    assert_non_null(a);
    assert_true(amp_tensor_get(a, AMP_SHAPE(5)) == 255.0);
    /* float dtypes take them all */
    amp_tensor *f = amp_tensor_full(AMP_F16, 1, AMP_SHAPE(1), NAN);
    assert_non_null(f);
    assert_true(isnan(amp_tensor_item(f)));
    amp_tensor *ts[] = {u, i, l, a, f};
    for (size_t k = 0; k < sizeof ts / sizeof *ts; k++) amp_tensor_free(ts[k]);
}

AMP_TEST_MAIN(t_create, t_errors, t_views, t_scope_and_memory, t_views_keep_storage_alive, t_random, t_copy_and_convert,
              t_block_cache, t_int_values_checked)
