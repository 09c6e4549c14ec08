/* Checkpoint directories: model.safetensors + training_state.safetensors,
 * written as one commit (both temporary files complete and fsync'ed, then
 * model renamed, then training state), opened with a consistency check that
 * rolls a half-finished commit forward. The training state holds everything
 * exact resume needs: optimizer moments and master weights, per-parameter
 * and global step counts, the stochastic-rounding position, the GradScaler,
 * a generator and the loader position. docs/checkpoints.md. */
#include <errno.h>
#include <float.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <sys/file.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "amp/checkpoint.h"
#include "io/safetensors_impl.h"
#include "tensor/tensor_impl.h"

#define MODEL_FILE "model.safetensors"
#define STATE_FILE "training_state.safetensors"
#define FORMAT_VERSION "1"
#define MAX_META 256
#define MAX_OPTIMS 16
#define LOCK_FILE ".amp.lock"
#define AMP_MAX_STEPS ((int64_t)1 << 62) /* step counts beyond this would overflow when counted on */

struct amp_checkpoint {
    char *dir;
    amp_safetensors *model, *state;
    int64_t step;
};

static char *join(const char *dir, const char *file) {
    size_t n = strlen(dir) + strlen(file) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, file);
    return p;
}

/* ---- metadata ------------------------------------------------------------------------------ */
typedef struct {
    amp_kv kv[MAX_META];
    char *keys[MAX_META], *vals[MAX_META];
    int n;
} meta_list;

static void meta_free(meta_list *m) {
    for (int i = 0; i < m->n; i++) {
        free(m->keys[i]);
        free(m->vals[i]);
    }
    m->n = 0;
}

static void meta_add(meta_list *m, const char *key, const char *fmt, ...) AMP_PRINTF(3, 4);
static void meta_add(meta_list *m, const char *key, const char *fmt, ...) {
    if (m->n >= MAX_META) return;
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    m->keys[m->n] = strdup(key);
    m->vals[m->n] = strdup(buf);
    m->kv[m->n].key = m->keys[m->n] ? m->keys[m->n] : "";
    m->kv[m->n].value = m->vals[m->n] ? m->vals[m->n] : "";
    m->n++;
}

static bool parse_i64(const char *s, int64_t *out) {
    if (!s || !*s) return false;
    char *e;
    errno = 0;
    long long v = strtoll(s, &e, 10);
    if (*e || errno) return false;
    *out = v;
    return true;
}

static bool parse_u64(const char *s, uint64_t *out) {
    if (!s || !*s || *s == '-') return false;
    char *e;
    errno = 0;
    unsigned long long v = strtoull(s, &e, 10);
    if (*e || errno) return false;
    *out = v;
    return true;
}

static bool parse_f64(const char *s, double *out) {
    if (!s || !*s) return false;
    char *e;
    errno = 0;
    double v = strtod(s, &e);
    if (*e || errno == ERANGE) return false;
    *out = v;
    return true;
}

static const char *kind_name(amp_optim_kind k) {
    return k == AMP_OPTIM_SGD ? "sgd" : k == AMP_OPTIM_ADAM ? "adam" : k == AMP_OPTIM_ADAMW ? "adamw" : "?";
}

static amp_status wrap_dir(amp_status st, const char *fn, const char *dir) {
    char pre[1200];
    snprintf(pre, sizeof pre, "%s: %s", fn, dir);
    return amp__error_wrap(st, pre);
}

/* ---- parameter naming ---------------------------------------------------------------------- */
typedef struct {
    amp_tensor **ptr;
    const char **name;
    int n;
} param_names;

static amp_status names_get(const char *fn, amp_module *m, param_names *pn) {
    memset(pn, 0, sizeof *pn);
    int n = amp_module_parameters(m, NULL, NULL, 0);
    if (n < 0) return amp_last_status();
    pn->ptr = calloc((size_t)(n ? n : 1), sizeof *pn->ptr);
    pn->name = calloc((size_t)(n ? n : 1), sizeof *pn->name);
    if (!pn->ptr || !pn->name) {
        free(pn->ptr);
        free(pn->name);
        return amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
    }
    pn->n = amp_module_parameters(m, pn->ptr, pn->name, n);
    return AMP_OK;
}

static void names_free(param_names *pn) {
    free(pn->ptr);
    free(pn->name);
}

static const char *name_of(const param_names *pn, const amp_tensor *p) {
    for (int i = 0; i < pn->n; i++)
        if (pn->ptr[i] == p) return pn->name[i];
    return NULL;
}

static const char *g_state_names[] = {"exp_avg", "exp_avg_sq", "momentum_buffer", "master"};
#define N_STATE_NAMES 4

/* ---- save ------------------------------------------------------------------------------------ */
typedef struct {
    amp_tensor **t;
    char **name;
    bool *owned;
    int n, cap;
} tlist;

static bool tl_add(tlist *l, amp_tensor *t, char *name, bool owned) {
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 32;
        amp_tensor **nt = realloc(l->t, sizeof *nt * (size_t)cap);
        if (nt) l->t = nt;
        char **nn = realloc(l->name, sizeof *nn * (size_t)cap);
        if (nn) l->name = nn;
        bool *no = realloc(l->owned, sizeof *no * (size_t)cap);
        if (no) l->owned = no;
        if (!nt || !nn || !no) {
            free(name);
            if (owned) amp__release(t);
            return false;
        }
        l->cap = cap;
    }
    l->t[l->n] = t;
    l->name[l->n] = name;
    l->owned[l->n] = owned;
    l->n++;
    return true;
}

static void tl_free(tlist *l) {
    for (int i = 0; i < l->n; i++) {
        free(l->name[i]);
        if (l->owned[i]) amp__release(l->t[i]);
    }
    free(l->t);
    free(l->name);
    free(l->owned);
}

static char *fmt_name(const char *fmt, int k, const char *p, const char *s) {
    size_t n = strlen(fmt) + strlen(p) + strlen(s) + 24;
    char *b = malloc(n);
    if (b) snprintf(b, n, fmt, k, p, s);
    return b;
}

static amp_tensor *i64_scalar(int64_t v) {
    amp_tensor *t = amp__tensor_new("amp_checkpoint_save", AMP_I64, 0, NULL, AMP_MEM_WORKSPACE, AMP_NEW_UNSCOPED);
    if (t) *(int64_t *)amp__data(t) = v;
    return t;
}

