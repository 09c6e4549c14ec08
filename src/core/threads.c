/* Thread count of parallel regions, lowered while other processes keep cores
 * busy (see threads.h; why: docs/notes.md, "Threads"). */
#include "core/threads.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "amp/base.h"
#include "core/env.h"

#define PERIOD_NS 200000000LL /* a measurement window: 200 ms */
#define STALE_NS (4 * PERIOD_NS) /* no region for this long: the window says nothing about now */
#define STAT_MAX (128 << 10) /* the cpu lines of 1024 CPUs; the interrupt counts after them may be cut */

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static _Atomic int g_ready; /* init_once has run: the regions after the first skip pthread_once */
static uint64_t g_mask[AMP_THREADS_MASK_WORDS];
static int g_ncpu = 1;     /* CPUs in this process's affinity mask at the first region */
static long g_hz = 100;    /* /proc/stat's tick (USER_HZ) */
static bool g_nice_free;   /* this process is not niced: niced processes' time is free for it */
static _Atomic int g_adapt = -1; /* -1: AMP_ADAPTIVE_THREADS decides */
static _Atomic int g_forced;      /* amp__threads_force_cap */
static _Atomic int g_cap;         /* cores to use now */
static _Atomic int g_broken;      /* /proc/stat unreadable: never lower */
static _Atomic long long g_next_ns; /* next window ends (CLOCK_MONOTONIC_COARSE) */

/* the last sample and the statistics, under g_mu */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    bool valid;
    long long wall_ns, cpu_ns;
    uint64_t idle;
} g_last;
static double g_sum_threads_s, g_sum_s;
static int g_changes;

static long long clock_ns(clockid_t id) {
    struct timespec ts;
    if (clock_gettime(id, &ts)) return -1;
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void init_once(void) {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        g_ncpu = 0;
        for (int c = 0; c < CPU_SETSIZE && c < 64 * AMP_THREADS_MASK_WORDS; c++)
            if (CPU_ISSET(c, &set)) {
                g_mask[c / 64] |= 1ull << (c % 64);
                g_ncpu++;
            }
    }
    if (g_ncpu < 1) {
        g_ncpu = 1;
        atomic_store(&g_broken, 1);
    }
    errno = 0;
    int prio = getpriority(PRIO_PROCESS, 0);
    g_nice_free = errno == 0 && prio <= 0;
    long hz = sysconf(_SC_CLK_TCK);
    if (hz > 0) g_hz = hz;
    atomic_store(&g_cap, g_ncpu);
    atomic_store_explicit(&g_ready, 1, memory_order_release);
}

int amp__threads_parse_stat(const char *text, const uint64_t *mask, bool nice_free, uint64_t *free_ticks) {
    int n = 0;
    uint64_t idle = 0;
    for (const char *p = text; p && *p;) {
        const char *eol = strchr(p, '\n');
        if (!strncmp(p, "cpu", 3) && p[3] >= '0' && p[3] <= '9') {
            char *e;
            unsigned long c = strtoul(p + 3, &e, 10);
            if (c < 64 * AMP_THREADS_MASK_WORDS && (mask[c / 64] >> (c % 64) & 1)) {
                /* user nice system idle iowait ... */
                unsigned long long v[5];
                for (int i = 0; i < 5; i++) {
                    char *f;
                    if (*e != ' ') return -1;
                    v[i] = strtoull(e, &f, 10);
                    if (f == e) return -1;
                    e = f;
                }
                idle += v[3] + v[4] + (nice_free ? v[1] : 0);
                n++;
            }
        }
        p = eol ? eol + 1 : NULL;
    }
    *free_ticks = idle;
    return n;
}

double amp__threads_window_avail(uint64_t idle0, uint64_t idle1, long hz, long long cpu0_ns, long long cpu1_ns,
                                 long long wall0_ns, long long wall1_ns) {
    long long dt = wall1_ns - wall0_ns;
    /* the free ticks went back (the kernel's iowait count may decrease:
     * proc(5)), or the process's CPU time did: this window is skipped and the
     * next one starts from the new sample */
    if (dt <= 0 || dt >= STALE_NS || idle1 < idle0 || cpu1_ns < cpu0_ns || hz <= 0) return NAN;
    return ((double)(idle1 - idle0) / (double)hz + (double)(cpu1_ns - cpu0_ns) * 1e-9) / ((double)dt * 1e-9);
}

