/* Internal: dispatch helpers. A kernel family keeps a table of function
 * pointers indexed by amp_cpu_path; AMP_DISPATCH picks the entry for the
 * active path, falling back to lower paths whose entry is set. */
#ifndef AMP_CORE_CPU_H
#define AMP_CORE_CPU_H

#include "amp/base.h"
#include "core/threads.h"

/* Returns the table entry for the active path, or the nearest lower one that
 * is non-NULL (the scalar entry must always be set). */
#define AMP_DISPATCH(table)                                                  \
    ({                                                                       \
        int amp_dp_ = (int)amp_cpu_active();                                 \
        while (amp_dp_ > 0 && !(table)[amp_dp_]) amp_dp_--;                  \
        (table)[amp_dp_];                                                    \
    })

/* AVX512_BF16's vcvtne2ps2bf16 (Cooper Lake, Sapphire Rapids, Zen 4): the
 * AVX-512 kernels round f32 to bf16 with it when the CPU has it (see
 * numeric/bf16_avx512.h). amp__cpu_set_bf16cvt(false) makes them use the
 * integer rounding instead (the tests compare the two); true re-enables it
 * where the CPU has it. */
bool amp__cpu_bf16cvt(void);
bool amp__cpu_bf16cvt_supported(void);
void amp__cpu_set_bf16cvt(bool on);

/* Split n items among OpenMP threads only when there is enough work. */
#define AMP_PARALLEL_MIN 32768

#endif
