/* Precision policies, opt levels, amp_context. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "amp/ops.h"
#include "amp/policy.h"
#include "core/error.h"

static int dtype_word(const char *s, size_t n, amp_dtype *out) {
    static const struct {
        const char *w;
        amp_dtype d;
    } words[] = {{"float32", AMP_F32}, {"f32", AMP_F32},       {"full", AMP_F32},      {"fp32", AMP_F32},
                 {"float16", AMP_F16}, {"f16", AMP_F16},       {"half", AMP_F16},      {"fp16", AMP_F16},
                 {"bfloat16", AMP_BF16}, {"bf16", AMP_BF16}};
    for (size_t i = 0; i < sizeof words / sizeof *words; i++)
        if (strlen(words[i].w) == n && strncasecmp(s, words[i].w, n) == 0) {
            *out = words[i].d;
            return 0;
        }
    return -1;
}

amp_status amp_policy_parse(const char *s, amp_policy *out) {
    static const char *fn = "amp_policy_parse";
    if (!s) return amp_error(AMP_ERR_ARG, "%s: string is NULL", fn);
    if (!out) return amp_error(AMP_ERR_ARG, "%s: out is NULL", fn);
    amp_policy p = {AMP_F32, AMP_F32, AMP_F32};
    bool seen[3] = {false, false, false};
    const char *cur = s;
    if (!*cur) return amp_error(AMP_ERR_FORMAT, "%s: empty policy string", fn);
    while (*cur) {
        const char *end = strchr(cur, ',');
        size_t len = end ? (size_t)(end - cur) : strlen(cur);
        const char *eq = memchr(cur, '=', len);
        if (!eq)
            return amp_error(AMP_ERR_FORMAT, "%s: '%.*s' in \"%s\" is not key=dtype (keys params/compute/output or p/c/o)", fn,
                             (int)len, cur, s);
        size_t kl = (size_t)(eq - cur), vl = len - kl - 1;
        int key;
        if ((kl == 6 && !strncasecmp(cur, "params", 6)) || (kl == 1 && (*cur == 'p' || *cur == 'P'))) key = 0;
        else if ((kl == 7 && !strncasecmp(cur, "compute", 7)) || (kl == 1 && (*cur == 'c' || *cur == 'C'))) key = 1;
        else if ((kl == 6 && !strncasecmp(cur, "output", 6)) || (kl == 1 && (*cur == 'o' || *cur == 'O'))) key = 2;
        else
            return amp_error(AMP_ERR_FORMAT, "%s: unknown key '%.*s' in \"%s\" (expected params, compute, output or p, c, o)",
                             fn, (int)kl, cur, s);
        if (seen[key]) return amp_error(AMP_ERR_FORMAT, "%s: key '%.*s' given twice in \"%s\"", fn, (int)kl, cur, s);
        amp_dtype d;
        if (dtype_word(eq + 1, vl, &d))
            return amp_error(AMP_ERR_FORMAT, "%s: unknown dtype '%.*s' in \"%s\" (expected float32/f32/full, "
                                             "float16/f16/half or bfloat16/bf16)", fn, (int)vl, eq + 1, s);
        seen[key] = true;
        if (key == 0) p.param = d;
        else if (key == 1) p.compute = d;
        else p.output = d;
        if (!end) break;
        cur = end + 1;
        if (!*cur) return amp_error(AMP_ERR_FORMAT, "%s: trailing comma in \"%s\"", fn, s);
    }
    if (!seen[0] || !seen[1] || !seen[2])
        return amp_error(AMP_ERR_FORMAT, "%s: \"%s\" must name params, compute and output", fn, s);
    *out = p;
    return AMP_OK;
}

static const char *long_name(amp_dtype d) { return d == AMP_F16 ? "float16" : d == AMP_BF16 ? "bfloat16" : "float32"; }

char *amp_policy_str(const amp_policy *p, char *buf, size_t n) {
    if (!buf || !n) return buf;
    if (!p) snprintf(buf, n, "(null)");
    else snprintf(buf, n, "params=%s,compute=%s,output=%s", long_name(p->param), long_name(p->compute), long_name(p->output));
    return buf;
}

amp_status amp_opt_level_parse(const char *s, amp_opt_level *out) {
    if (!s || !out) return amp_error(AMP_ERR_ARG, "amp_opt_level_parse: NULL argument");
    if ((s[0] == 'O' || s[0] == 'o') && s[1] >= '0' && s[1] <= '3' && !s[2]) {
        *out = (amp_opt_level)(s[1] - '0');
        return AMP_OK;
    }
    return amp_error(AMP_ERR_FORMAT, "amp_opt_level_parse: '%s' is not an opt level (O0, O1, O2 or O3)", s);
}

amp_status amp_opt_config_get(amp_opt_level level, amp_dtype half, amp_opt_config *out) {
    static const char *fn = "amp_opt_config_get";
    if (!out) return amp_error(AMP_ERR_ARG, "%s: out is NULL", fn);
    if ((int)level < 0 || level > AMP_O3) return amp_error(AMP_ERR_ARG, "%s: level %d is not O0..O3", fn, (int)level);
    if (level != AMP_O0 && half != AMP_F16 && half != AMP_BF16)
        return amp_error(AMP_ERR_DTYPE, "%s: half dtype %s is not f16 or bf16", fn, amp_dtype_name(half));
    amp_opt_config c;
    memset(&c, 0, sizeof c);
    c.level = level;
    c.param_dtype = AMP_F32;
    c.compute_dtype = AMP_F32;
    switch (level) {
    case AMP_O0: break;
    case AMP_O1:
        c.compute_dtype = half;
        c.autocast = true;
        c.loss_scaling = half == AMP_F16;
        break;
    case AMP_O2:
        c.param_dtype = c.compute_dtype = half;
        c.keep_norm_f32 = true;
        c.master_weights = true;
        c.loss_scaling = half == AMP_F16;
        break;
    case AMP_O3: c.param_dtype = c.compute_dtype = half; break;
    }
    *out = c;
    return AMP_OK;
}

static bool is_half(amp_dtype d) { return d == AMP_F16 || d == AMP_BF16; }

/* The one mapping from a policy to the decisions (amp_initialize's policy
 * option and `amp train --policy` both come here): half params are O2
 * (f32 master weights, norms kept f32, loss scaling for f16), f32 params with
 * half compute O1 (autocast), all f32 O0: the level's configuration from
 * amp_opt_config_get, so the two never disagree. */
