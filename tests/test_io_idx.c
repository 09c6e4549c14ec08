/* IDX reader and the batch loader: round trips through files the test writes
 * (plain and gzip), every kind of malformed file, and the real Fashion-MNIST
 * files from the Debian package. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "test_support.h"

static void write_file(const char *name, const void *data, size_t n, bool gz) {
    const char *p = test_tmp_path(name);
    if (gz) {
        gzFile f = gzopen(p, "wb");
        assert_non_null(f);
        assert_int_equal(gzwrite(f, data, (unsigned)n), (int)n);
        gzclose(f);
    } else {
        test_write_file(p, data, n);
    }
}

/* An IDX image: header for type/dims, then count elements of es bytes, big-endian values i*3+1. */
static unsigned char *make_idx(int type, int ndim, const uint32_t *dims, size_t es, size_t *len) {
    size_t count = 1;
    for (int i = 0; i < ndim; i++) count *= dims[i];
    *len = 4 + 4 * (size_t)ndim + count * es;
    unsigned char *b = calloc(1, *len);
    b[2] = (unsigned char)type;
    b[3] = (unsigned char)ndim;
    for (int i = 0; i < ndim; i++) {
        b[4 + 4 * i] = (unsigned char)(dims[i] >> 24);
        b[5 + 4 * i] = (unsigned char)(dims[i] >> 16);
        b[6 + 4 * i] = (unsigned char)(dims[i] >> 8);
        b[7 + 4 * i] = (unsigned char)dims[i];
    }
    unsigned char *d = b + 4 + 4 * ndim;
    for (size_t i = 0; i < count; i++) {
        uint64_t v = i * 3 + 1;
        for (size_t k = 0; k < es; k++) d[i * es + k] = (unsigned char)(v >> (8 * (es - 1 - k)));
    }
    return b;
}

static void t_roundtrip(void **state) {
    (void)state;
    size_t len;
    unsigned char *img = make_idx(0x08, 3, (uint32_t[]){5, 4, 3}, 1, &len);
    write_file("a.idx", img, len, false);
    write_file("a.idx.gz", img, len, true);
    for (int gz = 0; gz < 2; gz++) {
        amp_idx idx;
        assert_int_equal(amp_idx_load(test_tmp_path(gz ? "a.idx.gz" : "a.idx"), &idx), AMP_OK);
        assert_int_equal(idx.type, AMP_IDX_U8);
        assert_int_equal(idx.ndim, 3);
        assert_int_equal(idx.dims[0], 5);
        assert_int_equal(idx.dims[2], 3);
        assert_int_equal(idx.nbytes, 60);
        for (int i = 0; i < 60; i++) assert_int_equal(((uint8_t *)idx.data)[i], (uint8_t)(i * 3 + 1));
        amp_idx_free(&idx);
    }
    free(img);
    /* multi-byte types are converted from big-endian */
    unsigned char *i32 = make_idx(0x0C, 1, (uint32_t[]){7}, 4, &len);
    amp_idx idx;
    assert_int_equal(amp_idx_parse(i32, len, "i32", &idx), AMP_OK);
    for (int i = 0; i < 7; i++) assert_int_equal(((int32_t *)idx.data)[i], i * 3 + 1);
    amp_idx_free(&idx);
    free(i32);
}

static void expect_load_error(const char *file, amp_status want, const char *needle) {
    amp_idx idx;
    amp_status st = amp_idx_load(test_tmp_path(file), &idx);
    if (st != want) fail_msg("%s: status %d, expected %d (%s)", file, st, want, amp_last_error());
    const char *m = amp_last_error();
    if (!strstr(m, test_tmp_path(file))) fail_msg("%s: message does not name the file: %s", file, m);
    if (!strstr(m, needle)) fail_msg("%s: message does not say '%s': %s", file, needle, m);
    assert_null(idx.data);
    amp_clear_error();
}

