/* Internal: what the distributed checkpoint code (ddp_checkpoint.c) needs
 * of the data-parallel optimizers (ddp.c). */
#ifndef AMP_DIST_DDP_IMPL_H
#define AMP_DIST_DDP_IMPL_H

#include "amp/dist.h"

/* -1: not an optimizer made by amp_ddp_optim_new; else its ZeRO stage. */
int amp__ddp_optim_stage(const amp_optim *opt);
amp_ddp *amp__ddp_of(const amp_optim *opt);
/* The full parameters of a data-parallel optimizer, in its order. */
int amp__ddp_optim_nparams(const amp_optim *opt);
amp_tensor *amp__ddp_optim_param(const amp_optim *opt, int i);
/* Slice k of a stage-1 optimizer: its parameter (index in the order
 * above), first element and length. */
void amp__ddp_piece(const amp_optim *opt, int k, int *param_index, int64_t *poff, int64_t *len);
/* State `name` of a stage-1 optimizer gathered into f32 tensors of the
 * parameters' shapes (all NULL when no rank has it). Collective. */
amp_status amp__ddp_full_state(amp_optim *opt, const char *name, amp_tensor **full);

/* Training resumes after step `step` (a restored checkpoint's): the step
 * that collectives name in mismatch errors (amp_dist_group.step). */
void amp__ddp_set_step(amp_ddp *d, int64_t step);

#endif
