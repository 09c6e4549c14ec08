/* The CUDA backend's libraries on any machine where amp was built with it:
 * cuBLASLt (required), cuDNN and NCCL (when the build found them) are
 * loaded by dlopen when the backend starts (kernels/cuda/dl.h), before the
 * device is looked for, so whether they load and every function amp calls
 * resolves is checked here even without a GPU: the link step of a dlopen
 * design. Exits 77 ("built without CUDA") when amp was configured without
 * the CUDA backend. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op_check.h"
#include "kernels/backend.h"

static void t_libraries_load(void **state) {
    (void)state;
    amp_cuda_libs l;
    bool ok = amp__cuda_libs(&l);
    if (!ok) {
        /* the reason the backend gives says which library failed and why */
        amp_status st = amp_device_check(AMP_DEVICE_CUDA);
        fail_msg("cuBLASLt did not load: %s", st == AMP_OK ? "(no reason)" : amp_last_error());
    }
    assert_true(l.lt_loaded);
    /* cuBLASLt's version is major*10000 + minor*100 + patch (13.x: 13xxxx) */
    assert_true(l.lt_version >= 110000);
    printf("cuBLASLt %d\n", l.lt_version);
    if (l.cudnn_built) {
        assert_true(l.cudnn_loaded);
        assert_true(l.cudnn_version >= 90000); /* cuDNN 9: 9xxxx */
        printf("cuDNN %d\n", l.cudnn_version);
    }
    if (l.nccl_built) {
        assert_true(l.nccl_loaded);
        assert_true(l.nccl_version >= 20000); /* NCCL 2.x: 2xxxx */
        printf("NCCL %d\n", l.nccl_version);
    }
    /* without a device the backend still refuses, naming why */
    if (!amp_cuda_available()) {
        assert_int_not_equal(amp_device_check(AMP_DEVICE_CUDA), AMP_OK);
        assert_non_null(strstr(amp_last_error(), "no CUDA device"));
    }
}

int main(void) {
    if (!amp_cuda_built()) {
        amp_device_check(AMP_DEVICE_CUDA); /* its error says why */
        printf("SKIP: %s\n", amp_last_error());
        return 77;
    }
    return AMP_TEST_RUN(t_libraries_load);
}