int amp__threads_decide(int cur, int ncpu, double avail) {
    if (ncpu < 1) ncpu = 1;
    if (cur < 1) cur = 1;
    if (cur > ncpu) cur = ncpu;
    if (!(avail == avail)) return cur; /* NaN: no information */
    if (avail < cur - 0.25) {
        int t = (int)floor(avail + 0.25);
        return t < 1 ? 1 : t;
    }
    if (avail >= cur + 1 - 0.15) {
        double t = floor(avail + 0.15);
        return t > ncpu ? ncpu : (int)t;
    }
    return cur;
}

/* Free ticks of our CPUs now; false when /proc/stat cannot be read. */
static bool read_idle(uint64_t *idle) {
    static char buf[STAT_MAX]; /* under g_mu */
    int fd = open("/proc/stat", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    size_t len = 0;
    for (;;) {
        ssize_t r = read(fd, buf + len, sizeof buf - 1 - len);
        if (r <= 0) break;
        len += (size_t)r;
        if (len == sizeof buf - 1) break;
    }
    close(fd);
    buf[len] = '\0';
    /* the cpu lines come first: what a full buffer cut off is the interrupt counts */
    return amp__threads_parse_stat(buf, g_mask, g_nice_free, idle) == g_ncpu;
}

static void sample(long long now_coarse, int limit) {
    if (pthread_mutex_trylock(&g_mu)) return; /* another thread measures */
    if (now_coarse < atomic_load(&g_next_ns)) {
        pthread_mutex_unlock(&g_mu);
        return;
    }
    uint64_t idle;
    long long wall = clock_ns(CLOCK_MONOTONIC), cpu = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
    if (wall < 0 || cpu < 0 || !read_idle(&idle)) {
        atomic_store(&g_broken, 1);
        atomic_store(&g_cap, g_ncpu);
        pthread_mutex_unlock(&g_mu);
        return;
    }
    double avail = g_last.valid ? amp__threads_window_avail(g_last.idle, idle, g_hz, g_last.cpu_ns, cpu, g_last.wall_ns, wall)
                                : NAN;
    if (avail == avail) {
        double s = (double)(wall - g_last.wall_ns) * 1e-9;
        int cap = atomic_load(&g_cap);
        g_sum_threads_s += (cap < limit ? cap : limit) * s;
        g_sum_s += s;
        int next = amp__threads_decide(cap, g_ncpu, avail);
        if (next != cap) {
            atomic_store(&g_cap, next);
            g_changes++;
        }
    }
    g_last.valid = true;
    g_last.wall_ns = wall;
    g_last.cpu_ns = cpu;
    g_last.idle = idle;
    atomic_store(&g_next_ns, now_coarse + PERIOD_NS);
    pthread_mutex_unlock(&g_mu);
}

static bool adaptive(void) {
    int a = atomic_load_explicit(&g_adapt, memory_order_relaxed);
    if (a < 0) {
        a = amp__env_adaptive_threads() ? 1 : 0;
        atomic_store(&g_adapt, a);
    }
    return a;
}

int amp__nthreads(void) {
    int limit = omp_get_max_threads();
    if (limit < 1) return 1;
    int forced = atomic_load_explicit(&g_forced, memory_order_relaxed);
    if (forced > 0) return forced < limit ? forced : limit;
    if (limit == 1 || !adaptive()) return limit;
    if (!atomic_load_explicit(&g_ready, memory_order_acquire)) pthread_once(&g_once, init_once);
    if (limit > g_ncpu || atomic_load_explicit(&g_broken, memory_order_relaxed)) return limit;
    long long now = clock_ns(CLOCK_MONOTONIC_COARSE);
    if (now >= atomic_load_explicit(&g_next_ns, memory_order_relaxed)) sample(now, limit);
    int cap = atomic_load_explicit(&g_cap, memory_order_relaxed);
    return cap < limit ? cap : limit;
}

void amp__threads_force_cap(int cap) { atomic_store(&g_forced, cap > 0 ? cap : 0); }

void amp__threads_stats(double *mean, double *seconds, int *changes) {
    pthread_mutex_lock(&g_mu);
    if (mean) *mean = g_sum_s > 0 ? g_sum_threads_s / g_sum_s : 0;
    if (seconds) *seconds = g_sum_s;
    if (changes) *changes = g_changes;
    pthread_mutex_unlock(&g_mu);
}

void amp__threads_stats_reset(void) {
    pthread_mutex_lock(&g_mu);
    g_sum_threads_s = g_sum_s = 0;
    g_changes = 0;
    pthread_mutex_unlock(&g_mu);
}

void amp_set_adaptive_threads(bool on) { atomic_store(&g_adapt, on ? 1 : 0); }

bool amp_get_adaptive_threads(void) { return adaptive(); }

int amp_get_active_threads(void) { return amp__nthreads(); }
