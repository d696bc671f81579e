/*
 * jsonw.h - a streaming JSON writer (internal to libftrt; base layer): a document is written
 * to its file as it is produced, member by member, in json-c's JSON_C_TO_STRING_PRETTY layout
 * byte for byte (what json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY) and a final
 * newline would give for the same tree), so that a large document (the end-of-job report at
 * 131,072 ranks, issue 22) never sits in memory as a tree or as one string.
 *
 * The file is replaced atomically (base/fs.h ftrt__atomic_open): written to "<path>.tmp.<pid>"
 * and renamed over path by ftrt__jw_close; on any error the temp file is
 * removed and path is left as it was. The first error is kept and every later call does
 * nothing, so a writer checks once, at ftrt__jw_close. Not thread-safe: one writer, one
 * thread.
 */
#ifndef FTRT_BASE_JSONW_H
#define FTRT_BASE_JSONW_H

#include <stdint.h>
#include <stdio.h>

struct json_object;

/* Containers open at most (the report nests 5 deep). */
#define FTRT__JW_DEPTH 32

typedef struct ftrt__jw {
    FILE *f;                            /* NULL: a writer that writes nothing (no path) */
    char path[1024], tmp[1100];
    int depth;                          /* containers open */
    unsigned char had[FTRT__JW_DEPTH];  /* whether each open container has a member yet */
    unsigned char arr[FTRT__JW_DEPTH];  /* whether each open container is an array */
    int err;                            /* the first error (-errno), then every call is a no-op */
    struct json_object *num, *str;      /* json-c's, reused to print one double / one string */
} ftrt__jw;

/* Opens a writer on path (NULL or "": a writer that writes nothing, and every call returns at
 * once; w->f is NULL then).
 * Returns 0, or -errno (the temp file cannot be created: w->err holds it too, and
 * ftrt__jw_close still must be called), -ENAMETOOLONG past 1023 bytes. */
int ftrt__jw_open(ftrt__jw *w, const char *path);

/* Begins an object or an array: a member named key of the object open now, or (key NULL) an
 * element of the array open now, or the document itself (nothing open). Ends with
 * ftrt__jw_end. Nesting past FTRT__JW_DEPTH is -EOVERFLOW. A key, here and below, is written
 * as it is: letters, digits and '_' only (nothing to escape). */
void ftrt__jw_object(ftrt__jw *w, const char *key);
void ftrt__jw_array(ftrt__jw *w, const char *key);
/* Ends the innermost object or array open. */
void ftrt__jw_end(ftrt__jw *w);

/* Scalars, as members (key) or elements (key NULL); as json-c prints them: doubles with
 * "%.17g" and ".0" where that prints no point, strings escaped ("/" as "\/"), s NULL: null. */
void ftrt__jw_int(ftrt__jw *w, const char *key, int64_t v);
void ftrt__jw_double(ftrt__jw *w, const char *key, double v);
void ftrt__jw_bool(ftrt__jw *w, const char *key, int v);
void ftrt__jw_string(ftrt__jw *w, const char *key, const char *s);
void ftrt__jw_null(ftrt__jw *w, const char *key);

/* Ends the document (every container must be closed: -EINVAL otherwise), writes the final
 * newline, closes the file and renames it over the path; on an error, removes the temp file.
 * Frees what the writer holds. Returns 0, or the first error (-errno; -ENOMEM, -EOVERFLOW,
 * -EINVAL as above). */
int ftrt__jw_close(ftrt__jw *w);

#endif
