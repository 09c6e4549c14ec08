/* Walks every public function of include/amp/ (every header) with bad input: NULL
 * pointers, negative values, huge sizes, wrong dtypes, wrong ranks,
 * mismatched shapes (plus half and plain valid inputs, so cleanup paths run
 * too). The callers are generated from the headers by tools/gen_api_walk.py
 * into tests/api_walk.inc; this test also parses the headers itself and fails
 * when a declared function has no caller (rerun the generator).
 *
 * Checked for every call:
 *   - nothing crashes (ASan/UBSan/LSan builds check memory too);
 *   - a call of a function returning a status, a count or a pointer that
 *     reports failure (negative, NULL) leaves an error message naming the
 *     function;
 *   - such a function given NULL for every pointer (variant 0) records an
 *     error naming it (a getter may still answer 0), unless NULL is
 *     documented to be valid for it (NULL_OK below, each with its reason).
 *   - with freed tensors (variant "freed tensors"; the walk runs in debug
 *     mode, AMP_DEBUG=1): every function given a tensor that was freed
 *     records an error naming itself and saying the tensor was freed,
 *     whatever it returns (issue 12 item 14: the handle check in every
 *     public call), and reports failure when it can.
 * Functions returning void, bool, a float or an enum cannot report failure:
 * for them the test checks that nothing crashes (destructors take NULL as a
 * no-op, as free() does). Argument values that would only break the
 * caller's side of a contract (a count larger than the caller's array) are
 * not tried; tools/gen_api_walk.py lists those cases. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "test_support.h"

/* Huge sizes must be refused, not attempted: let ASan return NULL like malloc would. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }

enum { V_NULL = 0, V_NEG, V_HUGE, V_DTYPE, V_RANK, V_SHAPE, V_HALF, V_VALID, V_DEAD, N_VARIANTS };
static const char *g_variant_names[] = {"NULL pointers", "negative values", "huge values", "wrong dtypes", "wrong ranks",
                                        "mismatched shapes", "half tensors", "valid inputs", "freed tensors"};

typedef enum { K_STATUS, K_INT, K_PTR, K_VOID, K_OTHER } ret_kind;

typedef struct {
    bool failed, skipped;
} api_result;

typedef struct {
    amp_tensor *f32[6], *i64, *d0, *d5, *mis[6], *f16[6];
    amp_tensor *dead[6]; /* freed: dead handles in debug mode */
    bool dead_used;
    amp_tensor *out[16];
    amp_tensor *arr[6];
    amp_module *module;
    amp_optim *optim;
    amp_scaler *scaler;
    amp_loader *loader;
    amp_safetensors *st;
    amp_gguf *gguf;
    amp_hf_dir *hf; /* a directory of config.json and model.safetensors (b->st's tensor) */
    amp_checkpoint *ckpt;
    amp_context *ctx;
    amp_setup *setup;
    amp_module *setup_model;
    amp_generator gen;
    FILE *devnull;
    amp_idx idx;
    amp_dataset ds, ds_out;
    void *scratch;
    void *outptr;
    amp_module *fresh[6];
    amp_tokenizer *tok;
    amp_qtensor *qt; /* q8_0 [2, 32] */
    amp_text_dataset *text;
    amp_module *gpt;
    amp_gpt_cache *gpt_cache;
    amp_module *llama;
    amp_llama_cache *llama_cache;
    amp_dist_group *group; /* the world of one this process is */
    amp_ddp *ddp;          /* data parallel over f32[0] */
} api_bank;

typedef struct {
    const char *name, *header;
    ret_kind kind;
    bool has_ptr; /* takes a pointer argument */
    void (*call)(api_bank *, int, api_result *);
} api_fn;

static char *g_ckpt_dir;

/* ---- argument sources (used by api_walk.inc) ---------------------------------------------------- */
static amp_tensor *arg_tensor(api_bank *b, int v, int pos) {
    if (pos > 5) pos = 5;
    switch (v) {
    case V_NULL: return NULL;
    case V_DEAD: b->dead_used = true; return b->dead[pos];
    case V_DTYPE: return b->i64;
    case V_RANK: return pos == 0 ? b->d0 : b->d5;
    case V_SHAPE: return b->mis[pos];
    case V_HALF: return b->f16[pos];
    default: return b->f32[pos];
    }
}

static amp_tensor *const *arg_tensors(api_bank *b, int v) {
    if (v == V_NULL) return NULL;
    for (int i = 0; i < 6; i++) b->arr[i] = arg_tensor(b, v, i);
    return b->arr;
}

static amp_tensor **arg_tensor_out(api_bank *b, int v, int pos) {
    if (v == V_NULL) return NULL;
    return &b->out[pos * 4 < 12 ? pos * 4 : 12];
}

static void *arg_obj(api_bank *b, int v, void *obj) {
    (void)b;
    return v == V_NULL ? NULL : obj;
}

