/* The CUDA backend's device, stream, memory and error handling. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/dl.h"

amp_cu_ctx amp__cu;

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static bool g_ok;
static char g_reason[512];
static int g_count = -1;

/* ---- errors ---------------------------------------------------------------------- */
static bool sticky(cudaError_t e) {
    switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorHardwareStackError:
    case cudaErrorAssert:
    case cudaErrorECCUncorrectable:
    case cudaErrorLaunchTimeout: return true;
    default: return false;
    }
}

amp_status amp__cu_check(const char *fn, cudaError_t e, const char *what) {
    if (e == cudaSuccess) return AMP_OK;
    (void)cudaGetLastError(); /* clear a non-sticky error so later calls do not report it again */
    if (e == cudaErrorMemoryAllocation)
        return amp_error(AMP_ERR_NOMEM, "%s: %s: out of GPU memory (%s)", fn, what, cudaGetErrorString(e));
    return amp_error(AMP_ERR_STATE, "%s: %s failed: %s (%s)%s", fn, what, cudaGetErrorName(e), cudaGetErrorString(e),
                     sticky(e) ? "; the CUDA context cannot be used any more in this process" : "");
}

/* Deferred errors: the (fn, what) pairs kernels refer to by number. */
#define MAX_CODES 256
static pthread_mutex_t g_code_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    const char *fn, *what;
} g_codes[MAX_CODES];
static int g_ncodes;

int amp__cu_err_code(const char *fn, const char *what) {
    pthread_mutex_lock(&g_code_mu);
    int id = -1;
    for (int i = 0; i < g_ncodes; i++)
        if (g_codes[i].fn == fn && g_codes[i].what == what) id = i;
    if (id < 0 && g_ncodes < MAX_CODES) {
        g_codes[g_ncodes].fn = fn;
        g_codes[g_ncodes].what = what;
        id = g_ncodes++;
    }
    pthread_mutex_unlock(&g_code_mu);
    return id < 0 ? 0 : id + 1; /* 0: unnamed */
}

static amp_status report_recorded(const char *fn) {
    volatile amp_cu_err_rec *r = amp__cu.err_host;
    if (!r || !r->flag) return AMP_OK;
    int code = r->code;
    long long elem = r->elem, value = r->value, limit = r->limit;
    r->code = 0;
    r->flag = 0;
    const char *op = "a CUDA kernel", *what = "index";
    pthread_mutex_lock(&g_code_mu);
    if (code > 0 && code <= g_ncodes) {
        op = g_codes[code - 1].fn;
        what = g_codes[code - 1].what;
    }
    pthread_mutex_unlock(&g_code_mu);
    if (limit < 0) { /* not an index: a value check (the optimizers': value = the parameter, elem = its element or -1) */
        if (elem >= 0)
            return amp_error(AMP_ERR_RANGE, "%s: %s: parameter %lld, element %lld (found on the GPU by %s; reported at the next "
                                            "synchronisation)", fn, what, value, elem, op);
        return amp_error(AMP_ERR_RANGE, "%s: %s: parameter %lld (found on the GPU by %s; reported at the next "
                                        "synchronisation)", fn, what, value, op);
    }
    return amp_error(AMP_ERR_RANGE, "%s: %s %lld (element %lld) is out of range [0, %lld) (found on the GPU by %s; reported "
                                    "at the next synchronisation)", fn, what, value, elem, limit, op);
}

/* ---- bring-up ---------------------------------------------------------------------- */
static void *backing_alloc(void *ctx, size_t bytes) {
    (void)ctx;
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    return p;
}

static void backing_free(void *ctx, void *p, size_t bytes) {
    (void)ctx;
    (void)bytes;
    cudaFree(p);
}

