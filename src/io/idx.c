/* IDX files (the MNIST format): magic 0 0 type rank, rank big-endian u32
 * dimensions, then the elements big-endian. Plain or gzip, through zlib. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "amp/io.h"
#include "core/checked.h"
#include "core/error.h"
#include "io/io_util.h"

#define IDX_MAX_BYTES ((size_t)4 << 30)

static size_t type_size(int t) {
    switch (t) {
    case AMP_IDX_U8:
    case AMP_IDX_I8: return 1;
    case AMP_IDX_I16: return 2;
    case AMP_IDX_I32:
    case AMP_IDX_F32: return 4;
    case AMP_IDX_F64: return 8;
    default: return 0;
    }
}

static uint32_t be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* Validates a header; fills out (except data) and the expected data bytes. */
static amp_status parse_header(const unsigned char *h, size_t avail, const char *fn, const char *name, amp_idx *out,
                               size_t *hdr_len, size_t *data_len) {
    if (avail < 4)
        return amp_error(AMP_ERR_FORMAT, "%s: %s: truncated: %zu bytes, an IDX header needs at least 4", fn, name, avail);
    if (h[0] != 0 || h[1] != 0)
        return amp_error(AMP_ERR_FORMAT, "%s: %s: not an IDX file (magic bytes %02x %02x, expected 00 00)", fn, name, h[0], h[1]);
    size_t es = type_size(h[2]);
    if (!es) return amp_error(AMP_ERR_FORMAT, "%s: %s: unknown IDX element type 0x%02x", fn, name, h[2]);
    int rank = h[3];
    if (rank < 1 || rank > AMP_MAX_DIMS)
        return amp_error(AMP_ERR_FORMAT, "%s: %s: rank %d is outside [1, %d]", fn, name, rank, AMP_MAX_DIMS);
    size_t hl = 4 + 4 * (size_t)rank;
    if (avail < hl)
        return amp_error(AMP_ERR_FORMAT, "%s: %s: truncated header: %zu bytes, rank %d needs %zu", fn, name, avail, rank, hl);
    amp_ck ck = AMP_CK(fn, "data size");
    int64_t total = (int64_t)es;
    memset(out, 0, sizeof *out);
    out->type = (amp_idx_type)h[2];
    out->ndim = rank;
    for (int i = 0; i < rank; i++) {
        uint32_t d = be32(h + 4 + 4 * i);
        if (d > 0x7fffffffu) return amp_error(AMP_ERR_FORMAT, "%s: %s: dimension %d is %u (too large)", fn, name, i, d);
        out->dims[i] = d;
        total = amp_ck_mul(&ck, total, (int64_t)d); /* <= 4 GiB * 2^31: cannot fail */
        if (!ck.ok) return amp_last_status();
        if ((uint64_t)total > IDX_MAX_BYTES)
            return amp_error(AMP_ERR_FORMAT, "%s: %s: data would be more than 4 GiB (dimensions too large)", fn, name);
    }
    *hdr_len = hl;
    *data_len = (size_t)total;
    return AMP_OK;
}

static void to_host(amp_idx *idx) {
    size_t es = type_size(idx->type);
    if (es == 1) return;
    unsigned char *p = idx->data;
    for (size_t i = 0; i < idx->nbytes; i += es)
        for (size_t a = 0, b = es - 1; a < b; a++, b--) {
            unsigned char t = p[i + a];
            p[i + a] = p[i + b];
            p[i + b] = t;
        }
}