static void t_malformed(void **state) {
    (void)state;
    size_t len;
    unsigned char *img = make_idx(0x08, 3, (uint32_t[]){10, 8, 8}, 1, &len);
    write_file("trunc.idx", img, len - 17, false);
    write_file("trunc.idx.gz", img, len - 17, true);
    write_file("trunc_hdr.idx", img, 9, false);
    write_file("empty.idx", img, 0, false);
    unsigned char *extra = malloc(len + 3);
    memcpy(extra, img, len);
    write_file("trailing.idx", extra, len + 3, false);
    free(extra);
    img[0] = 0x12;
    write_file("magic.idx", img, len, false);
    img[0] = 0;
    img[2] = 0x07;
    write_file("type.idx", img, len, false);
    img[2] = 0x08;
    img[3] = 0;
    write_file("rank0.idx", img, len, false);
    img[3] = 9;
    write_file("rank9.idx", img, len, false);
    img[3] = 3;
    img[4] = 0x7f; /* 2 GiB dims product blows the 4 GiB cap */
    img[8] = 0x7f;
    write_file("huge.idx", img, len, false);
    free(img);
    /* a gzip stream with a corrupted body */
    write_file("ok.gz", "0123456789abcdef0123456789abcdef", 32, true);
    size_t glen;
    char *gzb = test_read_file(test_tmp_path("ok.gz"), &glen);
    for (size_t i = 12; i < glen - 8; i++) gzb[i] ^= 0x5a;
    write_file("corrupt.gz", gzb, glen, false);
    free(gzb);

    expect_load_error("trunc.idx", AMP_ERR_FORMAT, "truncated");
    expect_load_error("trunc.idx.gz", AMP_ERR_FORMAT, "truncated");
    expect_load_error("trunc_hdr.idx", AMP_ERR_FORMAT, "truncated");
    expect_load_error("empty.idx", AMP_ERR_FORMAT, "truncated");
    expect_load_error("trailing.idx", AMP_ERR_FORMAT, "trailing");
    expect_load_error("magic.idx", AMP_ERR_FORMAT, "not an IDX file");
    expect_load_error("type.idx", AMP_ERR_FORMAT, "element type");
    expect_load_error("rank0.idx", AMP_ERR_FORMAT, "rank");
    expect_load_error("rank9.idx", AMP_ERR_FORMAT, "rank");
    expect_load_error("huge.idx", AMP_ERR_FORMAT, "4 GiB");
    expect_load_error("corrupt.gz", AMP_ERR_FORMAT, "corrupt");
    expect_load_error("does-not-exist.idx", AMP_ERR_IO, "cannot open");
    amp_idx idx;
    assert_int_equal(amp_idx_load(NULL, &idx), AMP_ERR_ARG);
    assert_int_equal(amp_idx_parse(NULL, 5, "x", &idx), AMP_ERR_ARG);
    amp_clear_error();
}

static void t_dataset_mismatch(void **state) {
    (void)state;
    size_t li, ll;
    unsigned char *im = make_idx(0x08, 3, (uint32_t[]){6, 2, 2}, 1, &li);
    unsigned char *lb = make_idx(0x08, 1, (uint32_t[]){5}, 1, &ll);
    write_file("im.idx", im, li, false);
    write_file("lb.idx", lb, ll, false);
    amp_dataset ds;
    assert_int_equal(amp_dataset_load(test_tmp_path("im.idx"), test_tmp_path("lb.idx"), 0, &ds), AMP_ERR_FORMAT);
    assert_non_null(strstr(amp_last_error(), "6 images but"));
    assert_int_equal(amp_dataset_load(test_tmp_path("lb.idx"), test_tmp_path("lb.idx"), 0, &ds), AMP_ERR_FORMAT);
    assert_non_null(strstr(amp_last_error(), "rank 3"));
    amp_clear_error();
    test_free_all(im, lb);
}

static void t_fashion_mnist(void **state) {
    (void)state;
    amp_dataset tr, te;
    amp_status st = amp_fashion_mnist_load("train", 0, &tr);
    if (st != AMP_OK) fail_msg("Fashion-MNIST (Debian package dataset-fashion-mnist) must be installed: %s", amp_last_error());
    assert_int_equal(tr.n, 60000);
    assert_int_equal(tr.h, 28);
    assert_int_equal(tr.w, 28);
    assert_int_equal(tr.num_classes, 10);
    const uint8_t first[10] = {9, 0, 0, 3, 0, 2, 7, 2, 5, 5}; /* the published first training labels */
    assert_memory_equal(tr.labels, first, 10);
    assert_int_equal(amp_fashion_mnist_load("test", 2000, &te), AMP_OK);
    assert_int_equal(te.n, 2000);
    int counts[10] = {0};
    for (int i = 0; i < 2000; i++) counts[te.labels[i]]++;
    for (int c = 0; c < 10; c++) assert_true(counts[c] > 100); /* every class present */
    assert_int_equal(amp_fashion_mnist_load("valid", 0, &te), AMP_ERR_ARG);
    amp_clear_error();
    amp_dataset_free(&tr);
    amp_dataset_free(&te);
}

