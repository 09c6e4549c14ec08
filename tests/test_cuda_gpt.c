/* The GPT trained on the GPU through amp's ordinary ops, against the same
 * model trained on the CPU (issue 17): two twins made from one seed, one
 * moved with amp_module_to_device, the same batches, AdamW with nanoGPT's
 * decay groups, the scaler and gradient clipping as `amp train` uses them.
 * Skipped (exit 77, "SKIP: no CUDA device: ...") without a GPU.
 *
 * Checked per precision mode (fp32; bf16 O1 autocast; fp16 O1 with dynamic
 * loss scaling; bf16 O2 with f32 master weights):
 *  - the first step's logits: fp32 within 1e-5 of the largest |logit| (the
 *    GPU sums in another order; TF32 is off at the default "highest"
 *    precision); half modes within 2e-2 (each product's operands are
 *    rounded to the half type the same way, the f32 sums differ in order,
 *    and the rounding of a sum to half can then differ by one half ulp);
 *  - every step's loss: fp32 within 1e-4 relative, half modes 2e-2;
 *  - every step's clipped gradient norm: the same bounds;
 *  - fp16: the same loss-scale trace exactly (the same overflow decisions);
 *  - the parameters after the last step, in units of u = lr x steps (the
 *    most Adam can move a weight): Adam divides by sqrt(v), so a gradient
 *    component that is near 0 on both devices can step either way and
 *    differ by up to u, while every component with a clear gradient moves
 *    the same; so no element may differ by more than 2u, and at most 1%
 *    (fp32) / 5% (half modes) of all elements by more than u / 20;
 *  - the steady state: after the second step no step asks the driver for
 *    memory (the caching allocator serves it: device_mallocs is constant)
 *    and the GPU's live bytes return to the same level after each step. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "op_check.h"
#include "test_support.h"

typedef enum { M_F32, M_BF16_O1, M_F16_O1, M_BF16_O2 } mode_t_;
static const char *mode_name[] = {"fp32", "bf16 O1", "fp16 O1", "bf16 O2"};

typedef struct {
    amp_module *m;
    amp_optim *opt[2];
    int nopt;
    amp_scaler *sc;
    amp_device dev;
} twin;

static amp_tensor *tokens(int64_t B, int64_t T, int64_t V, uint64_t seed) {
    amp_tensor *t = amp_tensor_empty(AMP_I64, 2, AMP_SHAPE(B, T));
    int64_t *p = amp_tensor_data(t);
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int64_t i = 0; i < B * T; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        p[i] = (int64_t)(s % (uint64_t)V);
    }
    return t;
}

static void twin_make(twin *w, const amp_gpt_config *c, mode_t_ mode, amp_device dev) {
    memset(w, 0, sizeof *w);
    w->dev = dev;
    w->m = test_gpt_new(c, 5);
    if (mode == M_BF16_O2) assert_int_equal(amp_module_to(w->m, AMP_BF16, true), AMP_OK);
    if (dev != AMP_DEVICE_CPU && amp_module_to_device(w->m, dev) != AMP_OK) fail_msg("%s", amp_last_error());
    amp_tensor *ps[256], *half[256], *f32[256];
    int np = amp_module_parameters(w->m, ps, NULL, 256), nh = 0, nf = 0;
    assert_true(np > 0 && np <= 256);
    for (int i = 0; i < np; i++) assert_int_equal(amp_tensor_device(ps[i]), dev);
    amp_optim_opts oo = amp_adamw_opts(3e-3);
    oo.beta2 = 0.95;
    if (mode == M_BF16_O2) {
        for (int i = 0; i < np; i++) {
            if (amp_tensor_dtype(ps[i]) == AMP_F32) f32[nf++] = ps[i];
            else half[nh++] = ps[i];
        }
        oo.master_weights = true;
        w->opt[w->nopt++] = amp_optim_new(half, nh, &oo);
        oo.master_weights = false;
        if (nf) w->opt[w->nopt++] = amp_optim_new(f32, nf, &oo);
    } else {
        w->opt[w->nopt++] = amp_optim_new(ps, np, &oo);
    }
    for (int k = 0; k < w->nopt; k++)
        if (!w->opt[k]) fail_msg("amp_optim_new on %s: %s", amp_device_name(dev), amp_last_error());
    assert_int_equal(amp_gpt_apply_weight_decay(w->m, w->opt, w->nopt, 0.1, false), AMP_OK);
    amp_scaler_opts so;
    memset(&so, 0, sizeof so);
    if (mode == M_F16_O1) {
        so.init_scale = 65536.0;
        so.growth_interval = 2; /* the scale doubles every 2 clean steps until f16 gradients overflow, then backs off */
    } else {
        so.init_scale = 1.0;
        so.static_scale = true;
    }
    w->sc = amp_scaler_new(&so);
    assert_non_null(w->sc);
}

