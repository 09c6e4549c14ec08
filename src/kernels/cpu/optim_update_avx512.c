#define OPTIM_TILE_FN amp_optim_tile_avx512
#include "kernels/cpu/optim_update.inc"