static void t_loader(void **state) {
    (void)state;
    enum { N = 103, H = 2, W = 3 };
    uint8_t images[N * H * W], labels[N];
    for (int i = 0; i < N; i++) {
        labels[i] = (uint8_t)(i % 7);
        for (int k = 0; k < H * W; k++) images[i * H * W + k] = (uint8_t)(i + k);
    }
    amp_dataset ds = {N, H, W, 7, images, labels, NULL};
    amp_loader_opts o = {.batch = 10, .shuffle = true, .seed = 42, .mean = 0.5, .std = 0.25};
    amp_loader *a = amp_loader_new(&ds, &o), *b = amp_loader_new(&ds, &o);
    assert_int_equal(amp_loader_batches_per_epoch(a), 11);
    int seen[N] = {0};
    int64_t first_epoch0 = -1;
    amp_scope *s = amp_scope_begin();
    amp_tensor *x, *y, *x2, *y2;
    int nb = 0;
    while (amp_loader_next(a, &x, &y)) {
        assert_true(amp_loader_next(b, &x2, &y2));
        assert_memory_equal(amp_tensor_data(x), amp_tensor_data(x2), amp_tensor_nbytes(x)); /* same seed, same batches */
        int64_t bsz = amp_tensor_dim(x, 0);
        assert_int_equal(bsz, nb == 10 ? 3 : 10);
        for (int64_t i = 0; i < bsz; i++) {
            int64_t lab = (int64_t)amp_tensor_get(y, AMP_SHAPE(i));
            double px0 = amp_tensor_get(x, AMP_SHAPE(i, 0, 0, 0));
            /* recover the example index from its first pixel: (i/255 - 0.5)/0.25 */
            int idx = (int)((px0 * 0.25 + 0.5) * 255.0 + 0.5);
            assert_int_equal(lab, idx % 7);
            double px5 = amp_tensor_get(x, AMP_SHAPE(i, 0, 1, 2));
            assert_close(px5, ((idx + 5) / 255.0 - 0.5) / 0.25, 1e-6, 1e-6, "normalised pixel");
            seen[idx]++;
            if (nb == 0 && i == 0) first_epoch0 = idx;
        }
        nb++;
    }
    assert_int_equal(nb, 11);
    for (int i = 0; i < N; i++) assert_int_equal(seen[i], 1); /* a permutation */
    /* epoch 1 differs from epoch 0; seeking reproduces a position */
    amp_loader_start_epoch(a, 1);
    assert_true(amp_loader_next(a, &x, &y));
    assert_true(amp_loader_next(a, &x, &y));
    assert_true(amp_loader_next(a, &x, &y));
    assert_int_equal(amp_loader_seek(b, 1, 2), AMP_OK);
    assert_true(amp_loader_next(b, &x2, &y2));
    assert_memory_equal(amp_tensor_data(x), amp_tensor_data(x2), amp_tensor_nbytes(x));
    int64_t e, bi;
    amp_loader_position(b, &e, &bi);
    assert_int_equal(e, 1);
    assert_int_equal(bi, 3);
    amp_loader_start_epoch(b, 1);
    amp_loader_next(b, &x2, &y2);
    int idx1 = (int)((amp_tensor_get(x2, AMP_SHAPE(0, 0, 0, 0)) * 0.25 + 0.5) * 255.0 + 0.5);
    amp_loader_start_epoch(b, 0);
    amp_loader_next(b, &x2, &y2);
    int idx0 = (int)((amp_tensor_get(x2, AMP_SHAPE(0, 0, 0, 0)) * 0.25 + 0.5) * 255.0 + 0.5);
    assert_int_equal(idx0, first_epoch0);
    assert_true(idx0 != idx1 || N < 2);
    amp_scope_end(s);
    amp_loader_free(a);
    amp_loader_free(b);
    amp_loader_opts bad = {.batch = 0};
    assert_null(amp_loader_new(&ds, &bad));
    amp_clear_error();
}

AMP_TEST_MAIN_FIXTURES(test_tmpdir_setup, test_tmpdir_teardown, t_roundtrip, t_malformed, t_dataset_mismatch,
                       t_fashion_mnist, t_loader)
