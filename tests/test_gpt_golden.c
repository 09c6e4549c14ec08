/* amp's GPT model (src/models/gpt.c, amp_gpt_new) against PyTorch's
 * (tools/golden/gen_gpt.py: nanoGPT's model with tanh GELU; data and layout
 * in tests/data/gpt/README.md), as llm.c's test_gpt2 checks its model, but
 * tighter:
 *
 *  - the PyTorch-written state_dict loads into the model (amp_model_load,
 *    strict: nanoGPT's names, lm_head.weight tied and absent) and Hugging
 *    Face's GPT2LMHeadModel file (amp_gpt_load: names without
 *    "transformer.", Conv1D weights transposed) gives the same parameters
 *    bit for bit;
 *  - fp32: logits and loss within 1e-5 relative, every parameter's gradient
 *    within 1e-4 of the largest gradient of its tensor (the bar;
 *    measured 3e-7 / 1.4e-6); the model's logits equal the same network
 *    composed of amp's ops by hand (gpt_forward below) bit for bit;
 *  - bf16 autocast (PyTorch's CPU lists, as torch.autocast('cpu')): loss,
 *    logits and gradients against torch's own bf16 run, tolerances below
 *    (measured on this data, then given ~3x room);
 *  - 10 AdamW steps on one batch through the model's weight-decay groups
 *    (amp_gpt_apply_weight_decay), torch's clip_grad_norm_ 1.0 over all
 *    parameters (amp_clip_grad_norm_params) and the golden run's warmup +
 *    cosine learning rates: losses within 1e-5, gradient norms within 1e-4
 *    (measured 1e-7), both groupings PyTorch ran: the (no decay on
 *    biases, norms and embeddings: amp's default) and today's nanoGPT's
 *    (embeddings decayed too); the small model's final weights within 1e-3
 *    of each tensor's largest (why: below);
 *  - measured bf16 autocast against torch's bf16 run: loss 6e-6 relative,
 *    logits 4e-3 of the largest, gradients 9e-3 of each tensor's largest
 *    (bf16 has 8 bits: one rounding is 4e-3 relative).
 *
 * AMP_TEST_PER_CPU_PATH: CTest also runs this file once per CPU path. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "golden.h"
#include "op_check.h"

typedef struct {
    amp_module *m;
    int n_layer, n_head;
    int64_t C, V, block;
    int np;
    const char *names[64];
    amp_tensor *p[64];
} gpt;

static amp_tensor *P(gpt *g, const char *name) {
    for (int i = 0; i < g->np; i++)
        if (!strcmp(g->names[i], name)) return g->p[i];
    fail_msg("no parameter %s", name);
    return NULL;
}

/* The model with the golden configuration, its weights from the PyTorch file. */
static void gpt_load(gpt *g, const char *file, int n_layer, int n_head) {
    char path[1024];
    snprintf(path, sizeof path, "%s/gpt/%s", AMP_TEST_DATA_DIR, file);
    amp_safetensors *f = amp_safetensors_read(path);
    if (!f) fail_msg("%s", amp_last_error());
    memset(g, 0, sizeof *g);
    g->n_layer = n_layer;
    g->n_head = n_head;
    amp_safetensors_info wte, wpe;
    assert_int_equal(amp_safetensors_info_at(f, amp_safetensors_find(f, "transformer.wte.weight"), &wte), AMP_OK);
    assert_int_equal(amp_safetensors_info_at(f, amp_safetensors_find(f, "transformer.wpe.weight"), &wpe), AMP_OK);
    g->V = wte.shape[0];
    g->C = wte.shape[1];
    g->block = wpe.shape[0];
    amp_gpt_config c = {n_layer, n_head, g->C, g->block, g->V, 0.0, true};
    g->m = test_gpt_new(&c, 7);
    /* the state_dict names are nanoGPT's, in named_parameters() order (the file's data order) */
    g->np = amp_module_parameters(g->m, g->p, g->names, 64);
    assert_int_equal(g->np, amp_safetensors_count(f));
    for (int i = 0; i < g->np; i++) {
        amp_safetensors_info inf;
        assert_int_equal(amp_safetensors_info_at(f, i, &inf), AMP_OK);
        assert_string_equal(g->names[i], inf.name);
    }
    /* lm_head.weight is the same tensor as transformer.wte.weight */
    assert_ptr_equal(amp_module_get_parameter(g->m, "lm_head.weight"), amp_module_get_parameter(g->m, "transformer.wte.weight"));
    if (amp_model_load(g->m, path) != AMP_OK) fail_msg("amp_model_load: %s", amp_last_error());
    for (int i = 0; i < g->np; i++) { /* loaded exactly */
        amp_tensor *w = amp_safetensors_get(f, g->names[i]);
        assert_memory_equal(amp_tensor_data(w), amp_tensor_data(g->p[i]), amp_tensor_nbytes(w));
        amp_tensor_free(w);
    }
    amp_safetensors_free(f);
}

