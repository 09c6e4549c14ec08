/* Autocast: per-thread region stack, the op table, the cast cache. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/op_table.h"
#include "amp/ops.h"
#include "tensor/tensor_impl.h"

const amp_op_info amp__op_table[] = {
#define AMP_OP_ROW(id, nm, cuda, cpu) [AMP_OP_##id] = {nm, {cuda, cpu}},
    AMP_OP_LIST(AMP_OP_ROW)
#undef AMP_OP_ROW
};
_Static_assert(sizeof amp__op_table / sizeof amp__op_table[0] == AMP_OP_COUNT,
               "amp__op_table: one row per autocast op (AMP_OP_LIST)");

/* Process-wide overrides: AMP_CAST_DEFAULT (-1) = use the table. */
static atomic_int g_override[AMP_OP_COUNT];
static atomic_int g_override_init;

static void overrides_init(void) {
    int expected = 0;
    if (atomic_load(&g_override_init) == 2) return;
    if (atomic_compare_exchange_strong(&g_override_init, &expected, 1)) {
        for (int i = 0; i < AMP_OP_COUNT; i++) atomic_store(&g_override[i], AMP_CAST_DEFAULT);
        atomic_store(&g_override_init, 2);
    }
    while (atomic_load(&g_override_init) != 2) {
    }
}

#define MAX_REGIONS 64
typedef struct {
    amp_autocast_opts o;
} region;

typedef struct {
    amp_tensor *src;  /* retained */
    amp_tensor *cast; /* retained */
    amp_dtype dtype;
    uint64_t version; /* src's version when cast: a changed src is cast again */
} cache_entry;

static _Thread_local region g_regions[MAX_REGIONS];
#define g_depth amp__autocast_depth /* kept in the tensor layer: amp_scope_end reads it */
static _Thread_local cache_entry *g_cache;
static _Thread_local size_t g_cache_n, g_cache_cap;
static _Thread_local uint64_t g_cast_count;

const char *amp_cast_category_name(amp_cast_category c) {
    switch (c) {
    case AMP_CAST_NONE: return "none";
    case AMP_CAST_LOWER: return "lower precision";
    case AMP_CAST_FP32: return "fp32";
    case AMP_CAST_PROMOTE: return "promote";
    case AMP_CAST_DEFAULT: return "default";
    }
    return "invalid";
}

static void cache_clear(void) {
    for (size_t i = 0; i < g_cache_n; i++) {
        amp__release(g_cache[i].cast);
        amp__release(g_cache[i].src);
    }
    free(g_cache);
    g_cache = NULL;
    g_cache_n = g_cache_cap = 0;
}

static void unwind(int depth);

/* fn: the public entry point, named in errors */
static amp_status enter(const char *fn, const amp_autocast_opts *o) {
    if (!o) return amp_error(AMP_ERR_ARG, "%s: o is NULL", fn);
    if (o->enabled && o->dtype != AMP_F16 && o->dtype != AMP_BF16)
        return amp_error(AMP_ERR_DTYPE, "%s: dtype %s is not a lower-precision dtype (use f16 or bf16)", fn,
                         amp_dtype_name(o->dtype));
    if (o->table != AMP_AUTOCAST_TABLE_DEFAULT && o->table != AMP_AUTOCAST_TABLE_CPU)
        return amp_error(AMP_ERR_ARG, "%s: table %d is not a built-in table", fn, (int)o->table);
    if (g_depth >= MAX_REGIONS)
        return amp_error(AMP_ERR_STATE, "%s: more than %d nested regions (an amp_autocast_enter without its "
                                        "amp_autocast_exit in a loop?)", fn, MAX_REGIONS);
    amp__autocast_unwind = unwind; /* this thread's hook (tensor_impl.h) */
    g_regions[g_depth++].o = *o;
    return AMP_OK;
}

amp_status amp_autocast_enter_opts(const amp_autocast_opts *o) { return enter("amp_autocast_enter_opts", o); }

amp_status amp_autocast_enter(amp_dtype dt) {
    amp_autocast_opts o = AMP_AUTOCAST_OPTS(dt);
    if (g_depth > 0) { /* as torch: unspecified settings follow the enclosing region */
        o.cache_enabled = g_regions[g_depth - 1].o.cache_enabled;
        o.table = g_regions[g_depth - 1].o.table;
    }
    return enter("amp_autocast_enter", &o);
}

/* amp_scope_end: close the regions a scope left open (down to depth). */
static void unwind(int depth) {
    while (g_depth > depth && g_depth > 0) {
        g_depth--;
        if (g_depth == 0) cache_clear();
    }
}

amp_status amp_autocast_exit(void) {
    if (g_depth == 0) return amp_error(AMP_ERR_STATE, "amp_autocast_exit: no autocast region is open on this thread");
    g_depth--;
    if (g_depth == 0) cache_clear();
    return AMP_OK;
}

