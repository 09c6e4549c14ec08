/* amp/nn.h — modules: one mechanism for the built-in layers and yours.
 *
 * A module is a class (a small vtable: a name, a forward, optional extras)
 * plus what its constructor registers: named parameters, named buffers and
 * named child modules, and a block of private data for its configuration.
 * The built-in layers (Linear, Conv2d, norms, Dropout, Sequential, ...) are
 * written with exactly these public functions, so a module you write gets
 * everything they get: state_dict names, amp_model_save/load, checkpoints
 * and bit-exact resume, amp_module_to, keep-f32, train/eval, parameter
 * memory accounting, amp_initialize.
 *
 * A user module, in full:
 *
 *   typedef struct { double scale; } block_cfg;
 *   static amp_tensor *block_forward(amp_module *m, amp_tensor *x) {
 *       amp_tensor *h = amp_module_forward(amp_module_get_child(m, "fc"), x);
 *       return amp_add(x, amp_mul_scalar(amp_relu(h), ((block_cfg *)amp_module_data(m))->scale));
 *   }
 *   static const amp_module_class block_class = {.name = "Block", .forward = block_forward};
 *
 *   amp_module *block_new(int64_t d, amp_generator *g) {
 *       amp_module *m = amp_module_new(&block_class, sizeof(block_cfg));
 *       if (!m) return NULL;
 *       ((block_cfg *)amp_module_data(m))->scale = 0.5;
 *       if (!amp_module_register_module(m, "fc", amp_nn_linear(d, d, true, g))) { amp_module_free(m); return NULL; }
 *       return m;
 *   }
 *
 * Names are PyTorch's state_dict keys: a module's own parameters in
 * registration order, then its buffers, then each child's entries prefixed
 * with the child's name and a dot ("fc.weight"); a Sequential's or a
 * ModuleList's children are named "0", "1", ... (the mlp's first weight is
 * "1.weight": child 0 is the Flatten).
 *
 * Ownership: register_* take the caller's reference to the tensor or module
 * (on failure too: it is freed; only a child refused because it would make a
 * cycle stays the caller's). A tensor still held by a scope is taken out of
 * it. To share a parameter between two modules (weight tying, as GPT-2's
 * lm_head.weight and transformer.wte.weight), register it a second time with
 * another reference: amp_module_set_parameter(wte, "weight",
 * amp_tensor_retain(lm_head_weight)). A shared tensor is one parameter:
 * amp_module_parameters lists it once (its first name), the state lists every
 * name (as torch's state_dict), a saved file holds it once under its first
 * name and loading accepts any of its names. Modules are reference counted
 * too: a child registered under two parents is retained (amp_module_retain).
 *
 * Initialisation of the built-ins is PyTorch's default (kaiming-uniform with
 * a = sqrt(5) for Linear/Conv weights, uniform ±1/sqrt(fan_in) for biases;
 * ones/zeros for norms).
 *
 * Threads: building, registering, amp_module_to, train/eval and loading change
 * a module and need one thread. Once built, a module in eval mode may run
 * amp_module_forward on several threads at once (each with its own autocast
 * state and scopes); the queries (parameters, state, get_*) may too.
 * Training mutates the module (gradients, batch norm statistics): one thread
 * per module. docs/threads.md; the guide is docs/modules.md. */
#ifndef AMP_NN_H
#define AMP_NN_H

#include <stdio.h>

#include "amp/ops.h"
#include "amp/policy.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct amp_module amp_module;

/* Class flags. */
#define AMP_MODULE_NORM 1u /* a normalisation layer: kept in f32 (with its buffers) by amp_module_to(.., true) / O2 */
/* Kept in f32, its forward takes half inputs as they are (its ops compute in
 * f32 from f32 parameters and return the input's dtype, as layer_norm does:
 * Apex's batch norm under keep_batchnorm_fp32) instead of f32 copies: the
 * same values, and backward keeps the half input, not an f32 copy. */
#define AMP_MODULE_HALF_IO 2u

typedef struct {
    const char *name; /* the kind, "Linear", "Block" (amp_module_kind); required */
    /* forward for one input; NULL for containers without one (ModuleList) */
    amp_tensor *(*forward)(amp_module *self, amp_tensor *x);
    /* optional: several inputs (amp_module_forward_n); when absent,
     * amp_module_forward_n with n == 1 calls forward */
    amp_tensor *(*forward_n)(amp_module *self, amp_tensor *const *xs, int n);
    /* optional: "in_features=4, out_features=2, bias=True" for amp_module_print */
    void (*extra_repr)(const amp_module *self, char *buf, size_t n);
    /* optional: frees what the data block points to (not the block itself,
     * nor registered tensors or children: the module frees those) */
    void (*destroy)(void *data);
    unsigned flags; /* AMP_MODULE_NORM */
} amp_module_class;

/* A new module of class cls (which must outlive it) with data_size zeroed
 * bytes of private data, training mode on. */
