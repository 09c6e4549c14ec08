/* The docs that walk the code stay true to it (as test_autocast keeps
 * docs/autocast.md the op table's):
 *
 *  - t_quoted_names_exist: in docs/ARCHITECTURE.md, docs/adding-a-backend.md
 *    and docs/adding-an-op.md, every code span in backticks
 *    that names a file (`src/kernels/backend.h`, `kernels/cpu/norm.h`,
 *    `norm.inc`, `amp/ops.h`, `tests/`) names one that exists (looked up
 *    from the source root, src/, include/ and docs/; a bare file name
 *    anywhere in the tree), and every span that is a C identifier
 *    (`amp_layer_norm`, `AMP_KCALL`, `amp_storage.device`, a call
 *    `AMP_KCALL(be, ...)`, `AMP_CPU=avx2`'s name) occurs as a word in the
 *    code (src/, include/, tests/, tools/, scripts/, examples/, the build
 *    files). A fenced block whose info string names a file after the
 *    language (```c src/kernels/backend.c), or whose first line is
 *    / * file: PATH * / (adding-an-op.md's), is an excerpt: its lines, less
 *    indentation, must be lines of that file, in order ("..." skips).
 *  - t_adding_op_files: adding-an-op.md's numbered list under "## The
 *    files" names at most 5 files, each of which exists (the issue-24 bar
 *    for a one-operand elementwise op).
 *  - t_links_resolve: every relative link in docs/ (its .md files) and README.md points
 *    at a file that exists, and a link to a heading (notes.md#threads) at a
 *    heading of that file (GitHub's anchors).
 *  - t_title_refs_resolve: the code and the docs cite sections as
 *    ARCHITECTURE.md, "Title" or notes.md, "Title"; each such title must be
 *    a heading (or a bold paragraph lead) of that file.
 *
 * Each failure names the document, the line and the name. */
#include <ctype.h>
#include <dirent.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "test_support.h"

/* the source root; AMP_DOCS_ROOT checks another checkout (e.g. a branch's
 * tree unpacked elsewhere) with this build's test */
static const char *g_root = AMP_SOURCE_DIR;
#define ROOT g_root
#define SELF "tests/test_docs.c" /* its own names and citations are examples */

static const char *const WALKED_DOCS[] = {"docs/ARCHITECTURE.md", "docs/adding-a-backend.md", "docs/adding-an-op.md"};
static const char *const CODE_DIRS[] = {"src", "include", "tests", "tools", "scripts", "examples"};
static const char *const CODE_FILES[] = {"CMakeLists.txt", "Makefile", "amp.pc.in", "amp-static.pc.in"};
static const char *const NAME_DIRS[] = {"src", "include", "tests", "tools", "scripts", "examples", "docs", "share"};

/* ---- a report of failures ----------------------------------------------------------------- */
typedef struct {
    char *buf;
    size_t len, cap;
    int n;
} report;