static void make_id(char *out, size_t n) {
    static uint64_t counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    x ^= (uint64_t)getpid() << 32;
    x ^= ++counter * 0x9E3779B97F4A7C15ull;
    x ^= (uint64_t)(uintptr_t)out;
    /* splitmix finaliser */
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    x ^= x >> 31;
    snprintf(out, n, "%016" PRIx64, x);
}

static amp_status check_state_arg(const char *fn, const amp_train_state *s) {
    if (!s) return amp_error(AMP_ERR_ARG, "%s: state is NULL", fn);
    if (!s->model) return amp_error(AMP_ERR_ARG, "%s: state->model is NULL", fn);
    if (s->n_optims < 0 || (s->n_optims > 0 && !s->optims))
        return amp_error(AMP_ERR_ARG, "%s: n_optims %d with optims %p", fn, s->n_optims, (const void *)s->optims);
    if (s->n_optims > MAX_OPTIMS) return amp_error(AMP_ERR_ARG, "%s: at most %d optimizers (got %d)", fn, MAX_OPTIMS, s->n_optims);
    for (int k = 0; k < s->n_optims; k++)
        if (!s->optims[k]) return amp_error(AMP_ERR_ARG, "%s: optims[%d] is NULL", fn, k);
    if (s->n_meta < 0 || (s->n_meta > 0 && !s->meta)) return amp_error(AMP_ERR_ARG, "%s: n_meta %d with meta NULL", fn, s->n_meta);
    if (s->n_meta > 64) return amp_error(AMP_ERR_ARG, "%s: at most 64 extra metadata entries", fn);
    for (int i = 0; i < s->n_meta; i++)
        if (!s->meta[i].key || !s->meta[i].value) return amp_error(AMP_ERR_ARG, "%s: meta[%d] has a NULL key or value", fn, i);
    return AMP_OK;
}

static const char *okey(char *buf, size_t n, int k, const char *what) {
    snprintf(buf, n, "optim.%d.%s", k, what);
    return buf;
}

static amp_status repair(const char *dir);

/* ---- the writer's lock ------------------------------------------------------------------------
 * One writer per directory: an exclusive flock on DIR/.amp.lock, held for a
 * whole run (amp_checkpoint_lock_dir) or, when the caller holds none, for
 * one save. flock is released when the process dies (kill -9 included).
 * The process keeps the (device, inode) of the directories it holds, so
 * its own saves go ahead and a second lock from the same process is a clear
 * error rather than a self-deadlock. */
struct amp_checkpoint_lock {
    int fd;
    dev_t dev;
    ino_t ino;
    char *dir;
};

#define MAX_HELD 64
static pthread_mutex_t g_held_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    dev_t dev;
    ino_t ino;
} g_held[MAX_HELD];
static int g_n_held;

static bool held_by_us(dev_t dev, ino_t ino) {
    pthread_mutex_lock(&g_held_mu);
    bool r = false;
    for (int i = 0; i < g_n_held && !r; i++) r = g_held[i].dev == dev && g_held[i].ino == ino;
    pthread_mutex_unlock(&g_held_mu);
    return r;
}

static amp_checkpoint_lock *lock_dir(const char *fn, const char *dir) {
    if (!dir || !*dir) return amp_error_null(AMP_ERR_ARG, "%s: dir is NULL or empty", fn);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) return amp_error_null(AMP_ERR_IO, "%s: cannot create %s: %s", fn, dir, strerror(errno));
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) return amp_error_null(AMP_ERR_IO, "%s: %s is not a directory", fn, dir);
    if (held_by_us(sb.st_dev, sb.st_ino))
        return amp_error_null(AMP_ERR_STATE, "%s: %s is in use: this process already holds its lock (one writer per checkpoint "
                                             "directory)", fn, dir);
    char *lp = join(dir, LOCK_FILE);
    if (!lp) return amp_error_null(AMP_ERR_NOMEM, "%s: out of memory", fn);
    int fd = open(lp, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) {
        amp_error(AMP_ERR_IO, "%s: cannot open the lock file %s: %s", fn, lp, strerror(errno));
        free(lp);
        return NULL;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        char pid[32] = "";
        ssize_t r = pread(fd, pid, sizeof pid - 1, 0);
        if (r > 0) pid[r] = 0;
        pid[strcspn(pid, "\n")] = 0;
        close(fd);
        if (e == EWOULDBLOCK)
            amp_error(AMP_ERR_STATE, "%s: checkpoint directory %s is in use by another process%s%s%s (it holds %s); two runs "
                                     "writing one directory would overwrite each other's checkpoints",
                      fn, dir, *pid ? " (pid " : "", pid, *pid ? ")" : "", lp);
        else
            amp_error(AMP_ERR_IO, "%s: cannot lock %s: %s", fn, lp, strerror(e));
        free(lp);
        return NULL;
    }
    /* the holder's pid, for the message another process gets */
    char pid[32];
    int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)n, 0) != n) {
        amp_error(AMP_ERR_IO, "%s: cannot write the lock file %s: %s", fn, lp, strerror(errno));
        close(fd);
        free(lp);
        return NULL;
    }
    free(lp);
    amp_checkpoint_lock *l = calloc(1, sizeof *l);
    if (l) l->dir = strdup(dir);
    pthread_mutex_lock(&g_held_mu);
    bool room = g_n_held < MAX_HELD;
    if (room && l && l->dir) {
        g_held[g_n_held].dev = sb.st_dev;
        g_held[g_n_held].ino = sb.st_ino;
        g_n_held++;
    }
    pthread_mutex_unlock(&g_held_mu);
    if (!l || !l->dir || !room) {
        if (l) free(l->dir);
        free(l);
        close(fd);
        return amp_error_null(room ? AMP_ERR_NOMEM : AMP_ERR_STATE, "%s: %s", fn,
                              room ? "out of memory" : "too many checkpoint directories locked by this process");
    }
    l->fd = fd;
    l->dev = sb.st_dev;
    l->ino = sb.st_ino;
    return l;
}

amp_checkpoint_lock *amp_checkpoint_lock_dir(const char *dir) { return lock_dir("amp_checkpoint_lock_dir", dir); }