AMP_API amp_module *amp_module_new(const amp_module_class *cls, size_t data_size);
AMP_API void *amp_module_data(const amp_module *m);
AMP_API const amp_module_class *amp_module_class_of(const amp_module *m);
/* Drops one reference; the last frees the parameters, buffers and children
 * it holds the only references to. NULL is a no-op. A registered child's
 * reference is its parent's: freeing it is refused (an error; the parent frees
 * it) unless amp_module_retain gave you one of your own. With AMP_DEBUG=1 a
 * module used or freed after it was freed is an error naming the call. */
AMP_API void amp_module_free(amp_module *m);
AMP_API amp_module *amp_module_retain(amp_module *m); /* one more reference; returns m */

/* ---- registration (in the constructor) ----------------------------------------
 * Names: 1-127 characters, no '.', unique among the module's parameters,
 * buffers and children. Each returns its argument (borrowed now; owned by the
 * module) or NULL with the error, having freed the argument. */
/* t: a leaf float tensor (made requires_grad, unscoped, counted as parameter memory). */
AMP_API amp_tensor *amp_module_register_parameter(amp_module *m, const char *name, amp_tensor *t);
/* t: any tensor (no autograd; counted as parameter memory). persistent
 * buffers are part of the state (saved and loaded); others are not
 * (torch's persistent=False, e.g. a precomputed mask). */
AMP_API amp_tensor *amp_module_register_buffer(amp_module *m, const char *name, amp_tensor *t, bool persistent);
AMP_API amp_module *amp_module_register_module(amp_module *m, const char *name, amp_module *child);
/* Replaces the parameter registered as name (dotted: "wte.weight") by t,
 * taking t's reference and dropping the old one (weight tying). Shapes need
 * not match (the module's forward decides). */
AMP_API amp_status amp_module_set_parameter(amp_module *m, const char *name, amp_tensor *t);

/* ---- access ---------------------------------------------------------------------
 * Dotted names reach into children ("0.weight", "h.3.attn"). NULL with an
 * error when absent. Borrowed: valid while the module holds them. */
AMP_API amp_tensor *amp_module_get_parameter(const amp_module *m, const char *name);
AMP_API amp_tensor *amp_module_get_buffer(const amp_module *m, const char *name);
AMP_API amp_module *amp_module_get_child(const amp_module *m, const char *name);
/* Direct children in registration order; *name (may be NULL) receives the name. */
AMP_API int amp_module_num_children(const amp_module *m);
AMP_API amp_module *amp_module_child_at(const amp_module *m, int i, const char **name);

/* ---- containers -------------------------------------------------------------------- */
/* Takes ownership of the children (on failure too). Forward runs them in order. */
AMP_API amp_module *amp_nn_sequential(amp_module *const *children, int n);
/* torch's ModuleList: children "0", "1", ... and no forward of its own. */
AMP_API amp_module *amp_nn_module_list(void);
/* Appends child as the next numbered child of a Sequential or ModuleList
 * (taking ownership, on failure too). */
AMP_API amp_status amp_module_append(amp_module *container, amp_module *child);

/* ---- built-in layers -------------------------------------------------------------- */
AMP_API amp_module *amp_nn_linear(int64_t in, int64_t out, bool bias, amp_generator *g);
AMP_API amp_module *amp_nn_conv2d(int64_t in_ch, int64_t out_ch, int64_t kernel, const amp_conv_params *p, bool bias,
                          amp_generator *g);
AMP_API amp_module *amp_nn_batchnorm2d(int64_t channels, double eps, double momentum); /* torch: 1e-5, 0.1 */
AMP_API amp_module *amp_nn_layernorm(int64_t features, double eps);
/* torch.nn.Embedding: weight [num, dim] initialised N(0, 1); input integer indices. */
AMP_API amp_module *amp_nn_embedding(int64_t num, int64_t dim, amp_generator *g);
AMP_API amp_module *amp_nn_dropout(double p, amp_generator *g);
AMP_API amp_module *amp_nn_relu(void);
AMP_API amp_module *amp_nn_gelu(amp_gelu_approx approx);
AMP_API amp_module *amp_nn_maxpool2d(int64_t kernel, int64_t stride);
AMP_API amp_module *amp_nn_flatten(void);

/* ---- running ------------------------------------------------------------------------
 * Forward under the module's settings: a module kept in f32 runs with autocast
 * disabled and casts its input to f32 (the seeds' bn.float()), returning its
 * result in the input's dtype when that was half (a class with
 * AMP_MODULE_HALF_IO gets the half input itself and returns its own result). An error inside names the
 * op and, at the outermost forward, the module kind. */
