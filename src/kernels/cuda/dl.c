/* Loading cuBLASLt, cuDNN and NCCL (dl.h). */
#include "kernels/cuda/dl.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

amp_lt_api amp__lt;
bool amp__cudnn_loaded, amp__nccl_loaded;
#ifdef AMP_HAVE_CUDNN
amp_cudnn_api amp__cudnn;
#endif
#ifdef AMP_HAVE_NCCL
amp_nccl_api amp__nccl;
#endif

#define STR_(x) #x
#define STR(x) STR_(x)

/* dlopen name (a soname) from the build's directories, then the loader's
 * search path; the last dlerror in why. */
static void *open_lib(const char *soname, char *why, size_t n) {
#ifdef AMP_CUDA_LIB_DIRS
    const char *dirs = AMP_CUDA_LIB_DIRS; /* ';'-separated */
    char path[1024];
    while (dirs && *dirs) {
        const char *e = strchr(dirs, ';');
        size_t len = e ? (size_t)(e - dirs) : strlen(dirs);
        if (len && len + strlen(soname) + 2 < sizeof path) {
            memcpy(path, dirs, len);
            path[len] = '/';
            strcpy(path + len + 1, soname);
            void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
            if (h) return h;
        }
        dirs = e ? e + 1 : NULL;
    }
#endif
    void *h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (!h && why) snprintf(why, n, "%s", dlerror());
    return h;
}

#define AMP_DL_LOAD(api, h, f)                                                                                          \
    if (ok && !((api).f = (__typeof__(f) *)dlsym(h, #f))) {                                                             \
        ok = false;                                                                                                       \
        missing = #f;                                                                                                     \
    }

bool amp__cu_dl_load(char *reason, size_t n) {
    char why[512] = "";
    const char *lt_name = "libcublasLt.so." STR(CUBLAS_VER_MAJOR);
    void *h = open_lib(lt_name, why, sizeof why);
    if (!h) {
        snprintf(reason, n, "cuBLASLt (%s) could not be loaded: %s", lt_name, why);
        return false;
    }
    bool ok = true;
    const char *missing = "";
#define LT_LOAD(f) AMP_DL_LOAD(amp__lt, h, f)
    AMP_LT_FUNCS(LT_LOAD)
#undef LT_LOAD
    if (!ok) {
        snprintf(reason, n, "%s lacks %s (a cuBLASLt older than the headers amp was built with)", lt_name, missing);
        return false;
    }
#ifdef AMP_HAVE_CUDNN
    {
        void *hd = open_lib("libcudnn.so." STR(CUDNN_MAJOR), NULL, 0);
        ok = hd != NULL;
#define DNN_LOAD(f) AMP_DL_LOAD(amp__cudnn, hd, f)
        if (hd) {
            AMP_CUDNN_FUNCS(DNN_LOAD)
        }
#undef DNN_LOAD
        amp__cudnn_loaded = ok;
    }
#endif
#ifdef AMP_HAVE_NCCL
    {
        void *hn = open_lib("libnccl.so." STR(NCCL_MAJOR), NULL, 0);
        ok = hn != NULL;
#define NCCL_LOAD(f) AMP_DL_LOAD(amp__nccl, hn, f)
        if (hn) {
            AMP_NCCL_FUNCS(NCCL_LOAD)
        }
#undef NCCL_LOAD
        amp__nccl_loaded = ok;
    }
#endif
    (void)missing;
    return true;
}
