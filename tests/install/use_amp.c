/* Built by tests/test_install.c against an installed amp through pkg-config. */
#include <amp/amp.h>
#include <stdio.h>
int main(void) {
    amp_tensor *a = amp_tensor_ones(AMP_F32, 2, AMP_SHAPE(2, 3)), *b = amp_tensor_ones(AMP_F32, 2, AMP_SHAPE(3, 2));
    amp_autocast_enter(AMP_BF16);
    amp_tensor *c = amp_matmul(a, b);
    amp_autocast_exit();
    printf("%s %g\n", amp_dtype_name(amp_tensor_dtype(c)), amp_tensor_get(c, AMP_SHAPE(1, 1)));
    amp_tensor *bad = amp_matmul(a, a);
    printf("%s\n", bad ? "?" : amp_last_error());
    amp_tensor_free(a); amp_tensor_free(b); amp_tensor_free(c);
    return 0;
}
