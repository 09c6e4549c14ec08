/* The load dtype and compute precision of a GPT in the commands that run one
 * (amp generate): the seeds' three dtypes, the file's, the load's and the
 * compute's, made explicit. */
#ifndef AMP_CLI_GPT_DTYPES_H
#define AMP_CLI_GPT_DTYPES_H

#include <stdbool.h>
#include <stddef.h>

#include "amp/amp.h"

typedef struct {
    amp_load_dtype load; /* AMP_LOAD_KEEP: the file's */
    amp_dtype compute;   /* AMP_F32: no autocast; AMP_BF16 / AMP_F16: an autocast region around every forward */
} cli_gpt_dtypes;

/* --load-dtype (NULL: not given) and --precision (fp32|bf16|fp16) of command
 * cmd, checked before anything is loaded. Without --load-dtype, a half
 * precision loads the weights in that dtype too (what --precision alone
 * always did: half weights, no per-token casts); otherwise the file's dtype is
 * kept. 0, or CLI_USAGE with the usage printed by usage. */
int cli_gpt_dtypes_parse(const char *cmd, const char *load, const char *prec, cli_gpt_dtypes *out, void (*usage)(FILE *));
/* Converts m into the load dtype (amp_gpt_set_load_dtype: once, at load) and
 * sets its forward's autocast region for a half compute precision; label
 * (n bytes) receives "load bf16, compute bf16". */
amp_status cli_gpt_dtypes_apply(amp_module *m, const cli_gpt_dtypes *d, char *label, size_t n);

/* Whether path is a directory holding a config.json whose model_type is
 * "gpt2" (a Hugging Face GPT-2: amp_gpt_from_pretrained reads it). */
bool cli_is_gpt2_dir(const char *path);

#endif
