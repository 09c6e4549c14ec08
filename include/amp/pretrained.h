/* amp/pretrained.h — Hugging Face model directories: config.json plus the
 * weights in safetensors, one file (model.safetensors) or sharded
 * (model.safetensors.index.json naming each tensor's shard).
 *
 * Opening validates everything before anything is used: config.json is a
 * JSON object; every safetensors file is read and checked as
 * amp_safetensors_read checks one (header, dtypes, offsets, CRC); for a
 * sharded model the index's "weight_map" is an object of tensor name ->
 * shard file name (a plain file name in the directory, no '/'), every shard
 * it names exists and is valid, every tensor it names is in the shard it
 * names, and no tensor is in two shards or in a shard without the index
 * naming it. Errors name the function, the file and the problem. When both
 * model.safetensors and the index are present the single file is used (as
 * transformers does).
 *
 * Tensors are looked up by their file names ("embeddings.word_embeddings.weight")
 * and converted to the dtype the caller loads them in. docs/pretrained.md. */
#ifndef AMP_PRETRAINED_H
#define AMP_PRETRAINED_H

#include "amp/checkpoint.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct amp_hf_dir amp_hf_dir;
/* Opens and validates the directory (see above); NULL with the error. */
AMP_API amp_hf_dir *amp_hf_dir_open(const char *dir);
AMP_API void amp_hf_dir_close(amp_hf_dir *d); /* NULL ok */
AMP_API const char *amp_hf_dir_path(const amp_hf_dir *d);

/* config.json values by key; nested keys with '.' ("text_config.hidden_size").
 * Errors name the function, the key and the file: absent, or another type.
 * int: a JSON number that is an integer in int64's exact range (2^53);
 * float: any JSON number; str: a JSON string (valid while d is open);
 * bool: true/false. */
AMP_API amp_status amp_hf_config_int(const amp_hf_dir *d, const char *key, int64_t *out);
AMP_API amp_status amp_hf_config_float(const amp_hf_dir *d, const char *key, double *out);
AMP_API amp_status amp_hf_config_str(const amp_hf_dir *d, const char *key, const char **out);
AMP_API amp_status amp_hf_config_bool(const amp_hf_dir *d, const char *key, bool *out);
AMP_API bool amp_hf_config_has(const amp_hf_dir *d, const char *key); /* present and not null */
/* The same on another JSON file of the directory ("sentence_bert_config.json",
 * "tokenizer_config.json"; a plain file name), read at each call:
 * AMP_ERR_IO when the file is absent (a default applies), AMP_ERR_FORMAT
 * when it is not a JSON object or the key is absent or of another type. */
AMP_API amp_status amp_hf_file_int(const amp_hf_dir *d, const char *file, const char *key, int64_t *out);
AMP_API amp_status amp_hf_file_bool(const amp_hf_dir *d, const char *file, const char *key, bool *out);

/* The tensors of all files, sorted by name. */
AMP_API int amp_hf_dir_tensor_count(const amp_hf_dir *d);
AMP_API const char *amp_hf_dir_tensor_name(const amp_hf_dir *d, int i);
AMP_API bool amp_hf_dir_has_tensor(const amp_hf_dir *d, const char *name);
/* The tensor's safetensors entry (dtype, shape, bytes inside the loaded file),
 * valid while d is open. */
AMP_API amp_status amp_hf_dir_tensor_info(const amp_hf_dir *d, const char *name, amp_safetensors_info *out);
/* A new tensor holding the named tensor converted to dt (f32, f16 or bf16;
 * the file's must be a float dtype), in the current scope; when want_ndim >
 * 0 its shape must be exactly (want_ndim, want_dims), checked before
 * anything is allocated. Errors name the tensor and the file. */
AMP_API amp_tensor *amp_hf_dir_get(const amp_hf_dir *d, const char *name, amp_dtype dt, int want_ndim,
                                   const int64_t *want_dims);

#ifdef __cplusplus
}
#endif
#endif
