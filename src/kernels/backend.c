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

amp_status amp__backend_missing(const char *fn, const amp_backend *be, const char *what) {
    return amp_error(AMP_ERR_UNSUPPORTED, "%s: %s is not implemented on %s yet (docs/cuda.md lists what is)", fn, what,
                     be ? be->name : "this device");
}

void amp__dev_scaler_plain_init(amp_dev_scaler_init *in) {
    memset(in, 0, sizeof *in);
    in->scale = 1.0f;
    in->growth = 2.0;
    in->backoff = 0.5;
    in->interval = 1;
    in->floor = 1.0;
    in->hysteresis = 1;
    in->hysteresis_left = 1;
    in->static_scale = true;
}

amp_status amp__backend_first_nonfinite(const char *fn, const amp_backend *be, amp_tensor *const *ts, int n, float inv_scale,
                                        amp_dev_scaler *ds, int *first) {
    *first = -1;
    if (!be->scaler_new) { /* the host: the answer directly */
        bool found = false;
        int at = -1;
        amp_status st = AMP_BE_CALL(be, optim_check, fn, ts, n, inv_scale, NULL, &found, &at);
        if (st == AMP_OK && found) *first = at;
        return st;
    }
    amp_dev_scaler *tmp = NULL;
    if (!ds) {
        amp_dev_scaler_init in;
        amp__dev_scaler_plain_init(&in);
        if (!(ds = tmp = be->scaler_new(fn, &in))) return amp_last_status();
    }
    amp_dev_scaler_view v;
    amp_status st = be->scaler_reset_found(ds);
    if (st == AMP_OK) st = AMP_BE_CALL(be, optim_check, fn, ts, n, inv_scale, ds, NULL, NULL);
    if (st == AMP_OK) st = be->scaler_read(ds, &v, NULL, 0);
    if (st == AMP_OK && v.found_inf) *first = v.first_bad >= 0 ? v.first_bad : 0; /* (the kernel sets both) */
    if (tmp) be->scaler_free(tmp);
    return st;
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
