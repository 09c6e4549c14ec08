/* The amp command: one file per subcommand, one table in main.c. */
#ifndef AMP_CLI_H
#define AMP_CLI_H

#include <stdio.h>

#include "amp/amp.h"

/* Exit codes of every subcommand. */
enum { CLI_OK = 0, CLI_FAIL = 1, CLI_USAGE = 2 };

typedef struct {
    const char *name;
    const char *summary;
    int (*run)(int argc, char **argv); /* argv[0] is the subcommand name */
    void (*usage)(FILE *f);
} cli_command;

/* Helpers shared by the subcommands (cli_util.c). */
int cli_usage_error(void (*usage)(FILE *), const char *fmt, ...);
int cli_fail(const char *fmt, ...);
int cli_is_help(const char *arg);
/* Strict number parsing: the whole string must be a number in range. */
int cli_parse_long(const char *s, long lo, long hi, long *out);
int cli_parse_double(const char *s, double *out);
/* A comma-separated list of load dtypes ("f32,bf16,q8_0": amp_load_dtype_parse's spellings) into
 * out[0..max): the count (>= 1), or -1 with the reason in why (a word that is not a load dtype, one
 * named twice, more than max, an empty list). */
int cli_parse_load_dtypes(const char *s, amp_load_dtype *out, int max, char *why, size_t nwhy);
/* An inference pass over a loader: cli_eval_begin puts m in eval mode under
 * no_grad and returns whether it was training (cli_eval_end(m, was) undoes
 * both); cli_next_batch gives the next batch in its own scope, which the
 * caller ends, or NULL when the loader is done (nothing left open). */
bool cli_eval_begin(amp_module *m);
void cli_eval_end(amp_module *m, bool was);
amp_scope *cli_next_batch(amp_loader *l, amp_tensor **x, amp_tensor **y);
/* The shortest decimal that reads back as v (%.Ng, N from 1 to 17): "0.1",
 * not 0.10000000000000001; returned by value for use inside a call:
 * printf("%s", cli_num(v).s). */
typedef struct {
    char s[32];
} cli_num_text;
cli_num_text cli_num(double v);
/* One line per compute precision saying how matrix products run on this CPU
 * path (bf16: the native vdpbf16ps dot product or widened; fp16: widened;
 * f32: FMA, or one bf16 pass with matmul precision "medium"), each prefixed
 * by indent. which: any of "fp32", "fp16", "bf16" (NULL: all three). */
void cli_print_precision_notes(FILE *f, const char *indent, const char *which);
/* "1.25 MiB" */
const char *fmt_bytes(size_t b, char *buf, size_t n);

int cmd_formats(int argc, char **argv);
void cmd_formats_usage(FILE *f);
int cmd_train(int argc, char **argv);
void cmd_train_usage(FILE *f);
int cmd_compare(int argc, char **argv);
void cmd_compare_usage(FILE *f);
int cmd_memory(int argc, char **argv);
void cmd_memory_usage(FILE *f);
int cmd_autocast(int argc, char **argv);
void cmd_autocast_usage(FILE *f);
int cmd_inspect(int argc, char **argv);
void cmd_inspect_usage(FILE *f);
int cmd_predict(int argc, char **argv);
void cmd_predict_usage(FILE *f);
int cmd_embed(int argc, char **argv);
void cmd_embed_usage(FILE *f);
int cmd_generate(int argc, char **argv);
void cmd_generate_usage(FILE *f);
int cmd_eval(int argc, char **argv);
void cmd_eval_usage(FILE *f);
int cmd_bench(int argc, char **argv);
void cmd_bench_usage(FILE *f);
/* The bench parts' names, each after sep (the first after first). */
void cmd_bench_list(FILE *f, const char *first, const char *sep);
/* bench parts: argv[0] is the part name; each handles its own --help. */
int cmd_bench_convert(int argc, char **argv);
int cmd_bench_gemm(int argc, char **argv);
int cmd_bench_precision(int argc, char **argv);
int cmd_bench_train(int argc, char **argv);
int bench_train_gpt(int argc, char **argv); /* amp bench train --model gpt (cmd_bench_train_gpt.c) */
int cmd_bench_gpt(int argc, char **argv);   /* amp bench gpt: the same */
int bench_gpt_cuda(int argc, char **argv);  /* amp bench gpt --device cuda (cmd_bench_gpt_cuda.c) */
int cmd_bench_kernels(int argc, char **argv);
int cmd_bench_quant(int argc, char **argv);
int cmd_bench_attention(int argc, char **argv);
int cmd_bench_dist(int argc, char **argv);
int cmd_bench_load(int argc, char **argv);
int cmd_bench_infer(int argc, char **argv);

#endif
