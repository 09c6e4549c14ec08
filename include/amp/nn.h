/* amp/nn.h — modules and model builders.
 *
 * A module owns its parameters (leaf tensors requiring grad, counted as
 * parameter memory) and buffers (batch norm's running statistics). Names
 * follow PyTorch's state_dict keys: a Sequential's children are "0", "1", ...
 * so the mlp's first weight is "0.weight". Initialisation is PyTorch's
 * default (kaiming-uniform with a = sqrt(5) for Linear/Conv weights, uniform
 * ±1/sqrt(fan_in) for biases; ones/zeros for norms). */
#ifndef AMP_NN_H
#define AMP_NN_H

#include "amp/ops.h"
#include "amp/policy.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct amp_module amp_module;

amp_module *amp_nn_linear(int64_t in, int64_t out, bool bias, amp_generator *g);
amp_module *amp_nn_conv2d(int64_t in_ch, int64_t out_ch, int64_t kernel, const amp_conv_params *p, bool bias,
                          amp_generator *g);
amp_module *amp_nn_batchnorm2d(int64_t channels, double eps, double momentum); /* torch: 1e-5, 0.1 */
amp_module *amp_nn_layernorm(int64_t features, double eps);
amp_module *amp_nn_dropout(double p, amp_generator *g);
amp_module *amp_nn_relu(void);
amp_module *amp_nn_gelu(amp_gelu_approx approx);
amp_module *amp_nn_maxpool2d(int64_t kernel, int64_t stride);
amp_module *amp_nn_flatten(void);
/* Takes ownership of the children (on failure too). */
amp_module *amp_nn_sequential(amp_module *const *children, int n);

void amp_module_free(amp_module *m);
/* Forward under the module's settings: a module kept in f32 runs with
 * autocast disabled and casts its input to f32 (the seeds' bn.float()). */
amp_tensor *amp_module_forward(amp_module *m, amp_tensor *x);
void amp_module_train(amp_module *m, bool training); /* recursive */
bool amp_module_is_training(const amp_module *m);
const char *amp_module_kind(const amp_module *m); /* "Linear", "Sequential", ... */

/* Parameters in registration order with their state_dict names. Returns the
 * count; fills at most max entries (params/names may be NULL to count). The
 * names stay valid while the module lives. */
int amp_module_parameters(amp_module *m, amp_tensor **params, const char **names, int max);
/* Parameters and buffers (running_mean, running_var, num_batches_tracked):
 * everything a state dict holds. */
int amp_module_state(amp_module *m, amp_tensor **tensors, const char **names, int max);
int64_t amp_module_num_params(amp_module *m); /* total elements */

/* Keep a module (and its children) in f32 under autocast. */
void amp_module_keep_f32(amp_module *m, bool keep);
/* Cast every parameter to dt in place (new storage, same tensor objects, so
 * optimizers must be created afterwards); with keep_norm_f32, batch/layer
 * norms stay f32 and are marked keep-f32 (Apex O2). */
amp_status amp_module_to(amp_module *m, amp_dtype dt, bool keep_norm_f32);

/* ---- built-in models ----------------------------------------------------------
 * mlp: Flatten, Linear 784-512, ReLU, Linear 512-512, ReLU, Linear 512-10.
 * cnn: Conv 1->32 3x3 pad 1, ReLU, MaxPool 2, Conv 32->64 3x3 pad 1,
 *      BatchNorm2d, ReLU, MaxPool 2, Flatten, Linear 3136->128, ReLU,
 *      Dropout 0.25, Linear 128->10.  Input [N,1,28,28]. */
amp_module *amp_model_build(const char *name, amp_generator *g);

#ifdef __cplusplus
}
#endif
#endif