static amp_module *const *arg_fresh_modules(api_bank *b, int v) {
    if (v == V_NULL) return NULL;
    amp_generator g = amp_generator_make(3);
    b->fresh[0] = amp_nn_linear(3, 4, true, &g);
    b->fresh[1] = amp_nn_relu();
    b->fresh[2] = amp_nn_linear(4, 2, false, &g);
    for (int i = 3; i < 6; i++) b->fresh[i] = amp_nn_relu();
    return b->fresh;
}

/* A new tensor / module for functions that take ownership of their argument. */
static amp_tensor *arg_fresh_tensor(api_bank *b, int v) {
    (void)b;
    if (v == V_NULL) return NULL;
    amp_dtype dt = v == V_DTYPE ? AMP_I64 : v == V_HALF ? AMP_F16 : AMP_F32;
    return amp_tensor_ones(dt, 2, AMP_SHAPE(2, 3));
}

static amp_module *arg_fresh_module(api_bank *b, int v) {
    if (v == V_NULL) return NULL;
    return amp_nn_linear(3, 4, true, &b->gen);
}

/* Borrowed modules (amp_initialize): the bank's module six times. */
static amp_module *const *arg_modules(api_bank *b, int v) {
    static amp_module *ms[6];
    if (v == V_NULL) return NULL;
    for (int i = 0; i < 6; i++) ms[i] = b->module;
    return ms;
}

static amp_optim *const *arg_optims(api_bank *b, int v) {
    static amp_optim *os[6];
    if (v == V_NULL) return NULL;
    for (int i = 0; i < 6; i++) os[i] = b->optim;
    return os;
}

static const char *arg_str(int v, int pos) {
    (void)pos;
    if (v == V_NULL) return NULL;
    if (v == V_NEG) return "";
    return "/nonexistent-amp-dir/x"; /* not a name anything knows, and no path one can write */
}

static const char *const *arg_names(int v) {
    static const char *names[] = {"a", "b", "c", "d", "e", "f"};
    static const char *dup[] = {"a", "a", "", NULL, "e", "f"};
    if (v == V_NULL) return NULL;
    return v == V_NEG ? dup : names;
}

static const int64_t *arg_shape(int v) {
    static const int64_t neg[] = {-2, 3, 4, 5, 6, 7, 8, 9}, huge[] = {INT64_MAX / 2, 3, INT64_MAX / 2, 5, 6, 7, 8, 9},
                         good[] = {2, 3, 4, 5, 6, 7, 8, 9};
    if (v == V_NULL) return NULL;
    return v == V_NEG ? neg : v == V_HUGE ? huge : good;
}

static const int *arg_dims(int v) {
    static const int neg[] = {-9, 7, 0, 0, 0, 0, 0, 0}, huge[] = {INT_MAX, INT_MIN, 0, 0, 0, 0, 0, 0}, good[] = {0, 1, 2, 3, 4, 5, 6, 7};
    if (v == V_NULL) return NULL;
    return v == V_NEG ? neg : v == V_HUGE ? huge : good;
}

static int arg_int(int v, int i) {
    (void)i;
    return v == V_NEG ? -1 : v == V_HUGE ? INT_MAX : 1;
}

static int64_t arg_i64(int v, int i) {
    (void)i;
    return v == V_NEG ? -1 : v == V_HUGE ? INT64_MAX / 2 : 2;
}

/* entries of a caller array (the test's arrays hold 6) */
static int arg_count(int v) { return v == V_NEG ? -1 : v == V_HUGE ? 6 : 1; }

static size_t arg_size(int v) { return v == V_NEG ? 0 : 8; }

static bool arg_bool(int v) { return v == V_NEG; }

static double arg_double(int v, int i) {
    (void)i;
    return v == V_NEG ? -1.0 : v == V_HUGE ? (i % 2 ? NAN : INFINITY) : 0.5;
}

static int arg_enum(int v) { return v == V_NEG ? -1 : v == V_HUGE ? 1000 : 0; }

enum {
    OPT_POLICY, OPT_SCALER_STATE, OPT_OPTIM, OPT_SCALER, OPT_CONV, OPT_POOL, OPT_LOSS, OPT_LR, OPT_AUTOCAST, OPT_CONTEXT,
    OPT_LOADER, OPT_KV, OPT_TRAIN_STATE, OPT_SDPA, OPT_MODULE_CLASS, OPT_TEXT, OPT_FUNCTION, OPT_INIT, OPT_MODULE_IO,
    OPT_CKPT, OPT_GPT, OPT_GEN, OPT_DDP, OPT_BERT_LOAD, OPT_EMBED, OPT_LLAMA, OPT_LLAMA_GEN, N_OPTS
};