static void twin_free(twin *w) {
    amp_scaler_free(w->sc);
    for (int k = 0; k < w->nopt; k++) amp_optim_free(w->opt[k]);
    amp_module_free(w->m);
}

/* One training step as amp train runs it; the loss, the clipped norm, the
 * logits of the forward (host copy, f32) when asked. */
static void step(twin *w, mode_t_ mode, amp_tensor *xc, amp_tensor *yc, double *loss, double *norm, amp_tensor **logits_host) {
    amp_scope *s = amp_scope_begin();
    for (int k = 0; k < w->nopt; k++) assert_int_equal(amp_optim_zero_grad(w->opt[k]), AMP_OK);
    amp_tensor *x = w->dev == AMP_DEVICE_CPU ? xc : amp_tensor_to(xc, w->dev);
    amp_tensor *y = w->dev == AMP_DEVICE_CPU ? yc : amp_tensor_to(yc, w->dev);
    assert_non_null(x);
    assert_non_null(y);
    bool ac = mode == M_BF16_O1 || mode == M_F16_O1;
    if (ac) assert_int_equal(amp_autocast_enter(mode == M_F16_O1 ? AMP_F16 : AMP_BF16), AMP_OK);
    amp_tensor *lg = NULL;
    amp_tensor *l = amp_gpt_loss(w->m, x, y, logits_host ? &lg : NULL);
    if (ac) assert_int_equal(amp_autocast_exit(), AMP_OK);
    if (!l) fail_msg("%s: amp_gpt_loss on %s: %s", mode_name[mode], amp_device_name(w->dev), amp_last_error());
    assert_int_equal(amp_tensor_device(l), w->dev);
    *loss = amp_tensor_item(l);
    if (logits_host) {
        amp_tensor *h = amp_tensor_to(lg, AMP_DEVICE_CPU);
        assert_non_null(h);
        *logits_host = amp_tensor_keep(amp_to(h, AMP_F32));
    }
    amp_status st = amp_backward(mode == M_F16_O1 ? amp_scaler_scale(w->sc, l) : l);
    if (st != AMP_OK) fail_msg("%s: backward on %s: %s", mode_name[mode], amp_device_name(w->dev), amp_last_error());
    *norm = amp_scaler_clip_grad_norm(w->sc, w->opt, w->nopt, 1.0);
    if (*norm < 0) fail_msg("%s: clip on %s: %s", mode_name[mode], amp_device_name(w->dev), amp_last_error());
    bool sk;
    for (int k = 0; k < w->nopt; k++)
        if (amp_scaler_step(w->sc, w->opt[k], &sk) != AMP_OK)
            fail_msg("%s: step on %s: %s", mode_name[mode], amp_device_name(w->dev), amp_last_error());
    if (amp_scaler_update(w->sc) != AMP_OK) fail_msg("%s: update on %s: %s", mode_name[mode], amp_device_name(w->dev), amp_last_error());
    amp_scope_end(s);
}

static double rel(double a, double b) { return fabs(a - b) / fmax(fabs(b), 1e-30); }

