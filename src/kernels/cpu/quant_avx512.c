/* quant.inc built for AVX-512 (F/BW/VL/DQ), twice: plain (vpmaddubsw /
 * vpmaddwd) and with AVX512_VNNI (vpdpbusd; its functions carry the target
 * attribute, chosen at run time where cpuid has it). */
#define AMP_KPATH avx512
#define AMP_KPATH_AVX512 1
#include "kernels/cpu/quant.inc"
#undef AMP_KPATH
#define AMP_KPATH avx512vnni
#define QK_VNNI 1
#include "kernels/cpu/quant.inc"