/* A checkpointed region for amp_activation_checkpoint: y = 2 x[0]. */
static amp_tensor *walk_ckpt_fn(void *arg, amp_tensor *const *in, int n) {
    (void)arg;
    (void)n;
    return amp_mul_scalar(in[0], 2.0);
}
static amp_checkpoint_fn arg_ckpt_fn(int v) { return v == V_NULL ? NULL : walk_ckpt_fn; }

/* hooks for amp_tensor_register_post_accumulate_grad_hook / amp_autograd_queue_callback */
static amp_status walk_hook(amp_tensor *leaf, void *ctx) {
    (void)leaf;
    (void)ctx;
    return AMP_OK;
}
static amp_status walk_callback(void *ctx, amp_status st) {
    (void)ctx;
    return st;
}
static amp_grad_hook_fn arg_hook(int v) { return v == V_NULL ? NULL : walk_hook; }
/* amp_qtensor_wrap's release: a no-op (the walk wraps its scratch buffer) */
static void walk_release(void *owner) { (void)owner; }
static void (*arg_release(int v))(void *) { return v == V_NULL ? NULL : walk_release; }
/* a load dtype: out-of-range fields for the bad variants, q8_0 for valid ones */
static amp_load_dtype arg_load_dtype(int v) {
    if (v == V_NULL) return (amp_load_dtype){(amp_load_kind)7, AMP_F32, AMP_Q8_0};
    if (v == V_DTYPE) return (amp_load_dtype){AMP_LOAD_FLOAT, AMP_I64, AMP_Q8_0};
    if (v == V_HUGE) return (amp_load_dtype){AMP_LOAD_QUANT, AMP_F32, (amp_qtype)1000};
    return (amp_load_dtype){AMP_LOAD_QUANT, AMP_F32, AMP_Q8_0};
}
static amp_backward_callback_fn arg_callback(int v) { return v == V_NULL ? NULL : walk_callback; }

/* A custom function for amp_function_apply: y = 2 x[0]. */
static amp_tensor *walk_fn_forward(amp_function_ctx *ctx, amp_tensor *const *in, int n) {
    (void)ctx;
    (void)n;
    return amp_mul_scalar(in[0], 2.0);
}
static amp_status walk_fn_backward(amp_function_ctx *ctx, amp_tensor *g, amp_tensor **gin) {
    (void)ctx;
    gin[0] = amp_mul_scalar(g, 2.0);
    return AMP_OK;
}