static void gpt_free(gpt *g) { amp_module_free(g->m); }

/* The same network composed of ops by hand (the reference the model must
 * equal bit for bit): logits [B, T, V] and the mean cross-entropy;
 * everything made here belongs to the caller's scope. */
static amp_tensor *gpt_forward(gpt *g, amp_tensor *x, amp_tensor *y, amp_tensor **logits) {
    const int64_t B = amp_tensor_shape(x)[0], T = amp_tensor_shape(x)[1], C = g->C, nh = g->n_head;
    char n[128];
    amp_tensor *pos = amp_tensor_arange(0, (double)T, 1, AMP_I64);
    amp_tensor *h = amp_add(amp_embedding(P(g, "transformer.wte.weight"), x), amp_embedding(P(g, "transformer.wpe.weight"), pos));
    for (int l = 0; l < g->n_layer; l++) {
#define W(s) (snprintf(n, sizeof n, "transformer.h.%d.%s", l, s), P(g, n))
        amp_tensor *a = amp_layer_norm(h, 1, W("ln_1.weight"), W("ln_1.bias"), 1e-5);
        amp_tensor *qkv = amp_linear(a, W("attn.c_attn.weight"), W("attn.c_attn.bias")); /* [B, T, 3C] */
        amp_tensor *hd[3];
        for (int i = 0; i < 3; i++)
            hd[i] = amp_transpose(amp_reshape(amp_slice(qkv, 2, i * C, (i + 1) * C, 1), 4, AMP_SHAPE(B, T, nh, C / nh)), 1, 2);
        amp_tensor *att = amp_scaled_dot_product_attention(hd[0], hd[1], hd[2], true, 0.0, 0.0); /* [B, nh, T, hs] */
        amp_tensor *yb = amp_reshape(amp_transpose(att, 1, 2), 3, AMP_SHAPE(B, T, C));
        h = amp_add(h, amp_linear(yb, W("attn.c_proj.weight"), W("attn.c_proj.bias")));
        amp_tensor *m = amp_layer_norm(h, 1, W("ln_2.weight"), W("ln_2.bias"), 1e-5);
        amp_tensor *f = amp_gelu(amp_linear(m, W("mlp.c_fc.weight"), W("mlp.c_fc.bias")), AMP_GELU_TANH);
        h = amp_add(h, amp_linear(f, W("mlp.c_proj.weight"), W("mlp.c_proj.bias")));
#undef W
    }
    h = amp_layer_norm(h, 1, P(g, "transformer.ln_f.weight"), P(g, "transformer.ln_f.bias"), 1e-5);
    *logits = amp_linear(h, P(g, "transformer.wte.weight"), NULL); /* tied LM head */
    amp_loss_opts o = AMP_LOSS_DEFAULTS;
    o.ignore_index = -1;
    amp_tensor *loss = amp_cross_entropy(amp_reshape(*logits, 2, AMP_SHAPE(B * T, g->V)), amp_reshape(y, 1, AMP_SHAPE(B * T)), &o);
    if (!loss) fail_msg("gpt forward: %s", amp_last_error());
    amp_tensor_free(pos);
    return loss;
}

