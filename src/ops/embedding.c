/* embedding: rows of weight [V, D] gathered by i32/i64 indices of any shape
 * -> [..., D] in weight's dtype. The gradient scatter-adds the upstream rows
 * into a [V, D] weight gradient (f32 accumulation; in a half weight's dtype,
 * each row rounded once). Both run through the backend of the tensors'
 * device (embedding / embedding_backward); indices on the CPU are checked
 * here, before anything runs, and device indices by the backend's
 * check_index (reported at the next synchronisation; the device kernels
 * never read outside the table). */
#include <string.h>

#include "kernels/backend.h"
#include "ops/op_util.h"

static int64_t index_at(const amp_tensor *idx, int64_t flat) {
    const void *p = amp__elem_ptr(idx, flat);
    return idx->dtype == AMP_I64 ? *(const int64_t *)p : (int64_t) * (const int32_t *)p;
}

static amp_status embedding_backward(amp_node *n, amp_tensor *const *gout, amp_tensor **gin) {
    const amp_tensor *idx = n->saved[0];
    amp_edge *e = &n->inputs[0];
    const amp_backend *be = amp__backend_of(n->name, idx);
    if (!be) return amp_last_status();
    return AMP_KCALL(be, gather, embedding_backward, n->name, idx, gout[0], e->shape[0], e->shape[1], e->dtype, &gin[0]);
}

amp_tensor *amp_embedding(amp_tensor *weight, amp_tensor *indices) {
    static const char *fn = "amp_embedding";
    if (!amp__check_float(fn, weight, "weight") || !amp__check_index_dev(fn, indices, "indices")) return NULL;
    if (!amp__check_ndim(fn, weight, "weight", 2, 2)) return NULL;
    if (indices->ndim + 1 > AMP_MAX_DIMS)
        return amp_error_null(AMP_ERR_SHAPE, "%s: indices have %d dims; the result would have more than %d", fn,
                              indices->ndim, AMP_MAX_DIMS);
    const amp_tensor *both[2] = {weight, indices};
    static const char *const names[2] = {"weight", "indices"};
    amp_device dev;
    if (amp__same_device(fn, both, names, 2, &dev) != AMP_OK) return NULL;
    const amp_backend *be = amp__backend(fn, dev);
    if (!be) return NULL;
    int64_t V = weight->shape[0], D = weight->shape[1], cnt = amp_tensor_numel(indices);
    if (dev == AMP_DEVICE_CPU) {
        for (int64_t i = 0; i < cnt; i++) {
            int64_t v = index_at(indices, i);
            if (v < 0 || v >= V) {
                char b[AMP_SHAPE_BUF];
                return amp_error_null(AMP_ERR_RANGE,
                                      "%s: index %lld (element %lld of indices) is out of range for weight of shape %s "
                                      "(valid: 0 to %lld)",
                                      fn, (long long)v, (long long)i,
                                      amp__shape_fmt(weight->ndim, weight->shape, b, sizeof b), (long long)V - 1);
            }
        }
    } else if (AMP_KCALL(be, dev, check_index, fn, "index", indices, V, INT64_MIN) != AMP_OK) {
        return NULL;
    }
    amp_tensor *in[2] = {weight, indices};
    int mask = amp__autocast_dev(AMP_OP_EMBEDDING, in, 2, &dev);
    if (mask < 0) return NULL;
    weight = in[0];
    int64_t shape[AMP_MAX_DIMS];
    memcpy(shape, indices->shape, sizeof(int64_t) * (size_t)indices->ndim);
    shape[indices->ndim] = D;
    amp_tensor *out = amp__empty_out_on(fn, dev, weight->dtype, indices->ndim + 1, shape);
    if (!out) goto done;
    if (cnt > 0 && D > 0 && AMP_KCALL(be, gather, embedding, fn, weight, indices, out) != AMP_OK) {
        amp_tensor_free(out);
        out = NULL;
        goto done;
    }
    /* the node's one input is the weight (in[1], the indices, has no gradient) */
    amp_node_spec spec = {.backward = embedding_backward, .nsave = 1, .save = {indices}};
    if (amp__node_record(fn, out, in, 1, &spec) != AMP_OK) {
        amp_tensor_free(out);
        out = NULL;
    }
done:
    amp__autocast_done(in, 2, mask);
    return out;
}