/* Option structs: NULL (variant 0), values out of range (NEG), zeroed (HUGE), and sensible ones. */
static const void *arg_opts(api_bank *b, int v, int which) {
    static union {
        amp_policy policy;
        amp_scaler_state ss;
        amp_optim_opts optim;
        amp_scaler_opts scaler;
        amp_conv_params conv;
        amp_pool_params pool;
        amp_loss_opts loss;
        amp_lr_schedule lr;
        amp_autocast_opts ac;
        amp_context_opts ctx;
        amp_loader_opts lo;
        amp_kv kv[4];
        amp_train_state ts;
        amp_sdpa_opts sdpa;
        amp_module_class mc;
        amp_text_opts text;
        amp_function fnc;
        amp_init_opts init;
        amp_module_io io;
        amp_checkpoint_opts ck;
        amp_gpt_config gpt;
        amp_gpt_generate_opts gen;
        amp_llama_config llama;
        amp_llama_generate_opts llama_gen;
        amp_ddp_opts ddp;
        amp_bert_load_opts bert;
        amp_embed_opts embed;
        char raw[512];
    } u;
    if (v == V_NULL) return NULL;
    memset(&u, 0, sizeof u);
    if (v == V_HUGE) return &u;
    bool bad = v == V_NEG;
    switch (which) {
    case OPT_POLICY: u.policy = bad ? (amp_policy){(amp_dtype)-1, (amp_dtype)77, AMP_I64} : (amp_policy){AMP_F32, AMP_BF16, AMP_F32}; break;
    case OPT_SCALER_STATE:
        u.ss = bad ? (amp_scaler_state){-1, 0.5, 2, -3, -1, -1, -5, -1, -2, 0, 0}
                   : (amp_scaler_state){1024, 2, 0.5, 100, 3, 1, 1, 0, 0, 5, 1};
        break;
    case OPT_OPTIM:
        u.optim = amp_adamw_opts(1e-3);
        if (bad) {
            u.optim.kind = (amp_optim_kind)9;
            u.optim.lr = NAN;
            u.optim.beta1 = 2;
            u.optim.rounding = (amp_round_mode)7;
        }
        break;
    case OPT_SCALER:
        if (bad) u.scaler = (amp_scaler_opts){.init_scale = -1, .growth_factor = 0.5, .backoff_factor = 3, .growth_interval = -2, .hysteresis = -1, .min_scale = 5, .max_scale = 1};
        break;
    case OPT_CONV:
        if (bad) u.conv = (amp_conv_params){{-1, -1}, {-3, INT64_MAX / 2}, {-1, 0}, -4};
        break;
    case OPT_POOL:
        u.pool = bad ? (amp_pool_params){{-1, INT64_MAX / 2}, {-1, -1}, {-5, 9}, {-1, -1}, true, true} : (amp_pool_params){{2, 2}, {0, 0}, {0, 0}, {0, 0}, false, false};
        break;
    case OPT_LOSS:
        u.loss = AMP_LOSS_DEFAULTS;
        if (bad) {
            u.loss.reduction = (amp_reduction)9;
            u.loss.label_smoothing = 2;
            u.loss.beta = -1;
            u.loss.weight = b->mis[3];
            u.loss.pos_weight = b->i64;
        }
        break;
    case OPT_LR:
        u.lr = bad ? (amp_lr_schedule){(amp_lr_kind)9, -1, NAN, -5, -7, NAN} : (amp_lr_schedule){AMP_LR_COSINE, 0, 0, 2, 10, 0};
        break;
    case OPT_AUTOCAST: u.ac = bad ? (amp_autocast_opts){true, AMP_I64, true, (amp_autocast_table)5} : AMP_AUTOCAST_OPTS(AMP_BF16); break;
    case OPT_CONTEXT:
        u.ctx = bad ? (amp_context_opts){true, AMP_F8E4M3, (amp_scaler_mode)7, {.init_scale = -1}, (amp_autocast_table)9}
                    : (amp_context_opts){true, AMP_F16, AMP_SCALER_AUTO, {.init_scale = 0}, AMP_AUTOCAST_TABLE_DEFAULT};
        break;
    case OPT_LOADER: u.lo = bad ? (amp_loader_opts){-3, true, true, 1, NAN, -1, 0, 0} : (amp_loader_opts){2, true, false, 1, 0, 0, 0, 0}; break;
    case OPT_TEXT:
        u.text = bad ? (amp_text_opts){-1, NULL, 0} : (amp_text_opts){0.1, "", 1};
        break;
    case OPT_SDPA:
        u.sdpa = bad ? (amp_sdpa_opts){b->mis[3], true, 1.5, INFINITY, NULL, true} : AMP_SDPA_DEFAULTS;
        break;
    case OPT_KV:
        if (bad) {
            u.kv[0] = (amp_kv){NULL, "x"};
            u.kv[1] = (amp_kv){"k", NULL};
        } else {
            u.kv[0] = (amp_kv){"k", "v"};
            u.kv[1] = (amp_kv){"k2", "v2"};
        }
        break;
    case OPT_TRAIN_STATE:
        if (bad) u.ts = (amp_train_state){b->module, NULL, 3, NULL, NULL, NULL, -1, NULL, 2};
        else u.ts = (amp_train_state){b->module, &b->optim, 1, b->scaler, &b->gen, b->loader, 2, NULL, 0};
        break;
    case OPT_MODULE_CLASS: u.mc = (amp_module_class){.name = bad ? NULL : "Walk"}; break;
    case OPT_INIT:
        u.init = (amp_init_opts){.level = AMP_O2, .half = AMP_BF16, .optim = amp_sgd_opts(0.1)};
        if (bad) {
            u.init.level = (amp_opt_level)9;
            u.init.half = AMP_I64;
            u.init.keep_norm_f32 = (amp_switch)7;
        }
        break;
    case OPT_DDP:
        u.ddp = amp_ddp_default_opts();
        if (bad) {
            u.ddp.zero_stage = -2;
            u.ddp.bucket_mb = -1;
            u.ddp.grad_comm = (amp_grad_comm)99;
        }
        break;
    case OPT_MODULE_IO:
        u.io = bad ? (amp_module_io){AMP_I64, true, AMP_F32, AMP_U8} : (amp_module_io){AMP_DTYPE_COUNT, true, AMP_BF16, AMP_F32};
        break;
    case OPT_BERT_LOAD:
        u.bert = AMP_BERT_LOAD_DEFAULTS;
        if (bad) u.bert.load_dtype = (amp_load_dtype){(amp_load_kind)7, AMP_I64, (amp_qtype)99};
        break;
    case OPT_EMBED: u.embed = bad ? (amp_embed_opts){-4, -1, true} : AMP_EMBED_DEFAULTS; break;
    case OPT_CKPT: u.ck = (amp_checkpoint_opts){NULL, bad ? 3 : 0}; break;
    case OPT_GPT: u.gpt = bad ? (amp_gpt_config){-1, 3, 4, -4, 0, 2.0, true} : (amp_gpt_config){1, 1, 4, 4, 8, 0.0, true}; break;
    case OPT_GEN:
        u.gen = AMP_GPT_GENERATE_DEFAULTS;
        u.gen.max_new_tokens = 2;
        if (bad) u.gen.temperature = -1, u.gen.top_k = -3;
        break;
    case OPT_LLAMA:
        u.llama = (amp_llama_config){1, 8, 8, 2, 1, 16, 8, 10000.0, 1e-6, AMP_ROPE_HALVES, true};
        if (bad) u.llama.n_head = 3, u.llama.rms_eps = -1, u.llama.rope_layout = (amp_rope_layout)9;
        break;
    case OPT_LLAMA_GEN:
        u.llama_gen = AMP_LLAMA_GENERATE_DEFAULTS;
        u.llama_gen.max_new_tokens = 2;
        if (bad) u.llama_gen.top_p = 0, u.llama_gen.top_k = -3, u.llama_gen.n_stop = 2;
        break;
    case OPT_FUNCTION:
        u.fnc = (amp_function){.name = "Walk", .forward = walk_fn_forward, .backward = walk_fn_backward};
        if (bad) {
            u.fnc.cast_inputs = true;
            u.fnc.cast_dtype = AMP_I64;
        }
        break;
    default: break;
    }
    return &u;
}