static void report_add(report *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void report_add(report *r, const char *fmt, ...) {
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (k < 0) return;
    size_t add = strlen(line);
    if (r->len + add + 2 > r->cap) {
        r->cap = (r->len + add + 2) * 2;
        r->buf = realloc(r->buf, r->cap);
        assert_non_null(r->buf);
    }
    memcpy(r->buf + r->len, line, add);
    r->len += add;
    r->buf[r->len++] = '\n';
    r->buf[r->len] = 0;
    r->n++;
}

static void report_check(report *r, const char *what) {
    if (r->n) {
        for (char *q = r->buf; *q;) {
            char *eol = strchr(q, '\n');
            print_message("%.*s\n", (int)(eol - q), q);
            q = eol + 1;
        }
        fail_msg("%d %s (listed above)", r->n, what);
    }
    free(r->buf);
}

/* ---- the tree: the words of the code, the paths of every file ------------------------------ */
typedef struct {
    char **v;
    size_t n, cap;
} strset; /* open addressing; cap a power of two */

static uint64_t hash_str(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static bool set_has(const strset *s, const char *w, size_t n) {
    if (!s->cap) return false;
    for (size_t i = hash_str(w, n) & (s->cap - 1);; i = (i + 1) & (s->cap - 1)) {
        if (!s->v[i]) return false;
        if (strlen(s->v[i]) == n && !memcmp(s->v[i], w, n)) return true;
    }
}

static void set_add(strset *s, const char *w, size_t n) {
    if (set_has(s, w, n)) return;
    if ((s->n + 1) * 2 > s->cap) {
        strset g = {calloc(s->cap ? s->cap * 2 : 4096, sizeof(char *)), 0, s->cap ? s->cap * 2 : 4096};
        assert_non_null(g.v);
        for (size_t i = 0; i < s->cap; i++)
            if (s->v[i]) set_add(&g, s->v[i], strlen(s->v[i]));
        for (size_t i = 0; i < s->cap; i++) free(s->v[i]);
        free(s->v);
        *s = g;
    }
    size_t i = hash_str(w, n) & (s->cap - 1);
    while (s->v[i]) i = (i + 1) & (s->cap - 1);
    s->v[i] = strndup(w, n);
    assert_non_null(s->v[i]);
    s->n++;
}

static void set_free(strset *s) {
    for (size_t i = 0; i < s->cap; i++) free(s->v[i]);
    free(s->v);
    memset(s, 0, sizeof *s);
}

static bool is_word(int c) { return isalnum(c) || c == '_'; }

/* Token pasting makes names that are not words of the code: AMP_EW_##id
 * makes AMP_EW_EXPM1 from the row EXPM1, fn##f makes expm1f. The pasted
 * prefixes (those ending in '_') and short lower-case suffixes are kept, and
 * a name is found when it is one of them joined to a word. */
static strset g_paste_pre, g_paste_suf;

static void add_words(strset *words, const char *text) {
    for (const char *p = text; *p;) {
        if (isalpha((unsigned char)*p) || *p == '_') {
            const char *q = p;
            while (is_word((unsigned char)*q)) q++;
            set_add(words, p, (size_t)(q - p));
            if (q[0] == '#' && q[1] == '#' && q - p >= 4 && q[-1] == '_') set_add(&g_paste_pre, p, (size_t)(q - p));
            if (p - text >= 2 && p[-1] == '#' && p[-2] == '#' && q - p <= 2 && islower((unsigned char)*p))
                set_add(&g_paste_suf, p, (size_t)(q - p));
            p = q;
        } else if (isdigit((unsigned char)*p)) {
            while (is_word((unsigned char)*p)) p++;
        } else {
            p++;
        }
    }
}

static bool has_suffix(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

static bool is_code_file(const char *name) {
    static const char *const ext[] = {".c", ".h", ".inc", ".cu", ".cuh", ".py", ".sh", ".txt", ".in", ".supp"};
    for (size_t i = 0; i < sizeof ext / sizeof ext[0]; i++)
        if (has_suffix(name, ext[i])) return true;
    return false;
}

/* every file's base name into names; with words, the words of its code files */
static void walk(const char *rel, strset *names, strset *words) {
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", ROOT, rel);
    DIR *d = opendir(path);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char sub[2048], full[4096];
        snprintf(sub, sizeof sub, "%s/%s", rel, e->d_name);
        snprintf(full, sizeof full, "%s/%s", ROOT, sub);
        struct stat st;
        if (stat(full, &st) != 0) continue;
        if (S_ISDIR(st.st_mode)) {
            set_add(names, e->d_name, strlen(e->d_name));
            walk(sub, names, words && strcmp(sub, "tests/data") ? words : NULL);
        } else {
            set_add(names, e->d_name, strlen(e->d_name));
            if (words && is_code_file(e->d_name) && strcmp(sub, SELF)) {
                char *text = test_read_file(full, NULL);
                if (text) add_words(words, text);
                free(text);
            }
        }
    }
    closedir(d);
}

typedef struct {
    strset words, names;
} tree;

static tree *g_tree;

static const tree *the_tree(void) {
    if (g_tree) return g_tree;
    g_tree = calloc(1, sizeof *g_tree);
    assert_non_null(g_tree);
    for (size_t i = 0; i < sizeof CODE_DIRS / sizeof CODE_DIRS[0]; i++) walk(CODE_DIRS[i], &g_tree->names, &g_tree->words);
    for (size_t i = 0; i < sizeof NAME_DIRS / sizeof NAME_DIRS[0]; i++) walk(NAME_DIRS[i], &g_tree->names, NULL);
    for (size_t i = 0; i < sizeof CODE_FILES / sizeof CODE_FILES[0]; i++) {
        char p[2048];
        snprintf(p, sizeof p, "%s/%s", ROOT, CODE_FILES[i]);
        char *text = test_read_file(p, NULL);
        assert_non_null(text);
        add_words(&g_tree->words, text);
        set_add(&g_tree->names, CODE_FILES[i], strlen(CODE_FILES[i]));
        free(text);
    }
    return g_tree;
}

static bool exists_rel(const char *rel) {
    char p[4096];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", ROOT, rel);
    return stat(p, &st) == 0;
}

/* ---- one code span -------------------------------------------------------------------------- */
static bool looks_like_path(const char *s) {
    static const char *const ext[] = {".c",  ".h",    ".inc", ".cu", ".cuh",  ".md",  ".py",          ".sh",
                                      ".txt", ".json", ".bpe", ".bin", ".supp", ".in", ".safetensors"};
    for (const char *p = s; *p; p++)
        if (!(isalnum((unsigned char)*p) || strchr("_./+-", *p))) return false;
    if (strchr(s, '/')) return true;
    for (size_t i = 0; i < sizeof ext / sizeof ext[0]; i++)
        if (has_suffix(s, ext[i])) return true;
    return false;
}

static const char *check_path(const char *s) {
    if (!strncmp(s, "../", 3) || !strncmp(s, "./", 2)) return NULL; /* outside the tree, or a command */
    if (!strchr(s, '/') || (strchr(s, '/') == s + strlen(s) - 1)) {
        char base[512];
        snprintf(base, sizeof base, "%s", s);
        size_t n = strlen(base);
        if (n && base[n - 1] == '/') base[--n] = 0;
        if (set_has(&the_tree()->names, base, n) || exists_rel(s)) return NULL;
        return "no file or folder of that name in the tree";
    }
    static const char *const bases[] = {"", "src/", "include/", "docs/"};
    for (size_t i = 0; i < sizeof bases / sizeof bases[0]; i++) {
        char p[1024];
        snprintf(p, sizeof p, "%s%s", bases[i], s);
        if (exists_rel(p)) return NULL;
    }
    return "no such file (looked under the root, src/, include/, docs/)";
}

/* a name token pasting makes: a pasted prefix + a word, or a word + a
 * pasted suffix */
static bool pasted(const char *w) {
    const tree *t = the_tree();
    size_t n = strlen(w);
    for (size_t i = 0; i < g_paste_pre.cap; i++) {
        const char *p = g_paste_pre.v[i];
        size_t k = p ? strlen(p) : 0;
        if (p && k < n && !strncmp(w, p, k) && set_has(&t->words, w + k, n - k)) return true;
    }
    for (size_t i = 0; i < g_paste_suf.cap; i++) {
        const char *p = g_paste_suf.v[i];
        size_t k = p ? strlen(p) : 0;
        if (p && k < n && !strcmp(w + n - k, p) && set_has(&t->words, w, n - k)) return true;
    }
    return false;
}

/* identifiers: a, a.b, a->b, a(...), a[], A=value */
static const char *check_identifier(const char *s, bool *checked) {
    *checked = false;
    char buf[512];
    snprintf(buf, sizeof buf, "%s", s);
    char *cut = strpbrk(buf, "(=[");
    if (cut) {
        if (*cut == '(' && strchr(buf, ' ') && cut > strchr(buf, ' ')) return NULL;
        *cut = 0;
    } else if (strchr(buf, ' ')) {
        return NULL;
    }
    if (!buf[0] || !(isalpha((unsigned char)buf[0]) || buf[0] == '_')) return NULL;
    /* a.b and a->b: each part */
    char *parts[8];
    int np = 0;
    for (char *p = buf; np < 8;) {
        parts[np++] = p;
        char *dot = strchr(p, '.'), *arrow = strstr(p, "->");
        char *sep = dot && (!arrow || dot < arrow) ? dot : arrow;
        if (!sep) break;
        *sep = 0;
        p = sep + (sep == arrow ? 2 : 1);
    }
    for (int i = 0; i < np; i++)
        for (const char *p = parts[i]; *p; p++)
            if (!is_word((unsigned char)*p)) return NULL;
    *checked = true;
    for (int i = 0; i < np; i++)
        if (!set_has(&the_tree()->words, parts[i], strlen(parts[i])) && !pasted(parts[i])) return "not a word of the code";
    return NULL;
}

static char *trim(char *s) {
    while (*s == ' ' || *s == '\t') s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r')) s[--n] = 0;
    return s;
}

/* a line trimmed, less a macro row's trailing continuation (an excerpt may
 * quote a row with or without it) */
static char *uncontinued(char *s) {
    s = trim(s);
    size_t n = strlen(s);
    if (n && s[n - 1] == '\\') {
        s[n - 1] = 0;
        s = trim(s);
    }
    return s;
}

/* the lines of an excerpt, in order, among the file's lines */
static void check_excerpt(report *r, const char *doc, int line0, const char *file, char **lines, int n) {
    char p[2048];
    snprintf(p, sizeof p, "%s/%s", ROOT, file);
    char *text = test_read_file(p, NULL);
    if (!text) {
        report_add(r, "%s:%d: the excerpt's file %s does not exist", doc, line0, file);
        return;
    }
    char *cursor = text;
    for (int i = 0; i < n; i++) {
        char *want = uncontinued(lines[i]);
        if (!*want || !strcmp(want, "...")) continue;
        bool found = false;
        for (char *q = cursor; *q;) {
            char *eol = strchr(q, '\n');
            size_t len = eol ? (size_t)(eol - q) : strlen(q);
            char *copy = strndup(q, len);
            assert_non_null(copy);
            bool eq = !strcmp(uncontinued(copy), want);
            free(copy);
            q = eol ? eol + 1 : q + len;
            if (eq) {
                cursor = q;
                found = true;
                break;
            }
        }
        if (!found)
            report_add(r, "%s:%d: excerpt line not in %s (or out of order): %s", doc, line0 + 1 + i, file, want);
    }
    free(text);
}

static void check_walked_doc(report *r, const char *doc, int *spans, int *excerpts) {
    char p[2048];
    snprintf(p, sizeof p, "%s/%s", ROOT, doc);
    char *text = test_read_file(p, NULL);
    if (!text) return; /* the caller reports a missing doc */
    char *lines[4096];
    int n = 0;
    for (char *q = text; q && *q && n < 4096;) {
        lines[n++] = q;
        char *eol = strchr(q, '\n');
        if (eol) *eol = 0;
        q = eol ? eol + 1 : NULL;
    }
    for (int i = 0; i < n; i++) {
        char *t = trim(lines[i]);
        if (!strncmp(t, "```", 3)) {
            char info[512];
            snprintf(info, sizeof info, "%s", t + 3);
            char *file = strchr(info, ' ');
            int start = i;
            int j = i + 1;
            while (j < n && strncmp(trim(lines[j]), "```", 3)) j++;
            /* the file after the language, or a first line / * file: PATH * / */
            const char *hdr = start + 1 < j ? trim(lines[start + 1]) : "";
            size_t hl = strlen(hdr);
            if (file) {
                check_excerpt(r, doc, start + 1, trim(file), lines + i + 1, j - i - 1);
                (*excerpts)++;
            } else if (!strncmp(hdr, "/* file: ", 9) && hl > 12 && !strcmp(hdr + hl - 3, " */")) {
                char path[512];
                snprintf(path, sizeof path, "%.*s", (int)(hl - 12), hdr + 9);
                check_excerpt(r, doc, start + 2, path, lines + i + 2, j - i - 2);
                (*excerpts)++;
            }
            i = j;
            continue;
        }
        for (char *q = lines[i]; (q = strchr(q, '`'));) {
            char *end = strchr(q + 1, '`');
            if (!end) break;
            char span[512];
            size_t len = (size_t)(end - q - 1);
            if (len && len < sizeof span) {
                memcpy(span, q + 1, len);
                span[len] = 0;
                const char *why = NULL;
                bool checked = false;
                if (strpbrk(span, "*<>") || ((span[0] == '.' || span[0] == '_') && !strchr(span, '/'))) {
                    /* a pattern (`*_avx2.c`, `kernels/family/<family>.h`) or a
                     * suffix (`.inc`, `_ieee.cu`), not a name */
                } else if (looks_like_path(span)) {
                    why = check_path(span);
                    checked = true;
                } else {
                    why = check_identifier(span, &checked);
                }
                if (checked) (*spans)++;
                if (why) report_add(r, "%s:%d: `%s`: %s", doc, i + 1, span, why);
            }
            q = end + 1;
        }
    }
    free(text);
}

static void t_quoted_names_exist(void **st) {
    (void)st;
    report r = {0};
    int spans = 0, excerpts = 0;
    for (size_t i = 0; i < sizeof WALKED_DOCS / sizeof WALKED_DOCS[0]; i++) {
        if (!exists_rel(WALKED_DOCS[i]))
            report_add(&r, "%s is missing", WALKED_DOCS[i]);
        check_walked_doc(&r, WALKED_DOCS[i], &spans, &excerpts);
    }
    print_message("%d names and %d excerpts checked\n", spans, excerpts);
    assert_true(spans > 100); /* the parsing found the docs' names */
    assert_true(excerpts >= 5);
    report_check(&r, "names in the docs that the tree does not have");
}

/* ---- headings and links ----------------------------------------------------------------------- */
/* GitHub's anchor of a heading: lower case, punctuation other than - and _
 * dropped, spaces as - */
static void slug(const char *h, char *out, size_t cap) {
    size_t k = 0;
    for (const char *p = h; *p && k + 1 < cap; p++) {
        unsigned char c = (unsigned char)*p;
        if (isalnum(c) || c == '-' || c == '_') out[k++] = (char)tolower(c);
        else if (c == ' ') out[k++] = '-';
        else if (c >= 0x80) out[k++] = (char)c;
    }
    out[k] = 0;
}

/* does doc (a path from the root) have a heading whose anchor is `anchor`,
 * or (titled) whose text, or a bold lead's, starts with `title`? */
static bool doc_has(const char *doc, const char *anchor, const char *title) {
    char p[2048];
    snprintf(p, sizeof p, "%s/%s", ROOT, doc);
    char *text = test_read_file(p, NULL);
    if (!text) return false;
    bool found = false, fence = false;
    for (char *q = text; q && *q && !found;) {
        char *eol = strchr(q, '\n');
        if (eol) *eol = 0;
        if (!strncmp(q, "```", 3)) fence = !fence;
        if (!fence && q[0] == '#') {
            char *h = q;
            while (*h == '#') h++;
            while (*h == ' ') h++;
            if (anchor) {
                char s[512];
                slug(h, s, sizeof s);
                found = !strcmp(s, anchor);
            }
            if (title && !strncmp(h, title, strlen(title))) found = true;
        }
        if (!fence && title) {
            char *b = strstr(q, "**");
            if (b && !strncmp(b + 2, title, strlen(title))) found = true;
        }
        q = eol ? eol + 1 : NULL;
    }
    free(text);
    return found;
}

static void check_links(report *r, const char *doc) {
    char p[2048];
    snprintf(p, sizeof p, "%s/%s", ROOT, doc);
    char *text = test_read_file(p, NULL);
    assert_non_null(text);
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", doc);
    char *slash = strrchr(dir, '/');
    if (slash) slash[1] = 0;
    else dir[0] = 0;
    int line = 1;
    bool fence = false;
    for (char *q = text; *q; q++) {
        if (*q == '\n') {
            line++;
            if (!strncmp(q + 1, "```", 3)) fence = !fence;
            continue;
        }
        if (fence || q[0] != ']' || q[1] != '(') continue;
        char *end = strchr(q + 2, ')');
        if (!end || end - q > 300) continue;
        char target[512];
        memcpy(target, q + 2, (size_t)(end - q - 2));
        target[end - q - 2] = 0;
        if (strstr(target, "://") || !strncmp(target, "mailto:", 7) || strchr(target, ' ')) continue;
        char *hash = strchr(target, '#');
        char *anchor = NULL;
        if (hash) {
            *hash = 0;
            anchor = hash + 1;
        }
        char rel[2048];
        if (!target[0]) snprintf(rel, sizeof rel, "%s", doc);
        else {
            /* resolve ../ against the doc's folder */
            char base[1024], *t = target;
            snprintf(base, sizeof base, "%s", dir);
            while (!strncmp(t, "../", 3)) {
                size_t n = strlen(base);
                if (n) base[--n] = 0;
                char *s2 = strrchr(base, '/');
                if (s2) s2[1] = 0;
                else base[0] = 0;
                t += 3;
            }
            snprintf(rel, sizeof rel, "%s%s", base, t);
        }
        if (!exists_rel(rel)) report_add(r, "%s:%d: link to %s: no such file", doc, line, rel);
        else if (anchor && *anchor && has_suffix(rel, ".md") && !doc_has(rel, anchor, NULL))
            report_add(r, "%s:%d: link to %s#%s: no such heading there", doc, line, rel, anchor);
    }
    free(text);
}

static void t_links_resolve(void **st) {
    (void)st;
    report r = {0};
    char p[2048];
    snprintf(p, sizeof p, "%s/docs", ROOT);
    DIR *d = opendir(p);
    assert_non_null(d);
    struct dirent *e;
    int docs = 0;
    while ((e = readdir(d))) {
        if (!has_suffix(e->d_name, ".md")) continue;
        char rel[512];
        snprintf(rel, sizeof rel, "docs/%s", e->d_name);
        check_links(&r, rel);
        docs++;
    }
    closedir(d);
    check_links(&r, "README.md");
    assert_true(docs >= 10);
    report_check(&r, "links that do not resolve");
}

/* ---- "ARCHITECTURE.md, "Title"" and "notes.md, "Title"" wherever they are cited -------------- */
static void check_title_refs_in(report *r, const char *rel, const char *text) {
    static const char *const targets[][2] = {{"ARCHITECTURE.md, \"", "docs/ARCHITECTURE.md"}, {"notes.md, \"", "docs/notes.md"}};
    for (size_t k = 0; k < 2; k++) {
        for (const char *q = text; (q = strstr(q, targets[k][0]));) {
            const char *t = q + strlen(targets[k][0]);
            const char *end = strchr(t, '"');
            const char *nl = strchr(t, '\n');
            q = t;
            if (!end || (nl && nl < end) || end - t > 200) continue;
            char title[256];
            memcpy(title, t, (size_t)(end - t));
            title[end - t] = 0;
            if (!doc_has(targets[k][1], NULL, title)) {
                int line = 1;
                for (const char *c = text; c < t; c++) line += *c == '\n';
                report_add(r, "%s:%d: cites %s, \"%s\": no such heading there", rel, line, targets[k][1], title);
            }
        }
    }
}

static void scan_title_refs(report *r, const char *rel, int *files) {
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", ROOT, rel);
    struct stat st;
    if (stat(path, &st) != 0) return;
    if (S_ISDIR(st.st_mode)) {
        if (!strcmp(rel, "tests/data")) return;
        DIR *d = opendir(path);
        if (!d) return;
        struct dirent *e;
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.') continue;
            char sub[2048];
            snprintf(sub, sizeof sub, "%s/%s", rel, e->d_name);
            scan_title_refs(r, sub, files);
        }
        closedir(d);
        return;
    }
    if ((!is_code_file(rel) && !has_suffix(rel, ".md")) || !strcmp(rel, SELF)) return;
    char *text = test_read_file(path, NULL);
    if (!text) return;
    check_title_refs_in(r, rel, text);
    (*files)++;
    free(text);
}

static void t_title_refs_resolve(void **st) {
    (void)st;
    report r = {0};
    int files = 0;
    static const char *const where[] = {"src", "include", "tests", "tools", "scripts", "examples", "docs", "README.md"};
    for (size_t i = 0; i < sizeof where / sizeof where[0]; i++) scan_title_refs(&r, where[i], &files);
    assert_true(files > 100);
    report_check(&r, "citations of sections that do not exist");
}

/* adding-an-op.md's file list: numbered 1..n, at most 5 items, each an
 * existing file in backticks */
static void t_adding_op_files(void **st) {
    (void)st;
    char p[2048];
    snprintf(p, sizeof p, "%s/docs/adding-an-op.md", ROOT);
    char *doc = test_read_file(p, NULL);
    assert_non_null(doc);
    char *sec = strstr(doc, "\n## The files\n");
    if (!sec) fail_msg("docs/adding-an-op.md: no '## The files' section");
    sec += strlen("\n## The files\n");
    char *end = strstr(sec, "\n## ");
    if (end) *end = 0;
    int items = 0;
    for (char *q = sec; q && *q; q = strchr(q, '\n'), q = q ? q + 1 : NULL) {
        if (!isdigit((unsigned char)*q)) continue;
        char *d = q;
        while (isdigit((unsigned char)*d)) d++;
        if (d[0] != '.' || d[1] != ' ') continue;
        items++;
        if (atoi(q) != items) fail_msg("docs/adding-an-op.md: file list item %d is numbered %d", items, atoi(q));
        char *open = d + 2, *close = *open == '`' ? strchr(open + 1, '`') : NULL;
        if (!close) fail_msg("docs/adding-an-op.md: file list item %d does not start with a `file`", items);
        char rel[512];
        snprintf(rel, sizeof rel, "%.*s", (int)(close - open - 1), open + 1);
        if (!exists_rel(rel)) fail_msg("docs/adding-an-op.md: file list item %d names %s, which does not exist", items, rel);
    }
    if (items < 1) fail_msg("docs/adding-an-op.md: the file list is empty");
    if (items > 5) fail_msg("docs/adding-an-op.md: adding a one-operand elementwise op touches %d files (at most 5)", items);
    free(doc);
}

/* the checks themselves: a name that is not there, a heading's anchor */
static void t_checker(void **st) {
    (void)st;
    bool checked;
    assert_null(check_identifier("amp_layer_norm", &checked));
    assert_true(checked);
    assert_non_null(check_identifier("amp_no_such_function_anywhere", &checked));
    assert_null(check_identifier("amp_storage.device", &checked));
    assert_non_null(check_identifier("amp_storage.no_such_member_anywhere", &checked));
    assert_true(pasted("AMP_OP_LAYER_NORM")); /* AMP_OP_##id and the row LAYER_NORM */
    assert_false(pasted("AMP_OP_NO_SUCH_ROW_ANYWHERE"));
    assert_true(pasted("tanhf")); /* M(fn) fn##f and tanh */
    assert_null(check_identifier("tanhf", &checked));
    assert_false(pasted("no_such_functionf"));
    assert_null(check_identifier("make test", &checked));
    assert_false(checked);
    assert_null(check_path("src/ops/norm.c"));
    assert_null(check_path("ops/norm.c"));
    assert_null(check_path("amp/ops.h"));
    assert_null(check_path("norm.inc"));
    assert_non_null(check_path("src/ops/no_such_file.c"));
    assert_non_null(check_path("no_such_file.inc"));
    char s[128];
    slug("Non-finite values (optimizer, scaler, buffers)", s, sizeof s);
    assert_string_equal(s, "non-finite-values-optimizer-scaler-buffers");
    slug("The life of one op: `amp_layer_norm`", s, sizeof s);
    assert_string_equal(s, "the-life-of-one-op-amp_layer_norm");
}

int main(void) {
    const char *root = getenv("AMP_DOCS_ROOT");
    if (root && *root) g_root = root;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(t_checker),
        cmocka_unit_test(t_quoted_names_exist),
        cmocka_unit_test(t_adding_op_files),
        cmocka_unit_test(t_links_resolve),
        cmocka_unit_test(t_title_refs_resolve),
    };
    int rc = amp_test_run(tests);
    set_free(&g_paste_pre);
    set_free(&g_paste_suf);
    if (g_tree) {
        set_free(&g_tree->words);
        set_free(&g_tree->names);
        free(g_tree);
    }
    return rc;
}
