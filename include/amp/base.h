/* amp/base.h — status codes, errors, dtypes, CPU path selection, version.
 *
 * Errors: the library never aborts or exits on bad input. A function returns
 * NULL or a negative amp_status, and amp_last_error() (thread-local) says what
 * and where, e.g. "amp_matmul: [4,3] @ [5,2]: inner dimensions 3 and 5 differ".
 */
#ifndef AMP_BASE_H
#define AMP_BASE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define AMP_VERSION_MAJOR 0
#define AMP_VERSION_MINOR 1
#define AMP_VERSION_PATCH 0
#define AMP_VERSION "0.1.0"

/* AMP_API marks what libamp.so exports: every function declared in
 * include/amp/. The library is compiled with hidden visibility, so anything
 * without it (the internals in src/) stays inside the library; `nm -D
 * --defined-only libamp.so` lists exactly these declarations
 * (tests/test_exports.c checks both ways). A program linking libamp.a sees the
 * same functions; the mark only changes what a shared object exports. */
#if defined(__GNUC__) || defined(__clang__)
#define AMP_API __attribute__((visibility("default")))
#else
#define AMP_API
#endif

/* ---- status and errors ---------------------------------------------------- */
typedef enum {
    AMP_OK = 0,
    AMP_ERR_ARG = -1,         /* invalid argument (NULL, out of range, ...) */
    AMP_ERR_SHAPE = -2,       /* shapes do not agree */
    AMP_ERR_DTYPE = -3,       /* dtype not accepted */
    AMP_ERR_NOMEM = -4,       /* allocation failed */
    AMP_ERR_IO = -5,          /* file could not be opened/read/written */
    AMP_ERR_FORMAT = -6,      /* file or string is malformed */
    AMP_ERR_STATE = -7,       /* call not valid in the current state */
    AMP_ERR_UNSUPPORTED = -8, /* not supported (e.g. CPU path missing) */
    AMP_ERR_RANGE = -9        /* numeric value out of range / non-finite */
} amp_status;

/* Message of the most recent error on this thread ("" if none). The text names
 * the public function, the argument and the problem. */
AMP_API const char *amp_last_error(void);
/* Status of the most recent error on this thread (AMP_OK if none). */
AMP_API amp_status amp_last_status(void);
AMP_API void amp_clear_error(void);
AMP_API const char *amp_status_name(amp_status st);

/* ---- dtypes ------------------------------------------------------------ */
typedef enum {
    AMP_F32 = 0,
    AMP_F16,
    AMP_BF16,
    AMP_F8E4M3, /* OCP E4M3FN: no inf, NaN = S.1111.111, max 448 */
    AMP_F8E5M2, /* IEEE-like: max 57344, has inf */
    AMP_F64,
    AMP_I32,
    AMP_I64,
    AMP_U8,
    AMP_DTYPE_COUNT
} amp_dtype;

AMP_API size_t amp_dtype_size(amp_dtype dt);          /* bytes per element, 0 if invalid */
AMP_API const char *amp_dtype_name(amp_dtype dt);     /* "f32", "f16", "bf16", ... */
AMP_API bool amp_dtype_valid(amp_dtype dt);
AMP_API bool amp_dtype_is_float(amp_dtype dt);        /* f32 f16 bf16 f8* f64 */
AMP_API bool amp_dtype_is_half(amp_dtype dt);         /* f16 bf16 */
/* Accepts "f32"/"float32"/"float"/"fp32", "f16"/"float16"/"half"/"fp16",
 * "bf16"/"bfloat16", "f8e4m3"/"float8_e4m3fn", "f8e5m2"/"float8_e5m2",
 * "f64"/"float64"/"double", "i32"/"int32", "i64"/"int64", "u8"/"uint8". */
AMP_API amp_status amp_dtype_parse(const char *s, amp_dtype *out);

/* ---- CPU code paths ---------------------------------------------------- */
/* Kernels are compiled for each path in their own translation units and chosen
 * at start-up by cpuid. The environment variable
 * AMP_CPU=scalar|avx2|avx512|avx512bf16 forces a path; asking for one the CPU
 * lacks makes amp_init() fail with a message and leaves the best supported
 * path active.
 *
 * Each path computes the same bits for every elementwise, reduction,
 * normalisation and optimizer kernel. Matrix products are the exception:
 * avx512bf16 multiplies bf16 x bf16 operands with the vdpbf16ps dot product
 * (two products per step, subnormals flushed), which rounds differently from
 * the widened f32 products of the other paths. AMP_CPU=avx512 on such a CPU
 * gives the bits of every AVX-512 machine (docs/notes.md, "Matrix
 * products"). */
typedef enum {
    AMP_CPU_SCALAR = 0,
    AMP_CPU_AVX2,       /* AVX2 + FMA + F16C */
    AMP_CPU_AVX512,     /* AVX-512 F/BW/VL/DQ + F16C + FMA */
    AMP_CPU_AVX512BF16, /* AVX512 + AVX512_BF16: bf16 GEMMs on vdpbf16ps */
    AMP_CPU_PATH_COUNT
} amp_cpu_path;

/* Initialise the library: detect the CPU and apply AMP_CPU. Called implicitly
 * by anything that dispatches; call it yourself to see an AMP_CPU error. */
AMP_API amp_status amp_init(void);
AMP_API amp_cpu_path amp_cpu_active(void);
AMP_API bool amp_cpu_supported(amp_cpu_path p);
AMP_API amp_cpu_path amp_cpu_best(void);
/* Switch the active path (process-wide). Error if the CPU lacks it. */
AMP_API amp_status amp_cpu_select(amp_cpu_path p);
AMP_API const char *amp_cpu_path_name(amp_cpu_path p);
AMP_API amp_status amp_cpu_path_parse(const char *s, amp_cpu_path *out);

/* Internal precision of products of f32 operands (amp/ops.h:
 * amp_set_matmul_precision). */
typedef enum { AMP_MATMUL_HIGHEST = 0, AMP_MATMUL_HIGH = 1, AMP_MATMUL_MEDIUM = 2 } amp_matmul_precision;

/* Threads used by kernels (OpenMP). 0 = OpenMP's default. */
AMP_API void amp_set_num_threads(int n);
AMP_API int amp_get_num_threads(void);
/* amp_get_num_threads() is the most a kernel uses: while other processes keep
 * cores busy, kernels use fewer (measured every 200 ms; docs/threads.md).
 * false keeps the count fixed, as AMP_ADAPTIVE_THREADS=0 does. Process-wide. */
AMP_API void amp_set_adaptive_threads(bool on);
AMP_API bool amp_get_adaptive_threads(void);
/* The threads a kernel started now by the calling thread would use. */
AMP_API int amp_get_active_threads(void);

AMP_API const char *amp_version(void);

/* Debug mode, from the environment variable AMP_DEBUG=1 (read once, before
 * the first tensor is made): freed tensors are poisoned and kept as dead
 * handles, and every public call checks its tensor arguments, so a tensor
 * used after its scope ended, or freed twice, gives an error naming the
 * call ("amp_add: tensor 0x... (#12) was freed (by amp_scope_end) and is
 * used again") instead of reading freed memory. It costs a little memory
 * (the last 65536 freed tensor structs) and time; off, a check is one load. */
AMP_API bool amp_debug_enabled(void);

#ifdef __cplusplus
}
#endif
#endif
