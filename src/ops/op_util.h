/* Internal helpers for writing ops. An op in amp looks like this:
 *
 *   amp_tensor *amp_mul(amp_tensor *a, amp_tensor *b) {
 *       static const char *fn = "amp_mul";
 *       if (!amp__arg(fn, a, "a") || !amp__arg(fn, b, "b")) return NULL;  // NULL in, NULL out
 *       if (!amp__check_float(fn, a, "a") || ...) return NULL;
 *       amp_tensor *in[2] = {a, b};
 *       amp_device dev;
 *       int mask = amp__autocast_dev(AMP_OP_MUL, in, 2, &dev);            // one device; autocast category
 *       if (mask < 0) return NULL;
 *       const amp_backend *be = amp__backend(fn, dev);                     // kernels/backend.h
 *       ... out = amp__empty_out_on(fn, dev, ...);
 *       ... AMP_KCALL(be, family, entry, fn, ...) computes out from in[0], in[1] ...
 *       if (amp__needs_grad(2, in)) { node = amp__node_new(...); save; attach }
 *       amp__autocast_done(in, 2, mask);
 *       return out;
 *   }
 *
 * The last three steps (and, on failure, freeing out) are one call that
 * every op ends with: return amp__op_end(fn, ok, out, in, 2, mask, &spec,
 * tmp, ntmp), spec describing the node (amp_node_spec, autograd/node.h).
 *
 * A one-input op opens with amp__op_begin1 (the autocast and the backend in
 * one call). Saved tensors must be the (possibly cast) in[] entries, not the
 * originals.
 * An op computes nothing on the host itself: its forward and its backward
 * are calls into the backend of the tensors' device (the CPU's kernels are
 * src/kernels/cpu/, which nothing outside src/kernels/ includes:
 * tests/test_include_boundary.c). */
#ifndef AMP_OPS_OP_UTIL_H
#define AMP_OPS_OP_UTIL_H

#include "amp/autocast.h"
#include "amp/ops.h"
#include "amp/op_table.h"
#include "autograd/node.h"
#include "kernels/backend.h"
#include "tensor/tensor_impl.h"

/* NULL check for an op argument: returns false and sets "fn: name is NULL"
 * (keeping an earlier error's text as the cause). */
bool amp__arg(const char *fn, const amp_tensor *t, const char *name);
/* f32, f16 or bf16 (and f64 when allow_f64). Message names fn and name. */
bool amp__check_float(const char *fn, const amp_tensor *t, const char *name);
bool amp__check_float64ok(const char *fn, const amp_tensor *t, const char *name);
/* i32 or i64 (class indices, embedding ids). */
bool amp__check_index(const char *fn, const amp_tensor *t, const char *name);
/* The same dtype check on any device (for ops whose values are checked
 * through the backend's check_index or read back explicitly). */
bool amp__check_index_dev(const char *fn, const amp_tensor *t, const char *name);
bool amp__check_ndim(const char *fn, const amp_tensor *t, const char *name, int lo, int hi);

/* PyTorch type promotion for two float dtypes: equal -> same; f16 with bf16
 * -> f32; otherwise the wider (f64 > f32 > f16/bf16). Integers promote to the
 * float side. */
amp_dtype amp__promote(amp_dtype a, amp_dtype b);
/* Broadcast two shapes; error "fn: shapes [..] and [..] do not broadcast". */
amp_status amp__broadcast_shapes(const char *fn, const amp_tensor *a, const amp_tensor *b, int *ndim, int64_t *shape);

/* A constant for differentiable backwards (no history): f applied to every
 * element of t (as double), as a new contiguous f32 tensor of t's shape (f64
 * when t is f64) in the current scope. */
amp_tensor *amp__const_map(const amp_tensor *t, double (*f)(double v, const void *arg), const void *arg);

/* Views as autograd-aware ops (views.c); used by other ops too. */
amp_tensor *amp__reshape_view(const char *fn, amp_tensor *x, int ndim, const int64_t *shape);

/* Scalars as tensors of the given dtype, zero-d, unscoped in the engine. */
amp_tensor *amp__scalar_tensor(amp_dtype dt, double v);

/* A one-input op's opening: autocast for op (amp__autocast_dev with in =
 * {*x}; in[0] and *x become what the op computes on, on amp__dev(*x)), and
 * that device's backend. *mask: for amp__op_end, or -1 when autocast failed
 * (the error set, nothing to undo: return NULL). NULL (with the error) when
 * autocast failed or the device has no backend (then end through
 * amp__op_end). */
const amp_backend *amp__op_begin1(const char *fn, amp_op_id op, amp_tensor **x, amp_tensor **in, int *mask);

/* The same for a one-input op over one dim of a float x: first the checks
 * (x a float tensor, dim one of its dims: *d from 0), *mask -1 when one
 * fails. */
const amp_backend *amp__op_begin_dim(const char *fn, amp_op_id op, amp_tensor **x, int dim, int *d, amp_tensor **in,
                                     int *mask);

/* ---- the end of an op's forward (every op's epilogue) --------------------------------- */
/* The one epilogue of an op's forward. ok: the backend computed out (false
 * after any failure; out may then be NULL). When ok and nd is not NULL, the
 * node (amp__node_record(fn, out, in, nin, nd), autograd/node.h); then the
 * temporaries tmp[0..ntmp) are released (NULL entries skipped; the node
 * holds its own aliases of what it saved) and in's autocast casts undone
 * (amp__autocast_done with mask). Returns out, or NULL with out freed when
 * !ok or the node could not be made. */
amp_tensor *amp__op_end(const char *fn, bool ok, amp_tensor *out, amp_tensor **in, int nin, int mask,
                        const amp_node_spec *nd, amp_tensor *const *tmp, int ntmp);

#endif
