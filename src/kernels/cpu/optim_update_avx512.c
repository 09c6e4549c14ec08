#define OPTIM_TILE_FN amp_optim_tile_avx512
#define OPTIM_CHECK_FN amp_optim_check_avx512
#define OPTIM_SUMSQ_FN amp_optim_sumsq_avx512
#include "kernels/cpu/optim_update.inc"
