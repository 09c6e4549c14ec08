/* amp/checkpoint.h — safetensors files, model checkpoints and the training
 * state for exact resume.
 *
 * safetensors (the format PyTorch and the Hugging Face ecosystem use): an
 * 8-byte little-endian header length N, N bytes of JSON, then the data
 * section. The JSON maps each tensor name to {"dtype", "shape",
 * "data_offsets": [begin, end]} (offsets relative to the data section) and may
 * hold "__metadata__", a map of strings. amp writes the header padded with
 * spaces to a multiple of 8 bytes, tensors sorted by name, and records the
 * CRC-32 of the data section in the metadata ("data_crc32"), which the reader
 * checks when present.
 *
 * Reading validates everything before anything is used: the header length
 * (at most 100 MB and within the file), the JSON (cJSON), each entry's
 * dtype, shape and offsets, byte counts equal to dtype size × elements,
 * offsets inside the data section, contiguous and non-overlapping, no
 * duplicate names. Errors name the file, the tensor and the problem.
 *
 * Every file is written to "<path>.tmp" in the same directory, flushed and
 * fsync'ed, renamed over <path>, and the directory is fsync'ed: a crash leaves
 * either the old file or the new one, never a mix. docs/checkpoints.md. */
#ifndef AMP_CHECKPOINT_H
#define AMP_CHECKPOINT_H

#include "amp/io.h"
#include "amp/nn.h"
#include "amp/scaler.h"

