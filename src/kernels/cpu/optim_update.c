#define OPTIM_TILE_FN amp_optim_tile_scalar
#include "kernels/cpu/optim_update.inc"
