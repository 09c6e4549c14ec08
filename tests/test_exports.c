/* What libamp.so exports is the public API, and the amp command keeps to it.
 *
 * t_exports_match_headers: `nm -D --defined-only libamp.so` lists exactly the
 * functions (and data) that include/amp/ declares, every one of them marked
 * AMP_API (amp/base.h); the library is compiled with hidden visibility, so an
 * internal name there, a public one missing, or a public declaration without
 * the mark fails, each named.
 *
 * t_cli_includes: the CLI's files include public headers (include/amp/) and
 * their own (src/cli/); the one header of src/ they may reach beyond that is
 * src/cli/cli_internal.h, which lists the internals the CLI uses and why. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "test_support.h"

#ifndef AMP_SHARED_LIB
#error "AMP_SHARED_LIB (the path of libamp.so) comes from CMakeLists.txt"
#endif

enum { MAX_NAMES = 4096, NAME_LEN = 96 };

typedef struct {
    int n;
    char name[MAX_NAMES][NAME_LEN];
    char where[MAX_NAMES][32]; /* the header, for a declaration */
    bool marked[MAX_NAMES];    /* declared with AMP_API */
} name_set;

static int find(const name_set *s, const char *name) {
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->name[i], name)) return i;
    return -1;
}

static void add(name_set *s, const char *name, size_t len, const char *where, bool marked) {
    if (len >= NAME_LEN) fail_msg("name too long: %.*s", (int)len, name);
    if (s->n == MAX_NAMES) fail_msg("more than %d names", MAX_NAMES);
    snprintf(s->name[s->n], NAME_LEN, "%.*s", (int)len, name);
    snprintf(s->where[s->n], sizeof s->where[0], "%s", where);
    s->marked[s->n] = marked;
    s->n++;
}

static bool ident_char(char c) {
    return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

static void blank(char *a, const char *b) {
    for (; a < b; a++)
        if (*a != '\n') *a = ' ';
}

/* The header's text with comments, preprocessor lines and the C++ guard
 * (#ifdef __cplusplus ... #endif) blanked, so that what remains is C
 * declarations and definitions. */
static void strip(char *s) {
    for (char *p = strstr(s, "#ifdef __cplusplus"); p; p = strstr(p, "#ifdef __cplusplus")) {
        char *e = strstr(p, "#endif");
        if (!e) fail_msg("unterminated #ifdef __cplusplus");
        blank(p, e + 6);
    }
    for (char *p = s; *p; p++) {
        if (p[0] == '/' && p[1] == '*') {
            char *e = strstr(p + 2, "*/");
            if (!e) fail_msg("unterminated comment");
            blank(p, e + 2);
            p = e + 1;
        } else if (p[0] == '/' && p[1] == '/') {
            char *e = strchr(p, '\n');
            if (!e) e = p + strlen(p);
            blank(p, e);
            p = e - 1;
        }
    }
    for (char *p = s; *p; p++) {
        if (p != s && p[-1] != '\n') continue;
        char *q = p;
        while (*q == ' ' || *q == '\t') q++;
        if (*q != '#') continue;
        char *e = q;
        while (*e && !(*e == '\n' && e[-1] != '\\')) e++;
        blank(q, e);
    }
}

/* Adds every declaration of one header's top level: a statement (up to ';'
 * outside braces) with '(' and no typedef declares the function named before
 * its first '('; one starting with AMP_API without '(' declares data. */
static void header_decls(const char *path, const char *hname, name_set *out) {
    char *s = test_read_file(path, NULL);
    if (!s) fail_msg("cannot read %s", path);
    strip(s);
    int depth = 0;
    char *start = NULL;
    for (char *p = s; *p; p++) {
        /* brace bodies (a struct's members, an enum's values) are blanked:
         * the statement is what stands outside them */
        if (*p == '{' || *p == '}' || depth > 0) {
            depth += *p == '{' ? 1 : *p == '}' ? -1 : 0;
            if (*p != '\n') *p = ' ';
            continue;
        }
        if (*p != ';') {
            if (!start && *p != ' ' && *p != '\n' && *p != '\t') start = p;
            continue;
        }
        if (!start) continue;
        *p = 0;
        char *st = start;
        start = NULL;
        bool marked = !strncmp(st, "AMP_API", 7) && !ident_char(st[7]);
        bool typedef_ = false;
        for (char *t = strstr(st, "typedef"); t; t = strstr(t + 1, "typedef"))
            if ((t == st || !ident_char(t[-1])) && !ident_char(t[7])) typedef_ = true;
        if (typedef_) continue;
        char *par = strchr(st, '(');
        char *e = par ? par : st + strlen(st);
        if (!par) {
            if (!marked) continue; /* a forward struct declaration, an enum */
            char *br = strchr(st, '[');
            if (br) e = br;
        }
        while (e > st && (e[-1] == ' ' || e[-1] == '\n' || e[-1] == '\t')) e--;
        char *b = e;
        while (b > st && ident_char(b[-1])) b--;
        if (b == e) fail_msg("%s: cannot find the name in '%s'", hname, st);
        add(out, b, (size_t)(e - b), hname, marked);
    }
    if (depth != 0) fail_msg("%s: unbalanced braces", hname);
    free(s);
}

static void public_decls(name_set *out) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/include/amp", AMP_SOURCE_DIR);
    DIR *d = opendir(dir);
    if (!d) fail_msg("cannot open %s", dir);
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len < 3 || strcmp(e->d_name + len - 2, ".h")) continue;
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        header_decls(path, e->d_name, out);
    }
    closedir(d);
}