#ifdef __cplusplus
extern "C" {
#endif

#define AMP_SAFETENSORS_MAX_HEADER ((uint64_t)100 * 1000 * 1000) /* bytes of JSON */

/* ---- safetensors ----------------------------------------------------------- */
typedef struct amp_safetensors amp_safetensors;

typedef struct {
    const char *name;
    const char *dtype_name; /* as in the file: "F32", "BF16", "I64", "BOOL", ... */
    amp_dtype dtype;        /* amp's dtype, AMP_DTYPE_COUNT when amp has none (BOOL, I16, U64 ...) */
    int ndim;
    int64_t shape[AMP_MAX_DIMS];
    int64_t numel;
    uint64_t begin, end;    /* data_offsets, relative to the data section */
    const void *data;       /* the tensor's little-endian bytes inside the loaded file */
} amp_safetensors_info;

/* Reads and validates a whole file (and its data_crc32 when recorded). */
AMP_API amp_safetensors *amp_safetensors_read(const char *path);
/* The same on a file image in memory (copied); name is used in messages. */
AMP_API amp_safetensors *amp_safetensors_parse(const void *buf, size_t len, const char *name);
AMP_API void amp_safetensors_free(amp_safetensors *f);

/* Tensors in data-offset order (the order of the data section). */
AMP_API int amp_safetensors_count(const amp_safetensors *f);
AMP_API amp_status amp_safetensors_info_at(const amp_safetensors *f, int i, amp_safetensors_info *out);
AMP_API int amp_safetensors_find(const amp_safetensors *f, const char *name); /* index or -1 */
/* A new tensor (caller owns it) holding a copy of the named tensor. */
AMP_API amp_tensor *amp_safetensors_get(const amp_safetensors *f, const char *name);
/* "__metadata__": count, i-th key, value of a key (NULL when absent). */
AMP_API int amp_safetensors_meta_count(const amp_safetensors *f);
AMP_API const char *amp_safetensors_meta_key(const amp_safetensors *f, int i);
AMP_API const char *amp_safetensors_meta(const amp_safetensors *f, const char *key);
/* Sizes: the whole file, the JSON header (N), the data section. */
AMP_API uint64_t amp_safetensors_file_bytes(const amp_safetensors *f);
AMP_API uint64_t amp_safetensors_header_bytes(const amp_safetensors *f);
AMP_API uint64_t amp_safetensors_data_bytes(const amp_safetensors *f);
/* Whether the file recorded data_crc32 (then it was checked when reading). */
AMP_API bool amp_safetensors_has_crc(const amp_safetensors *f);

/* Metadata entry for writers. */
typedef struct {
    const char *key;
    const char *value;
} amp_kv;

/* Writes n named tensors (any strides; stored contiguous, little-endian, in
 * their own dtype) and the metadata, atomically. Names must be unique, not
 * empty and not "__metadata__"; the key "data_crc32" is added by the writer. */
AMP_API amp_status amp_safetensors_write(const char *path, amp_tensor *const *tensors, const char *const *names, int n,
                                 const amp_kv *meta, int n_meta);
/* The same file image in memory (malloc'd; free() it). */
AMP_API amp_status amp_safetensors_encode(amp_tensor *const *tensors, const char *const *names, int n, const amp_kv *meta,
                                  int n_meta, void **buf, size_t *len);

/* ---- models -------------------------------------------------------------------- */
/* Saves amp_module_state (parameters and buffers, state_dict names, each in
 * its own dtype) to a safetensors file, with optional metadata. */
AMP_API amp_status amp_model_save(amp_module *m, const char *path, const amp_kv *meta, int n_meta);
/* Loads a file written by amp_model_save or by PyTorch (a state_dict saved
 * with safetensors) into m: every tensor of the module must be present with
 * the same shape, and the file may hold no others (torch's strict=True).
 * Float tensors are converted to the module's dtype (round to nearest even),
 * integer tensors to its integer dtype. Nothing is changed unless all
 * tensors check. */
AMP_API amp_status amp_model_load(amp_module *m, const char *path);
AMP_API amp_status amp_module_load_safetensors(amp_module *m, const amp_safetensors *f);

/* ---- training state (exact resume) ---------------------------------------------
 * A checkpoint directory holds two files:
 *   model.safetensors           the module's state (amp_model_save)
 *   training_state.safetensors  optimizer moments, f32 master weights,
 *                               per-parameter and global step counts, the
 *                               stochastic-rounding position, GradScaler state,
 *                               generator and loader position, step, epoch
 * Both carry the same "checkpoint_id"; a save writes both temporary files,
 * then renames model, then training state, so a crash between the renames is
 * repaired (rolled forward) by the next save; open reads such a directory
 * as the new checkpoint without changing it.
 *
 * One writer per directory: a save takes an exclusive advisory lock
 * (flock on DIR/.amp.lock) unless this process holds it already; a run
 * that saves repeatedly holds it from start to end with
 * amp_checkpoint_lock_dir, so a second run on the same directory is refused
 * at once ("in use by another process (pid N)") instead of overwriting the
 * first one's saves mid-run. The lock dies with the process (kill -9
 * included). Readers (open, restore, amp inspect) take no lock and never
 * change the directory. */
typedef struct {
    amp_module *model;           /* required */
    amp_optim *const *optims;    /* may be empty; parameters are named by model */
    int n_optims;
    amp_scaler *scaler;          /* may be NULL (a disabled scaler is skipped) */
    amp_generator *gen;          /* may be NULL (e.g. the dropout generator) */
    amp_loader *loader;          /* may be NULL: position saved / sought */
    int64_t step;                /* saved; restored by amp_checkpoint_restore */
    const amp_kv *meta;          /* extra metadata (saved into both files) */
    int n_meta;
} amp_train_state;

AMP_API amp_status amp_checkpoint_save(const char *dir, const amp_train_state *s);

typedef struct amp_checkpoint_lock amp_checkpoint_lock;
/* Creates dir if needed and locks it for this process (AMP_ERR_STATE naming
 * the directory and the holder's pid when another process, or this one,
 * already holds it). */
AMP_API amp_checkpoint_lock *amp_checkpoint_lock_dir(const char *dir);
AMP_API void amp_checkpoint_unlock(amp_checkpoint_lock *l);

typedef struct amp_checkpoint amp_checkpoint;
/* Opens dir for reading: reads and validates both files and checks their
 * ids agree; when a save was interrupted (or is in progress) between its
 * two renames, the training state is read from the temporary file that
 * completes it. Never renames, writes or locks anything. */
AMP_API amp_checkpoint *amp_checkpoint_open(const char *dir);
AMP_API void amp_checkpoint_close(amp_checkpoint *c);
/* Metadata of the training-state file (the trainer's keys included). */
AMP_API const char *amp_checkpoint_meta(const amp_checkpoint *c, const char *key);
AMP_API const amp_safetensors *amp_checkpoint_model_file(const amp_checkpoint *c);
AMP_API const amp_safetensors *amp_checkpoint_state_file(const amp_checkpoint *c);
AMP_API int64_t amp_checkpoint_step(const amp_checkpoint *c);
/* Restores everything s points to; s->step receives the saved step. The
 * optimizers must match the saved ones (count, kind, master weights,
 * parameters and shapes), and every value is checked before anything
 * changes: weights, buffers, moments and master weights finite (second
 * moments and running variances >= 0), step counts in [0, 2^62] (a
 * parameter's at most its optimizer's), the scaler's scale and factors in
 * the f32 range and consistent (min_scale <= scale <= max_scale), loader
 * position in range; the message names the key. */
AMP_API amp_status amp_checkpoint_restore(const amp_checkpoint *c, amp_train_state *s);

#ifdef __cplusplus
}
#endif
#endif
