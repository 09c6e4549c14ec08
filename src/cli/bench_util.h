/* Shared pieces of the `amp bench` subcommands: timing, memcpy bandwidth,
 * JSON output (cJSON), and the markdown-ish tables they print. */
#ifndef AMP_CLI_BENCH_UTIL_H
#define AMP_CLI_BENCH_UTIL_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "cli/trainer.h"

/* The options the bench commands share, taken by bench_option. */
typedef struct {
    long threads;       /* --threads T, 1..1024 (0: not given; -1: the command has none) */
    const char *json;   /* --json FILE (NULL: none) */
    const char *script; /* --torch-script PATH; NULL: the command has neither it nor --no-torch */
    bool no_torch;      /* --no-torch */
    bool help;          /* --help or -h came: the usage is printed, the command returns CLI_OK */
} bench_opts;
/* Takes argv[*i] (and its value, moving *i past it) when it is --help (the
 * usage printed to stdout, o->help set) or one of o's options with a valid
 * value: true. false: the command's own option, or a bad one (a shared
 * option with a bad or missing value included, refused by the caller's
 * "bad option" as before). */
bool bench_option(bench_opts *o, int argc, char **argv, int *i, void (*usage)(FILE *));

/* Monotonic wall clock in seconds. */
double bench_now(void);
/* Median of n samples (sorts in place). */
double bench_median(double *v, int n);
/* Median of the positive values among v[0..n) (v is left as it is; -1
 * marks a round not measured): -1 when there are none. */
double bench_median_pos(const double *v, int n);
/* Median of v[0..n) (v is left as it is). */
double bench_median_of(const double *v, int n);
/* The lowest and highest of v[0..n), n >= 1. */
void bench_minmax(const double *v, int n, double *lo, double *hi);
/* Adds "ms_per_step_min" and "ms_per_step_max", the lowest and highest of
 * the rounds' v[0..n), to o. */
void bench_json_range(cJSON *o, const double *v, int n);
/* Runs fn(arg) repeatedly: warm-up, then at least min_reps runs and at least
 * min_seconds of total time; returns the median seconds per run. */
double bench_time(void (*fn)(void *), void *arg, int min_reps, double min_seconds);
/* memcpy bandwidth (GB/s, counting read + write bytes) over a buffer of the
 * given size, using the current OpenMP thread count. */
double bench_memcpy_gbps(size_t bytes);
/* Triad a[i] = b[i] + s*c[i] bandwidth in GB/s (3 arrays of n floats). */
double bench_triad_gbps(size_t n);
/* The triad kept allocated, to be measured again beside each of several
 * measurements (the bandwidth of a shared VM drifts within a run). */
typedef struct bench_triad bench_triad;
bench_triad *bench_triad_new(size_t n);
double bench_triad_run(bench_triad *t, double min_seconds);
/* one triad pass, timed alone (GB/s): for pairing with another measurement */
double bench_triad_once(bench_triad *t);
void bench_triad_free(bench_triad *t);

/* A helper process answering one line per request line (the PyTorch
 * workers tools/bench_torch_mm.py and tools/bench_torch.py --serve), so a
 * benchmark can interleave its rounds with PyTorch's. The interpreter is
 * $AMP_TORCH_PYTHON or /usr/bin/python3; args[0] is the script. start reads
 * the worker's first line into first (false: no python, no script, or it
 * did not answer). ask sends req (no newline) and reads one line (false when
 * the worker is gone). */
typedef struct {
    int pid;
    FILE *in, *out;
} bench_worker;
bool bench_worker_start(bench_worker *w, const char *const *args, char *first, size_t n);
bool bench_worker_ask(bench_worker *w, const char *req, char *line, size_t n);
void bench_worker_stop(bench_worker *w);

