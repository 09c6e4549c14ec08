/* The device API on any machine: names and parsing, what amp says when CUDA
 * cannot be used (built without it, or no device), amp_tensor_to within the
 * CPU (a differentiable view), per-device memory counters, and the refusal of
 * tensors on another device: a tensor whose storage claims to be on cuda
 * (made here by hand, never dereferenced) must be refused by name before any
 * kernel could read it. The GPU itself is tested by tests/test_cuda_*.c. */
#include <string.h>
#include <sys/mman.h>

#include "op_check.h"
#include "tensor/tensor_impl.h"

static void t_names(void **state) {
    (void)state;
    assert_string_equal(amp_device_name(AMP_DEVICE_CPU), "cpu");
    assert_string_equal(amp_device_name(AMP_DEVICE_CUDA), "cuda");
    assert_string_equal(amp_device_name((amp_device)7), "invalid-device");
    amp_device d = AMP_DEVICE_CUDA;
    assert_int_equal(amp_device_parse("cpu", &d), AMP_OK);
    assert_int_equal(d, AMP_DEVICE_CPU);
    const char *cuda_names[] = {"cuda", "cuda:0", "gpu"};
    for (int i = 0; i < 3; i++) {
        d = AMP_DEVICE_CPU;
        assert_int_equal(amp_device_parse(cuda_names[i], &d), AMP_OK);
        assert_int_equal(d, AMP_DEVICE_CUDA);
    }
    assert_int_equal(amp_device_parse("cuda:1", &d), AMP_ERR_ARG);
    assert_non_null(strstr(amp_last_error(), "AMP_CUDA_DEVICE"));
    assert_int_equal(amp_device_parse("tpu", &d), AMP_ERR_ARG);
    assert_non_null(strstr(amp_last_error(), "'tpu' is not a device"));
    assert_int_equal(amp_device_parse(NULL, &d), AMP_ERR_ARG);
    assert_int_equal(amp_device_check(AMP_DEVICE_CPU), AMP_OK);
    assert_int_equal(amp_device_check((amp_device)9), AMP_ERR_ARG);
}

/* Without a usable GPU every way onto cuda fails with the reason. */
static void t_cuda_unavailable(void **state) {
    (void)state;
    if (amp_cuda_available()) skip();
    amp_status st = amp_device_check(AMP_DEVICE_CUDA);
    assert_int_not_equal(st, AMP_OK);
    const char *why = amp_cuda_built() ? "no CUDA device" : "built without CUDA";
    assert_non_null(strstr(amp_last_error(), why));
    if (!amp_cuda_built()) assert_int_equal(amp_cuda_device_count(), 0);
    amp_tensor *x = amp_tensor_ones(AMP_F32, 1, AMP_SHAPE(4));
    amp_clear_error();
    assert_null(amp_tensor_to(x, AMP_DEVICE_CUDA));
    assert_non_null(strstr(amp_last_error(), " (then: amp_tensor_to)")); /* the root cause first */
    assert_non_null(strstr(amp_last_error(), why));
    assert_int_not_equal(amp_tensor_move_(x, AMP_DEVICE_CUDA), AMP_OK);
    assert_non_null(strstr(amp_last_error(), " (then: amp_tensor_move_)"));
    assert_int_equal(amp_tensor_device(x), AMP_DEVICE_CPU); /* unchanged */
    assert_true(amp_tensor_get(x, AMP_SHAPE(2)) == 1.0);
    assert_null(amp_tensor_zeros_on(AMP_DEVICE_CUDA, AMP_F32, 1, AMP_SHAPE(3)));
    assert_non_null(strstr(amp_last_error(), " (then: amp_tensor_zeros_on)"));
    assert_non_null(strstr(amp_last_error(), why));
    amp_cuda_info info;
    assert_int_not_equal(amp_cuda_get_info(&info), AMP_OK);
    assert_int_not_equal(amp_cuda_synchronize(), AMP_OK);
    assert_non_null(strstr(amp_last_error(), why));
    amp_mem_stats m = amp_memory_stats_device(AMP_DEVICE_CUDA);
    assert_int_equal(m.live_total, 0);
    assert_int_equal(m.reserved, 0);
    amp_tensor_free(x);
}

/* to(cpu) of a CPU tensor: a new reference sharing the data, and the
 * gradient flows through it */