amp_status amp_idx_parse(const void *buf, size_t len, const char *name, amp_idx *out) {
    static const char *fn = "amp_idx_parse";
    if (!out) return amp_error(AMP_ERR_ARG, "%s: out is NULL", fn);
    memset(out, 0, sizeof *out);
    if (!buf && len) return amp_error(AMP_ERR_ARG, "%s: buf is NULL", fn);
    if (!name) name = "(memory)";
    size_t hl, dl;
    amp_idx tmp;
    amp_status st = parse_header(buf, len, fn, name, &tmp, &hl, &dl);
    if (st) return st;
    if (len - hl != dl)
        return amp_error(AMP_ERR_FORMAT, "%s: %s: %s: the header announces %zu data bytes, the file holds %zu", fn, name,
                         len - hl < dl ? "truncated" : "trailing bytes", dl, len - hl);
    tmp.data = malloc(dl ? dl : 1);
    if (!tmp.data) return amp_error(AMP_ERR_NOMEM, "%s: %s: out of memory for %zu bytes", fn, name, dl);
    memcpy(tmp.data, (const unsigned char *)buf + hl, dl);
    tmp.nbytes = dl;
    to_host(&tmp);
    *out = tmp;
    return AMP_OK;
}

/* Reads up to n bytes; returns bytes read or -1 with the error set. */
static long long gz_read_all(gzFile f, void *dst, size_t n, const char *fn, const char *path) {
    size_t got = 0;
    while (got < n) {
        unsigned chunk = (unsigned)((n - got) > (1u << 30) ? (1u << 30) : (n - got));
        int r = gzread(f, (char *)dst + got, chunk);
        if (r < 0) {
            int errnum;
            const char *m = gzerror(f, &errnum);
            amp_error(AMP_ERR_FORMAT, "%s: %s: corrupt compressed data (%s)", fn, path, m ? m : "zlib error");
            return -1;
        }
        if (r == 0) break;
        got += (size_t)r;
    }
    return (long long)got;
}

amp_status amp_idx_load(const char *path, amp_idx *out) {
    static const char *fn = "amp_idx_load";
    if (!out) return amp_error(AMP_ERR_ARG, "%s: out is NULL", fn);
    memset(out, 0, sizeof *out);
    if (!path) return amp_error(AMP_ERR_ARG, "%s: path is NULL", fn);
    int fd = amp__open_regular(fn, path); /* a FIFO would block open() forever */
    if (fd < 0) return amp_last_status();
    gzFile f = gzdopen(fd, "rb");
    if (!f) {
        close(fd);
        return amp_error(AMP_ERR_IO, "%s: cannot open %s", fn, path);
    }
    unsigned char hdr[4 + 4 * AMP_MAX_DIMS];
    long long got = gz_read_all(f, hdr, 4, fn, path);
    amp_status st = AMP_OK;
    size_t hl = 0, dl = 0;
    amp_idx tmp;
    if (got < 0) goto fail_keep;
    if (got >= 4 && hdr[3] >= 1 && hdr[3] <= AMP_MAX_DIMS) {
        long long more = gz_read_all(f, hdr + 4, 4 * (size_t)hdr[3], fn, path);
        if (more < 0) goto fail_keep;
        got += more;
    }
    st = parse_header(hdr, (size_t)got, fn, path, &tmp, &hl, &dl);
    if (st) goto fail;
    tmp.data = malloc(dl ? dl : 1);
    if (!tmp.data) {
        st = amp_error(AMP_ERR_NOMEM, "%s: %s: out of memory for %zu bytes", fn, path, dl);
        goto fail;
    }
    got = gz_read_all(f, tmp.data, dl, fn, path);
    if (got < 0) {
        free(tmp.data);
        goto fail_keep;
    }
    if ((size_t)got != dl) {
        st = amp_error(AMP_ERR_FORMAT, "%s: %s: truncated: the header announces %zu data bytes, the file holds %lld", fn,
                       path, dl, got);
        free(tmp.data);
        goto fail;
    }
    char extra;
    long long tail = gz_read_all(f, &extra, 1, fn, path);
    if (tail != 0) {
        if (tail > 0) st = amp_error(AMP_ERR_FORMAT, "%s: %s: trailing bytes after the %zu data bytes", fn, path, dl);
        else st = amp_last_status();
        free(tmp.data);
        goto fail;
    }
    gzclose(f);
    tmp.nbytes = dl;
    to_host(&tmp);
    *out = tmp;
    return AMP_OK;
fail_keep:
    st = amp_last_status();
fail:
    gzclose(f);
    return st;
}

