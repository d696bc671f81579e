/*
 * settings_table.c - the Markdown table of ftrt_config's settings, generated from the one table
 * in base/config.c (FTRT__SETTINGS, read through ftrt__settings()), and its checker.
 *
 *   settings_table                          print the table
 *   settings_table --check DOC.md LIB.py    exit 1 unless DOC.md (docs/configuration.md) holds exactly that table
 *                                           between <!-- settings:begin --> and
 *                                           <!-- settings:end -->, and the ctypes mirror
 *                                           (class Config in bindings/python/ftrt/_lib.py) has
 *                                           ftrt_config's fields in order with their types
 *   settings_table --update DOC.md          rewrite DOC.md's table in place
 *
 * Built as build/tests/settings_table (linked with the internal archive); ctest
 * unit.settings_table runs --check.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ftrt.h"
#include "runtime/internal.h"

#define BEGIN "<!-- settings:begin -->\n"
#define END "<!-- settings:end -->\n"

static const char *type_of(const ftrt__setting *s, char *buf, size_t cap)
{
    if (s->kind == FTRT__SET_DBL) return "double";
    if (s->kind == FTRT__SET_STR) {
        snprintf(buf, cap, "char[%zu]", s->size);
        return buf;
    }
    return "int";
}

/* The ctypes spelling of the field's type, as in _lib.py. */
static const char *ctype_of(const ftrt__setting *s, char *buf, size_t cap)
{
    if (s->kind == FTRT__SET_DBL) return "ctypes.c_double";
    if (s->kind == FTRT__SET_STR) {
        snprintf(buf, cap, "ctypes.c_char * %zu", s->size);
        return buf;
    }
    return "ctypes.c_int";
}

/* The i-th of the '|'-separated names, as `name`. */
static void put_name(FILE *f, const char *names, int i)
{
    for (; i > 0 && names; i--) {
        names = strchr(names, '|');
        if (names) names++;
    }
    if (!names) {
        fputs("?", f);
        return;
    }
    size_t n = strcspn(names, "|");
    fprintf(f, "`%.*s`", (int)n, names);
}

static void row(FILE *f, const ftrt__setting *s)
{
    char tb[32];
    fprintf(f, "| `%s` | `%s` | %s | ", s->env, s->field, type_of(s, tb, sizeof tb));
    switch (s->kind) {
    case FTRT__SET_STR: /* default | range */
        if (s->def_str[0]) fprintf(f, "`%s` | ", s->def_str);
        else fputs("empty | ", f);
        if (s->lo > 0) fprintf(f, "%g..%zu bytes", s->lo, s->size - 1);
        else fprintf(f, "at most %zu bytes", s->size - 1);
        break;
    case FTRT__SET_DBL: fprintf(f, "%g | %g..%g", s->def, s->lo, s->hi); break;
    case FTRT__SET_ENUM: {
        put_name(f, s->names, (int)s->def);
        fputs(" | ", f);
        int n = (int)(s->hi - s->lo) + 1;
        for (int i = 0; i < n; i++) {
            if (i) fputs(", ", f);
            put_name(f, s->names, i);
        }
        break;
    }
    default:
        fprintf(f, "%d | %ld..%ld", (int)s->def, (long)s->lo, (long)s->hi);
        if (s->kind == FTRT__SET_POW2) fputs(", a power of two", f);
    }
    fprintf(f, " | %s |\n", s->doc);
}

/* The table, malloc'ed. */
static char *table(void)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    fputs("| variable | `ftrt_config` field | type | default | range | meaning |\n"
          "|---|---|---|---|---|---|\n",
          f);
    int n;
    const ftrt__setting *s = ftrt__settings(&n);
    for (int i = 0; i < n; i++) row(f, &s[i]);
    fclose(f);
    return buf;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return NULL;
    }
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    char chunk[65536];
    size_t got;
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0) fwrite(chunk, 1, got, m);
    fclose(f);
    fclose(m);
    return buf;
}

