/* Shared pieces of the `amp bench` subcommands: timing, memcpy bandwidth,
 * JSON output (cJSON), and the markdown-ish tables they print. */
#ifndef AMP_CLI_BENCH_UTIL_H
#define AMP_CLI_BENCH_UTIL_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* Monotonic wall clock in seconds. */
double bench_now(void);
/* Median of n samples (sorts in place). */
double bench_median(double *v, int n);
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
/* Machine description object: cpu model, cores, threads, path, amp version. */
cJSON *bench_machine_json(void);
/* dense peak TFLOP/s of a GPU by its name (f32, tf32, f16/bf16); zeros when unknown */
void bench_gpu_peaks(const char *name, double *f32, double *tf32, double *half);
void bench_print_machine(void);

#endif