#include "api_walk.inc"

/* ---- the bank: fresh objects for every function ---------------------------------------------- */
static amp_tensor *tensor_of(amp_dtype dt, int ndim, const int64_t *shape, bool grad) {
    amp_tensor *t = amp_tensor_empty(dt, ndim, shape);
    assert_non_null(t);
    int64_t n = amp_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        int64_t idx[AMP_MAX_DIMS], r = i;
        for (int d = ndim - 1; d >= 0; d--) {
            idx[d] = r % shape[d];
            r /= shape[d];
        }
        amp_tensor_set(t, idx, (double)(i % 3));
    }
    if (grad) amp_tensor_set_requires_grad(t, true);
    return t;
}

static void bank_make(api_bank *b) {
    memset(b, 0, sizeof *b);
    for (int i = 0; i < 6; i++) {
        b->f32[i] = tensor_of(AMP_F32, 2, AMP_SHAPE(2, 3), i == 0);
        b->f16[i] = tensor_of(AMP_F16, 2, AMP_SHAPE(2, 3), i == 0);
    }
    b->i64 = tensor_of(AMP_I64, 2, AMP_SHAPE(2, 3), false);
    b->d0 = tensor_of(AMP_F32, 0, NULL, false);
    b->d5 = tensor_of(AMP_F32, 5, AMP_SHAPE(1, 2, 1, 3, 1), false);
    for (int i = 0; i < 6; i++) {
        b->dead[i] = tensor_of(AMP_F32, 2, AMP_SHAPE(2, 3), i == 0);
        amp_tensor_free(b->dead[i]); /* a handle the debug quarantine remembers as freed */
    }
    static const int64_t shapes[6][3] = {{2, 3}, {4, 5}, {3}, {5, 2, 2}, {1, 7}, {6}};
    static const int ranks[6] = {2, 2, 1, 3, 2, 1};
    for (int i = 0; i < 6; i++) b->mis[i] = tensor_of(AMP_F32, ranks[i], shapes[i], i == 0);
    b->gen = amp_generator_make(1);
    b->module = amp_nn_linear(3, 4, true, &b->gen);
    amp_optim_opts oo = amp_adamw_opts(1e-3);
    b->optim = test_optim_new(b->module, &oo);
    b->scaler = amp_scaler_new(NULL);
    b->ds.n = 4;
    b->ds.h = b->ds.w = 2;
    b->ds.num_classes = 2;
    b->ds.images = calloc(16, 1);
    b->ds.labels = calloc(4, 1);
    amp_loader_opts lo = {2, true, false, 1, 0, 0, 0, 0};
    b->loader = amp_loader_new(&b->ds, &lo);
    amp_tensor *w = b->f32[1];
    const char *nm[] = {"w"};
    void *buf;
    size_t len;
    assert_int_equal(amp_safetensors_encode(&w, nm, 1, NULL, 0, &buf, &len), AMP_OK);
    b->st = amp_safetensors_parse(buf, len, "bank");
    free(buf);
    b->gguf = amp_gguf_open(AMP_TEST_DATA_DIR "/gguf/meta.gguf");
    assert_non_null(b->gguf);
    {
        char hp[4096];
        snprintf(hp, sizeof hp, "%s/hf", g_ckpt_dir);
        assert_true(mkdir(hp, 0755) == 0 || errno == EEXIST); /* one bank per test */
        snprintf(hp, sizeof hp, "%s/hf/config.json", g_ckpt_dir);
        test_write_file(hp, "{\"hidden_size\": 3}", 18);
        snprintf(hp, sizeof hp, "%s/hf/model.safetensors", g_ckpt_dir);
        assert_int_equal(amp_safetensors_write(hp, &w, nm, 1, NULL, 0), AMP_OK);
        snprintf(hp, sizeof hp, "%s/hf", g_ckpt_dir);
        b->hf = amp_hf_dir_open(hp);
        assert_non_null(b->hf);
    }
    b->ckpt = amp_checkpoint_open(g_ckpt_dir);
    amp_context_opts co;
    memset(&co, 0, sizeof co);
    b->ctx = amp_context_new(&co);
    {
        amp_init_opts io = {.level = AMP_O0, .optim = amp_sgd_opts(0.1)};
        amp_module *sm = amp_nn_linear(3, 2, true, &b->gen);
        b->setup_model = sm;
        b->setup = amp_initialize(&sm, 1, &io);
    }
    b->devnull = fopen("/dev/null", "w");
    b->scratch = aligned_alloc(64, 4096);
    memset(b->scratch, 0, 4096);
    b->tok = amp_tokenizer_byte();
    {
        amp_tensor *w = amp_tensor_ones(AMP_F32, 2, AMP_SHAPE(2, 32));
        b->qt = amp_quantize(w, AMP_Q8_0);
        amp_tensor_free(w);
        assert_non_null(b->qt);
    }
    char tp[4096];
    snprintf(tp, sizeof tp, "%s/text.txt", g_ckpt_dir);
    FILE *tf = fopen(tp, "w");
    assert_non_null(tf);
    for (int i = 0; i < 40; i++) fprintf(tf, "line %d\n", i);
    fclose(tf);
    amp_text_opts to = {0.1, "", 1};
    b->text = amp_text_dataset_open(tp, b->tok, &to);
    b->group = amp_dist_world();
    b->ddp = amp_ddp_new(b->group, &b->f32[0], 1, NULL);
    assert_true(b->group && b->ddp);
    assert_true(b->tok && b->text);
    amp_gpt_config gc = {1, 1, 4, 4, 8, 0.0, true};
    b->gpt = amp_gpt_new(&gc, &b->gen);
    b->gpt_cache = amp_gpt_cache_new(b->gpt, 1);
    assert_true(b->gpt && b->gpt_cache);
    amp_llama_config lc = {1, 8, 8, 2, 1, 16, 8, 10000.0, 1e-6, AMP_ROPE_HALVES, true};
    b->llama = amp_llama_new(&lc, &b->gen);
    b->llama_cache = amp_llama_cache_new(b->llama, 1, 4);
    assert_true(b->llama && b->llama_cache);
    assert_true(b->module && b->optim && b->scaler && b->loader && b->st && b->ckpt && b->ctx && b->devnull && b->setup);
}

