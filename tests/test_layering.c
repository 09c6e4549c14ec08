/* The layering of src/ (docs/ARCHITECTURE.md, Layering): every quoted
 * include of every file under src/ is resolved against src/ then include/
 * (the compiler's order) and checked against the layer of the including
 * file. Public headers (include/amp/) may be included from anywhere; a
 * private header only from its own layer or a layer above it:
 *
 *   core < numeric < tensor < kernels < autocast < autograd < ops < optim
 *        < training (scaler, amp_initialize) < io < nn < dist < models < cli
 *
 * A layer is a folder of src/, except src/amp, which holds two: autocast
 * (autocast.c, policy.c, op_table.h: below autograd, which records the
 * region for custom functions and checkpoints) and training (scaler.c,
 * initialize.c: above autograd and the optimizers they drive). The one edge
 * downward is the device interface: the tensor layer allocates through
 * kernels/device.h and includes nothing else of kernels/. Inside the public
 * API the optimizer does not include the scaler's header (the scaler drives
 * the optimizer, one way). Inside a layer, where files share a header, the
 * calls themselves go one way (t_calls_one_way: optim.c uses nothing scaler.c
 * defines; the CLI trainer's front, tasks, loop and data parallel in that
 * order). tools/include_graph.py prints the whole graph and its circles. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "test_support.h"

enum { L_CORE, L_NUMERIC, L_TENSOR, L_KERNELS, L_AUTOCAST, L_AUTOGRAD, L_OPS, L_OPTIM, L_TRAINING, L_IO, L_NN, L_DIST,
       L_MODELS, L_CLI, L_COUNT };
static const char *const layer_name[L_COUNT] = {"core", "numeric", "tensor", "kernels", "autocast", "autograd", "ops",
                                                "optim", "training", "io", "nn", "dist", "models", "cli"};

/* Includes that break the rules today, each to be removed by the change
 * named beside it (delete the line when it lands). None today: the list
 * ends with its terminator, which is not counted. */
static const struct {
    const char *file, *header, *why;
} known[] = {
    {NULL, NULL, NULL},
};
static const size_t n_known = sizeof known / sizeof known[0] - 1;
static int known_seen[sizeof known / sizeof known[0]];