static void run_mode(mode_t_ mode) {
    amp_gpt_config c = {2, 4, 128, 64, 256, 0.0, true};
    const int64_t B = 4, T = 64;
    const int steps = 8;
    twin cpu, gpu;
    twin_make(&cpu, &c, mode, AMP_DEVICE_CPU);
    twin_make(&gpu, &c, mode, AMP_DEVICE_CUDA);
    double tol = mode == M_F32 ? 1e-4 : 2e-2;
    uint64_t mallocs_after2 = 0;
    size_t live_after2 = 0;
    for (int s = 0; s < steps; s++) {
        amp_tensor *x = tokens(B, T, c.vocab_size, 100 + (uint64_t)s), *y = tokens(B, T, c.vocab_size, 200 + (uint64_t)s);
        double lc, lg, nc, ng;
        amp_tensor *Lc = NULL, *Lg = NULL;
        step(&cpu, mode, x, y, &lc, &nc, s == 0 ? &Lc : NULL);
        step(&gpu, mode, x, y, &lg, &ng, s == 0 ? &Lg : NULL);
        double scc = amp_scaler_get_scale(cpu.sc), scg = amp_scaler_get_scale(gpu.sc);
        printf("%s step %d: loss cpu %.6f gpu %.6f (rel %.1e)  norm cpu %.5f gpu %.5f  scale %g / %g\n", mode_name[mode], s, lc, lg,
               rel(lg, lc), nc, ng, scc, scg);
        if (s == 0) {
            const float *a = amp_tensor_data(Lc), *b = amp_tensor_data(Lg);
            int64_t n = amp_tensor_numel(Lc);
            assert_int_equal(n, amp_tensor_numel(Lg));
            double mx = 0, d = 0;
            for (int64_t i = 0; i < n; i++) {
                mx = fmax(mx, fabs(a[i]));
                d = fmax(d, fabs((double)a[i] - b[i]));
            }
            printf("%s: first logits max |cpu - gpu| %.2e of max |logit| %.3f\n", mode_name[mode], d, mx);
            if (!(d <= (mode == M_F32 ? 1e-5 : 2e-2) * mx)) fail_msg("%s: logits differ: %.3e of %.3e", mode_name[mode], d, mx);
            test_free_tensors(Lc, Lg);
        }
        if (!(rel(lg, lc) <= tol)) fail_msg("%s step %d: loss cpu %.7f gpu %.7f", mode_name[mode], s, lc, lg);
        if (!(rel(ng, nc) <= tol * 5)) fail_msg("%s step %d: grad norm cpu %.7f gpu %.7f", mode_name[mode], s, nc, ng);
        if (scc != scg) fail_msg("%s step %d: scale cpu %g gpu %g", mode_name[mode], s, scc, scg);
        amp_mem_stats ms = amp_memory_stats_device(AMP_DEVICE_CUDA);
        if (s == 1) {
            mallocs_after2 = ms.device_mallocs;
            live_after2 = ms.live_total;
        } else if (s > 1) {
            if (ms.device_mallocs != mallocs_after2)
                fail_msg("%s step %d: %llu cudaMalloc calls after step 2, %llu now (the cache should serve a steady state)",
                         mode_name[mode], s, (unsigned long long)mallocs_after2, (unsigned long long)ms.device_mallocs);
            if (ms.live_total != live_after2)
                fail_msg("%s step %d: %zu live GPU bytes after step 2, %zu now (a leak per step?)", mode_name[mode], s, live_after2,
                         ms.live_total);
        }
        test_free_tensors(x, y);
    }
    /* the weights after the run, in units of u = lr x steps */
    amp_tensor *pc[256], *pg[256];
    const char *names[256];
    int np = amp_module_parameters(cpu.m, pc, names, 256);
    assert_int_equal(amp_module_parameters(gpu.m, pg, NULL, 256), np);
    const double u = 3e-3 * steps;
    double worst = 0;
    int wi = 0;
    int64_t total = 0, loose = 0;
    for (int i = 0; i < np; i++) {
        amp_tensor *h = amp_tensor_to(pg[i], AMP_DEVICE_CPU), *hf = amp_to(h, AMP_F32), *cf = amp_to(pc[i], AMP_F32);
        const float *a = amp_tensor_data(cf), *b = amp_tensor_data(hf);
        for (int64_t k = 0; k < amp_tensor_numel(cf); k++) {
            double d = fabs((double)a[k] - b[k]);
            if (d > worst) worst = d, wi = i;
            loose += d > u / 20;
            total++;
        }
        amp_tensor_free(h), amp_tensor_free(hf), amp_tensor_free(cf);
    }
    double frac = (double)loose / (double)total;
    printf("%s: after %d steps the largest parameter difference is %.2f u (%s); %.3f%% of %lld elements differ by more than "
           "u/20 (u = lr x steps = %g)\n",
           mode_name[mode], steps, worst / u, names[wi], 100 * frac, (long long)total, u);
    if (!(worst <= 2 * u)) fail_msg("%s: a parameter differs by %.3f u after %d steps (%s)", mode_name[mode], worst / u, steps, names[wi]);
    if (!(frac <= (mode == M_F32 ? 0.01 : 0.05)))
        fail_msg("%s: %.2f%% of the parameters differ by more than u/20 after %d steps", mode_name[mode], 100 * frac, steps);
    twin_free(&cpu);
    twin_free(&gpu);
}