static void bank_free(api_bank *b) {
    amp_ddp_free(b->ddp);
    for (int i = 0; i < 6; i++) {
        test_free_tensors(b->f32[i], b->f16[i], b->mis[i]);
    }
    test_free_tensors(b->i64, b->d0, b->d5);
    amp_optim_free(b->optim);
    amp_module_free(b->module);
    amp_scaler_free(b->scaler);
    amp_loader_free(b->loader);
    amp_dataset_free(&b->ds);
    amp_safetensors_free(b->st);
    amp_gguf_close(b->gguf);
    amp_hf_dir_close(b->hf);
    amp_text_dataset_free(b->text);
    amp_gpt_cache_free(b->gpt_cache);
    amp_llama_cache_free(b->llama_cache);
    amp_module_free(b->llama);
    amp_module_free(b->gpt);
    amp_tokenizer_free(b->tok);
    amp_qtensor_free(b->qt);
    amp_checkpoint_close(b->ckpt);
    amp_context_free(b->ctx);
    amp_setup_free(b->setup);
    amp_module_free(b->setup_model);
    fclose(b->devnull);
    free(b->scratch);
}

/* ---- which functions are public: every header's declarations (tests/support) ------------------ */
static int header_functions(char names[][64], int max) {
    static const char *const hdrs[] = {"amp.h", "base.h", "numeric.h", "cuda.h", "tensor.h", "autograd.h", "autocast.h",
                                       "ops.h", "optim.h", "scaler.h", "policy.h", "nn.h", "initialize.h", "io.h",
                                       "checkpoint.h", "gguf.h", "text.h", "gpt.h", "dist.h", "pretrained.h", "quant.h", "bert.h", "llama.h"};
    return test_header_functions(hdrs, (int)(sizeof hdrs / sizeof hdrs[0]), names, max);
}

static void t_table_covers_headers(void **state) {
    (void)state;
    static char names[1024][64];
    int n = header_functions(names, 1024);
    assert_true(n > 100);
    int missing = 0;
    for (int i = 0; i < n; i++) {
        bool found = false;
        for (int j = 0; j < API_COUNT && !found; j++) found = !strcmp(g_api[j].name, names[i]);
        if (!found) {
            print_message("public function %s has no caller: rerun tools/gen_api_walk.py\n", names[i]);
            missing++;
        }
    }
    for (int j = 0; j < API_COUNT; j++) {
        bool found = false;
        for (int i = 0; i < n && !found; i++) found = !strcmp(g_api[j].name, names[i]);
        if (!found) {
            print_message("caller for %s, which the headers no longer declare: rerun tools/gen_api_walk.py\n", g_api[j].name);
            missing++;
        }
    }
    assert_int_equal(n, API_COUNT);
    assert_int_equal(missing, 0);
}

