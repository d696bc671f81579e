/*
 * jsonw.c - the streaming JSON writer (base/jsonw.h): json-c's pretty layout, written as it is
 * produced. The layout, as json-c 0.16 prints it with JSON_C_TO_STRING_PRETTY: a container
 * opens with "{\n" or "[\n"; each member after the first is preceded by ",\n"; a member is
 * indented two spaces a level, an object's written "\"key\":value"; a container closes with
 * "\n" (when it had a member), its own indentation and "}" or "]". Scalars are printed by
 * json-c itself. tests/unit/test_report.c checks the output against json-c's.
 */
#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <string.h>

#include "base/fs.h"
#include "base/jsonw.h"

int ftrt__jw_open(ftrt__jw *w, const char *path)
{
    memset(w, 0, sizeof *w);
    if (!path || !path[0]) return 0;
    if (ftrt__path(w->path, sizeof w->path, "%s", path)) return w->err = -ENAMETOOLONG;
    w->f = ftrt__atomic_open(path, w->tmp, sizeof w->tmp);
    if (!w->f) return w->err = -errno;
    return 0;
}

static void put(ftrt__jw *w, const char *s, size_t n)
{
    if (w->err || !w->f || n == 0) return;
    if (fwrite(s, 1, n, w->f) != n) w->err = errno ? -errno : -EIO;
}

static void puts_(ftrt__jw *w, const char *s) { put(w, s, strlen(s)); }

static void indent(ftrt__jw *w, int level)
{
    static const char sp[] = "                                                                ";
    for (int n = 2 * level; n > 0 && !w->err;) {
        int k = n < (int)sizeof sp - 1 ? n : (int)sizeof sp - 1;
        put(w, sp, (size_t)k);
        n -= k;
    }
}

/* The separator, indentation and key before a member (key: in an object) or an element of the
 * container open now; nothing before the document itself. Returns -1 after an error. */
static int lead(ftrt__jw *w, const char *key)
{
    if (w->err || !w->f) return -1; /* (no file: nothing to do) */
    if (w->depth == 0) return 0;
    if (w->had[w->depth - 1]) puts_(w, ",\n");
    w->had[w->depth - 1] = 1;
    indent(w, w->depth);
    if (key) {
        put(w, "\"", 1);
        puts_(w, key); /* the report's keys: [a-z0-9_], nothing to escape */
        put(w, "\":", 2);
    }
    return w->err ? -1 : 0;
}

static void open_(ftrt__jw *w, const char *key, int arr)
{
    if (lead(w, key)) return;
    if (w->depth >= FTRT__JW_DEPTH) {
        w->err = -EOVERFLOW;
        return;
    }
    put(w, arr ? "[\n" : "{\n", 2);
    w->arr[w->depth] = (unsigned char)arr;
    w->had[w->depth++] = 0;
}

void ftrt__jw_object(ftrt__jw *w, const char *key) { open_(w, key, 0); }

void ftrt__jw_array(ftrt__jw *w, const char *key) { open_(w, key, 1); }

void ftrt__jw_end(ftrt__jw *w)
{
    if (w->err || !w->f) return;
    if (w->depth == 0) {
        w->err = -EINVAL;
        return;
    }
    w->depth--;
    if (w->had[w->depth]) put(w, "\n", 1);
    indent(w, w->depth);
    put(w, w->arr[w->depth] ? "]" : "}", 1);
}

void ftrt__jw_int(ftrt__jw *w, const char *key, int64_t v)
{
    char b[24];
    if (lead(w, key) == 0) put(w, b, (size_t)snprintf(b, sizeof b, "%lld", (long long)v));
}

/* Scalars are printed by one json-c object of each kind, reused (json-c's own format, and its
 * text buffer reused: no allocation per value). */
void ftrt__jw_double(ftrt__jw *w, const char *key, double v)
{
    if (lead(w, key)) return;
    if (!w->num)
        w->num = json_object_new_double(v);
    else
        json_object_set_double(w->num, v);
    const char *s =
        w->num ? json_object_to_json_string_ext(w->num, JSON_C_TO_STRING_PRETTY) : NULL;
    if (s)
        puts_(w, s);
    else
        w->err = -ENOMEM;
}

void ftrt__jw_bool(ftrt__jw *w, const char *key, int v)
{
    if (lead(w, key) == 0) puts_(w, v ? "true" : "false");
}

void ftrt__jw_null(ftrt__jw *w, const char *key)
{
    if (lead(w, key) == 0) puts_(w, "null");
}

void ftrt__jw_string(ftrt__jw *w, const char *key, const char *s)
{
    if (!s) {
        ftrt__jw_null(w, key);
        return;
    }
    if (lead(w, key)) return;
    int ok = 1;
    if (!w->str)
        w->str = json_object_new_string(s);
    else
        ok = json_object_set_string(w->str, s);
    const char *t = ok && w->str ? json_object_to_json_string_ext(w->str, JSON_C_TO_STRING_PRETTY)
                                 : NULL;
    if (t)
        puts_(w, t);
    else
        w->err = -ENOMEM;
}

int ftrt__jw_close(ftrt__jw *w)
{
    if (!w->err && w->depth != 0) w->err = -EINVAL;
    put(w, "\n", 1);
    json_object_put(w->num);
    json_object_put(w->str);
    w->num = w->str = NULL;
    if (!w->f) return w->err;
    int e = ftrt__atomic_finish(w->f, w->tmp, w->path, w->err);
    w->f = NULL;
    return w->err = e;
}