void amp_checkpoint_unlock(amp_checkpoint_lock *l) {
    if (!l) return;
    pthread_mutex_lock(&g_held_mu);
    for (int i = 0; i < g_n_held; i++)
        if (g_held[i].dev == l->dev && g_held[i].ino == l->ino) {
            g_held[i] = g_held[--g_n_held];
            break;
        }
    pthread_mutex_unlock(&g_held_mu);
    close(l->fd); /* releases the flock */
    free(l->dir);
    free(l);
}

amp_status amp_checkpoint_save(const char *dir, const amp_train_state *s) {
    static const char *fn = "amp_checkpoint_save";
    if (!dir || !*dir) return amp_error(AMP_ERR_ARG, "%s: dir is NULL or empty", fn);
    amp_status st = check_state_arg(fn, s);
    if (st) return st;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) return amp_error(AMP_ERR_IO, "%s: cannot create %s: %s", fn, dir, strerror(errno));
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) return amp_error(AMP_ERR_IO, "%s: %s is not a directory", fn, dir);
    /* the writer's lock: the caller's (amp_checkpoint_lock_dir), else one for this save */
    amp_checkpoint_lock *own = NULL;
    if (!held_by_us(sb.st_dev, sb.st_ino) && !(own = lock_dir(fn, dir))) return amp_last_status();
    st = repair(dir); /* finish an interrupted commit before starting a new one (only the writer renames) */
    if (st) {
        amp_checkpoint_unlock(own);
        return st;
    }

    char *mpath = join(dir, MODEL_FILE), *spath = join(dir, STATE_FILE);
    char *mtmp = join(dir, MODEL_FILE ".tmp"), *stmp = join(dir, STATE_FILE ".tmp");
    meta_list mm = {0}, sm = {0};
    tlist tl = {0};
    param_names pn = {0};
    amp_tensor **mts = NULL;
    const char **mnames = NULL;
    if (!mpath || !spath || !mtmp || !stmp) {
        st = amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
        goto out;
    }
    char id[32];
    make_id(id, sizeof id);

    /* model file */
    int nm = amp__module_file_state(fn, s->model, &mts, &mnames); /* a tied tensor once */
    if (nm < 0) {
        st = amp_last_status();
        goto out;
    }
    for (int i = 0; i < s->n_meta; i++) meta_add(&mm, s->meta[i].key, "%s", s->meta[i].value);
    meta_add(&mm, "format", "amp.model");
    meta_add(&mm, "format_version", FORMAT_VERSION);
    meta_add(&mm, "checkpoint_id", "%s", id);
    meta_add(&mm, "step", "%" PRId64, s->step);
    st = amp__st_write_file(fn, mtmp, mts, mnames, nm, mm.kv, mm.n);
    if (st) goto out;

    /* training state file */
    if ((st = names_get(fn, s->model, &pn))) goto out;
    for (int i = 0; i < s->n_meta; i++) meta_add(&sm, s->meta[i].key, "%s", s->meta[i].value);
    meta_add(&sm, "format", "amp.training_state");
    meta_add(&sm, "format_version", FORMAT_VERSION);
    meta_add(&sm, "checkpoint_id", "%s", id);
    meta_add(&sm, "step", "%" PRId64, s->step);
    meta_add(&sm, "optim.count", "%d", s->n_optims);
    for (int k = 0; k < s->n_optims; k++) {
        const amp_optim *o = s->optims[k];
        const amp_optim_opts *oo = amp_optim_get_opts(o);
        int np = amp_optim_num_params(o);
        char kb[64];
        meta_add(&sm, okey(kb, sizeof kb, k, "kind"), "%s", kind_name(oo->kind));
        meta_add(&sm, okey(kb, sizeof kb, k, "master_weights"), "%d", oo->master_weights ? 1 : 0);
        meta_add(&sm, okey(kb, sizeof kb, k, "params"), "%d", np);
        meta_add(&sm, okey(kb, sizeof kb, k, "steps"), "%" PRId64, amp_optim_steps(o));
        meta_add(&sm, okey(kb, sizeof kb, k, "sr_counter"), "%" PRIu64, amp_optim_sr_counter(o));
        meta_add(&sm, okey(kb, sizeof kb, k, "lr"), "%.17g", oo->lr);
        for (int i = 0; i < np; i++) {
            amp_tensor *p = amp_optim_param(o, i);
            const char *pname = name_of(&pn, p);
            if (!pname) {
                st = amp_error(AMP_ERR_ARG, "%s: parameter %d of optimizer %d is not a parameter of the model", fn, i, k);
                goto out;
            }
            for (int j = 0; j < N_STATE_NAMES; j++) {
                amp_tensor *t = amp_optim_state(o, i, g_state_names[j]);
                if (t && !tl_add(&tl, t, fmt_name("optim.%d.%s.%s", k, pname, g_state_names[j]), false)) goto oom;
            }
            amp_tensor *stp = i64_scalar(amp_optim_param_steps(o, i));
            if (!stp || !tl_add(&tl, stp, fmt_name("optim.%d.%s.%s", k, pname, "step"), true)) goto oom;
        }
    }
    for (int i = 0; i < tl.n; i++)
        if (!tl.name[i]) goto oom;
    amp_clear_error();
    amp_scaler_state ss;
    if (s->scaler && amp_scaler_is_enabled(s->scaler) && amp_scaler_state_get(s->scaler, &ss) == AMP_OK) {
        meta_add(&sm, "scaler.enabled", "1");
        meta_add(&sm, "scaler.scale", "%.17g", ss.scale);
        meta_add(&sm, "scaler.growth_factor", "%.17g", ss.growth_factor);
        meta_add(&sm, "scaler.backoff_factor", "%.17g", ss.backoff_factor);
        meta_add(&sm, "scaler.growth_interval", "%" PRId64, ss.growth_interval);
        meta_add(&sm, "scaler.growth_tracker", "%" PRId64, ss.growth_tracker);
        meta_add(&sm, "scaler.hysteresis", "%d", ss.hysteresis);
        meta_add(&sm, "scaler.hysteresis_left", "%d", ss.hysteresis_left);
        meta_add(&sm, "scaler.min_scale", "%.17g", ss.min_scale);
        meta_add(&sm, "scaler.max_scale", "%.17g", ss.max_scale);
        meta_add(&sm, "scaler.num_updates", "%" PRId64, ss.num_updates);
        meta_add(&sm, "scaler.num_skipped", "%" PRId64, ss.num_skipped);
    } else {
        meta_add(&sm, "scaler.enabled", "0");
    }
    if (s->gen) {
        meta_add(&sm, "rng.seed", "%" PRIu64, s->gen->seed);
        meta_add(&sm, "rng.offset", "%" PRIu64, s->gen->offset);
    }
    if (s->loader) {
        int64_t e, b;
        amp_loader_position(s->loader, &e, &b);
        meta_add(&sm, "loader.epoch", "%" PRId64, e);
        meta_add(&sm, "loader.batch", "%" PRId64, b);
        meta_add(&sm, "loader.batches_per_epoch", "%" PRId64, amp_loader_batches_per_epoch(s->loader));
    }
    if (sm.n >= MAX_META) {
        st = amp_error(AMP_ERR_ARG, "%s: too many metadata entries", fn);
        goto out;
    }
    st = amp__st_write_file(fn, stmp, tl.t, (const char *const *)tl.name, tl.n, sm.kv, sm.n);
    if (st) {
        unlink(mtmp);
        goto out;
    }
    /* commit: model first, then the training state (open() rolls a commit
     * interrupted between the two forward from the temporary file) */
    st = amp__rename_durable(fn, mtmp, mpath);
    if (!st) st = amp__rename_durable(fn, stmp, spath);
    goto out;