/* Functions for which NULL for every pointer is a valid call (documented
 * defaults or no-ops). */
static const char *NULL_OK[] = {
    "amp_scaler_new",   /* NULL opts = torch's defaults (scaler.h) */
    "amp_policy_str",   /* returns buf, which is NULL; prints "(null)" for a NULL policy */
    "amp_shape_str",    /* returns buf, which is NULL */
    "amp_module_kind",  /* "(null)" for NULL (nn.h) */
    "amp_lr_at",        /* a NULL schedule is constant: base_lr (optim.h) */
    "amp_nn_linear",    /* NULL generator = the default generator (tensor.h) */
    "amp_nn_conv2d",    /* likewise */
    "amp_nn_dropout",   /* likewise */
    "amp_nn_embedding", /* likewise */
    "amp_context_new",  /* NULL options = all zero: a disabled context, the plain f32 loop */
    "amp_tokenizer_gpt2", /* NULL paths = the vocabulary files amp ships (text.h) */
    "amp_set_matmul_precision_thread", /* NULL removes the thread's override (ops.h) */
    "amp_dist_init",    /* NULL argc/argv: MPI_Init accepts them (dist.h) */
    NULL,
};

/* Functions whose failure value is also an ordinary answer for valid input,
 * so it comes without an error message (NULL input still needs one). */
static const char *ANSWERS[] = {
    "amp_tensor_grad",          /* NULL: no gradient */
    "amp_tensor_grad_fn_name",  /* NULL: a leaf */
    "amp_optim_grad",           /* NULL: no gradient yet */
    "amp_optim_state",          /* NULL: state not allocated (momentum before the first step) */
    "amp_safetensors_find",     /* -1: no such tensor */
    "amp_gguf_find_key",        /* -1: no such key */
    "amp_gguf_find_tensor",     /* -1: no such tensor */
    "amp_safetensors_meta",     /* NULL: no such key */
    "amp_checkpoint_meta",      /* NULL: no such key */
    "amp_context_scaler",       /* NULL: the context does not scale */
    "amp_setup_scaler",         /* NULL: no loss scaling at this level */
    "amp_scaler_scale_history", /* NULL: no update yet */
    "amp_autocast_op_policy",   /* -2: unknown op */
    NULL,
};

/* Functions that answer a freed tensor as they answer NULL (with the error
 * message, but a value that is not a failure). */
static const char *DEAD_ANSWERS[] = {
    "amp_tensor_numel", /* 0 */
    "amp_shape_str",    /* writes "(freed)" into buf and returns buf */
    NULL,
};

static bool in_list(const char *const *list, const char *fn) {
    for (int i = 0; list[i]; i++)
        if (!strcmp(list[i], fn)) return true;
    return false;
}

static bool null_ok(const char *fn) { return in_list(NULL_OK, fn); }