amp_status amp_opt_config_from_policy(const amp_policy *p, amp_opt_config *out) {
    static const char *fn = "amp_opt_config_from_policy";
    if (!p || !out) return amp_error(AMP_ERR_ARG, "%s: NULL argument", fn);
    amp_dtype ds[3] = {p->param, p->compute, p->output};
    for (int i = 0; i < 3; i++)
        if (ds[i] != AMP_F32 && !is_half(ds[i]))
            return amp_error(AMP_ERR_DTYPE, "%s: %s dtype %s is not float32, float16 or bfloat16", fn,
                             i == 0 ? "params" : i == 1 ? "compute" : "output", amp_dtype_name(ds[i]));
    if (is_half(p->param) && p->compute != p->param)
        return amp_error(AMP_ERR_ARG, "%s: params %s with compute %s: half parameters compute in their own dtype (compute must be %s)",
                         fn, amp_dtype_name(p->param), amp_dtype_name(p->compute), amp_dtype_name(p->param));
    amp_opt_level level = is_half(p->param) ? AMP_O2 : is_half(p->compute) ? AMP_O1 : AMP_O0;
    return amp_opt_config_get(level, p->compute, out); /* (compute is the half dtype for O1 and O2; O0 ignores it) */
}

/* ---- amp_context --------------------------------------------------------------------- */
struct amp_context {
    amp_context_opts o;
    amp_scaler *scaler;
    bool inside;
};

amp_context *amp_context_new(const amp_context_opts *in) {
    static const char *fn = "amp_context_new";
    amp_context_opts o;
    memset(&o, 0, sizeof o);
    if (in) o = *in;
    if (o.enabled && o.dtype != AMP_F16 && o.dtype != AMP_BF16)
        return amp_error_null(AMP_ERR_DTYPE, "%s: dtype %s is not f16 or bf16", fn, amp_dtype_name(o.dtype));
    if ((int)o.scaler < 0 || o.scaler > AMP_SCALER_OFF) return amp_error_null(AMP_ERR_ARG, "%s: scaler mode %d is not valid", fn, (int)o.scaler);
    amp_context *c = calloc(1, sizeof *c);
    if (!c) return amp_error_null(AMP_ERR_NOMEM, "%s: out of memory", fn);
    c->o = o;
    bool want = o.enabled && (o.scaler == AMP_SCALER_ON || (o.scaler == AMP_SCALER_AUTO && o.dtype == AMP_F16));
    if (want) {
        c->scaler = amp_scaler_new(&o.scaler_opts);
        if (!c->scaler) {
            free(c);
            return NULL;
        }
    }
    return c;
}

void amp_context_free(amp_context *c) {
    if (!c) return;
    if (c->inside) amp_autocast_exit();
    amp_scaler_free(c->scaler);
    free(c);
}

amp_status amp_context_enter(amp_context *c) {
    if (!c) return amp_error(AMP_ERR_ARG, "amp_context_enter: context is NULL");
    if (c->inside) return amp_error(AMP_ERR_STATE, "amp_context_enter: already inside this context");
    if (c->o.enabled) {
        amp_autocast_opts ao = AMP_AUTOCAST_OPTS(c->o.dtype);
        ao.table = c->o.table;
        amp_status st = amp_autocast_enter_opts(&ao);
        if (st != AMP_OK) return st;
    }
    c->inside = true;
    return AMP_OK;
}

amp_status amp_context_exit(amp_context *c) {
    if (!c) return amp_error(AMP_ERR_ARG, "amp_context_exit: context is NULL");
    if (!c->inside) return amp_error(AMP_ERR_STATE, "amp_context_exit: not inside this context");
    c->inside = false;
    return c->o.enabled ? amp_autocast_exit() : AMP_OK;
}

amp_status amp_context_backward(amp_context *c, amp_tensor *loss) {
    if (!c) return amp_error(AMP_ERR_ARG, "amp_context_backward: context is NULL");
    if (!loss) return amp_error_chain(AMP_ERR_ARG, "amp_context_backward: loss is NULL");
    amp_tensor *scaled = c->scaler ? amp_scaler_scale(c->scaler, loss) : loss;
    amp_status st = scaled ? amp_backward(scaled) : amp_last_status();
    if (c->scaler) amp_tensor_free(scaled);
    if (st) return amp_error_chain(st, "amp_context_backward");
    return st;
}

amp_status amp_context_step(amp_context *c, amp_optim *opt, bool *skipped) {
    if (skipped) *skipped = false;
    if (!c) return amp_error(AMP_ERR_ARG, "amp_context_step: context is NULL");
    if (!opt) return amp_error(AMP_ERR_ARG, "amp_context_step: opt is NULL");
    if (!c->scaler) return amp_optim_step(opt);
    amp_status st = amp_scaler_step(c->scaler, opt, skipped);
    if (st != AMP_OK) return st;
    return amp_scaler_update(c->scaler);
}

amp_scaler *amp_context_scaler(amp_context *c) { return c ? c->scaler : amp_error_null(AMP_ERR_ARG, "amp_context_scaler: context is NULL"); }