/* largest |got - want| relative to max |want| */
static double rel_to_max(const amp_tensor *got, const amp_tensor *want) {
    int64_t n = amp_tensor_numel(want);
    assert_int_equal(amp_tensor_numel(got), n);
    double *a = tc_values(got), *b = tc_values(want), m = 0, d = 0;
    for (int64_t i = 0; i < n; i++) {
        m = fmax(m, fabs(b[i]));
        d = fmax(d, fabs(a[i] - b[i]));
    }
    test_free_all(a, b);
    return m > 0 ? d / m : d;
}

static void check_logits(golden_file *gf, const char *prefix, const amp_tensor *logits, bool big, double tol,
                         const char *what) {
    char r[64];
    if (!big) {
        snprintf(r, sizeof r, "%slogits", prefix);
        amp_tensor *w = golden_tensor(gf, r);
        double e = rel_to_max(logits, w);
        printf("%s: logits within %.2e of max|logit|\n", what, e);
        if (!(e <= tol)) fail_msg("%s: logits differ by %.3g of the largest (allowed %.3g)", what, e, tol);
        amp_tensor_free(w);
        return;
    }
    /* vocab 50257: logsumexp over the vocabulary and 256 sampled columns */
    amp_tensor *lse = golden_tensorf(gf, "%slogits_lse", prefix);
    amp_tensor *idx = golden_tensorf(gf, "%slogits_idx", prefix);
    amp_tensor *at = golden_tensorf(gf, "%slogits_at", prefix);
    double *lv = tc_values(logits), *wl = tc_values(lse), *wa = tc_values(at), *iv = tc_values(idx);
    int64_t rows = amp_tensor_numel(lse), V = amp_tensor_numel(logits) / rows, k = amp_tensor_numel(idx);
    double worst = 0, scale = 0, dmax = 0;
    for (int64_t r0 = 0; r0 < rows; r0++) {
        double m = -INFINITY, s = 0;
        for (int64_t v = 0; v < V; v++) m = fmax(m, lv[r0 * V + v]);
        for (int64_t v = 0; v < V; v++) s += exp(lv[r0 * V + v] - m);
        worst = fmax(worst, fabs(m + log(s) - wl[r0]) / fabs(wl[r0]));
        for (int64_t j = 0; j < k; j++) {
            scale = fmax(scale, fabs(wa[r0 * k + j]));
            dmax = fmax(dmax, fabs(lv[r0 * V + (int64_t)iv[j]] - wa[r0 * k + j]));
        }
    }
    worst = fmax(worst, dmax / scale);
    printf("%s: logsumexp within relative / sampled logits within max-relative %.2e\n", what, worst);
    if (!(worst <= tol * (prefix[0] ? 1.0 : 10.0))) fail_msg("%s: logits differ by %.3g relative", what, worst);
    test_free_all(lv, wl, wa, iv);
    test_free_tensors(lse, idx, at);
}

static void check_grads(golden_file *gf, gpt *g, const char *prefix, double tol, const char *what) {
    double worst = 0;
    const char *wn = "";
    for (int i = 0; i < g->np; i++) {
        char r[160];
        snprintf(r, sizeof r, "%sgrad.%s", prefix, g->names[i]);
        amp_tensor *w = golden_tensor(gf, r), *got = amp_tensor_grad(g->p[i]);
        assert_non_null(got);
        double e = rel_to_max(got, w);
        if (e > worst) {
            worst = e;
            wn = g->names[i];
        }
        if (!(e <= tol)) fail_msg("%s: gradient of %s differs by %.3g of its largest (allowed %.3g)", what, g->names[i], e, tol);
        amp_tensor_free(w);
    }
    printf("%s: every gradient within %.2e of its tensor's largest (worst %s)\n", what, worst, wn);
}

static void clear_grads(gpt *g) {
    for (int i = 0; i < g->np; i++) amp_tensor_set_grad(g->p[i], NULL);
}