/* PyTorch's training-step workers of amp bench train and amp bench gpt
 * (tools/bench_torch.py --serve --threads N): one at `threads` threads and,
 * when that is not 1, one at 1 thread. Each process fixes its thread count
 * before torch loads, so OpenBLAS's own threads (PyTorch's f32 products on
 * Debian; torch.set_num_threads does not limit them) follow it and the
 * "1 thr" column is one thread. start: false (both stopped) when PyTorch
 * cannot run; version then empty. at: the worker at n threads, NULL if none. */
typedef struct {
    bench_worker w[2]; /* [0] at threads, [1] at 1 thread (unused when threads is 1) */
    int threads;
    char version[64];
} bench_torch;
bool bench_torch_start(bench_torch *t, const char *script, int threads);
bench_worker *bench_torch_at(bench_torch *t, int n);
/* "PyTorch <version>: measured in the same rounds (...)", naming the workers'
 * thread counts and OPENBLAS_CORETYPE */
void bench_torch_print(const bench_torch *t, const char *script);
void bench_torch_stop(bench_torch *t);
/* Starts t's workers at amp's thread count unless no_torch, and prints what
 * runs: "PyTorch: not run (--no-torch)" or "PyTorch: not available", else
 * note (a line, when not NULL) and bench_torch_print's. t->version is ""
 * when PyTorch does not run. */
void bench_torch_open(bench_torch *t, const char *script, bool no_torch, const char *note);
/* Sends req to the worker at `threads` threads and reads its "ok <ms>": the
 * ms, or -1 (no such worker, or no answer). */
double bench_torch_ms(bench_torch *t, int threads, const char *req);
/* The faster of PyTorch's ms at amp's threads (t) and at 1 thread (t1),
 * either -1 when not measured: -1 when neither was. */
double bench_torch_best(double t, double t1);
/* Adds those of "torch_ms_per_step" (t), "torch_ms_per_step_1thread" (t1)
 * and "speedup_vs_torch" (the best over amp's ms) that were measured to o. */
void bench_json_torch(cJSON *o, double t, double t1, double ms);

/* The CPU notes under the tables of amp bench train and gpt, from this CPU
 * and amp's active path: what PyTorch's bf16 autocast runs on ("its bf16
 * autocast ..."), and amp's matrix products per precision
 * (cli_print_precision_notes) under a line naming the path. */
const char *bench_torch_bf16_note(void);
void bench_print_amp_notes(void);

/* Sets OPENBLAS_CORETYPE from this CPU's /proc/cpuinfo flags
 * (bench_openblas_coretype, cli/bench_openblas.h) unless it is set already:
 * a user's value is never replaced. Call before OpenBLAS loads here or in a
 * worker. Returns the value in effect (NULL: unset, OpenBLAS's own choice)
 * and, in *why (when why is not NULL), where it came from. */
const char *bench_openblas_env(const char **why);

/* Writes root to path atomically (temp file + rename); returns 0 or -1 and
 * prints an error. Does nothing when path is NULL. */
int bench_write_json(const char *path, const cJSON *root);
/* One timed training run of amp bench train, gpt and load: cfg (the
 * model's fields set; its progress is turned off) in the given precision
 * and opt level, started as its own process would start. res gets the
 * run's results (res->step_ms: its median ms per step). CLI_OK, CLI_USAGE
 * (no such mode) or CLI_FAIL (the error printed). */
int bench_train_run(trainer_cfg *cfg, const char *precision, const char *opt_level, trainer_result *res);
/* The end of amp bench train and gpt: t's workers stopped; with rc ==
 * CLI_OK, "<note>, and <bench_torch_bf16_note>." and the notes of
 * bench_print_amp_notes printed and root written to json (CLI_FAIL when that
 * fails); root is freed. Returns the status. */
int bench_finish(int rc, bench_torch *t, const char *note, const char *json, cJSON *root);
/* Machine description object: cpu model, cores, threads, path, amp version. */
cJSON *bench_machine_json(void);
/* dense peak TFLOP/s of a GPU by its name (f32, tf32, f16/bf16); zeros when unknown */
void bench_gpu_peaks(const char *name, double *f32, double *tf32, double *half);
void bench_print_machine(void);

#endif
