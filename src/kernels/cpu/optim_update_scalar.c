/* optim_update.inc built for plain C (the scalar path). */
#define OPTIM_TILE_FN amp_optim_tile_scalar
#define OPTIM_CHECK_FN amp_optim_check_scalar
#define OPTIM_SUMSQ_FN amp_optim_sumsq_scalar
#include "kernels/cpu/optim_update.inc"