static void init_once(void) {
    int n = 0;
    if (!amp__cu_dl_load(g_reason, sizeof g_reason)) {
        g_count = 0;
        return;
    }
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        g_count = 0;
        snprintf(g_reason, sizeof g_reason, "no CUDA device (cudaGetDeviceCount: %s: %s)", cudaGetErrorName(e),
                 cudaGetErrorString(e));
        return;
    }
    g_count = n;
    if (n == 0) {
        snprintf(g_reason, sizeof g_reason, "no CUDA device (the driver reports none)");
        return;
    }
    int dev = 0;
    const char *env = getenv("AMP_CUDA_DEVICE");
    if (env && *env) {
        char *end;
        long v = strtol(env, &end, 10);
        if (*end || v < 0 || v >= n) {
            snprintf(g_reason, sizeof g_reason, "AMP_CUDA_DEVICE='%s' is not a device index in [0, %d)", env, n);
            return;
        }
        dev = (int)v;
    }
    amp__cu.device = dev;
    if ((e = cudaSetDevice(dev)) != cudaSuccess || (e = cudaGetDeviceProperties(&amp__cu.prop, dev)) != cudaSuccess ||
        (e = cudaStreamCreateWithFlags(&amp__cu.stream, cudaStreamNonBlocking)) != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(g_reason, sizeof g_reason, "CUDA device %d cannot be used: %s: %s", dev, cudaGetErrorName(e),
                 cudaGetErrorString(e));
        return;
    }
    if (amp__cu.prop.major < 7) {
        snprintf(g_reason, sizeof g_reason, "CUDA device %d (%s) has compute capability %d.%d; amp needs 7.0 or newer", dev,
                 amp__cu.prop.name, amp__cu.prop.major, amp__cu.prop.minor);
        return;
    }
    void *h = NULL;
    if ((e = cudaHostAlloc(&h, sizeof(amp_cu_err_rec), cudaHostAllocMapped)) != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(g_reason, sizeof g_reason, "CUDA device %d: cudaHostAlloc: %s", dev, cudaGetErrorString(e));
        return;
    }
    memset(h, 0, sizeof(amp_cu_err_rec));
    void *d = NULL;
    if ((e = cudaHostGetDevicePointer(&d, h, 0)) != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(g_reason, sizeof g_reason, "CUDA device %d: cudaHostGetDevicePointer: %s", dev, cudaGetErrorString(e));
        return;
    }
    amp__cu.err_host = h;
    amp__cu.err_dev = d;
    amp__cu.cache = amp_cache_alloc_new((amp_cache_backing){backing_alloc, backing_free, NULL});
    if (!amp__cu.cache) {
        snprintf(g_reason, sizeof g_reason, "out of host memory starting the CUDA backend");
        return;
    }
    g_ok = true;
}

extern const amp_backend amp__cuda_table; /* cuda_backend.c */

const amp_backend *amp__cuda_backend(const char *fn) {
    pthread_once(&g_once, init_once);
    if (!g_ok) return amp_error_null(AMP_ERR_UNSUPPORTED, "%s: %s", fn, g_reason);
    /* a host thread that has not used CUDA yet starts on device 0 */
    int cur = -1;
    if (cudaGetDevice(&cur) != cudaSuccess || cur != amp__cu.device) cudaSetDevice(amp__cu.device);
    return &amp__cuda_table;
}

const amp_backend *amp__cuda_backend_if_started(void) {
    if (!g_ok) return NULL;
    return &amp__cuda_table;
}

const char *amp__cuda_unavailable_reason(void) {
    pthread_once(&g_once, init_once);
    return g_ok ? NULL : g_reason;
}

int amp__cuda_count(void) {
    pthread_once(&g_once, init_once);
    return g_count < 0 ? 0 : g_count;
}

/* ---- memory ---------------------------------------------------------------------------- */
void *amp__cu_raw_alloc(size_t nbytes) {
    void *p = amp_cache_malloc(amp__cu.cache, nbytes);
    if (p) return p;
    size_t fr = 0, tot = 0;
    cudaMemGetInfo(&fr, &tot);
    (void)cudaGetLastError();
    amp_cache_stats s = amp_cache_get_stats(amp__cu.cache);
    return amp_error_null(AMP_ERR_NOMEM, "amp: out of GPU memory allocating %zu bytes: amp holds %zu bytes in use and %zu "
                                         "cached (amp_memory_empty_cache returns them); the device has %zu of %zu bytes free",
                          nbytes, s.allocated, s.reserved - s.allocated, fr, tot);
}

void amp__cu_raw_free(void *p, size_t nbytes) {
    (void)nbytes;
    amp_cache_release(amp__cu.cache, p);
}

void amp__cu_empty_cache(void) {
    /* cudaFree waits for the device: blocks freed by the host may still be
     * read by queued work, which finishes first */
    cudaStreamSynchronize(amp__cu.stream);
    amp_cache_empty(amp__cu.cache);
}

void amp__cu_cache_stats(size_t *cached, size_t *reserved, uint64_t *driver_allocs) {
    amp_cache_stats s = amp_cache_get_stats(amp__cu.cache);
    if (cached) *cached = s.reserved - s.allocated;
    if (reserved) *reserved = s.reserved;
    if (driver_allocs) *driver_allocs = s.raw_allocs;
}

