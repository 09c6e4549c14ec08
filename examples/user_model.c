/* A model of your own (amp/nn.h): a residual MLP block written as a module
 * class, stacked in a ModuleList inside a model class, trained with bf16
 * autocast on in-memory data, then saved and loaded into a fresh copy. Any
 * module written this way gets what the built-in layers get: state_dict
 * names, save/load and checkpoints, amp_module_to, keep-f32, train/eval. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp, rmdir */
#include <amp/amp.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* ---- Block: x + fc2(gelu(fc1(norm(x)))) ------------------------------------------------------- */
static amp_tensor *block_forward(amp_module *m, amp_tensor *x) {
    amp_tensor *h = amp_module_forward(amp_module_get_child(m, "norm"), x);
    h = amp_gelu(amp_module_forward(amp_module_get_child(m, "fc1"), h), AMP_GELU_TANH);
    return amp_add(x, amp_module_forward(amp_module_get_child(m, "fc2"), h));
}
static const amp_module_class block_class = {.name = "Block", .forward = block_forward};

static amp_module *block_new(int64_t d, amp_generator *g) {
    amp_module *m = amp_module_new(&block_class, 0);
    if (m && amp_module_register_module(m, "norm", amp_nn_layernorm(d, 1e-5)) &&
        amp_module_register_module(m, "fc1", amp_nn_linear(d, 4 * d, true, g)) &&
        amp_module_register_module(m, "fc2", amp_nn_linear(4 * d, d, true, g)))
        return m;
    amp_module_free(m);
    return NULL;
}

/* ---- Net: embed, blocks, head; its configuration in the module's data ---------------------------- */
typedef struct {
    int64_t in, d, out, depth;
} net_cfg;

static amp_tensor *net_forward(amp_module *m, amp_tensor *x) {
    const net_cfg *c = amp_module_data(m);
    amp_tensor *h = amp_module_forward(amp_module_get_child(m, "embed"), x);
    amp_module *blocks = amp_module_get_child(m, "blocks");
    for (int i = 0; i < c->depth; i++) h = amp_module_forward(amp_module_child_at(blocks, i, NULL), h);
    return amp_module_forward(amp_module_get_child(m, "head"), h);
}
static void net_repr(const amp_module *m, char *buf, size_t n) {
    const net_cfg *c = amp_module_data(m);
    snprintf(buf, n, "in=%lld, d=%lld, depth=%lld", (long long)c->in, (long long)c->d, (long long)c->depth);
}
static const amp_module_class net_class = {.name = "Net", .forward = net_forward, .extra_repr = net_repr};

static amp_module *net_new(const net_cfg *c, amp_generator *g) {
    amp_module *m = amp_module_new(&net_class, sizeof *c);
    if (!m) return NULL;
    *(net_cfg *)amp_module_data(m) = *c;
    amp_module *blocks = amp_nn_module_list();
    bool ok = amp_module_register_module(m, "embed", amp_nn_linear(c->in, c->d, true, g)) &&
              amp_module_register_module(m, "blocks", blocks);
    for (int i = 0; ok && i < c->depth; i++) ok = amp_module_append(blocks, block_new(c->d, g)) == AMP_OK;
    if (ok && amp_module_register_module(m, "head", amp_nn_linear(c->d, c->out, true, g))) return m;
    amp_module_free(m);
    return NULL;
}

int main(void) {
    amp_generator g = amp_generator_make(7);
    amp_scope *data = amp_scope_begin();
    amp_tensor *w = amp_tensor_randn(AMP_F32, 2, AMP_SHAPE(3, 12), &g);
    amp_tensor *x = amp_tensor_keep(amp_tensor_randn(AMP_F32, 2, AMP_SHAPE(512, 12), &g));
    amp_tensor *y = amp_tensor_keep(amp_sigmoid(amp_matmul(amp_mul(x, x), amp_transpose(w, 0, 1)))); /* nonlinear target */
    amp_scope_end(data);

    net_cfg cfg = {.in = 12, .d = 32, .out = 3, .depth = 2};
    amp_module *net = net_new(&cfg, &g);
    amp_module_print(net, stdout); /* torch's repr */
    amp_tensor *params[32];
    const char *names[32];
    int n = amp_module_parameters(net, params, names, 32);
    printf("%d parameter tensors, %lld values; e.g. %s, %s\n", n, (long long)amp_module_num_params(net), names[2], names[n - 1]);
    amp_optim_opts oo = amp_adamw_opts(3e-3);
    amp_optim *opt = amp_optim_new(params, n, &oo);

    double first = 0, last = 0;
    for (int step = 0; step < 150; step++) {
        amp_scope *s = amp_scope_begin();
        int64_t b = (step % 8) * 64;
        amp_optim_zero_grad(opt);
        amp_autocast_enter(AMP_BF16);
        amp_tensor *loss = amp_mse_loss(amp_module_forward(net, amp_slice(x, 0, b, b + 64, 1)), amp_slice(y, 0, b, b + 64, 1), NULL);
        amp_autocast_exit();
        amp_backward(loss);
        amp_optim_step(opt);
        if (step == 0) first = amp_tensor_item(loss);
        last = amp_tensor_item(loss);
        amp_scope_end(s);
    }

    /* save, load into a net with other initial weights, compare predictions */
    char dir[] = "/tmp/amp_user_model_XXXXXX", path[64];
    if (!mkdtemp(dir)) return 1;
    snprintf(path, sizeof path, "%s/net.safetensors", dir);
    amp_generator g2 = amp_generator_make(99);
    amp_module *copy = net_new(&cfg, &g2);
    int ok = amp_model_save(net, path, NULL, 0) == AMP_OK && amp_model_load(copy, path) == AMP_OK;
    amp_module_train(net, false);
    amp_module_train(copy, false);
    amp_scope *s = amp_scope_begin();
    amp_tensor *p1 = amp_module_forward(net, x), *p2 = amp_module_forward(copy, x);
    double d = 0;
    for (int64_t i = 0; i < 512 && ok; i++)
        for (int64_t j = 0; j < 3; j++) d = fmax(d, fabs(amp_tensor_get(p1, (int64_t[]){i, j}) - amp_tensor_get(p2, (int64_t[]){i, j})));
    amp_scope_end(s);
    remove(path);
    rmdir(dir);
    printf("user_model: loss %.4f -> %.4f; saved and loaded: predictions differ by %g\n", first, last, d);
    amp_optim_free(opt);
    amp_module_free(net);
    amp_module_free(copy);
    amp_tensor_free(x);
    amp_tensor_free(y);
    return ok && d == 0 && last < 0.3 * first ? 0 : 1;
}