bool amp_autocast_is_enabled(void) { return g_depth > 0 && g_regions[g_depth - 1].o.enabled; }
amp_dtype amp_autocast_dtype(void) { return amp_autocast_is_enabled() ? g_regions[g_depth - 1].o.dtype : AMP_F32; }
int amp_autocast_depth(void) { return g_depth; }
void amp__autocast_current(amp_autocast_opts *o) {
    if (g_depth > 0) *o = g_regions[g_depth - 1].o;
    else *o = (amp_autocast_opts){false, AMP_F16, true, AMP_AUTOCAST_TABLE_DEFAULT};
}
uint64_t amp_autocast_cast_count(void) { return g_cast_count; }
size_t amp_autocast_cache_entries(void) { return g_cache_n; }

static int find_op(const char *name) {
    if (!name) return -1;
    for (int i = 0; i < AMP_OP_COUNT; i++)
        if (strcmp(amp__op_table[i].name, name) == 0) return i;
    return -1;
}

amp_status amp_autocast_set_op_policy(const char *op, amp_cast_category c) {
    overrides_init();
    int i = find_op(op);
    if (i < 0) return amp_error(AMP_ERR_ARG, "amp_autocast_set_op_policy: unknown op '%s' (see docs/autocast.md)", op ? op : "(null)");
    if (c < AMP_CAST_DEFAULT || c > AMP_CAST_PROMOTE)
        return amp_error(AMP_ERR_ARG, "amp_autocast_set_op_policy: category %d is not valid", (int)c);
    atomic_store(&g_override[i], (int)c);
    return AMP_OK;
}

static amp_cast_category category_of(int op, amp_autocast_table table) {
    overrides_init();
    int ov = atomic_load(&g_override[op]);
    if (ov != AMP_CAST_DEFAULT) return (amp_cast_category)ov;
    return amp__op_table[op].category[table];
}

int amp_autocast_op_policy(const char *op, amp_autocast_table table) {
    if (!op) {
        amp_error(AMP_ERR_ARG, "amp_autocast_op_policy: op is NULL");
        return -2;
    }
    int i = find_op(op);
    if (i < 0 || (table != AMP_AUTOCAST_TABLE_DEFAULT && table != AMP_AUTOCAST_TABLE_CPU)) return -2;
    return (int)category_of(i, table);
}

/* ---- casting ------------------------------------------------------------------ */
static bool castable(const amp_tensor *t) { return t->dtype == AMP_F32 || t->dtype == AMP_F16 || t->dtype == AMP_BF16; }

static amp_tensor *do_cast(amp_tensor *x, amp_dtype dt, bool cache_enabled) {
    bool cacheable = cache_enabled && x->dtype == AMP_F32 && !x->grad_fn && x->requires_grad;
    size_t stale = (size_t)-1;
    if (cacheable) {
        for (size_t i = 0; i < g_cache_n; i++)
            if (g_cache[i].src == x && g_cache[i].dtype == dt) {
                if (g_cache[i].version == amp__version(x)) return amp_tensor_retain(g_cache[i].cast);
                stale = i; /* x changed in place (an optimizer step inside the region): cast it again */
                break;
            }
    }
    g_cast_count++;
    if (!cacheable) {
        amp_tensor *c = amp_to(x, dt);
        return amp_tensor_keep(c);
    }
    /* A cached cast always records history (PyTorch #158232): it must work
     * when reused after a no_grad block ends. */
    amp_mem_push_category(AMP_MEM_CAST_CACHE);
    int saved_depth = 0;
    while (!amp_grad_enabled() && amp__engine_depth == 0) {
        amp_no_grad_end();
        saved_depth++;
    }
    amp_tensor *c = amp_tensor_keep(amp_to(x, dt));
    for (int i = 0; i < saved_depth; i++) amp_no_grad_begin();
    amp_mem_pop_category();
    if (!c) return NULL;
    if (stale != (size_t)-1) {
        amp__release(g_cache[stale].cast);
        g_cache[stale].cast = amp_tensor_retain(c);
        g_cache[stale].version = amp__version(x);
        return c;
    }
    if (g_cache_n == g_cache_cap) {
        size_t cap = g_cache_cap ? g_cache_cap * 2 : 16;
        cache_entry *p = realloc(g_cache, cap * sizeof *p);
        if (!p) return c; /* uncached but correct */
        g_cache = p;
        g_cache_cap = cap;
    }
    g_cache[g_cache_n].src = amp_tensor_retain(x);
    g_cache[g_cache_n].cast = amp_tensor_retain(c);
    g_cache[g_cache_n].dtype = dt;
    g_cache[g_cache_n].version = amp__version(x);
    g_cache_n++;
    return c;
}

static int autocast_cast(amp_op_id op, amp_tensor **in, int n);