/* The document's table: [*b, *e) between the markers. Returns 0 or -1 (said). */
static int find_markers(const char *path, char *text, char **b, char **e)
{
    char *begin = strstr(text, BEGIN);
    char *end = begin ? strstr(begin, END) : NULL;
    if (!begin || !end) {
        fprintf(stderr, "%s: no %.*s ... %.*s block\n", path, (int)strlen(BEGIN) - 1, BEGIN,
                (int)strlen(END) - 1, END);
        return -1;
    }
    *b = begin + strlen(BEGIN);
    *e = end;
    return 0;
}

static int check_readme(const char *path, const char *want)
{
    char *text = slurp(path), *b, *e;
    if (!text) return 1;
    int bad = find_markers(path, text, &b, &e) != 0;
    if (!bad && ((size_t)(e - b) != strlen(want) || memcmp(b, want, strlen(want)) != 0)) {
        fprintf(stderr,
                "%s: the configuration table differs from the settings in base/config.c; "
                "regenerate it: build/tests/settings_table --update %s\n--- %s\n"
                "%.*s--- generated\n%s",
                path, path, path, (int)(e - b), b, want);
        bad = 1;
    }
    free(text);
    return bad;
}

static int update_readme(const char *path, const char *want)
{
    char *text = slurp(path), *b, *e;
    if (!text) return 1;
    if (find_markers(path, text, &b, &e)) {
        free(text);
        return 1;
    }
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        free(text);
        return 1;
    }
    fwrite(text, 1, (size_t)(b - text), f);
    fputs(want, f);
    fputs(e, f);
    int rc = fclose(f) ? 1 : 0;
    free(text);
    return rc;
}

/* Compares class Config's _fields_ in the ctypes mirror with ftrt_config. */
static int check_mirror(const char *path)
{
    char *text = slurp(path);
    if (!text) return 1;
    char *cls = strstr(text, "\nclass Config(");
    char *fields = cls ? strstr(cls, "_fields_ = [\n") : NULL;
    char *close = fields ? strstr(fields, "\n    ]\n") : NULL;
    if (!close) {
        fprintf(stderr, "%s: class Config's _fields_ = [ ... ] not found\n", path);
        free(text);
        return 1;
    }
    *close = 0;
    int n, bad = 0, k = 0;
    const ftrt__setting *s = ftrt__settings(&n);
    char *line = strchr(fields, '\n') + 1;
    for (; line && *line; k++) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        char want[128], tb[64];
        if (k == 0) snprintf(want, sizeof want, "(\"size\", ctypes.c_uint32),");
        else if (k == 1) snprintf(want, sizeof want, "(\"version\", ctypes.c_uint32),");
        else if (k - 2 < n)
            snprintf(want, sizeof want, "(\"%s\", %s),", s[k - 2].field,
                     ctype_of(&s[k - 2], tb, sizeof tb));
        else snprintf(want, sizeof want, "(nothing: ftrt_config has no more fields)");
        const char *got = line + strspn(line, " ");
        if (strcmp(got, want) != 0) {
            fprintf(stderr, "%s: Config._fields_[%d] is %s ftrt_config needs %s\n", path, k, got,
                    want);
            bad = 1;
        }
        line = nl ? nl + 1 : NULL;
    }
    if (k != n + 2) {
        fprintf(stderr, "%s: Config._fields_ has %d fields, ftrt_config %d\n", path, k, n + 2);
        bad = 1;
    }
    free(text);
    return bad;
}

int main(int argc, char **argv)
{
    _Static_assert(offsetof(ftrt_config, version) == 4 && sizeof(uint32_t) == 4,
                   "ftrt_config starts with uint32_t size, version");
    char *want = table();
    if (!want) return 1;
    int rc;
    if (argc == 1) {
        fputs(want, stdout);
        rc = 0;
    } else if (argc == 4 && !strcmp(argv[1], "--check")) {
        rc = check_readme(argv[2], want) | check_mirror(argv[3]);
        if (!rc) printf("settings table: %s and %s agree with base/config.c\n", argv[2], argv[3]);
    } else if (argc == 3 && !strcmp(argv[1], "--update")) {
        rc = update_readme(argv[2], want);
    } else {
        fprintf(stderr, "usage: %s [--check docs/configuration.md _lib.py | --update docs/configuration.md]\n", argv[0]);
        rc = 2;
    }
    free(want);
    return rc;
}
