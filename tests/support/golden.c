#include "golden.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op_check.h"
#include "test_support.h"

typedef struct {
    char *name;
    amp_dtype dt;
    int ndim;
    int64_t shape[AMP_MAX_DIMS];
    const unsigned char *data;
} golden_rec;

struct golden_file {
    unsigned char *buf;
    size_t len;
    int n;
    golden_rec *recs;
};

static int rd(const unsigned char *buf, size_t len, size_t *pos, void *dst, size_t n) {
    if (*pos + n > len) return -1;
    memcpy(dst, buf + *pos, n);
    *pos += n;
    return 0;
}

golden_file *golden_open(const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", AMP_TEST_DATA_DIR, name);
    size_t len;
    unsigned char *buf = (unsigned char *)test_read_file(path, &len);
    if (!buf) fail_msg("golden: cannot read %s", path);
    if (len < 12 || memcmp(buf, "AMPGOLD1", 8) != 0) fail_msg("golden: %s is not an AMPGOLD1 file", path);
    golden_file *g = calloc(1, sizeof *g);
    g->buf = buf;
    g->len = len;
    size_t pos = 8;
    uint32_t count = 0;
    rd(buf, len, &pos, &count, 4);
    g->recs = calloc(count ? count : 1, sizeof *g->recs);
    for (uint32_t i = 0; i < count; i++) {
        golden_rec *r = &g->recs[i];
        uint16_t nl = 0;
        uint8_t dt = 0, nd = 0;
        if (rd(buf, len, &pos, &nl, 2)) fail_msg("golden: %s truncated", path);
        r->name = calloc(1, nl + 1u);
        if (rd(buf, len, &pos, r->name, nl) || rd(buf, len, &pos, &dt, 1) || rd(buf, len, &pos, &nd, 1))
            fail_msg("golden: %s truncated", path);
        if (nd > AMP_MAX_DIMS || dt >= AMP_DTYPE_COUNT) fail_msg("golden: %s: bad record %s", path, r->name);
        r->dt = (amp_dtype)dt;
        r->ndim = nd;
        int64_t numel = 1;
        for (int k = 0; k < nd; k++) {
            if (rd(buf, len, &pos, &r->shape[k], 8)) fail_msg("golden: %s truncated", path);
            numel *= r->shape[k];
        }
        size_t nbytes = (size_t)numel * amp_dtype_size(r->dt);
        if (pos + nbytes > len) fail_msg("golden: %s truncated in %s", path, r->name);
        r->data = buf + pos;
        pos += nbytes;
        g->n++;
    }
    return g;
}

void golden_close(golden_file *g) {
    if (!g) return;
    for (int i = 0; i < g->n; i++) free(g->recs[i].name);
    free(g->recs);
    free(g->buf);
    free(g);
}

static golden_rec *find(golden_file *g, const char *record) {
    for (int i = 0; i < g->n; i++)
        if (strcmp(g->recs[i].name, record) == 0) return &g->recs[i];
    return NULL;
}

bool golden_has(golden_file *g, const char *record) { return find(g, record) != NULL; }

amp_tensor *golden_tensor(golden_file *g, const char *record) {
    golden_rec *r = find(g, record);
    if (!r) fail_msg("golden: no record '%s'", record);
    amp_tensor *t = amp_tensor_from_data(r->data, r->dt, r->ndim, r->shape);
    if (!t) fail_msg("golden: %s: %s", record, amp_last_error());
    return t;
}