int amp__autocast(amp_op_id op, amp_tensor **in, int n) {
    /* Until each op computes through its device's backend, an op takes CPU
     * tensors only: a device pointer must never reach a CPU kernel. Ops that
     * dispatch through kernels/backend.h call amp__autocast_dev instead. */
    for (int i = 0; i < n; i++)
        if (in[i] && in[i]->storage->device != AMP_DEVICE_CPU) {
            amp_error(AMP_ERR_UNSUPPORTED, "amp_%s: input %d is on %s, and this op computes on the CPU only so far "
                                           "(docs/cuda.md lists what runs on cuda); move it with amp_tensor_to",
                      amp__op_table[op].name, i, amp_device_name(in[i]->storage->device));
            return -1;
        }
    return autocast_cast(op, in, n);
}

int amp__autocast_dev(amp_op_id op, amp_tensor **in, int n, amp_device *dev) {
    char fn[64];
    snprintf(fn, sizeof fn, "amp_%s", amp__op_table[op].name);
    if (amp__same_device(fn, (const amp_tensor *const *)in, NULL, n, dev) != AMP_OK) return -1;
    return autocast_cast(op, in, n);
}

static int autocast_cast(amp_op_id op, amp_tensor **in, int n) {
    /* backward functions reuse public ops: never autocast inside the engine */
    if (!amp_autocast_is_enabled() || amp__engine_depth > 0) return 0;
    const amp_autocast_opts *o = &g_regions[g_depth - 1].o;
    amp_cast_category cat = category_of(op, o->table);
    amp_dtype target;
    switch (cat) {
    case AMP_CAST_LOWER: target = o->dtype; break;
    case AMP_CAST_FP32: target = AMP_F32; break;
    case AMP_CAST_PROMOTE: {
        /* widest float type among the castable inputs; f16 with bf16 -> f32 */
        int have = 0;
        amp_dtype w = AMP_F32;
        for (int i = 0; i < n; i++) {
            if (!in[i] || !castable(in[i])) continue;
            if (!have) { w = in[i]->dtype; have = 1; }
            else if (in[i]->dtype != w) w = AMP_F32;
        }
        if (!have) return 0;
        target = w;
        break;
    }
    default: return 0;
    }
    int mask = 0;
    for (int i = 0; i < n; i++) {
        if (!in[i] || !castable(in[i]) || in[i]->dtype == target) continue;
        amp_tensor *c = do_cast(in[i], target, o->cache_enabled);
        if (!c) {
            amp__autocast_done(in, n, mask);
            return -1;
        }
        in[i] = c;
        mask |= 1 << i;
    }
    return mask;
}

amp_cast_category amp__autocast_category(amp_op_id op) {
    if (!amp_autocast_is_enabled() || amp__engine_depth > 0) return AMP_CAST_NONE;
    return category_of(op, g_regions[g_depth - 1].o.table);
}

void amp__autocast_done(amp_tensor **in, int n, int mask) {
    for (int i = 0; i < n && i < 31; i++)
        if (mask & (1 << i)) amp__release(in[i]);
}

/* ---- docs ------------------------------------------------------------------------ */
amp_status amp_autocast_write_docs(FILE *f) {
    if (!f) return amp_error(AMP_ERR_ARG, "amp_autocast_write_docs: f is NULL");
    static const amp_cast_category order[] = {AMP_CAST_LOWER, AMP_CAST_FP32, AMP_CAST_PROMOTE, AMP_CAST_NONE};
    static const char *what[] = {
        "inputs cast to the region's dtype (f16 or bf16)",
        "half inputs cast to f32; the output is f32",
        "inputs cast to the widest float dtype among them (f16 with bf16 gives f32)",
        "no cast: the op runs in its inputs' dtype with ordinary type promotion",
    };
    fprintf(f, "# Autocast op categories\n\n"
               "Generated from the op table in `src/amp/op_table.h` by `make docs`\n"
               "(`amp autocast --markdown`);"
               " `tests/test_autocast.c` fails when this file is stale.\n\n"
               "f64 and integer tensors are never cast. The **default** table is PyTorch's CUDA\n"
               "autocast lists restricted to amp's ops (what the seeds teach: softmax, norms and\n"
               "losses in fp32). The **cpu** table is PyTorch's CPU lists, for parity with\n"
               "`torch.autocast(\"cpu\")`; choose it per region with\n"
               "`amp_autocast_opts.table = AMP_AUTOCAST_TABLE_CPU`. Override one op with\n"
               "`amp_autocast_set_op_policy(\"softmax\", AMP_CAST_NONE)`.\n\n");
    for (int t = 0; t < 2; t++) {
        fprintf(f, "## %s table\n\n", t == 0 ? "Default" : "CPU");
        for (int k = 0; k < 4; k++) {
            fprintf(f, "### %s\n\n%s.\n\n", amp_cast_category_name(order[k]), what[k]);
            int any = 0;
            for (int i = 0; i < AMP_OP_COUNT; i++) {
                if (amp__op_table[i].category[t] != order[k]) continue;
                fprintf(f, "%s`%s`", any ? ", " : "", amp__op_table[i].name);
                any = 1;
            }
            fprintf(f, any ? "\n\n" : "(none)\n\n");
        }
    }
    return AMP_OK;
}