AMP_API amp_tensor *amp_module_forward(amp_module *m, amp_tensor *x);
AMP_API amp_tensor *amp_module_forward_n(amp_module *m, amp_tensor *const *xs, int n);
AMP_API void amp_module_train(amp_module *m, bool training); /* recursive */
/* Whether a forward of m on this thread runs in training mode (dropout
 * active, batch norm on the batch's statistics and updating its running
 * ones): m's flag, and false inside an eval scope. A module class decides
 * its behaviour with this call, as the built-in layers do. */
AMP_API bool amp_module_is_training(const amp_module *m);
/* An eval scope on this thread (nests; per thread): until the matching
 * amp_module_eval_end, amp_module_is_training answers false for every
 * module, so every forward on this thread runs in eval semantics without
 * writing any module's training flag: several threads can run a model in
 * eval semantics while it stays in training mode, which amp_module_train
 * (a write to the shared model) cannot give them. amp_gpt_generate and
 * amp_gpt_forward_cached run inside one. (Save and restore a module's own
 * flag outside a scope: inside, amp_module_is_training reads false.) An end
 * without a begin does nothing. */
AMP_API void amp_module_eval_begin(void);
AMP_API void amp_module_eval_end(void);
AMP_API const char *amp_module_kind(const amp_module *m); /* the class name: "Linear", "Sequential", ... */
/* Writes torch's module repr: "Sequential(\n  (0): Linear(in_features=...)\n)". */
AMP_API amp_status amp_module_print(const amp_module *m, FILE *f);

/* Parameters (each tensor once, at its first name) in state_dict order with
 * their dotted names. Returns the count; fills at most max entries
 * (params/names may be NULL to count). Names stay valid while m lives. */
AMP_API int amp_module_parameters(amp_module *m, amp_tensor **params, const char **names, int max);
/* Buffers (persistent and not) with their names, likewise. */
AMP_API int amp_module_buffers(amp_module *m, amp_tensor **buffers, const char **names, int max);
/* Everything a state dict holds: parameters and persistent buffers, every
 * name of a shared tensor (as torch's state_dict). */
AMP_API int amp_module_state(amp_module *m, amp_tensor **tensors, const char **names, int max);
AMP_API int64_t amp_module_num_params(amp_module *m); /* elements of the unique parameters */
/* Drops every parameter's .grad (torch's model.zero_grad(set_to_none=True)). */
AMP_API amp_status amp_module_zero_grad(amp_module *m);

/* ---- mixed precision at the module's boundary (what amp_initialize sets) ----
 * Around this module's forward (this module only, not its children),
 * amp_module_forward casts floating-point inputs to `input`, runs the
 * forward inside an autocast region with autocast_dtype when `autocast` is
 * set, and casts a floating-point output to `output`, as Apex patches a
 * model's forward: an O2 model given f32 data computes in half instead of
 * promoting everything to f32, and hands back f32 logits for the loss.
 * AMP_DTYPE_COUNT leaves inputs or the output as they are; integer tensors
 * (token ids, labels) are never cast. The casts are differentiable. */
typedef struct {
    amp_dtype input;
    bool autocast;
    amp_dtype autocast_dtype; /* AMP_F16 or AMP_BF16 */
    amp_dtype output;
} amp_module_io;
/* io NULL removes the settings. */
AMP_API amp_status amp_module_set_io(amp_module *m, const amp_module_io *io);
/* The settings (false when none are set). */
AMP_API bool amp_module_get_io(const amp_module *m, amp_module_io *io);

/* Keep a module (and its children) in f32 under autocast. */
AMP_API void amp_module_keep_f32(amp_module *m, bool keep);
AMP_API bool amp_module_is_kept_f32(const amp_module *m);
/* Cast every float parameter (and the float buffers of layers that are not
 * norms) to dt in place (new storage, same tensor objects, so optimizers
 * must be created afterwards); with keep_norm_f32, modules of a class with
 * AMP_MODULE_NORM stay f32 and are marked keep-f32 (Apex O2). */
AMP_API amp_status amp_module_to(amp_module *m, amp_dtype dt, bool keep_norm_f32);
/* Move every parameter and buffer of m and its children to device d in place
 * (torch's Module.to(device): the same tensor objects, so a tied parameter
 * moves once and optimizers made afterwards or before see it on d; .grad
 * moves too). On failure the tensors moved so far stay moved. */
AMP_API amp_status amp_module_to_device(amp_module *m, amp_device d);

/* ---- built-in models ----------------------------------------------------------
 * mlp: Flatten, Linear 784-512, ReLU, Linear 512-512, ReLU, Linear 512-10.
 * cnn: Conv 1->32 3x3 pad 1, ReLU, MaxPool 2, Conv 32->64 3x3 pad 1,
 *      BatchNorm2d, ReLU, MaxPool 2, Flatten, Linear 3136->128, ReLU,
 *      Dropout 0.25, Linear 128->10.  Input [N,1,28,28]. */
AMP_API amp_module *amp_model_build(const char *name, amp_generator *g);

#ifdef __cplusplus
}
#endif
#endif
