/* Internal: how many threads a parallel region uses now.
 *
 * OpenMP's limit (omp_get_max_threads(): amp_set_num_threads, OMP_NUM_THREADS,
 * by default the cores this process may run on) is an upper bound. While
 * other processes keep some of those cores busy, regions use fewer threads:
 * every 200 ms the first region to start reads /proc/stat and the process's
 * CPU time and counts the cores the rest of the machine left free (niced
 * processes' time counts as free unless this process is niced); a region
 * whose threads must wait for a core held by another process waits for that
 * process's time slice (milliseconds) at every join, which made a 10 ms
 * training step take 150-230 ms (docs/notes.md, "Threads"). Kernels split
 * their work so that results never depend on the thread count.
 *
 * Off with AMP_ADAPTIVE_THREADS=0 or amp_set_adaptive_threads(false); also
 * off when the limit exceeds the cores this process may run on (the caller
 * chose to oversubscribe) and where /proc/stat cannot be read. */
#ifndef AMP_CORE_THREADS_H
#define AMP_CORE_THREADS_H

#include <stdbool.h>
#include <stdint.h>

/* Threads for a parallel region started now by the calling thread (>= 1).
 * Cost, measured on the EPYC VM: 4-5 ns with adaptation off or a forced cap
 * (omp_get_max_threads and two relaxed loads), 9-12 ns adapting (then also
 * an acquire load, the coarse clock through the vDSO, about 7 ns, and two
 * relaxed loads); the region it sizes costs 0.35 us or more. */
int amp__nthreads(void);

/* The clauses of an amp parallel region that runs only when cond holds:
 *   #pragma omp parallel for schedule(static) AMP_OMP_IF(n > MIN)
 * gcc evaluates a num_threads expression even when the if clause is false
 * (then passing 1), so the count is asked for only when cond holds. */
#define AMP_OMP_IF(cond) if (cond) num_threads((cond) ? amp__nthreads() : 1)
/* The clause of a region that always runs. */
#define AMP_OMP_THREADS num_threads(amp__nthreads())

/* ---- the parts, separately testable ---------------------------------------------------------- */

#define AMP_THREADS_MASK_WORDS 16 /* 1024 CPUs, as cpu_set_t */

/* Free ticks of the "cpuN" lines of /proc/stat's text for the N set in
 * mask: idle + iowait, plus nice (time of processes with a nice value above
 * 0, which yield to this one) when nice_free. Returns the number of such
 * lines counted, or -1 when a line of one of them is malformed. */
int amp__threads_parse_stat(const char *text, const uint64_t *mask, bool nice_free, uint64_t *free_ticks);

/* The cores free for this process over a window from sample 0 to sample 1:
 * the free ticks (amp__threads_parse_stat) over the tick rate hz, plus the
 * process's own CPU time, over the wall time. NaN (the window is skipped)
 * when it says nothing about now: wall time not positive or 0.8 s or more
 * (no region for that long), or a count that went backwards (the kernel's
 * iowait ticks may decrease, proc(5); unsigned arithmetic made that
 * billions of cores). */
double amp__threads_window_avail(uint64_t idle0, uint64_t idle1, long hz, long long cpu0_ns, long long cpu1_ns,
                                 long long wall0_ns, long long wall1_ns);

/* The next core count from the current one (cur), the cores this process may
 * run on (ncpu) and the cores measured free for it over the last window
 * (avail: idle cores plus the process's own use). t cores are used only
 * while at least t - 0.25 are free; hysteresis keeps a count against the
 * measurement's noise (/proc/stat counts 10 ms ticks: up to 0.05 core per
 * CPU over 200 ms). */
int amp__threads_decide(int cur, int ncpu, double avail);

/* Tests: make regions use min(limit, cap) threads whatever the machine does
 * (also beyond the cores there are); 0 returns to measuring. */
void amp__threads_force_cap(int cap);

/* Since the first measurement: the mean over time of the threads regions
 * could use (min of the limit and the core count, as the measuring thread
 * saw them), seconds measured, and how many times the count changed. Zeros
 * when nothing was measured. */
void amp__threads_stats(double *mean, double *seconds, int *changes);
/* Forget the statistics (a benchmark between configurations). */
void amp__threads_stats_reset(void);

#endif