oom:
    st = amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
out:
    amp_checkpoint_unlock(own);
    tl_free(&tl);
    names_free(&pn);
    meta_free(&mm);
    meta_free(&sm);
    free(mts);
    free(mnames);
    free(mpath);
    free(spath);
    free(mtmp);
    free(stmp);
    return st;
}

/* ---- open -------------------------------------------------------------------------------------- */
static const char *id_of(const amp_safetensors *f) {
    const char *v = amp_safetensors_meta(f, "checkpoint_id");
    return v ? v : "";
}

static const char *step_of(const amp_safetensors *f) {
    const char *v = amp_safetensors_meta(f, "step");
    return v ? v : "?";
}

static bool file_exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0;
}

/* Rolls an interrupted commit forward: the model was renamed, the training
 * state's temporary file is complete and carries the model's id. */
static amp_status repair(const char *dir) {
    char *stmp = join(dir, STATE_FILE ".tmp"), *mpath = join(dir, MODEL_FILE), *spath = join(dir, STATE_FILE);
    amp_status st = AMP_OK;
    if (!stmp || !mpath || !spath || !file_exists(stmp)) goto out;
    char *mid = amp__st_peek_meta(mpath, "checkpoint_id");
    char *sid = file_exists(spath) ? amp__st_peek_meta(spath, "checkpoint_id") : NULL;
    if (mid && (!sid || strcmp(mid, sid))) {
        amp_safetensors *t = amp_safetensors_read(stmp); /* full validation, checksum included */
        if (t && !strcmp(id_of(t), mid)) st = amp__rename_durable("amp_checkpoint_save", stmp, spath);
        amp_clear_error(); /* an incomplete temporary file is simply overwritten by this save */
        amp_safetensors_free(t);
    }
    free(mid);
    free(sid);
out:
    free(stmp);
    free(mpath);
    free(spath);
    return st;
}

/* One attempt at a consistent pair: the model file, and the training state
 * with the same id, from its file or from the temporary file of a commit
 * interrupted (or in progress) between the two renames. Nothing is renamed:
 * opening for reading never changes the directory. *sig receives what was
 * seen, so the caller can tell a commit in progress from a broken pair. */
static amp_status open_pair(const char *fn, const char *dir, amp_checkpoint *c, char *sig, size_t nsig) {
    char *mpath = join(dir, MODEL_FILE), *spath = join(dir, STATE_FILE), *stmp = join(dir, STATE_FILE ".tmp");
    amp_status st = AMP_OK;
    snprintf(sig, nsig, "?");
    if (!mpath || !spath || !stmp) {
        st = amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
        goto out;
    }
    if (!file_exists(mpath) || !file_exists(spath)) {
        st = amp_error(AMP_ERR_IO, "%s: %s holds no complete checkpoint (%s missing)", fn, dir,
                       file_exists(mpath) ? STATE_FILE : MODEL_FILE);
        snprintf(sig, nsig, "missing %d%d", file_exists(mpath), file_exists(spath));
        goto out;
    }
    c->model = amp_safetensors_read(mpath);
    if (!c->model) {
        st = amp__error_wrap(amp_last_status(), fn);
        snprintf(sig, nsig, "model unreadable");
        goto out;
    }
    c->state = amp_safetensors_read(spath);
    if (c->state && strcmp(id_of(c->model), id_of(c->state)) && file_exists(stmp)) {
        /* the model was renamed, the state not yet: its temporary file completes the commit
           (full validation, checksum included) */
        amp_safetensors *t = amp_safetensors_read(stmp);
        if (t && !strcmp(id_of(t), id_of(c->model))) {
            amp_safetensors_free(c->state);
            c->state = t;
        } else {
            amp_safetensors_free(t);
            amp_clear_error();
        }
    }
    if (!c->state) {
        st = amp__error_wrap(amp_last_status(), fn);
        snprintf(sig, nsig, "state unreadable, model %s", id_of(c->model));
        goto out;
    }
    snprintf(sig, nsig, "model %s state %s", id_of(c->model), id_of(c->state));
out:
    free(mpath);
    free(spath);
    free(stmp);
    return st;
}

