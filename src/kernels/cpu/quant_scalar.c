/* quant.inc built for plain C (the scalar path). */
#define AMP_KPATH scalar
#include "kernels/cpu/quant.inc"