static void t_fp32(void **state) { (void)state; run_mode(M_F32); }
static void t_bf16_o1(void **state) { (void)state; run_mode(M_BF16_O1); }
static void t_fp16_o1(void **state) { (void)state; run_mode(M_F16_O1); }
static void t_bf16_o2(void **state) { (void)state; run_mode(M_BF16_O2); }

/* One forward + backward without an optimizer: the loss and every
 * parameter's gradient on the GPU against the CPU twin (fp32: 1e-4 of each
 * gradient's largest magnitude; bf16 autocast: 5e-2). */
static void fwd_bwd_case(bool bf16) {
    amp_gpt_config c = {2, 4, 128, 64, 256, 0.0, true};
    amp_module *m[2];
    amp_tensor *ps[2][256];
    const char *names[256];
    double loss[2];
    amp_tensor *xc = tokens(4, 64, c.vocab_size, 7), *yc = tokens(4, 64, c.vocab_size, 8);
    int np = 0;
    for (int d = 0; d < 2; d++) {
        m[d] = test_gpt_new(&c, 5);
        if (d && amp_module_to_device(m[d], AMP_DEVICE_CUDA) != AMP_OK) fail_msg("%s", amp_last_error());
        np = amp_module_parameters(m[d], ps[d], names, 256);
        amp_scope *s = amp_scope_begin();
        amp_tensor *x = d ? amp_tensor_to(xc, AMP_DEVICE_CUDA) : xc, *y = d ? amp_tensor_to(yc, AMP_DEVICE_CUDA) : yc;
        if (bf16) assert_int_equal(amp_autocast_enter(AMP_BF16), AMP_OK);
        amp_tensor *l = amp_gpt_loss(m[d], x, y, NULL);
        if (bf16) assert_int_equal(amp_autocast_exit(), AMP_OK);
        if (!l) fail_msg("forward on %s: %s", d ? "cuda" : "cpu", amp_last_error());
        loss[d] = amp_tensor_item(l);
        if (amp_backward(l) != AMP_OK) fail_msg("backward on %s: %s", d ? "cuda" : "cpu", amp_last_error());
        amp_scope_end(s);
    }
    printf("%s forward: loss cpu %.7f gpu %.7f\n", bf16 ? "bf16" : "fp32", loss[0], loss[1]);
    double tol = bf16 ? 5e-2 : 1e-4;
    if (!(rel(loss[1], loss[0]) <= (bf16 ? 1e-2 : 1e-5))) fail_msg("loss cpu %.7f gpu %.7f", loss[0], loss[1]);
    int bad = 0;
    for (int i = 0; i < np; i++) {
        amp_tensor *gc = amp_tensor_grad(ps[0][i]), *gg = amp_tensor_grad(ps[1][i]);
        if (!gc || !gg) fail_msg("%s: no gradient (cpu %p, gpu %p)", names[i], (void *)gc, (void *)gg);
        amp_tensor *h = amp_tensor_to(gg, AMP_DEVICE_CPU), *hf = amp_to(h, AMP_F32), *cf = amp_to(gc, AMP_F32);
        const float *a = amp_tensor_data(cf), *b = amp_tensor_data(hf);
        double mx = 0, dm = 0;
        for (int64_t k = 0; k < amp_tensor_numel(cf); k++) mx = fmax(mx, fabs(a[k])), dm = fmax(dm, fabs((double)a[k] - b[k]));
        if (!(dm <= tol * mx)) {
            printf("  %s: gradient differs: max |cpu - gpu| %.3e of max %.3e\n", names[i], dm, mx);
            bad++;
        }
        amp_tensor_free(h), amp_tensor_free(hf), amp_tensor_free(cf);
    }
    if (bad) fail_msg("%d of %d gradients differ", bad, np);
    amp_module_free(m[0]);
    amp_module_free(m[1]);
    test_free_tensors(xc, yc);
}
static void t_fwd_bwd_fp32(void **state) { (void)state; fwd_bwd_case(false); }
static void t_fwd_bwd_bf16(void **state) { (void)state; fwd_bwd_case(true); }