amp_checkpoint *amp_checkpoint_open(const char *dir) {
    static const char *fn = "amp_checkpoint_open";
    if (!dir) return amp_error_null(AMP_ERR_ARG, "%s: dir is NULL", fn);
    struct stat sb;
    if (stat(dir, &sb) != 0) return amp_error_null(AMP_ERR_IO, "%s: cannot open checkpoint directory %s: %s", fn, dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode)) return amp_error_null(AMP_ERR_ARG, "%s: %s is not a checkpoint directory", fn, dir);
    amp_checkpoint *c = calloc(1, sizeof *c);
    char *spath = join(dir, STATE_FILE);
    if (!c || !spath || !(c->dir = strdup(dir))) {
        amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
        goto fail;
    }
    /* A writer may be between its two renames (or start a new commit while
     * we read): read again while what we see keeps changing; stop when two
     * attempts in a row see the same thing (a broken directory) */
    char prev[160] = "", sig[160];
    for (int attempt = 0;; attempt++) {
        amp_safetensors_free(c->model);
        amp_safetensors_free(c->state);
        c->model = c->state = NULL;
        amp_status st = open_pair(fn, dir, c, sig, sizeof sig);
        bool consistent = !st && *id_of(c->state) && !strcmp(id_of(c->model), id_of(c->state));
        if (consistent) break;
        if (!st) {
            const char *mid = id_of(c->model), *sid = id_of(c->state);
            amp_error(AMP_ERR_FORMAT, "%s: %s is inconsistent: %s is checkpoint %s (step %s) but %s is checkpoint %s (step %s)", fn, dir,
                      MODEL_FILE, *mid ? mid : "(none)", step_of(c->model), STATE_FILE, *sid ? sid : "(none)", step_of(c->state));
        }
        if (attempt >= 50 || !strcmp(sig, prev)) goto fail;
        snprintf(prev, sizeof prev, "%s", sig);
        usleep(2000 * (useconds_t)(attempt + 1)); /* a commit in progress: its renames take milliseconds */
    }
    const char *fmt = amp_safetensors_meta(c->state, "format");
    if (!fmt || strcmp(fmt, "amp.training_state")) {
        amp_error(AMP_ERR_FORMAT, "%s: %s is not an amp training state (metadata format = %s)", fn, spath, fmt ? fmt : "(none)");
        goto fail;
    }
    const char *ver = amp_safetensors_meta(c->state, "format_version");
    if (!ver || strcmp(ver, FORMAT_VERSION)) {
        amp_error(AMP_ERR_FORMAT, "%s: %s has format version %s; this amp reads version %s", fn, spath, ver ? ver : "(none)",
                  FORMAT_VERSION);
        goto fail;
    }
    if (!parse_i64(amp_safetensors_meta(c->state, "step"), &c->step) || c->step < 0 || c->step > AMP_MAX_STEPS) {
        amp_error(AMP_ERR_FORMAT, "%s: %s: metadata step \"%s\" is not a step count (0 to 2^62)", fn, spath, step_of(c->state));
        goto fail;
    }
    free(spath);
    return c;
fail:
    free(spath);
    amp_checkpoint_close(c);
    return NULL;
}

void amp_checkpoint_close(amp_checkpoint *c) {
    if (!c) return;
    amp_safetensors_free(c->model);
    amp_safetensors_free(c->state);
    free(c->dir);
    free(c);
}

const char *amp_checkpoint_meta(const amp_checkpoint *c, const char *key) {
    if (!c || !key) return amp_error_null(AMP_ERR_ARG, "amp_checkpoint_meta: NULL argument");
    return amp_safetensors_meta(c->state, key);
}

const amp_safetensors *amp_checkpoint_model_file(const amp_checkpoint *c) {
    if (!c) return amp_error_null(AMP_ERR_ARG, "amp_checkpoint_model_file: c is NULL");
    return c->model;
}

const amp_safetensors *amp_checkpoint_state_file(const amp_checkpoint *c) {
    if (!c) return amp_error_null(AMP_ERR_ARG, "amp_checkpoint_state_file: c is NULL");
    return c->state;
}

int64_t amp_checkpoint_step(const amp_checkpoint *c) {
    if (!c) return amp_error_neg(AMP_ERR_ARG, "amp_checkpoint_step: c is NULL");
    return c->step;
}

/* ---- restore ------------------------------------------------------------------------------------ */
static amp_status get_i64(const char *fn, const amp_checkpoint *c, const char *key, int64_t *out) {
    const char *v = amp_safetensors_meta(c->state, key);
    if (!parse_i64(v, out))
        return amp_error(AMP_ERR_FORMAT, "%s: %s: metadata %s = \"%s\" is missing or not an integer", fn, c->dir, key, v ? v : "(none)");
    return AMP_OK;
}

static amp_status get_u64(const char *fn, const amp_checkpoint *c, const char *key, uint64_t *out) {
    const char *v = amp_safetensors_meta(c->state, key);
    if (!parse_u64(v, out))
        return amp_error(AMP_ERR_FORMAT, "%s: %s: metadata %s = \"%s\" is missing or not an integer", fn, c->dir, key, v ? v : "(none)");
    return AMP_OK;
}

static amp_status get_f64(const char *fn, const amp_checkpoint *c, const char *key, double *out) {
    const char *v = amp_safetensors_meta(c->state, key);
    if (!parse_f64(v, out))
        return amp_error(AMP_ERR_FORMAT, "%s: %s: metadata %s = \"%s\" is missing or not a number", fn, c->dir, key, v ? v : "(none)");
    return AMP_OK;
}

/* ---- value checks: a restored value must be one training could have made ---------------- */
static bool ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

/* The first bad element of a file's tensor (float: not finite, or negative
 * when nonneg; I64: negative when nonneg), reported with the file and the
 * key. Reads the stored bits; no conversion. */
static amp_status check_values(const char *fn, const char *dir, const char *file, const amp_safetensors_info *in, bool nonneg) {
    const unsigned char *p = in->data;
    int64_t bad = -1;
    const char *why = NULL;
    for (int64_t i = 0; i < in->numel && bad < 0; i++) {
        uint64_t u = 0;
        bool nonfinite = false, neg = false;
        switch (in->dtype) {
        case AMP_F32: {
            uint32_t v;
            memcpy(&v, p + 4 * i, 4);
            nonfinite = (v & 0x7f800000u) == 0x7f800000u;
            neg = (v >> 31) && (v & 0x7fffffffu);
            break;
        }
        case AMP_F16:
        case AMP_BF16: {
            uint16_t v;
            memcpy(&v, p + 2 * i, 2);
            uint16_t e = in->dtype == AMP_F16 ? 0x7c00u : 0x7f80u;
            nonfinite = (v & e) == e;
            neg = (v >> 15) && (v & 0x7fffu);
            break;
        }
        case AMP_F64:
            memcpy(&u, p + 8 * i, 8);
            nonfinite = (u & 0x7ff0000000000000ull) == 0x7ff0000000000000ull;
            neg = (u >> 63) && (u & 0x7fffffffffffffffull);
            break;
        case AMP_F8E4M3: nonfinite = (p[i] & 0x7f) == 0x7f, neg = (p[i] >> 7) && (p[i] & 0x7f); break;
        case AMP_F8E5M2: nonfinite = (p[i] & 0x7c) == 0x7c, neg = (p[i] >> 7) && (p[i] & 0x7f); break;
        case AMP_I64: {
            int64_t v;
            memcpy(&v, p + 8 * i, 8);
            neg = v < 0;
            break;
        }
        case AMP_I32: {
            int32_t v;
            memcpy(&v, p + 4 * i, 4);
            neg = v < 0;
            break;
        }
        default: break;
        }
        if (nonfinite) bad = i, why = "is not finite";
        else if (neg && nonneg) bad = i, why = "is negative";
    }
    if (bad < 0) return AMP_OK;
    return amp_error(AMP_ERR_FORMAT, "%s: %s: %s: tensor '%s' element %" PRId64 " %s (%s); a checkpoint holding it cannot be "
                                     "resumed",
                     fn, dir, file, in->name, bad, why,
                     nonneg ? "it must be finite and >= 0" : "restored weights, buffers and optimizer state must be finite");
}

