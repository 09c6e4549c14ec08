/* The backend registry and the device API (amp/tensor.h, amp/cuda.h). */
#include "amp/cuda.h"
#include "kernels/backend.h"

#include <stdio.h>
#include <string.h>

#include "tensor/tensor_impl.h"

const char *amp_device_name(amp_device d) {
    switch (d) {
    case AMP_DEVICE_CPU: return "cpu";
    case AMP_DEVICE_CUDA: return "cuda";
    default: return "invalid-device";
    }
}

amp_status amp_device_parse(const char *s, amp_device *out) {
    if (!s) return amp_error(AMP_ERR_ARG, "amp_device_parse: s is NULL");
    if (!out) return amp_error(AMP_ERR_ARG, "amp_device_parse: out is NULL");
    if (!strcmp(s, "cpu")) {
        *out = AMP_DEVICE_CPU;
        return AMP_OK;
    }
    if (!strcmp(s, "cuda") || !strcmp(s, "cuda:0") || !strcmp(s, "gpu")) {
        *out = AMP_DEVICE_CUDA;
        return AMP_OK;
    }
    if (!strncmp(s, "cuda:", 5))
        return amp_error(AMP_ERR_ARG, "amp_device_parse: '%s': amp uses one GPU per process, named \"cuda\" (choose which "
                                      "with AMP_CUDA_DEVICE=N)", s);
    return amp_error(AMP_ERR_ARG, "amp_device_parse: '%s' is not a device (expected \"cpu\" or \"cuda\")", s);
}

#ifndef AMP_NO_CUDA_REASON
#define AMP_NO_CUDA_REASON "it was configured without the CUDA backend"
#endif

const amp_backend *amp__backend(const char *fn, amp_device d) {
    switch (d) {
    case AMP_DEVICE_CPU: return &amp_backend_cpu;
    case AMP_DEVICE_CUDA:
#ifdef AMP_HAVE_CUDA
        return amp__cuda_backend(fn);
#else
        return amp_error_null(AMP_ERR_UNSUPPORTED, "%s: amp was built without CUDA (" AMP_NO_CUDA_REASON "; see docs/cuda.md)",
                              fn);
#endif
    default: return amp_error_null(AMP_ERR_ARG, "%s: device %d is not valid", fn, (int)d);
    }
}

#ifdef AMP_HAVE_CUDA
const amp_backend *amp__cuda_backend_if_started(void);
#endif

const amp_backend *amp__backend_if_started(amp_device d) {
    if (d == AMP_DEVICE_CPU) return &amp_backend_cpu;
#ifdef AMP_HAVE_CUDA
    if (d == AMP_DEVICE_CUDA) return amp__cuda_backend_if_started();
#endif
    return NULL;
}

const amp_backend *amp__backend_of(const char *fn, const amp_tensor *t) { return amp__backend(fn, amp__dev(t)); }

const amp_device_iface *amp__device_iface(const char *fn, amp_device d) {
    const amp_backend *be = amp__backend(fn, d);
    return be ? be->dev : NULL;
}

const amp_device_iface *amp__device_iface_if_started(amp_device d) {
    const amp_backend *be = amp__backend_if_started(d);
    return be ? be->dev : NULL;
}

#ifdef AMP_HAVE_CUDA
extern const amp_backend amp__cuda_table; /* kernels/cuda/cuda_backend.c */
#endif

const amp_backend *const *amp__backend_tables(int *n) {
    static const amp_backend *const tabs[] = {
        &amp_backend_cpu,
#ifdef AMP_HAVE_CUDA
        &amp__cuda_table,
#endif
    };
    *n = (int)(sizeof tabs / sizeof tabs[0]);
    return tabs;
}

amp_status amp__backend_missing(const char *fn, const amp_backend *be, const char *what) {
    return amp_error(AMP_ERR_UNSUPPORTED, "%s: %s is not implemented on %s yet (docs/cuda.md lists what is)", fn, what,
                     be ? be->name : "this device");
}

amp_status amp_device_check(amp_device d) {
    if ((int)d < 0 || d >= AMP_DEVICE_COUNT) return amp_error(AMP_ERR_ARG, "amp_device_check: device %d is not valid", (int)d);
    return amp__backend("amp_device_check", d) ? AMP_OK : amp_last_status();
}

/* ---- amp/cuda.h ---------------------------------------------------------------- */
bool amp_cuda_built(void) {
#ifdef AMP_HAVE_CUDA
    return true;
#else
    return false;
#endif
}

int amp_cuda_device_count(void) {
#ifdef AMP_HAVE_CUDA
    return amp__cuda_count();
#else
    return 0;
#endif
}

bool amp_cuda_available(void) {
#ifdef AMP_HAVE_CUDA
    return amp__cuda_unavailable_reason() == NULL;
#else
    return false;
#endif
}

#ifndef AMP_HAVE_CUDA
bool amp__cuda_libs(amp_cuda_libs *out) {
    memset(out, 0, sizeof *out);
    return false;
}

amp_status amp_cuda_get_info(amp_cuda_info *out) {
    if (!out) return amp_error(AMP_ERR_ARG, "amp_cuda_get_info: out is NULL");
    memset(out, 0, sizeof *out);
    return amp__backend("amp_cuda_get_info", AMP_DEVICE_CUDA) ? AMP_OK : amp_last_status();
}

amp_status amp_cuda_synchronize(void) {
    return amp__backend("amp_cuda_synchronize", AMP_DEVICE_CUDA) ? AMP_OK : amp_last_status();
}
#endif