/* Bit-for-bit equality of two tensors' values. */
static void assert_same(const amp_tensor *a, const amp_tensor *b, const char *what) {
    assert_int_equal(amp_tensor_numel(a), amp_tensor_numel(b));
    double *x = tc_values(a), *y = tc_values(b);
    for (int64_t i = 0; i < amp_tensor_numel(a); i++)
        if (x[i] != y[i]) fail_msg("%s: element %lld differs: %.9g vs %.9g", what, (long long)i, x[i], y[i]);
    test_free_all(x, y);
}

/* 10 AdamW steps as the golden run: grouping "nanogpt" (embeddings decayed)
 * or "noemb" (the groups, amp's default). Restores the weights. */
static void adamw_steps(gpt *g, golden_file *gf, amp_tensor *x, amp_tensor *y, const char *grouping, bool big) {
    amp_tensor *saved[64];
    for (int i = 0; i < g->np; i++) saved[i] = amp_clone(g->p[i]);
    amp_optim_opts oo = amp_adamw_opts(1e-3);
    oo.beta2 = 0.95;
    amp_optim *opt = amp_optim_new(g->p, g->np, &oo);
    assert_non_null(opt);
    bool emb = !strcmp(grouping, "nanogpt");
    assert_int_equal(amp_gpt_apply_weight_decay(g->m, &opt, 1, 0.1, emb), AMP_OK);
    int nd = 0;
    for (int i = 0; i < g->np; i++) {
        double wd = amp_optim_param_weight_decay(opt, i);
        bool want = amp_tensor_ndim(g->p[i]) >= 2 && (emb || (!strstr(g->names[i], ".wte.") && !strstr(g->names[i], ".wpe.")));
        if (wd != (want ? 0.1 : 0.0)) fail_msg("%s: %s has weight decay %g", grouping, g->names[i], wd);
        nd += wd > 0;
    }
    assert_int_equal(nd, 4 * g->n_layer + (emb ? 2 : 0));
    char r[160];
    amp_tensor *wls = golden_tensorf(gf, "adamw.%s.loss", grouping);
    amp_tensor *wlr = golden_tensorf(gf, "adamw.%s.lr", grouping);
    amp_tensor *wgn = golden_tensorf(gf, "adamw.%s.grad_norm", grouping);
    double *wlv = tc_values(wls), *wlrv = tc_values(wlr), *wgv = tc_values(wgn), worst = 0;
    for (int it = 0; it < 10; it++) {
        amp_scope *s = amp_scope_begin();
        assert_int_equal(amp_optim_set_lr(opt, wlrv[it]), AMP_OK);
        amp_tensor *loss = amp_gpt_loss(g->m, x, y, NULL);
        assert_non_null(loss);
        double lv = amp_tensor_item(loss);
        assert_int_equal(amp_backward(loss), AMP_OK);
        double norm = amp_clip_grad_norm_params(g->p, g->np, 1.0); /* torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0) */
        assert_int_equal(amp_optim_step(opt), AMP_OK);
        amp_optim_zero_grad(opt);
        amp_scope_end(s);
        worst = fmax(worst, fabs(lv - wlv[it]) / wlv[it]);
        if (!(fabs(lv - wlv[it]) <= 1e-5 * wlv[it]) || !(fabs(norm - wgv[it]) <= 1e-4 * wgv[it]))
            fail_msg("%s AdamW step %d: loss %.7f (torch %.7f), grad norm %.7g (torch %.7g)", grouping, it, lv, wlv[it], norm, wgv[it]);
    }
    printf("10 AdamW steps (%s groups): losses within %.2e relative of torch's (%.4f -> %.4f)\n", grouping, worst, wlv[0], wlv[9]);
    snprintf(r, sizeof r, "adamw.%s.final.%s", grouping, g->names[0]);
    if (!big && golden_has(gf, r)) {
        double wf = 0;
        for (int i = 0; i < g->np; i++) {
            snprintf(r, sizeof r, "adamw.%s.final.%s", grouping, g->names[i]);
            amp_tensor *w = golden_tensor(gf, r);
            wf = fmax(wf, rel_to_max(g->p[i], w));
            amp_tensor_free(w);
        }
        printf("weights after 10 steps within %.2e of torch's (of each tensor's largest)\n", wf);
        /* 1e-3, not 1e-5: Adam divides each gradient by its own running
         * magnitude, so a gradient that is zero in exact arithmetic (the key
         * part of c_attn.bias: softmax ignores a score shift common to all
         * keys) takes full-size steps in the direction of its rounding noise,
         * in torch and in amp alike (measured: 5e-4 there, 1.3e-4 in wte,
         * 1e-5 to 3e-5 elsewhere) */
        assert_true(wf <= 1e-3);
    }
    test_free_all(wlv, wlrv, wgv);
    test_free_tensors(wls, wlr, wgn);
    amp_optim_free(opt);
    for (int i = 0; i < g->np; i++) {
        assert_int_equal(amp_tensor_copy_(g->p[i], saved[i]), AMP_OK);
        amp_tensor_free(saved[i]);
    }
}