static void t_walk(void **state) {
    (void)state;
    amp_set_num_threads(2);
    int threads = amp_get_num_threads();
    amp_cpu_path path = amp_cpu_active();
    int calls = 0, failures = 0, violations = 0, skipped = 0;
    bool trace = getenv("AMP_WALK_TRACE") != NULL; /* name each call before making it (to place a crash) */
    for (int f = 0; f < API_COUNT; f++) {
        const api_fn *fn = &g_api[f];
        api_bank b;
        bank_make(&b);
        for (int v = 0; v < N_VARIANTS; v++) {
            amp_scope *scope = amp_scope_begin();
            memset(b.scratch, 0, 4096);
            memset(b.out, 0, sizeof b.out);
            memset(b.fresh, 0, sizeof b.fresh);
            amp_clear_error();
            api_result r = {false, false};
            b.dead_used = false;
            if (trace) {
                fprintf(stderr, "walk: %s, %s\n", fn->name, g_variant_names[v]);
                fflush(stderr);
            }
            fn->call(&b, v, &r);
            amp_status st = amp_last_status();
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", amp_last_error());
            /* restore global state a call may have changed */
            while (amp_autocast_depth() > 0) amp_autocast_exit();
            while (!amp_grad_enabled()) amp_no_grad_end();
            if (!strcmp(fn->name, "amp_module_eval_begin")) amp_module_eval_end();
            if (!strcmp(fn->name, "amp_mem_push_category")) amp_mem_pop_category();
            if (!strcmp(fn->name, "amp_nn_sequential") && v != V_NULL) {
                /* it owns the first n children (none when n < 0: it cannot know how many) */
                int owned = arg_count(v) < 0 ? 0 : arg_count(v);
                for (int i = owned; i < 6; i++) amp_module_free(b.fresh[i]);
            }
            amp_set_num_threads(threads);
            amp_cpu_select(path);
            free(b.outptr);
            b.outptr = NULL;
            amp_idx_free(&b.idx);
            amp_dataset_free(&b.ds_out);
            amp_scope_end(scope);
            if (r.skipped) {
                skipped++;
                continue;
            }
            calls++;
            bool reports = fn->kind == K_STATUS || fn->kind == K_INT || fn->kind == K_PTR;
            if (reports && r.failed) failures++;
            bool named = st != AMP_OK && strstr(msg, fn->name) != NULL;
            if (v == V_DEAD) {
                /* every call given a freed tensor names itself and the freed tensor, and fails when it can report */
                if (b.dead_used && (!named || !strstr(msg, "freed") || (reports && !r.failed && !in_list(DEAD_ANSWERS, fn->name)))) {
                    print_message("VIOLATION %s (%s): given a freed tensor, %s: \"%s\"\n", fn->name, fn->header,
                                  reports && !r.failed ? "it reported success" : "no error naming it and the freed tensor", msg);
                    violations++;
                }
                continue;
            }
            bool answer = in_list(ANSWERS, fn->name) && v != V_NULL;
            if (reports && r.failed && !null_ok(fn->name) && !answer && !named) {
                if (st == AMP_OK)
                    print_message("VIOLATION %s (%s): failed on %s without an error message\n", fn->name, fn->header, g_variant_names[v]);
                else
                    print_message("VIOLATION %s (%s): failed on %s, but the message does not name it: \"%s\"\n", fn->name, fn->header,
                                  g_variant_names[v], msg);
                violations++;
            } else if (reports && v == V_NULL && fn->has_ptr && !null_ok(fn->name) && !named) {
                /* a getter may answer 0 for NULL, but must say why */
                print_message("VIOLATION %s (%s): NULL for every pointer argument gave no error naming it%s%s\n", fn->name, fn->header,
                              st != AMP_OK ? ": " : "", st != AMP_OK ? msg : "");
                violations++;
            }
        }
        bank_free(&b);
    }
    print_message("%d functions, %d calls (%d skipped by design), %d reported failures, %d violations\n", API_COUNT, calls, skipped,
                  failures, violations);
    assert_int_equal(violations, 0);
}

/* Found by the walk's neighbourhood: an invalid memory category used to be
 * pushed as is, and the next allocation indexed the byte counters with it. */
static void t_invalid_category_then_alloc(void **state) {
    (void)state;
    amp_clear_error();
    amp_mem_push_category((amp_mem_category)100000);
    assert_non_null(strstr(amp_last_error(), "amp_mem_push_category: category 100000"));
    amp_tensor *t = amp_tensor_ones(AMP_F32, 2, AMP_SHAPE(4, 4));
    assert_non_null(t);
    amp_tensor_free(t);
    amp_mem_pop_category();
    amp_mem_push_category((amp_mem_category)-1);
    amp_tensor *u = amp_tensor_ones(AMP_F32, 1, AMP_SHAPE(8));
    amp_tensor_free(u);
    amp_mem_pop_category();
    amp_mem_stats ms = amp_memory_stats();
    assert_true(ms.live_total < ((size_t)1 << 40));
}

static int group_setup(void **state) {
    (void)state;
    char *root = test_mkdtemp();
    if (!root) return -1;
    size_t n = strlen(root) + 8;
    g_ckpt_dir = malloc(n);
    snprintf(g_ckpt_dir, n, "%s/ck", root);
    free(root);
    amp_generator g = amp_generator_make(0);
    amp_module *m = amp_nn_linear(3, 4, true, &g);
    amp_train_state s = {m, NULL, 0, NULL, NULL, NULL, 0, NULL, 0};
    amp_status st = amp_checkpoint_save(g_ckpt_dir, &s);
    amp_module_free(m);
    /* a world of one (this test is not started by mpirun) for amp/dist.h's functions */
    if (amp_dist_init(NULL, NULL) != AMP_OK) return -1;
    return st == AMP_OK ? 0 : -1;
}

static int group_teardown(void **state) {
    (void)state;
    char *slash = strrchr(g_ckpt_dir, '/');
    *slash = 0;
    test_rmtree(g_ckpt_dir);
    free(g_ckpt_dir);
    amp_dist_finalize();
    return 0;
}

int main(void) {
    setenv("AMP_DEBUG", "1", 1); /* dead handles are checked (variant "freed tensors") */
    return AMP_TEST_RUN_FIXTURES(group_setup, group_teardown, t_table_covers_headers, t_walk,
                                 t_invalid_category_then_alloc);
}