void amp_idx_free(amp_idx *idx) {
    if (!idx) return;
    free(idx->data);
    memset(idx, 0, sizeof *idx);
}

/* ---- datasets ---------------------------------------------------------------------- */
amp_status amp_dataset_load(const char *images, const char *labels, int64_t limit, amp_dataset *out) {
    static const char *fn = "amp_dataset_load";
    if (!out) return amp_error(AMP_ERR_ARG, "%s: out is NULL", fn);
    memset(out, 0, sizeof *out);
    if (limit < 0) return amp_error(AMP_ERR_ARG, "%s: limit %lld is negative", fn, (long long)limit);
    amp_idx im, lb;
    amp_status st = amp_idx_load(images, &im);
    if (st) return amp_error_chain(st, "%s: images", fn);
    st = amp_idx_load(labels, &lb);
    if (st) {
        amp_idx_free(&im);
        return amp_error_chain(st, "%s: labels", fn);
    }
    if ((im.type != AMP_IDX_U8 && im.type != AMP_IDX_F32) || im.ndim != 3) {
        st = amp_error(AMP_ERR_FORMAT, "%s: %s: expected u8 or f32 images of rank 3, got type 0x%02x rank %d", fn, images, im.type,
                       im.ndim);
        goto done;
    }
    if (lb.type != AMP_IDX_U8 || lb.ndim != 1) {
        st = amp_error(AMP_ERR_FORMAT, "%s: %s: expected u8 labels of rank 1, got type 0x%02x rank %d", fn, labels, lb.type, lb.ndim);
        goto done;
    }
    if (im.dims[0] != lb.dims[0]) {
        st = amp_error(AMP_ERR_FORMAT, "%s: %s has %lld images but %s has %lld labels", fn, images, (long long)im.dims[0],
                       labels, (long long)lb.dims[0]);
        goto done;
    }
    int64_t n = im.dims[0];
    if (limit > 0 && limit < n) n = limit;
    out->n = n;
    out->h = im.dims[1];
    out->w = im.dims[2];
    if (im.type == AMP_IDX_F32) out->fimages = im.data;
    else out->images = im.data;
    out->labels = lb.data;
    uint8_t maxl = 0;
    for (int64_t i = 0; i < n; i++)
        if (out->labels[i] > maxl) maxl = out->labels[i];
    out->num_classes = (int64_t)maxl + 1;
    return AMP_OK;
done:
    amp_idx_free(&im);
    amp_idx_free(&lb);
    return st;
}

void amp_dataset_free(amp_dataset *ds) {
    if (!ds) return;
    free(ds->images);
    free(ds->labels);
    free(ds->fimages);
    memset(ds, 0, sizeof *ds);
}

const char *amp_fashion_mnist_dir(void) {
    const char *d = getenv("AMP_DATA_DIR");
    return d && *d ? d : "/usr/share/datasets/fashion-mnist";
}

amp_status amp_fashion_mnist_load(const char *split, int64_t limit, amp_dataset *out) {
    if (!split || (strcmp(split, "train") && strcmp(split, "test")))
        return amp_error(AMP_ERR_ARG, "amp_fashion_mnist_load: split '%s' is not train or test", split ? split : "(null)");
    const char *dir = amp_fashion_mnist_dir();
    const char *pre = strcmp(split, "train") == 0 ? "train" : "t10k";
    /* paths of any length ($AMP_DATA_DIR was cut off at ~995 characters) */
    size_t n = strlen(dir) + 64;
    char *im = malloc(n), *lb = malloc(n);
    if (!im || !lb) {
        free(im);
        free(lb);
        return amp_error(AMP_ERR_NOMEM, "amp_fashion_mnist_load: out of memory");
    }
    snprintf(im, n, "%s/%s-images-idx3-ubyte.gz", dir, pre);
    snprintf(lb, n, "%s/%s-labels-idx1-ubyte.gz", dir, pre);
    amp_status st = amp_dataset_load(im, lb, limit, out);
    free(im);
    free(lb);
    if (st) return amp_error_chain(st, "amp_fashion_mnist_load");
    return AMP_OK;
}