/* Every tensor of the model file: floats finite, running variances and
 * batch counts >= 0. */
static amp_status check_model_values(const char *fn, const amp_checkpoint *c) {
    for (int i = 0; i < amp_safetensors_count(c->model); i++) {
        amp_safetensors_info in;
        amp_safetensors_info_at(c->model, i, &in);
        bool nonneg = ends_with(in.name, "running_var") || ends_with(in.name, "num_batches_tracked");
        amp_status st = check_values(fn, c->dir, MODEL_FILE, &in, nonneg);
        if (st) return st;
    }
    return AMP_OK;
}

/* A state tensor: present with the parameter's shape and a float dtype. */
static amp_status check_tensor(const char *fn, const amp_checkpoint *c, const char *name, const amp_tensor *p, bool want_int) {
    int i = amp_safetensors_find(c->state, name);
    if (i < 0) return amp_error(AMP_ERR_FORMAT, "%s: %s: %s lacks tensor '%s'", fn, c->dir, STATE_FILE, name);
    amp_safetensors_info info;
    amp_safetensors_info_at(c->state, i, &info);
    if (want_int) {
        if (info.dtype != AMP_I64 || info.ndim != 0)
            return amp_error(AMP_ERR_FORMAT, "%s: %s: tensor '%s' should be a 0-d I64, it is %s of rank %d", fn, c->dir, name,
                             info.dtype_name, info.ndim);
        return AMP_OK;
    }
    if (info.dtype == AMP_DTYPE_COUNT || !amp_dtype_is_float(info.dtype))
        return amp_error(AMP_ERR_FORMAT, "%s: %s: tensor '%s' has dtype %s; expected F32", fn, c->dir, name, info.dtype_name);
    if (info.ndim != p->ndim || memcmp(info.shape, p->shape, sizeof(int64_t) * (size_t)p->ndim)) {
        char a[AMP_SHAPE_BUF], b[AMP_SHAPE_BUF];
        return amp_error(AMP_ERR_SHAPE, "%s: %s: tensor '%s' has shape %s; the parameter has %s", fn, c->dir, name,
                         amp__shape_fmt(info.ndim, info.shape, a, sizeof a), amp__shape_fmt(p->ndim, p->shape, b, sizeof b));
    }
    return AMP_OK;
}

static amp_status restore_optims(const char *fn, const amp_checkpoint *c, amp_train_state *s, const param_names *pn, bool apply) {
    int64_t cnt;
    amp_status st = get_i64(fn, c, "optim.count", &cnt);
    if (st) return st;
    if (cnt != s->n_optims)
        return amp_error(AMP_ERR_STATE, "%s: %s holds the state of %" PRId64 " optimizer(s); %d given", fn, c->dir, cnt, s->n_optims);
    char kb[64];
    for (int k = 0; k < s->n_optims; k++) {
        amp_optim *o = s->optims[k];
        const amp_optim_opts *oo = amp_optim_get_opts(o);
        const char *kind = amp_safetensors_meta(c->state, okey(kb, sizeof kb, k, "kind"));
        if (!kind || strcmp(kind, kind_name(oo->kind)))
            return amp_error(AMP_ERR_STATE, "%s: %s: optimizer %d was %s when saved; this one is %s", fn, c->dir, k, kind ? kind : "(none)",
                             kind_name(oo->kind));
        int64_t mw, np, steps;
        uint64_t sr;
        if ((st = get_i64(fn, c, okey(kb, sizeof kb, k, "master_weights"), &mw))) return st;
        if ((st = get_i64(fn, c, okey(kb, sizeof kb, k, "params"), &np))) return st;
        if ((st = get_i64(fn, c, okey(kb, sizeof kb, k, "steps"), &steps))) return st;
        if ((st = get_u64(fn, c, okey(kb, sizeof kb, k, "sr_counter"), &sr))) return st;
        if ((mw != 0) != oo->master_weights)
            return amp_error(AMP_ERR_STATE, "%s: %s: optimizer %d was saved %s master weights; this one has %s", fn, c->dir, k,
                             mw ? "with" : "without", oo->master_weights ? "them" : "none");
        if (np != amp_optim_num_params(o))
            return amp_error(AMP_ERR_STATE, "%s: %s: optimizer %d was saved with %" PRId64 " parameters; this one has %d", fn, c->dir, k, np,
                             amp_optim_num_params(o));
        if (steps < 0 || steps > AMP_MAX_STEPS)
            return amp_error(AMP_ERR_FORMAT, "%s: %s: %s = %" PRId64 " is not a step count (0 to 2^62)", fn, c->dir,
                             okey(kb, sizeof kb, k, "steps"), steps);
        double lr;
        const char *lrs = amp_safetensors_meta(c->state, okey(kb, sizeof kb, k, "lr"));
        if (lrs && (!parse_f64(lrs, &lr) || !(lr >= 0) || !isfinite(lr)))
            return amp_error(AMP_ERR_FORMAT, "%s: %s: %s = \"%s\" is not a finite learning rate >= 0", fn, c->dir,
                             okey(kb, sizeof kb, k, "lr"), lrs);
        if (apply) {
            amp_optim_set_steps(o, steps);
            amp_optim_set_sr_counter(o, sr);
        }
        for (int i = 0; i < (int)np; i++) {
            amp_tensor *p = amp_optim_param(o, i);
            const char *pname = name_of(pn, p);
            if (!pname) return amp_error(AMP_ERR_ARG, "%s: parameter %d of optimizer %d is not a parameter of the model", fn, i, k);
            for (int j = 0; j < N_STATE_NAMES; j++) {
                char *nm = fmt_name("optim.%d.%s.%s", k, pname, g_state_names[j]);
                if (!nm) return amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
                bool in_file = amp_safetensors_find(c->state, nm) >= 0;
                bool expected = (j < 2 && oo->kind != AMP_OPTIM_SGD) || (j == 3 && oo->master_weights);
                bool optional = j == 2 && oo->kind == AMP_OPTIM_SGD && oo->momentum != 0; /* absent before the first step */
                if (!in_file && expected) {
                    st = amp_error(AMP_ERR_FORMAT, "%s: %s: %s lacks tensor '%s'", fn, c->dir, STATE_FILE, nm);
                } else if (in_file && !expected && !optional) {
                    st = amp_error(AMP_ERR_FORMAT, "%s: %s: tensor '%s' does not fit a %s optimizer%s", fn, c->dir, nm,
                                   kind_name(oo->kind), oo->master_weights ? " with master weights" : "");
                } else if (in_file) {
                    st = check_tensor(fn, c, nm, p, false);
                    if (!st && !apply) { /* values: finite; the second moment >= 0 */
                        amp_safetensors_info info;
                        amp_safetensors_info_at(c->state, amp_safetensors_find(c->state, nm), &info);
                        st = check_values(fn, c->dir, STATE_FILE, &info, j == 1);
                    }
                    if (!st && apply) {
                        amp_tensor *t = amp_safetensors_get(c->state, nm);
                        st = t ? amp_optim_load_state(o, i, g_state_names[j], t) : amp_last_status();
                        amp_tensor_free(t);
                    }
                }
                free(nm);
                if (st) return st;
            }
            char *nm = fmt_name("optim.%d.%s.%s", k, pname, "step");
            if (!nm) return amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
            st = check_tensor(fn, c, nm, p, true);
            if (!st) {
                amp_safetensors_info info;
                amp_safetensors_info_at(c->state, amp_safetensors_find(c->state, nm), &info);
                int64_t v;
                memcpy(&v, info.data, sizeof v);
                /* a parameter steps only with its optimizer (and not when it has no gradient) */
                if (v < 0 || v > steps)
                    st = amp_error(AMP_ERR_FORMAT, "%s: %s: tensor '%s' = %" PRId64 " is not a step count in [0, %s = %" PRId64 "]", fn,
                                   c->dir, nm, v, okey(kb, sizeof kb, k, "steps"), steps);
                else if (apply)
                    st = amp_optim_set_param_steps(o, i, v);
            }
            free(nm);
            if (st) return st;
        }
    }
    return AMP_OK;
}