/* The layer of a path under src/ ("src/amp/scaler.c"); -1 if none. */
static int layer_of(const char *path) {
    static const struct {
        const char *prefix;
        int layer;
    } map[] = {
        {"src/core/", L_CORE},           {"src/numeric/", L_NUMERIC},     {"src/tensor/", L_TENSOR},
        {"src/kernels/", L_KERNELS},     {"src/amp/autocast.c", L_AUTOCAST}, {"src/amp/policy.c", L_AUTOCAST},
        {"src/amp/op_table.h", L_AUTOCAST}, {"src/autograd/", L_AUTOGRAD}, {"src/ops/", L_OPS},
        /* the found_inf check and unscale (torch's foreach op): below the optimizer */
        {"src/amp/scaler_impl.h", L_OPS}, {"src/amp/scaler_found_inf.c", L_OPS},
        {"src/optim/", L_OPTIM},         {"src/amp/scaler.c", L_TRAINING}, {"src/amp/initialize.c", L_TRAINING},
        {"src/io/", L_IO},               {"src/nn/", L_NN},               {"src/dist/", L_DIST},
        {"src/models/", L_MODELS},       {"src/cli/", L_CLI},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (!strncmp(path, map[i].prefix, strlen(map[i].prefix))) return map[i].layer;
    return -1;
}

static bool exists(const char *rel) {
    char p[2048];
    struct stat sb;
    snprintf(p, sizeof p, "%s/%s", AMP_SOURCE_DIR, rel);
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

static bool source_name(const char *n) {
    const char *dot = strrchr(n, '.');
    if (!dot) return false;
    return !strcmp(dot, ".c") || !strcmp(dot, ".h") || !strcmp(dot, ".inc") || !strcmp(dot, ".cu") || !strcmp(dot, ".cuh");
}

typedef struct {
    int files, includes, violations, unplaced;
    bool quiet; /* count, do not print (the checker's own test) */
} walk_stats;

/* An include of file (layer lf) that resolved to header (src/... or
 * include/...): is it allowed? */
static void check_edge(const char *file, int lf, const char *header, walk_stats *ws) {
    /* public headers a layer must not use either: one-way dependencies
     * inside the API */
    static const struct {
        int layer;
        const char *header, *why;
    } banned[] = {
        {L_OPTIM, "include/amp/scaler.h", "the scaler drives the optimizer through optim/optim_impl.h, never the reverse"},
    };
    for (size_t i = 0; i < sizeof banned / sizeof banned[0]; i++)
        if (lf == banned[i].layer && !strcmp(header, banned[i].header)) {
            if (!ws->quiet) print_error("%s includes %s: %s\n", file, header, banned[i].why);
            ws->violations++;
            return;
        }
    if (strncmp(header, "src/", 4)) return; /* public API */
    int lh = layer_of(header);
    if (lh < 0) {
        if (!ws->quiet) print_error("%s includes %s, which no layer of tests/test_layering.c holds (add it to layer_of)\n", file, header);
        ws->violations++;
        return;
    }
    bool ok = lh <= lf;
    /* the device interface is what the tensor layer may use of kernels/ */
    if (lf == L_TENSOR && !strcmp(header, "src/kernels/device.h")) ok = true;
    if (ok) return;
    for (size_t i = 0; i < n_known && !ws->quiet; i++)
        if (!strcmp(file, known[i].file) && !strcmp(header, known[i].header)) {
            known_seen[i]++;
            return;
        }
    if (!ws->quiet)
        print_error("%s (layer %s) includes %s (layer %s): a lower layer includes a higher one (docs/ARCHITECTURE.md, "
                "Layering)\n",
                file, layer_name[lf], header, layer_name[lh]);
    ws->violations++;
}

static void check_file(const char *rel, walk_stats *ws) {
    char p[2048];
    snprintf(p, sizeof p, "%s/%s", AMP_SOURCE_DIR, rel);
    char *text = test_read_file(p, NULL);
    if (!text) fail_msg("cannot read %s", rel);
    int lf = layer_of(rel);
    if (lf < 0) {
        print_error("%s is in no layer of tests/test_layering.c (add it to layer_of)\n", rel);
        ws->unplaced++;
    }
    ws->files++;
    for (char *line = text; line && *line;) {
        char *next = strchr(line, '\n');
        if (next) *next++ = '\0';
        char *s = line;
        while (*s == ' ' || *s == '\t') s++;
        if (*s == '#') {
            s++;
            while (*s == ' ' || *s == '\t') s++;
            if (!strncmp(s, "include", 7)) {
                s += 7;
                while (*s == ' ' || *s == '\t') s++;
                char *end = *s == '"' ? strchr(s + 1, '"') : NULL;
                if (end && lf >= 0) {
                    *end = '\0';
                    char h[600];
                    snprintf(h, sizeof h, "src/%s", s + 1);
                    if (!exists(h)) snprintf(h, sizeof h, "include/%s", s + 1);
                    if (!exists(h)) fail_msg("%s includes \"%s\", found under neither src/ nor include/", rel, s + 1);
                    ws->includes++;
                    check_edge(rel, lf, h, ws);
                }
            }
        }
        line = next;
    }
    free(text);
}

static void walk(const char *rel, walk_stats *ws) {
    char p[2048];
    snprintf(p, sizeof p, "%s/%s", AMP_SOURCE_DIR, rel);
    DIR *d = opendir(p);
    if (!d) fail_msg("cannot open %s", p);
    char **names = NULL;
    size_t n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        names = realloc(names, (n + 1) * sizeof *names);
        assert_non_null(names);
        names[n] = strdup(e->d_name);
        assert_non_null(names[n]);
        n++;
    }
    closedir(d);
    for (size_t i = 0; i < n; i++) {
        char child[1024];
        snprintf(child, sizeof child, "%s/%s", rel, names[i]);
        char full[2048];
        struct stat sb;
        snprintf(full, sizeof full, "%s/%s", AMP_SOURCE_DIR, child);
        if (stat(full, &sb) == 0 && S_ISDIR(sb.st_mode)) walk(child, ws);
        else if (source_name(names[i])) check_file(child, ws);
        free(names[i]);
    }
    free(names);
}

/* The layers themselves: each file's placement and each include's. */
static void t_layers(void **st) {
    (void)st;
    walk_stats ws = {0};
    memset(known_seen, 0, sizeof known_seen);
    walk("src", &ws);
    /* the walk saw the tree (a wrong AMP_SOURCE_DIR would pass vacuously) */
    assert_true(ws.files > 150);
    assert_true(ws.includes > 400);
    for (size_t i = 0; i < n_known; i++)
        if (!known_seen[i])
            print_error("%s no longer includes %s (%s): delete its line from known[] in tests/test_layering.c\n",
                        known[i].file, known[i].header, known[i].why);
    assert_int_equal(ws.unplaced, 0);
    assert_int_equal(ws.violations, 0);
}

/* The checker catches what it is for (a rule that can never fail proves
 * nothing): the edges the issue found, judged by the same function. */
static void t_checker_refuses_upward_edges(void **st) {
    (void)st;
    static const struct {
        const char *file, *header;
        bool allowed;
    } cases[] = {
        {"src/tensor/tensor.c", "src/autograd/node.h", false},
        {"src/tensor/tensor.c", "src/ops/op_util.h", false},
        {"src/tensor/scope.c", "src/amp/op_table.h", false},
        {"src/tensor/alloc.c", "src/kernels/cpu/gemm.h", false},
        {"src/tensor/alloc.c", "src/kernels/device.h", true},
        {"src/kernels/cpu/backend_cpu_loss.c", "src/ops/f32_util.h", false},
        {"src/kernels/backend.c", "src/autograd/node.h", false},
        {"src/kernels/cpu/backend_cpu_optim.c", "src/optim/optim_impl.h", false},
        {"src/kernels/cuda/cuda_ctx.c", "src/amp/op_table.h", false},
        {"src/kernels/backend.c", "src/tensor/tensor_impl.h", true},
        {"src/core/error.c", "src/tensor/tensor_impl.h", false},
        {"src/core/cpu.c", "src/kernels/backend.h", false},
        {"src/numeric/convert.c", "src/tensor/tensor_impl.h", false},
        {"src/optim/optim.c", "src/amp/scaler.c", false},
        {"src/optim/optim.c", "include/amp/scaler.h", false},
        {"src/optim/optim.c", "include/amp/optim.h", true},
        {"src/amp/scaler.c", "src/optim/optim_impl.h", true},
        {"src/amp/autocast.c", "src/autograd/node.h", false},
        {"src/autograd/engine.c", "src/amp/op_table.h", true},
        {"src/dist/ddp.c", "src/cli/trainer.h", false},
        {"src/cli/trainer.c", "src/dist/dist_impl.h", true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        walk_stats ws = {.quiet = true};
        check_edge(cases[i].file, layer_of(cases[i].file), cases[i].header, &ws);
        if ((ws.violations == 0) != cases[i].allowed)
            fail_msg("%s -> %s: expected %s", cases[i].file, cases[i].header, cases[i].allowed ? "allowed" : "refused");
    }
}

/* ---- calls that go one way inside a layer ----------------------------------
 * Includes cannot show these (the files share one header), so the functions
 * a file defines (non-static, at file scope) must not be called from the
 * files below it. */

/* The text without comments and string literals (a call named in a message
 * or a comment is not a call). */
static char *code_of(const char *rel) {
    char p[2048];
    snprintf(p, sizeof p, "%s/%s", AMP_SOURCE_DIR, rel);
    char *s = test_read_file(p, NULL);
    if (!s) fail_msg("cannot read %s", rel);
    char *w = s;
    for (const char *r = s; *r;) {
        if (r[0] == '/' && r[1] == '*') {
            const char *e = strstr(r + 2, "*/");
            r = e ? e + 2 : r + strlen(r);
            *w++ = ' ';
        } else if (r[0] == '/' && r[1] == '/') {
            while (*r && *r != '\n') r++;
        } else if (*r == '"' || *r == '\'') {
            char q = *r++;
            while (*r && *r != q) r += (r[0] == '\\' && r[1]) ? 2 : 1;
            if (*r) r++;
            *w++ = q;
            *w++ = q;
        } else {
            *w++ = *r++;
        }
    }
    *w = '\0';
    return s;
}

static bool ident_char(char c) { return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); }

/* Does code call name (name, optional spaces, '(' or used as a value: the
 * tasks are tables of function pointers)? */
static bool mentions(const char *code, const char *name) {
    size_t n = strlen(name);
    for (const char *p = strstr(code, name); p; p = strstr(p + 1, name))
        if ((p == code || !ident_char(p[-1])) && !ident_char(p[n])) return true;
    return false;
}

/* Calls one of the functions or tables `callee` defines from `caller`:
 * prints each (unless quiet) and returns how many. */
static int calls_into(const char *caller, const char *callee, bool quiet) {
    char *code = code_of(caller), *def = code_of(callee);
    int found = 0;
    for (char *line = def; line && *line;) {
        char *next = strchr(line, '\n');
        if (next) *next++ = '\0';
        static const char *const skip[] = {"static", "typedef", "struct", "enum", "union", "extern", "#"};
        bool candidate = (line[0] == '_' || (line[0] >= 'a' && line[0] <= 'z') || (line[0] >= 'A' && line[0] <= 'Z'));
        for (size_t i = 0; candidate && i < sizeof skip / sizeof skip[0]; i++)
            if (!strncmp(line, skip[i], strlen(skip[i])) && !ident_char(line[strlen(skip[i])])) candidate = false;
        /* a definition: `type name(args) {` or `const type table = {` */
        char *paren = candidate ? strchr(line, '(') : NULL, *eq = candidate ? strstr(line, " = {") : NULL;
        char *end = paren && (!eq || paren < eq) ? paren : eq;
        if (end && end > line && !(end == paren && end[-1] == '*') && line[strlen(line) - 1] != ';') {
            char *b = end;
            while (b > line && b[-1] == ' ') b--;
            char *a = b;
            while (a > line && ident_char(a[-1])) a--;
            char name[128];
            size_t n = (size_t)(b - a);
            if (n > 0 && n < sizeof name) {
                memcpy(name, a, n);
                name[n] = '\0';
                if (strcmp(name, "main") && mentions(code, name)) {
                    if (!quiet)
                        print_error("%s uses %s, which %s defines: the calls go the other way (docs/ARCHITECTURE.md, Layering)\n",
                                caller, name, callee);
                    found++;
                }
            }
        }
        line = next;
    }
    free(code);
    free(def);
    return found;
}

/* The optimizer knows nothing of the scaler; in the CLI trainer the front
 * (trainer_tasks.c) picks a task, the tasks use the loop, the loop and the
 * tasks use data parallel, never the other way. */
static void t_calls_one_way(void **st) {
    (void)st;
    static const char *const pairs[][2] = {
        {"src/optim/optim.c", "src/amp/scaler.c"},
        {"src/optim/optim.c", "src/amp/initialize.c"},
        {"src/cli/trainer.c", "src/cli/trainer_tasks.c"},
        {"src/cli/trainer.c", "src/cli/trainer_gpt.c"},
        {"src/cli/trainer.c", "src/cli/trainer_mnist.c"},
        {"src/cli/trainer_gpt.c", "src/cli/trainer_tasks.c"},
        {"src/cli/trainer_mnist.c", "src/cli/trainer_tasks.c"},
        {"src/cli/trainer_gpt.c", "src/cli/trainer_mnist.c"},
        {"src/cli/trainer_mnist.c", "src/cli/trainer_gpt.c"},
        {"src/cli/trainer_dist.c", "src/cli/trainer.c"},
        {"src/cli/trainer_dist.c", "src/cli/trainer_tasks.c"},
        {"src/cli/trainer_dist.c", "src/cli/trainer_gpt.c"},
        {"src/cli/trainer_dist.c", "src/cli/trainer_mnist.c"},
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) bad += calls_into(pairs[i][0], pairs[i][1], false);
    /* the reader finds definitions, tables included (else the check above
     * proves nothing): the calls that do go down */
    assert_int_equal(calls_into("src/cli/trainer_tasks.c", "src/cli/trainer.c", true), 2);   /* trainer_loop, _defaults */
    assert_int_equal(calls_into("src/cli/trainer_tasks.c", "src/cli/trainer_gpt.c", true), 2); /* the task, the preset */
    assert_true(calls_into("src/amp/scaler.c", "src/optim/optim.c", true) >= 8);
    assert_int_equal(bad, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(t_checker_refuses_upward_edges), cmocka_unit_test(t_layers),
                                       cmocka_unit_test(t_calls_one_way)};
    return amp_test_run(tests);
}
