/* amp/io.h — datasets: IDX files (MNIST / Fashion-MNIST format), plain or
 * gzipped; a seeded batch loader. */
#ifndef AMP_IO_H
#define AMP_IO_H

#include "amp/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* IDX element types (the third magic byte). */
typedef enum {
    AMP_IDX_U8 = 0x08,
    AMP_IDX_I8 = 0x09,
    AMP_IDX_I16 = 0x0B,
    AMP_IDX_I32 = 0x0C,
    AMP_IDX_F32 = 0x0D,
    AMP_IDX_F64 = 0x0E
} amp_idx_type;

typedef struct {
    amp_idx_type type;
    int ndim;
    int64_t dims[AMP_MAX_DIMS];
    void *data;    /* elements in host byte order */
    size_t nbytes;
} amp_idx;

/* Reads a plain or gzipped IDX file (detected from its content). Validates
 * the magic, the rank, the dimensions and that the data is exactly
 * dims × element size bytes; a truncated or corrupt file is an error naming
 * the file and the problem. Sizes above 4 GiB are refused. */
AMP_API amp_status amp_idx_load(const char *path, amp_idx *out);
/* The same checks on an uncompressed IDX image in memory (name is used in
 * messages). */
AMP_API amp_status amp_idx_parse(const void *buf, size_t len, const char *name, amp_idx *out);
AMP_API void amp_idx_free(amp_idx *idx);

/* An image classification set: n images of h×w u8 pixels, n u8 labels.
 * Images may instead be f32 (fimages, IDX type 0x0D): the loader uses those
 * values as they are, where u8 pixels are divided by 255. */
typedef struct {
    int64_t n, h, w;
    int64_t num_classes; /* 1 + max label */
    uint8_t *images;     /* NULL when fimages holds the pixels */
    uint8_t *labels;
    float *fimages;      /* f32 images, or NULL */
} amp_dataset;

/* Loads an images file (u8 or f32, rank 3) and a labels file (u8, rank 1)
 * and checks that they agree. limit > 0 keeps only the first limit examples. */
AMP_API amp_status amp_dataset_load(const char *images, const char *labels, int64_t limit, amp_dataset *out);
AMP_API void amp_dataset_free(amp_dataset *ds);
/* Fashion-MNIST from the Debian package dataset-fashion-mnist (or the
 * directory in $AMP_DATA_DIR): split "train" or "test". */
AMP_API amp_status amp_fashion_mnist_load(const char *split, int64_t limit, amp_dataset *out);
AMP_API const char *amp_fashion_mnist_dir(void);

/* Batches of x [B,1,h,w] f32 (pixels scaled to [0,1], then (x-mean)/std when
 * std > 0) and y [B] i64. Shuffled per epoch with a counter-based generator
 * seeded by `seed` (same seed, same order, on any machine). */
typedef struct {
    int64_t batch;
    bool shuffle;
    bool drop_last;
    uint64_t seed;
    double mean, std; /* std 0: no normalisation */
    /* Data parallel (torch's DistributedSampler): with num_shards > 1 each
     * call returns shard `shard` of the global batch of `batch` examples:
     * rows [shard * b / n ...) of it, the first (b mod n) shards one row
     * longer, so the union over shards is exactly the batch a single
     * loader returns (same order, same epochs, same position). A shard of
     * a short last batch may be empty (0 rows). 0 or 1: no sharding. */
    int64_t num_shards, shard;
} amp_loader_opts;

typedef struct amp_loader amp_loader;
AMP_API amp_loader *amp_loader_new(const amp_dataset *ds, const amp_loader_opts *o);
AMP_API void amp_loader_free(amp_loader *l);
/* Starts epoch e (reshuffles deterministically for e). */
AMP_API amp_status amp_loader_start_epoch(amp_loader *l, int64_t epoch);
/* Next batch (new tensors in the current scope); false at the end of the
 * epoch. */
AMP_API bool amp_loader_next(amp_loader *l, amp_tensor **x, amp_tensor **y);
AMP_API int64_t amp_loader_batches_per_epoch(const amp_loader *l);
/* Rows of the whole (global) batch the last amp_loader_next drew, before
 * sharding: scale a shard's mean loss by rows * num_shards / global_rows
 * when shards are unequal. 0 before the first batch. */
AMP_API int64_t amp_loader_last_global_rows(const amp_loader *l);
/* Position for checkpoints: epoch and next batch index; restoring it
 * reproduces the same remaining batches. */
AMP_API void amp_loader_position(const amp_loader *l, int64_t *epoch, int64_t *batch);
AMP_API amp_status amp_loader_seek(amp_loader *l, int64_t epoch, int64_t batch);

#ifdef __cplusplus
}
#endif
#endif