static void exported(name_set *out) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "nm -D --defined-only '%s'", AMP_SHARED_LIB);
    FILE *f = popen(cmd, "r");
    if (!f) fail_msg("cannot run %s", cmd);
    char line[512];
    while (fgets(line, sizeof line, f)) {
        /* "ADDRESS TYPE NAME" */
        char addr[64], type[8], name[256];
        if (sscanf(line, "%63s %7s %255s", addr, type, name) != 3) fail_msg("%s: unexpected line: %s", cmd, line);
        add(out, name, strlen(name), "", false);
    }
    int rc = pclose(f);
    if (rc != 0) fail_msg("%s failed (status %d)", cmd, rc);
}

static void t_exports_match_headers(void **state) {
    (void)state;
    static name_set decl, dyn;
    decl.n = dyn.n = 0;
    public_decls(&decl);
    exported(&dyn);
    print_message("include/amp/ declares %d names, libamp.so exports %d\n", decl.n, dyn.n);
    assert_true(decl.n > 400);
    int bad = 0;
    for (int i = 0; i < decl.n; i++) {
        if (!decl.marked[i]) {
            print_message("%s: %s is declared without AMP_API\n", decl.where[i], decl.name[i]);
            bad++;
        }
        if (find(&dyn, decl.name[i]) < 0) {
            print_message("%s: %s is declared but libamp.so does not export it\n", decl.where[i], decl.name[i]);
            bad++;
        }
    }
    for (int i = 0; i < dyn.n; i++)
        if (find(&decl, dyn.name[i]) < 0) {
            print_message("libamp.so exports %s, which include/amp/ does not declare\n", dyn.name[i]);
            bad++;
        }
    assert_int_equal(bad, 0);
}

/* The quoted #include paths of a file, one after another in *paths. */
static int quoted_includes(const char *path, char paths[][256], int max) {
    char *s = test_read_file(path, NULL);
    if (!s) fail_msg("cannot read %s", path);
    int n = 0;
    for (char *p = s; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        char *q = p;
        while (*q == ' ' || *q == '\t') q++;
        if (*q++ != '#') continue;
        while (*q == ' ' || *q == '\t') q++;
        if (strncmp(q, "include", 7)) continue;
        q += 7;
        while (*q == ' ' || *q == '\t') q++;
        if (*q != '"') continue;
        char *e = strchr(q + 1, '"');
        if (!e || n == max) fail_msg("%s: cannot read an #include", path);
        snprintf(paths[n++], 256, "%.*s", (int)(e - q - 1), q + 1);
    }
    free(s);
    return n;
}

static bool exists(const char *dir, const char *rel) {
    char p[2048];
    snprintf(p, sizeof p, "%s/%s/%.255s", AMP_SOURCE_DIR, dir, rel);
    struct stat st;
    return stat(p, &st) == 0;
}

static void t_cli_includes(void **state) {
    (void)state;
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/src/cli", AMP_SOURCE_DIR);
    DIR *d = opendir(dir);
    if (!d) fail_msg("cannot open %s", dir);
    int files = 0, bad = 0, internal_users = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len < 3 || (strcmp(e->d_name + len - 2, ".c") && strcmp(e->d_name + len - 2, ".h"))) continue;
        bool is_internal_h = !strcmp(e->d_name, "cli_internal.h");
        char path[2048], incs[64][256];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        int n = quoted_includes(path, incs, 64);
        files++;
        for (int i = 0; i < n; i++) {
            if (!strcmp(incs[i], "cli/cli_internal.h")) internal_users++;
            bool public_h = !strncmp(incs[i], "amp/", 4) && exists("include", incs[i]);
            bool cli_h = !strncmp(incs[i], "cli/", 4) && exists("src", incs[i]);
            bool local = exists("src/cli", incs[i]); /* "bench_openblas.h" beside the file */
            if (public_h || cli_h || local || is_internal_h) continue;
            print_message("src/cli/%s includes \"%s\", a header of the library's internals: use the public API "
                          "or list it in src/cli/cli_internal.h with the reason\n",
                          e->d_name, incs[i]);
            bad++;
        }
    }
    closedir(d);
    print_message("%d CLI files, %d of them include cli/cli_internal.h\n", files, internal_users);
    assert_true(files > 20);
    assert_int_equal(bad, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(t_exports_match_headers),
        cmocka_unit_test(t_cli_includes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