static void t_to_same_device(void **state) {
    (void)state;
    amp_tensor *x = amp_tensor_from_data((float[]){1, 2, 3}, AMP_F32, 1, AMP_SHAPE(3));
    amp_tensor_set_requires_grad(x, true);
    amp_tensor *y = amp_tensor_to(x, AMP_DEVICE_CPU);
    assert_non_null(y);
    assert_ptr_equal(amp_tensor_data(y), amp_tensor_data(x));
    amp_tensor *yy = amp_mul(y, y), *l = amp_sum(yy, NULL, 0, false);
    assert_int_equal(amp_backward(l), AMP_OK);
    const amp_tensor *g = amp_tensor_grad(x);
    assert_non_null(g);
    for (int i = 0; i < 3; i++) assert_true(amp_tensor_get(g, AMP_SHAPE(i)) == 2.0 * (i + 1));
    assert_int_equal(amp_tensor_move_(x, AMP_DEVICE_CPU), AMP_OK); /* nothing to do */
    assert_null(amp_tensor_to(NULL, AMP_DEVICE_CPU));
    assert_non_null(strstr(amp_last_error(), "amp_tensor_to"));
    assert_null(amp_tensor_to(x, (amp_device)5));
    assert_non_null(strstr(amp_last_error(), "device 5 is not valid"));
    test_free_tensors(l, yy, y, x);
}

static void t_memory_stats(void **state) {
    (void)state;
    amp_mem_stats a = amp_memory_stats(), b = amp_memory_stats_device(AMP_DEVICE_CPU);
    assert_int_equal(a.live_total, b.live_total);
    assert_int_equal(a.allocs, b.allocs);
    amp_tensor *x = amp_tensor_zeros_on(AMP_DEVICE_CPU, AMP_F32, 1, AMP_SHAPE(1000));
    assert_non_null(x);
    assert_int_equal(amp_memory_stats_device(AMP_DEVICE_CPU).live[AMP_MEM_DATA], a.live[AMP_MEM_DATA] + 4000);
    assert_true(amp_tensor_get(x, AMP_SHAPE(999)) == 0.0);
    amp_tensor *f = amp_tensor_full_on(AMP_DEVICE_CPU, AMP_BF16, 1, AMP_SHAPE(3), 0.1);
    assert_true(amp_tensor_get(f, AMP_SHAPE(1)) == 0.10009765625);
    test_free_tensors(f, x);
    assert_int_equal(amp_memory_stats_device((amp_device)42).live_total, 0);
}

/* A tensor that claims to live on cuda: its storage is borrowed host memory
 * (never freed by the allocator); ops must refuse it by name. */
static amp_tensor *fake_cuda(float *buf, int64_t n) {
    amp_tensor *t = amp_tensor_borrow(buf, AMP_F32, 1, &n);
    t->storage->device = AMP_DEVICE_CUDA;
    return t;
}

static void t_mixed_devices_refused(void **state) {
    (void)state;
    float buf[4] = {1, 2, 3, 4};
    amp_scope *s = amp_scope_begin();
    amp_tensor *c = amp_tensor_ones(AMP_F32, 1, AMP_SHAPE(4)), *g = fake_cuda(buf, 4);
    assert_int_equal(amp_tensor_device(g), AMP_DEVICE_CUDA);
    amp_clear_error();
    assert_null(amp_add(c, g));
    assert_non_null(strstr(amp_last_error(), "amp_add"));
    assert_non_null(strstr(amp_last_error(), "cuda"));
    assert_null(amp_matmul(g, c));
    assert_non_null(strstr(amp_last_error(), "amp_matmul"));
    /* an op whose entry the CUDA table leaves NULL (cumsum: refused by name
     * before any data is read; softmax runs on cuda now: on a machine with a
     * GPU it would read the fake tensor's memory) */
    assert_null(amp_cumsum(g, 0));
    assert_non_null(strstr(amp_last_error(), "amp_cumsum"));
    /* the internal check every op runs names both tensors and devices */
    const amp_tensor *ts[2] = {c, g};
    const char *names[2] = {"a", "b"};
    amp_device dev;
    assert_int_equal(amp__same_device("amp_add", ts, names, 2, &dev), AMP_ERR_ARG);
    assert_string_equal(amp_last_error(), "amp_add: a is on cpu and b on cuda: an op takes its tensors on one device "
                                          "(move them with amp_tensor_to)");
    const amp_tensor *one[2] = {NULL, g};
    assert_int_equal(amp__same_device("amp_x", one, NULL, 2, &dev), AMP_OK);
    assert_int_equal(dev, AMP_DEVICE_CUDA);
    g->storage->device = AMP_DEVICE_CPU; /* so the scope frees it as the borrowed tensor it is */
    amp_scope_end(s);
}

/* Entries that read tensor data on the host before an op's device check
 * (index and mask values, optimizer state) refuse a device tensor by name.
 * The fake tensor's memory is inaccessible (PROT_NONE): a host read would
 * crash the test instead of passing it. Views need no data and keep the
 * device. */