amp_tensor *golden_tensorf(golden_file *g, const char *fmt, ...) {
    char name[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    return golden_tensor(g, name);
}

int golden_count(golden_file *g) { return g->n; }
const char *golden_name(golden_file *g, int i) { return i >= 0 && i < g->n ? g->recs[i].name : NULL; }

void golden_assert(golden_file *g, const char *name, const amp_tensor *t, double rtol, double atol) {
    amp_tensor *w = golden_tensor(g, name);
    if (amp_tensor_numel(w) != amp_tensor_numel(t))
        fail_msg("%s: %lld elements, golden has %lld", name, (long long)amp_tensor_numel(t), (long long)amp_tensor_numel(w));
    double *wv = tc_values(w);
    tc_assert_tensor(t, wv, rtol, atol, name);
    free(wv);
    amp_tensor_free(w);
}

void golden_backward(golden_file *g, const char *case_name, amp_tensor *out) {
    char nm[160];
    snprintf(nm, sizeof nm, "%s/r", case_name);
    if (golden_has(g, nm)) {
        amp_tensor *R = golden_tensor(g, nm);
        assert_int_equal(amp_backward_ex(out, R, false), AMP_OK);
        amp_tensor_free(R);
    } else {
        assert_int_equal(amp_backward(out), AMP_OK);
    }
}

void golden_assert_out_gx(golden_file *g, const char *case_name, amp_tensor *out, const amp_tensor *x, double rtol,
                          double atol) {
    char nm[160];
    snprintf(nm, sizeof nm, "%s/out", case_name);
    golden_assert(g, nm, out, rtol, atol);
    golden_backward(g, case_name, out);
    snprintf(nm, sizeof nm, "%s/gx", case_name);
    golden_assert(g, nm, amp_tensor_grad(x), rtol, atol);
}

static amp_tensor *record(golden_file *g, const char *case_name, const char *suffix, char *name, size_t cap) {
    snprintf(name, cap, "%s.%s", case_name, suffix);
    return golden_has(g, name) ? golden_tensor(g, name) : NULL;
}

static void assert_values(const amp_tensor *t, const amp_tensor *want, double rtol, double atol, const char *what) {
    double *wv = tc_values(want);
    tc_assert_tensor(t, wv, rtol, atol, what);
    free(wv);
}

void golden_replay(golden_file *g, const char *case_name, const golden_op_case *c) {
    amp_scope *s = amp_scope_begin();
    char rec[160], what[192];
    amp_tensor *in[3] = {NULL, NULL, NULL};
    int n = 0;
    for (; n < (c->nin ? c->nin : 3); n++) {
        char suffix[8];
        snprintf(suffix, sizeof suffix, "in%d", n);
        in[n] = record(g, case_name, suffix, rec, sizeof rec);
        if (!in[n] && !c->nin) break;
        if (!in[n]) fail_msg("golden: no record '%s'", rec);
        amp_tensor_set_requires_grad(in[n], true);
    }
    amp_tensor *idx = NULL;
    amp_tensor *out = c->call(case_name, in, &idx, c->ctx);
    snprintf(what, sizeof what, "golden %s", case_name);
    snprintf(rec, sizeof rec, "%s.%s", case_name, c->out);
    amp_tensor *want = golden_tensor(g, rec);
    /* golden_format.py stores 0-d results as [1] (numpy) */
    if (amp_tensor_ndim(out) == 0) want = amp_reshape(want, 0, NULL);
    double t[4];
    c->tol(amp_tensor_dtype(in[0]), amp_tensor_dtype(want), t);
    if (amp_tensor_dtype(out) != amp_tensor_dtype(want))
        fail_msg("%s: dtype %s, torch's %s", what, amp_dtype_name(amp_tensor_dtype(out)),
                 amp_dtype_name(amp_tensor_dtype(want)));
    tc_assert_shape(out, amp_tensor_ndim(want), amp_tensor_shape(want), what);
    assert_values(out, want, t[0], t[1], what);
    amp_tensor *widx = record(g, case_name, "idx", rec, sizeof rec);
    if (widx) assert_values(idx, widx, 0, 0, rec);
    snprintf(rec, sizeof rec, "%s.%s", case_name, c->gout);
    amp_tensor *gout = golden_tensor(g, rec);
    if (amp_tensor_ndim(out) == 0) gout = amp_reshape(gout, 0, NULL);
    assert_int_equal(amp_backward_ex(out, gout, false), AMP_OK);
    for (int k = 0; k < n; k++) {
        snprintf(rec, sizeof rec, "%s.g%d", case_name, k);
        amp_tensor *gw = golden_tensor(g, rec);
        snprintf(what, sizeof what, "golden %s d/din%d", case_name, k);
        assert_values(amp_tensor_grad(in[k]), gw, t[2], t[3], what);
        amp_tensor_free(gw);
    }
    amp_scope_end(s);
}

void golden_replay_all(const char *file, const char *const *names, size_t n, const golden_op_case *c) {
    golden_file *g = golden_open(file);
    for (size_t i = 0; i < n; i++) golden_replay(g, names[i], c);
    golden_close(g);
}

void golden_tol_bf16_ulp(amp_dtype in0, amp_dtype out, double t[4]) {
    (void)in0;
    bool bf = out == AMP_BF16;
    t[0] = t[2] = bf ? 8e-3 : 1e-5;
    t[1] = t[3] = bf ? 4e-3 : 1e-5;
}

void golden_tol_rounded(amp_dtype in0, amp_dtype out, double t[4]) {
    (void)out;
    t[0] = tc_rtol(in0, 1.0);
    t[1] = 1e-6;
    t[2] = in0 == AMP_F32 ? 1e-5 : tc_rtol(in0, 4.0);
    t[3] = in0 == AMP_F32 ? 1e-5 : tc_rtol(in0, 2.0);
}