static amp_status restore_scaler(const char *fn, const amp_checkpoint *c, amp_scaler *sc, bool apply) {
    const char *en = amp_safetensors_meta(c->state, "scaler.enabled");
    bool saved = en && !strcmp(en, "1");
    bool have = sc && amp_scaler_is_enabled(sc);
    if (!have) return AMP_OK; /* nothing to restore into */
    if (!saved) return amp_error(AMP_ERR_STATE, "%s: %s holds no GradScaler state but an enabled scaler was given", fn, c->dir);
    amp_scaler_state ss;
    memset(&ss, 0, sizeof ss);
    int64_t h, hl;
    amp_status st;
    if ((st = get_f64(fn, c, "scaler.scale", &ss.scale)) || (st = get_f64(fn, c, "scaler.growth_factor", &ss.growth_factor)) ||
        (st = get_f64(fn, c, "scaler.backoff_factor", &ss.backoff_factor)) ||
        (st = get_i64(fn, c, "scaler.growth_interval", &ss.growth_interval)) ||
        (st = get_i64(fn, c, "scaler.growth_tracker", &ss.growth_tracker)) || (st = get_i64(fn, c, "scaler.hysteresis", &h)) ||
        (st = get_i64(fn, c, "scaler.hysteresis_left", &hl)) || (st = get_f64(fn, c, "scaler.min_scale", &ss.min_scale)) ||
        (st = get_f64(fn, c, "scaler.max_scale", &ss.max_scale)) || (st = get_i64(fn, c, "scaler.num_updates", &ss.num_updates)) ||
        (st = get_i64(fn, c, "scaler.num_skipped", &ss.num_skipped)))
        return st;
    if (h < 0 || h > 1000000 || hl < -1000000 || hl > 1000000)
        return amp_error(AMP_ERR_FORMAT, "%s: %s: scaler.hysteresis %" PRId64 " / scaler.hysteresis_left %" PRId64 " out of range", fn,
                         c->dir, h, hl);
    /* each value in its range, named by its key (amp_scaler_state_set checks the same, by field) */
    const double fmin = (double)FLT_MIN, fmax = (double)FLT_MAX;
    const char *bad = NULL, *why = NULL;
    double bv = 0;
    if (ss.scale == 0) bad = "scaler.scale", bv = ss.scale, why = "the loss scale collapsed to 0 in the run that saved it (its weights may hold NaN)";
    else if (!(ss.scale >= fmin && ss.scale <= fmax)) bad = "scaler.scale", bv = ss.scale, why = "outside the f32 range [1.18e-38, 3.4e38]";
    else if (!(ss.growth_factor > 1 && ss.growth_factor <= fmax)) bad = "scaler.growth_factor", bv = ss.growth_factor, why = "must be > 1 and finite as an f32";
    else if (!(ss.backoff_factor >= fmin && ss.backoff_factor < 1)) bad = "scaler.backoff_factor", bv = ss.backoff_factor, why = "must be in [1.18e-38, 1)";
    else if (ss.min_scale != 0 && !(ss.min_scale >= fmin && ss.min_scale <= fmax)) bad = "scaler.min_scale", bv = ss.min_scale, why = "must be 0 or in the f32 range";
    else if (ss.max_scale != 0 && !(ss.max_scale >= fmin && ss.max_scale <= fmax)) bad = "scaler.max_scale", bv = ss.max_scale, why = "must be 0 or in the f32 range";
    else if (ss.max_scale != 0 && ss.min_scale > ss.max_scale) bad = "scaler.min_scale", bv = ss.min_scale, why = "is above scaler.max_scale";
    else if (ss.min_scale != 0 && ss.scale < ss.min_scale) bad = "scaler.min_scale", bv = ss.min_scale, why = "is above scaler.scale";
    else if (ss.max_scale != 0 && ss.scale > ss.max_scale) bad = "scaler.max_scale", bv = ss.max_scale, why = "is below scaler.scale";
    if (bad) return amp_error(AMP_ERR_FORMAT, "%s: %s: %s = %g: %s", fn, c->dir, bad, bv, why);
    const char *ibad = NULL;
    int64_t iv = 0;
    if (ss.growth_interval <= 0 || ss.growth_interval > AMP_MAX_STEPS) ibad = "scaler.growth_interval", iv = ss.growth_interval;
    else if (ss.growth_tracker < 0 || ss.growth_tracker >= ss.growth_interval) ibad = "scaler.growth_tracker", iv = ss.growth_tracker;
    else if (ss.num_updates < 0 || ss.num_updates > AMP_MAX_STEPS) ibad = "scaler.num_updates", iv = ss.num_updates;
    else if (ss.num_skipped < 0 || ss.num_skipped > ss.num_updates) ibad = "scaler.num_skipped", iv = ss.num_skipped;
    if (ibad)
        return amp_error(AMP_ERR_FORMAT, "%s: %s: %s = %" PRId64 " is out of range (interval > 0, 0 <= tracker < interval, "
                                         "0 <= skipped <= updates <= 2^62)", fn, c->dir, ibad, iv);
    ss.hysteresis = (int)h;
    ss.hysteresis_left = (int)hl;
    if (!apply) {
        /* validate on a throwaway scaler so a bad state fails before anything changes */
        amp_scaler *tmp = amp_scaler_new(NULL);
        if (!tmp) return amp_last_status();
        st = amp_scaler_state_set(tmp, &ss);
        amp_scaler_free(tmp);
        if (st) return wrap_dir(st, fn, c->dir);
        return AMP_OK;
    }
    st = amp_scaler_state_set(sc, &ss);
    if (st) return wrap_dir(st, fn, c->dir);
    return AMP_OK;
}