static void run_model(const char *stem, int n_layer, int n_head, bool big) {
    char file[128];
    snprintf(file, sizeof file, "%s.safetensors", stem);
    gpt g;
    gpt_load(&g, file, n_layer, n_head);
    snprintf(file, sizeof file, "gpt/%s_golden.bin", stem);
    golden_file *gf = golden_open(file);
    amp_tensor *x = golden_tensor(gf, "x"), *y = golden_tensor(gf, "y");
    /* fp32 */
    amp_scope *s = amp_scope_begin();
    amp_tensor *logits, *loss = amp_gpt_loss(g.m, x, y, &logits);
    if (!loss) fail_msg("%s", amp_last_error());
    golden_assert(gf, "loss", loss, 1e-5, 0);
    check_logits(gf, "", logits, big, 1e-5, stem);
    amp_tensor *ref_logits, *ref_loss;
    amp_no_grad_begin();
    ref_loss = gpt_forward(&g, x, y, &ref_logits);
    amp_no_grad_end();
    assert_same(logits, ref_logits, "model logits vs the ops composed by hand");
    assert_same(loss, ref_loss, "model loss vs the ops composed by hand");
    assert_int_equal(amp_backward(loss), AMP_OK);
    amp_scope_end(s);
    check_grads(gf, &g, "", 1e-4, stem);
    clear_grads(&g);
    /* bf16 autocast with PyTorch's CPU lists */
    s = amp_scope_begin();
    amp_autocast_opts ao = AMP_AUTOCAST_OPTS(AMP_BF16);
    ao.table = AMP_AUTOCAST_TABLE_CPU;
    assert_int_equal(amp_autocast_enter_opts(&ao), AMP_OK);
    loss = amp_gpt_loss(g.m, x, y, &logits);
    assert_int_equal(amp_autocast_exit(), AMP_OK);
    assert_non_null(loss);
    assert_int_equal(amp_tensor_dtype(logits), AMP_BF16);
    amp_tensor *wl = golden_tensor(gf, "bf16.loss");
    double le = fabs(amp_tensor_item(loss) - amp_tensor_item(wl)) / fabs(amp_tensor_item(wl));
    printf("%s bf16: loss %.6f, torch %.6f (%.2e relative)\n", stem, amp_tensor_item(loss), amp_tensor_item(wl), le);
    assert_true(le <= 2e-3);
    amp_tensor_free(wl);
    check_logits(gf, "bf16.", logits, big, 3e-2, "bf16 autocast");
    assert_int_equal(amp_backward(loss), AMP_OK);
    amp_scope_end(s);
    check_grads(gf, &g, "bf16.", 0.1, "bf16 autocast");
    clear_grads(&g);
    /* 10 AdamW steps, both groupings */
    adamw_steps(&g, gf, x, y, "noemb", big);
    adamw_steps(&g, gf, x, y, "nanogpt", big);
    test_free_tensors(x, y);
    golden_close(gf);
    gpt_free(&g);
}

static void t_small(void **state) {
    (void)state;
    run_model("gpt_small", 2, 4, false);
}

