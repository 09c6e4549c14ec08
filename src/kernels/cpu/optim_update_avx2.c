#define OPTIM_TILE_FN amp_optim_tile_avx2
#define OPTIM_CHECK_FN amp_optim_check_avx2
#define OPTIM_SUMSQ_FN amp_optim_sumsq_avx2
#include "kernels/cpu/optim_update.inc"