static amp_status restore_all(const char *fn, const amp_checkpoint *c, amp_train_state *s, bool apply) {
    param_names pn;
    amp_status st = names_get(fn, s->model, &pn);
    if (st) return st;
    if (!apply) st = check_model_values(fn, c);
    if (st) {
        names_free(&pn);
        return st;
    }
    if (apply) {
        st = amp_module_load_safetensors(s->model, c->model);
        if (st) st = amp__error_wrap(st, fn);
    } else {
        /* the module check runs as part of the load, which changes nothing on failure; here only
           confirm every state tensor is there with the right shape */
        amp_tensor **ts = NULL;
        const char **nm = NULL;
        int n = amp__module_file_state(fn, s->model, &ts, &nm); /* as amp_checkpoint_save wrote it */
        if (n < 0) st = amp_last_status();
        else {
            if (amp_safetensors_count(c->model) != n)
                st = amp_error(AMP_ERR_FORMAT, "%s: %s: %s holds %d tensors; the model has %d", fn, c->dir, MODEL_FILE,
                               amp_safetensors_count(c->model), n);
            for (int i = 0; i < n && !st; i++) {
                int j = amp_safetensors_find(c->model, nm[i]);
                amp_safetensors_info info;
                if (j < 0) {
                    st = amp_error(AMP_ERR_FORMAT, "%s: %s: %s lacks tensor '%s'", fn, c->dir, MODEL_FILE, nm[i]);
                    break;
                }
                amp_safetensors_info_at(c->model, j, &info);
                if (info.dtype != ts[i]->dtype || info.ndim != ts[i]->ndim ||
                    memcmp(info.shape, ts[i]->shape, sizeof(int64_t) * (size_t)info.ndim)) {
                    char a[AMP_SHAPE_BUF], b[AMP_SHAPE_BUF];
                    st = amp_error(AMP_ERR_STATE, "%s: %s: tensor '%s' is %s %s in the checkpoint; the model has %s %s", fn, c->dir, nm[i],
                                   info.dtype_name, amp__shape_fmt(info.ndim, info.shape, a, sizeof a), amp_dtype_name(ts[i]->dtype),
                                   amp__shape_fmt(ts[i]->ndim, ts[i]->shape, b, sizeof b));
                }
            }
        }
        free(ts);
        free(nm);
    }
    if (!st) st = restore_optims(fn, c, s, &pn, apply);
    if (!st) st = restore_scaler(fn, c, s->scaler, apply);
    if (!st && s->gen) {
        uint64_t seed, off;
        if (!(st = get_u64(fn, c, "rng.seed", &seed)) && !(st = get_u64(fn, c, "rng.offset", &off)) && apply) {
            s->gen->seed = seed;
            s->gen->offset = off;
        }
    }
    if (!st && s->loader) {
        int64_t e, b, bpe;
        if (!(st = get_i64(fn, c, "loader.epoch", &e)) && !(st = get_i64(fn, c, "loader.batch", &b)) &&
            !(st = get_i64(fn, c, "loader.batches_per_epoch", &bpe))) {
            if (bpe != amp_loader_batches_per_epoch(s->loader))
                st = amp_error(AMP_ERR_STATE, "%s: %s: the loader had %" PRId64 " batches per epoch when saved, now %" PRId64
                                              " (different data or batch size)",
                               fn, c->dir, bpe, amp_loader_batches_per_epoch(s->loader));
            else if (e < 0 || e > AMP_MAX_STEPS || b < 0 || b > bpe)
                st = amp_error(AMP_ERR_FORMAT, "%s: %s: loader position epoch %" PRId64 " batch %" PRId64 " is invalid", fn, c->dir, e, b);
            else if (apply)
                st = amp_loader_seek(s->loader, e, b);
        }
    }
    if (!st && apply) s->step = c->step;
    names_free(&pn);
    return st;
}

amp_status amp_checkpoint_restore(const amp_checkpoint *c, amp_train_state *s) {
    static const char *fn = "amp_checkpoint_restore";
    if (!c) return amp_error(AMP_ERR_ARG, "%s: checkpoint is NULL", fn);
    amp_status st = check_state_arg(fn, s);
    if (st) return st;
    st = restore_all(fn, c, s, false);
    if (!st) st = restore_all(fn, c, s, true);
    return st;
}