static void t_vocab50257(void **state) {
    (void)state;
    run_model("gpt_v50257", 1, 2, true);
}

/* Hugging Face's layout of the same state_dict, written by the safetensors
 * library (names without "transformer.", Conv1D weights [in, out]): the
 * file holds the same values, and amp_gpt_load reads it into the same
 * parameters as the nanoGPT file, bit for bit. */
static void t_hf_file(void **state) {
    (void)state;
    amp_safetensors *a = amp_safetensors_read(AMP_TEST_DATA_DIR "/gpt/gpt_small.safetensors");
    amp_safetensors *h = amp_safetensors_read(AMP_TEST_DATA_DIR "/gpt/gpt_small_hf.safetensors");
    assert_non_null(a);
    if (!h) fail_msg("%s", amp_last_error());
    assert_int_equal(amp_safetensors_count(h), amp_safetensors_count(a));
    assert_string_equal(amp_safetensors_meta(h, "format"), "pt");
    amp_gpt_config c = {2, 4, 64, 32, 256, 0.0, true};
    amp_module *m = amp_gpt_new(&c, NULL);
    assert_non_null(m);
    if (amp_gpt_load(m, AMP_TEST_DATA_DIR "/gpt/gpt_small_hf.safetensors") != AMP_OK) fail_msg("%s", amp_last_error());
    for (int i = 0; i < amp_safetensors_count(a); i++) {
        amp_safetensors_info inf;
        amp_safetensors_info_at(a, i, &inf);
        const char *hn = strncmp(inf.name, "transformer.", 12) ? inf.name : inf.name + 12;
        amp_scope *sc = amp_scope_begin(); /* the transposed view */
        amp_tensor *ta = amp_safetensors_get(a, inf.name), *th = amp_safetensors_get(h, hn);
        if (!th) fail_msg("%s missing from the Hugging Face file", hn);
        bool conv1d = strstr(hn, "c_attn.weight") || strstr(hn, "c_proj.weight") || strstr(hn, "c_fc.weight");
        amp_tensor *tt = conv1d ? amp_contiguous(amp_transpose(th, 0, 1)) : amp_clone(th);
        assert_int_equal(amp_tensor_numel(tt), amp_tensor_numel(ta));
        assert_memory_equal(amp_tensor_shape(tt), amp_tensor_shape(ta), sizeof(int64_t) * (size_t)amp_tensor_ndim(ta));
        assert_memory_equal(amp_tensor_data(tt), amp_tensor_data(ta), amp_tensor_nbytes(ta));
        amp_tensor *p = amp_module_get_parameter(m, inf.name); /* what amp_gpt_load made of the HF file */
        assert_non_null(p);
        assert_memory_equal(amp_tensor_data(p), amp_tensor_data(ta), amp_tensor_nbytes(ta));
        test_free_tensors(ta, th, tt);
        amp_scope_end(sc);
    }
    /* the nanoGPT file through amp_gpt_load too; a wrong configuration is refused by name */
    assert_int_equal(amp_gpt_load(m, AMP_TEST_DATA_DIR "/gpt/gpt_small.safetensors"), AMP_OK);
    amp_module_free(m);
    c.n_layer = 1;
    m = amp_gpt_new(&c, NULL);
    assert_int_not_equal(amp_gpt_load(m, AMP_TEST_DATA_DIR "/gpt/gpt_small_hf.safetensors"), AMP_OK);
    assert_non_null(strstr(amp_last_error(), "h.1."));
    amp_module_free(m);
    c.n_layer = 2;
    c.n_embd = 32;
    m = amp_gpt_new(&c, NULL);
    assert_int_not_equal(amp_gpt_load(m, AMP_TEST_DATA_DIR "/gpt/gpt_small.safetensors"), AMP_OK);
    assert_non_null(strstr(amp_last_error(), "shape"));
    amp_module_free(m);
    amp_safetensors_free(a);
    amp_safetensors_free(h);
}

AMP_TEST_MAIN(t_small, t_vocab50257, t_hf_file)
