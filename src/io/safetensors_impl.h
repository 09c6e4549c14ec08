/* Internal: the pieces of the safetensors writer that checkpoint.c needs to
 * commit two files as one checkpoint. */
#ifndef AMP_IO_SAFETENSORS_IMPL_H
#define AMP_IO_SAFETENSORS_IMPL_H

#include "amp/checkpoint.h"

/* Writes the file image to `path` (no rename), flushed and fsync'ed. fn names
 * the public caller in errors. */
amp_status amp__st_write_file(const char *fn, const char *path, amp_tensor *const *tensors, const char *const *names, int n,
                              const amp_kv *meta, int n_meta);
/* rename(from, to), then fsync the directory holding `to`. */
amp_status amp__rename_durable(const char *fn, const char *from, const char *to);
/* Reads only the header of a safetensors file and returns a malloc'd copy of
 * metadata value `key` (NULL when absent or unreadable; no error set). */
char *amp__st_peek_meta(const char *path, const char *key);

/* The tensors of a module's state as a file holds them: each tensor once,
 * under its first state_dict name (a tied parameter's other names are
 * aliases). *ts and *names are malloc'd (free both); returns the count or -1. */
int amp__module_file_state(const char *fn, amp_module *m, amp_tensor ***ts, const char ***names);

/* Adds prefix (the call and what it worked on) to the thread's last error as
 * its context, after it: amp_error_chain. Returns st. */
amp_status amp__error_wrap(amp_status st, const char *prefix);

#endif