static void t_host_readers_refuse(void **state) {
    (void)state;
    void *mem = mmap(NULL, 1 << 16, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(mem != MAP_FAILED);
    amp_scope *s = amp_scope_begin();
    amp_tensor *fakes[8];
    int nf = 0;
#define FAKE(dt, ...)                                                                          \
    (fakes[nf] = amp_tensor_borrow(mem, dt, (int)(sizeof((int64_t[]){__VA_ARGS__}) / 8), AMP_SHAPE(__VA_ARGS__)), \
     fakes[nf]->storage->device = AMP_DEVICE_CUDA, fakes[nf++])
    amp_tensor *x = FAKE(AMP_F32, 4, 8), *idx = FAKE(AMP_I64, 4), *mask = FAKE(AMP_U8, 4, 8), *idx2 = FAKE(AMP_I64, 4, 8);
    amp_tensor *cw = amp_tensor_ones(AMP_F32, 2, AMP_SHAPE(8, 8)), *cx = amp_tensor_ones(AMP_F32, 2, AMP_SHAPE(4, 8));
    struct {
        const char *fn, *arg;
        amp_tensor *r;
    } cases[] = {
        {"amp_embedding", "indices", amp_embedding(cw, idx)},
        {"amp_embedding", "cuda", amp_embedding(x, amp_tensor_zeros(AMP_I64, 1, AMP_SHAPE(2)))},
        {"amp_index_select", "index", amp_index_select(cx, 0, idx)},
        {"amp_gather", "index", amp_gather(cx, 0, idx2)},
        {"amp_masked_fill", "x", amp_masked_fill(x, amp_tensor_zeros(AMP_U8, 2, AMP_SHAPE(4, 8)), 0)},
        {"amp_masked_fill", "mask", amp_masked_fill(cx, mask, 0)},
        {"amp_cross_entropy", "target", amp_cross_entropy(cx, idx, NULL)},
        {"amp_cat", "cuda", amp_cat((amp_tensor *[]){cx, x}, 2, 0)},
        {"amp_linear", "cuda", amp_linear(cx, cw, x)},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (cases[i].r) fail_msg("%s computed on a cuda tensor (%s)", cases[i].fn, cases[i].arg);
    }
    /* each refusal names the op and the argument (re-run one by one to read each message) */
    /* (embedding, index_select, gather, masked_fill compute on the device
     * of their tensors: a mix is refused before any data is read) */
    assert_null(amp_embedding(cw, idx));
    assert_string_equal(amp_last_error(), "amp_embedding: weight is on cpu and indices on cuda: an op takes its tensors on "
                                          "one device (move them with amp_tensor_to)");
    assert_null(amp_index_select(cx, 0, idx));
    assert_non_null(strstr(amp_last_error(), "amp_index_select: x is on cpu and index on cuda"));
    assert_null(amp_gather(cx, 0, idx2));
    assert_non_null(strstr(amp_last_error(), "amp_gather: x is on cpu and index on cuda"));
    assert_null(amp_masked_fill(cx, mask, 0));
    assert_non_null(strstr(amp_last_error(), "amp_masked_fill: x is on cpu and mask on cuda"));
    assert_null(amp_cross_entropy(cx, idx, NULL));
    assert_non_null(strstr(amp_last_error(), "amp_cross_entropy: target is on cuda"));
    /* views: no data read, the device kept */
    amp_tensor *v = amp_transpose(x, 0, 1);
    assert_non_null(v);
    assert_int_equal(amp_tensor_device(v), AMP_DEVICE_CUDA);
    v = amp_reshape(x, 1, AMP_SHAPE(32));
    assert_non_null(v);
    assert_int_equal(amp_tensor_device(v), AMP_DEVICE_CUDA);

    /* optimizers: they update on the parameters' device (kernels/backend.h's optimizer entries); without a
     * usable GPU a cuda parameter is refused when the optimizer is made ... */
    amp_tensor_set_requires_grad(x, true);
    amp_optim_opts o = amp_adamw_opts(1e-3);
    if (!amp_cuda_available()) {
        assert_null(amp_optim_new(&x, 1, &o));
        assert_non_null(strstr(amp_last_error(), "amp_optim_new: "));
        assert_non_null(strstr(amp_last_error(), "CUDA"));
    }
    /* ... and one that went there afterwards, leaving its gradient and state behind, is refused by name before
     * any update reads it (an optimizer's tensors are on one device) */
    amp_tensor *p = amp_tensor_ones(AMP_F32, 1, AMP_SHAPE(4));
    amp_tensor_set_requires_grad(p, true);
    amp_optim *opt = amp_optim_new(&p, 1, &o);
    assert_non_null(opt);
    amp_tensor_set_grad(p, amp_tensor_ones(AMP_F32, 1, AMP_SHAPE(4)));
    amp_storage *keep = p->storage;
    amp_storage fake_storage = *keep;
    fake_storage.data = mem;
    fake_storage.device = AMP_DEVICE_CUDA;
    p->storage = &fake_storage;
    assert_int_equal(amp_optim_step(opt), AMP_ERR_ARG);
    assert_non_null(strstr(amp_last_error(), "amp_optim_step: parameter 0 has its gradient on cpu but parameter 0 is on cuda"));
    amp_scaler *sc = amp_scaler_new(NULL);
    assert_int_equal(amp_scaler_unscale(sc, opt), AMP_ERR_ARG);
    assert_non_null(strstr(amp_last_error(), "amp_scaler_unscale: parameter 0 has its gradient on cpu but parameter 0 is on cuda"));
    assert_int_equal(amp_scaler_step(sc, opt, NULL), AMP_ERR_ARG);
    assert_int_equal(amp_clip_grad_value(opt, 1.0), AMP_ERR_UNSUPPORTED);
    assert_true(amp_clip_grad_norm(opt, 1.0) < 0);
    assert_non_null(strstr(amp_last_error(), "amp_clip_grad_norm: parameter 0 has its gradient on cpu but parameter 0 is on cuda"));
    p->storage = keep;
    amp_tensor *g = (amp_tensor *)amp_tensor_grad(p);
    amp_storage *gkeep = g->storage, gfake = *gkeep;
    gfake.data = mem;
    gfake.device = AMP_DEVICE_CUDA;
    g->storage = &gfake;
    assert_true(amp_clip_grad_norm(opt, 1.0) < 0);
    assert_non_null(strstr(amp_last_error(), "amp_clip_grad_norm: parameter 0 has its gradient on cuda"));
    if (!amp_cuda_available()) { /* (with a GPU this fake gradient would be read there) */
        assert_true(amp_clip_grad_norm_params(&p, 1, 1.0) < 0);
        assert_non_null(strstr(amp_last_error(), "amp_clip_grad_norm_params: "));
    }
    assert_int_equal(amp_optim_step(opt), AMP_ERR_ARG);
    assert_non_null(strstr(amp_last_error(), "parameter 0 has its gradient on cuda but parameter 0 is on cpu"));
    g->storage = gkeep;
    assert_int_equal(amp_optim_step(opt), AMP_OK); /* back on the CPU: it steps */
    amp_scaler_free(sc);
    amp_optim_free(opt);
    amp_tensor_free(p);
    for (int i = 0; i < nf; i++) fakes[i]->storage->device = AMP_DEVICE_CPU;
#undef FAKE
    amp_scope_end(s);
    munmap(mem, 1 << 16);
}

/* amp_module_to_device: arguments checked; to the device a module is on, a
 * no-op that keeps every tensor object and its data; without a usable GPU
 * the move fails naming the reason and leaves the tensors where they were */
static void t_module_to_device(void **state) {
    (void)state;
    assert_int_equal(amp_module_to_device(NULL, AMP_DEVICE_CPU), AMP_ERR_ARG);
    assert_non_null(strstr(amp_last_error(), "amp_module_to_device: module is NULL"));
    amp_generator g = amp_generator_make(1);
    amp_module *m = amp_model_build("mlp", &g);
    assert_non_null(m);
    assert_int_equal(amp_module_to_device(m, (amp_device)7), AMP_ERR_ARG);
    assert_non_null(strstr(amp_last_error(), "device 7 is not valid"));
    amp_tensor *ps[16];
    int np = amp_module_parameters(m, ps, NULL, 16);
    assert_true(np > 0 && np <= 16);
    void *d0 = amp_tensor_data(ps[0]);
    assert_int_equal(amp_module_to_device(m, AMP_DEVICE_CPU), AMP_OK);
    assert_ptr_equal(amp_tensor_data(ps[0]), d0);
    if (!amp_cuda_available()) {
        assert_int_not_equal(amp_module_to_device(m, AMP_DEVICE_CUDA), AMP_OK);
        assert_non_null(strstr(amp_last_error(), amp_cuda_built() ? "no CUDA device" : "built without CUDA"));
        for (int i = 0; i < np; i++) assert_int_equal(amp_tensor_device(ps[i]), AMP_DEVICE_CPU);
    }
    amp_module_free(m);
}

AMP_TEST_MAIN(t_names, t_cuda_unavailable, t_to_same_device, t_memory_stats, t_mixed_devices_refused,
              t_host_readers_refuse, t_module_to_device)