void *amp__cu_scratch(size_t nbytes) { return amp__cu_raw_alloc(nbytes); }
void amp__cu_scratch_free(void *p) { amp_cache_release(amp__cu.cache, p); }

/* ---- host <-> device ---------------------------------------------------------------------- */
amp_status amp__cu_sync(const char *fn) {
    amp_status st = AMP_CU(fn, cudaStreamSynchronize(amp__cu.stream));
    if (st != AMP_OK) return st;
    return report_recorded(fn);
}

amp_status amp__cu_synchronize(void) { return amp__cu_sync("amp_cuda_synchronize"); }

amp_status amp__cu_to_host(void *host, const void *dev, size_t n) {
    if (!n) return AMP_OK;
    amp_status st = AMP_CU("amp", cudaMemcpyAsync(host, dev, n, cudaMemcpyDeviceToHost, amp__cu.stream));
    if (st != AMP_OK) return st;
    return amp__cu_sync("amp");
}

amp_status amp__cu_from_host(void *dev, const void *host, size_t n) {
    if (!n) return AMP_OK;
    /* from pageable memory the call returns once the data is staged, so the
     * caller may reuse its buffer at once */
    return AMP_CU("amp", cudaMemcpyAsync(dev, host, n, cudaMemcpyHostToDevice, amp__cu.stream));
}

amp_status amp__cu_memset(void *p, int byte, size_t n) {
    if (!n) return AMP_OK;
    return AMP_CU("amp", cudaMemsetAsync(p, byte, n, amp__cu.stream));
}

/* ---- descriptors --------------------------------------------------------------------------- */
amp_cu_tensor amp__cu_desc(const amp_tensor *t) {
    amp_cu_tensor d;
    memset(&d, 0, sizeof d);
    d.p = amp__data(t);
    d.dtype = (int)t->dtype;
    d.ndim = t->ndim;
    for (int i = 0; i < t->ndim; i++) {
        d.shape[i] = t->shape[i];
        d.stride[i] = t->stride[i];
    }
    return d;
}

void amp__cu_coalesce(amp_cu_tensor **ts, int n) {
    if (n <= 0) return;
    int nd = ts[0]->ndim, out = 0;
    int64_t shape[AMP_CU_MAX_DIMS];
    int64_t st[8][AMP_CU_MAX_DIMS];
    for (int i = 0; i < nd; i++) {
        int64_t sz = ts[0]->shape[i];
        if (sz == 1) continue;
        if (out > 0) {
            bool merge = true;
            for (int k = 0; k < n && merge; k++) merge = st[k][out - 1] == ts[k]->stride[i] * sz;
            if (merge) {
                shape[out - 1] *= sz;
                for (int k = 0; k < n; k++) st[k][out - 1] = ts[k]->stride[i];
                continue;
            }
        }
        shape[out] = sz;
        for (int k = 0; k < n; k++) st[k][out] = ts[k]->stride[i];
        out++;
    }
    for (int k = 0; k < n; k++) {
        ts[k]->ndim = out;
        for (int i = 0; i < out; i++) {
            ts[k]->shape[i] = shape[i];
            ts[k]->stride[i] = st[k][i];
        }
    }
}

/* ---- amp/cuda.h ------------------------------------------------------------------------------ */
amp_status amp_cuda_synchronize(void) {
    if (!amp__cuda_backend("amp_cuda_synchronize")) return amp_last_status();
    return amp__cu_sync("amp_cuda_synchronize");
}

int amp__cu_lt_version(void);    /* gemm_cublaslt.c */
int amp__cu_cudnn_version(void); /* versions.c */
int amp__cu_nccl_version(void);  /* versions.c */

amp_status amp_cuda_get_info(amp_cuda_info *out) {
    static const char *fn = "amp_cuda_get_info";
    if (!out) return amp_error(AMP_ERR_ARG, "%s: out is NULL", fn);
    memset(out, 0, sizeof *out);
    if (!amp__cuda_backend(fn)) return amp_last_status();
    snprintf(out->name, sizeof out->name, "%s", amp__cu.prop.name);
    out->device = amp__cu.device;
    out->cc_major = amp__cu.prop.major;
    out->cc_minor = amp__cu.prop.minor;
    out->sm_count = amp__cu.prop.multiProcessorCount;
    out->total_memory = amp__cu.prop.totalGlobalMem;
    cudaRuntimeGetVersion(&out->runtime_version);
    cudaDriverGetVersion(&out->driver_version);
    out->cublaslt_version = amp__cu_lt_version();
    out->cudnn_version = amp__cu_cudnn_version();
    out->nccl_version = amp__cu_nccl_version();
    return AMP_OK;
}
