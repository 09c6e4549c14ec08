/* Built by tests/test_install.c against an installed amp with README.md's
 * lines ("Using the library"), as my.c. It calls libm itself, as most
 * programs using amp do (the examples too), so the README's line must link it. */
#include <amp/amp.h>
#include <math.h>
#include <stdio.h>
int main(int argc, char **argv) {
    (void)argv;
    amp_tensor *a = amp_tensor_ones(AMP_F32, 2, AMP_SHAPE(2, 3)), *b = amp_tensor_ones(AMP_F32, 2, AMP_SHAPE(3, 2));
    amp_autocast_enter(AMP_BF16);
    amp_tensor *c = amp_matmul(a, b);
    amp_autocast_exit();
    printf("%s %g\n", amp_dtype_name(amp_tensor_dtype(c)), amp_tensor_get(c, AMP_SHAPE(1, 1)));
    amp_tensor *bad = amp_matmul(a, a);
    printf("%s\n", bad ? "?" : amp_last_error());
    amp_tensor_free(a); amp_tensor_free(b); amp_tensor_free(c);
    volatile double one = argc; /* a libm call the compiler cannot fold */
    printf("exp %.4f\n", exp(one));
    printf("vocab %s\n", amp_gpt2_vocab_dir());
    printf("cuda %s\n", amp_device_check(AMP_DEVICE_CUDA) == AMP_OK ? "ok" : amp_last_error());
    return 0;
}