/* A module moved to the GPU and back: the same values, tied weights stay tied. */
static void t_module_roundtrip(void **state) {
    (void)state;
    amp_gpt_config c = {1, 2, 32, 16, 64, 0.0, true};
    amp_module *m = test_gpt_new(&c, 1);
    amp_tensor *w0 = amp_tensor_to(amp_module_get_parameter(m, "transformer.wte.weight"), AMP_DEVICE_CPU);
    amp_tensor *copy = amp_tensor_empty(AMP_F32, 2, AMP_SHAPE(64, 32));
    assert_int_equal(amp_tensor_copy_(copy, w0), AMP_OK);
    assert_int_equal(amp_module_to_device(m, AMP_DEVICE_CUDA), AMP_OK);
    amp_tensor *wte = amp_module_get_parameter(m, "transformer.wte.weight"), *head = amp_module_get_parameter(m, "lm_head.weight");
    assert_int_equal(amp_tensor_device(wte), AMP_DEVICE_CUDA);
    if (head) assert_ptr_equal(amp_tensor_data(wte), amp_tensor_data(head)); /* tied: one tensor, moved once */
    assert_int_equal(amp_module_to_device(m, AMP_DEVICE_CPU), AMP_OK);
    wte = amp_module_get_parameter(m, "transformer.wte.weight");
    assert_int_equal(amp_tensor_device(wte), AMP_DEVICE_CPU);
    assert_memory_equal(amp_tensor_data(wte), amp_tensor_data(copy), 64 * 32 * sizeof(float));
    test_free_tensors(copy, w0);
    amp_module_free(m);
}

/* A model on the GPU saved with amp_model_save gives the same file as its
 * CPU twin (the writer copies device tensors to the host), and loading that
 * file into a model on the GPU gives back the same values. */
static void t_save_load_on_device(void **state) {
    (void)state;
    amp_gpt_config c = {1, 2, 32, 16, 64, 0.0, true};
    amp_generator g1 = amp_generator_make(3), g2 = amp_generator_make(3);
    amp_module *mc = amp_gpt_new(&c, &g1), *mg = amp_gpt_new(&c, &g2);
    assert_int_equal(amp_module_to_device(mg, AMP_DEVICE_CUDA), AMP_OK);
    char dir[] = "/tmp/amp_cuda_gpt_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char pc[128], pg[128];
    snprintf(pc, sizeof pc, "%s/cpu.safetensors", dir);
    snprintf(pg, sizeof pg, "%s/gpu.safetensors", dir);
    assert_int_equal(amp_model_save(mc, pc, NULL, 0), AMP_OK);
    if (amp_model_save(mg, pg, NULL, 0) != AMP_OK) fail_msg("%s", amp_last_error());
    FILE *a = fopen(pc, "rb"), *b = fopen(pg, "rb");
    assert_non_null(a);
    assert_non_null(b);
    int ca, cb;
    long at = 0;
    do {
        ca = fgetc(a), cb = fgetc(b), at++;
        if (ca != cb) fail_msg("the files differ at byte %ld", at);
    } while (ca != EOF);
    fclose(a), fclose(b);
    /* load the CPU file into a third model on the GPU */
    amp_generator g3 = amp_generator_make(99);
    amp_module *m3 = amp_gpt_new(&c, &g3);
    assert_int_equal(amp_module_to_device(m3, AMP_DEVICE_CUDA), AMP_OK);
    if (amp_model_load(m3, pc) != AMP_OK) fail_msg("%s", amp_last_error());
    amp_tensor *w = amp_module_get_parameter(m3, "transformer.h.0.mlp.c_fc.weight");
    assert_int_equal(amp_tensor_device(w), AMP_DEVICE_CUDA);
    amp_tensor *h = amp_tensor_to(w, AMP_DEVICE_CPU);
    amp_tensor *ref = amp_module_get_parameter(mc, "transformer.h.0.mlp.c_fc.weight");
    assert_memory_equal(amp_tensor_data(h), amp_tensor_data(ref), amp_tensor_nbytes(ref));
    amp_tensor_free(h);
    remove(pc), remove(pg), rmdir(dir);
    amp_module_free(mc), amp_module_free(mg), amp_module_free(m3);
}

int main(void) {
    amp_test_require_cuda();
    return AMP_TEST_RUN(t_module_roundtrip, t_save_load_on_device, t_fwd_bwd_fp32, t_fwd_bwd_bf16, t_fp32, t_bf16_o1,
                        t_fp16_o1, t_bf16_o2);
}
