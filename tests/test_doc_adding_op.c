/* docs/adding-an-op.md against the tree, the way test_autocast keeps
 * docs/autocast.md true: the numbered list under "## The files" has at most
 * five entries (the bar for a one-operand elementwise op) and each
 * entry that starts with a `path` names a file that exists; every code
 * block whose first line is a file header names a file that exists, and
 * each of its other lines appears in that file (whitespace runs and a
 * trailing line-continuation backslash ignored). A page that still
 * describes rows, declarations or table lines that were renamed or moved
 * fails here. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

#define DOC "docs/adding-an-op.md"
#define HEADER_OPEN "/* file: "

/* s without surrounding whitespace or a trailing '\', whitespace runs as one
 * space; written to out (cap bytes). */
static void normalize(const char *s, size_t n, char *out, size_t cap) {
    size_t o = 0;
    bool space = false;
    for (size_t i = 0; i < n && o + 1 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (isspace(c)) {
            space = o > 0;
            continue;
        }
        if (space && o + 2 < cap) out[o++] = ' ';
        space = false;
        out[o++] = (char)c;
    }
    out[o] = '\0';
    while (o > 0 && (out[o - 1] == '\\' || out[o - 1] == ' ')) out[--o] = '\0';
}

/* whether the normalized line occurs within one normalized line of text */
static bool has_line(const char *text, const char *want) {
    char buf[4096];
    for (const char *p = text; *p;) {
        const char *e = strchr(p, '\n');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        normalize(p, n, buf, sizeof buf);
        if (strstr(buf, want)) return true;
        if (!e) break;
        p = e + 1;
    }
    return false;
}

static char *read_src(const char *rel) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", AMP_SOURCE_DIR, rel);
    size_t len;
    return test_read_file(path, &len);
}

static void t_file_list(void **st) {
    (void)st;
    char *doc = read_src(DOC);
    if (!doc) fail_msg("%s is missing", DOC);
    const char *sec = strstr(doc, "\n## The files\n");
    if (!sec) fail_msg("%s: no '## The files' section", DOC);
    sec += strlen("\n## The files\n");
    const char *end = strstr(sec, "\n## ");
    if (!end) end = sec + strlen(sec);
    int items = 0, paths = 0;
    for (const char *p = sec; p && p < end; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (!isdigit((unsigned char)*p)) continue;
        const char *q = p;
        while (isdigit((unsigned char)*q)) q++;
        if (q[0] != '.' || q[1] != ' ') continue;
        items++;
        if (atoi(p) != items) fail_msg("%s: file list item %d is numbered %d", DOC, items, atoi(p));
        q += 2;
        if (*q != '`') continue;
        const char *close = strchr(q + 1, '`');
        if (!close) fail_msg("%s: file list item %d: unclosed `", DOC, items);
        char rel[512];
        snprintf(rel, sizeof rel, "%.*s", (int)(close - q - 1), q + 1);
        char *f = read_src(rel);
        if (!f) fail_msg("%s: file list item %d names %s, which does not exist", DOC, items, rel);
        free(f);
        paths++;
    }
    if (items < 1 || paths < 1) fail_msg("%s: the file list is empty", DOC);
    if (items > 5) fail_msg("%s: adding a one-operand elementwise op touches %d files (at most 5)", DOC, items);
    free(doc);
}

static void t_excerpts(void **st) {
    (void)st;
    char *doc = read_src(DOC);
    if (!doc) fail_msg("%s is missing", DOC);
    int blocks = 0, lines = 0;
    for (const char *p = strstr(doc, "```"); p; p = strstr(p, "```")) {
        const char *body = strchr(p, '\n');
        if (!body) break;
        body++;
        const char *close = strstr(body, "```");
        if (!close) fail_msg("%s: unclosed code block", DOC);
        if (strncmp(body, HEADER_OPEN, strlen(HEADER_OPEN)) == 0) {
            const char *name = body + strlen(HEADER_OPEN), *ne = strstr(name, " */");
            const char *hl = strchr(body, '\n');
            if (!ne || !hl || ne > hl) fail_msg("%s: malformed file header in a code block", DOC);
            char rel[512];
            snprintf(rel, sizeof rel, "%.*s", (int)(ne - name), name);
            char *src = read_src(rel);
            if (!src) fail_msg("%s: an excerpt names %s, which does not exist", DOC, rel);
            blocks++;
            for (const char *l = hl + 1; l < close;) {
                const char *le = strchr(l, '\n');
                if (!le || le > close) le = close;
                char want[4096];
                normalize(l, (size_t)(le - l), want, sizeof want);
                if (want[0]) {
                    if (!has_line(src, want)) fail_msg("%s: the excerpt line\n  %s\nis not in %s", DOC, want, rel);
                    lines++;
                }
                l = le + 1;
            }
            free(src);
        }
        p = close + 3;
    }
    if (blocks < 3 || lines < 3) fail_msg("%s: %d checked excerpts, %d lines (expected the walk's)", DOC, blocks, lines);
    free(doc);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(t_file_list), cmocka_unit_test(t_excerpts)};
    return amp_test_run(tests);
}
