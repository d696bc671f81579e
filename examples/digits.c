/*
 * digits.c - reads the UCI handwritten digits CSV (gzip) with zlib and splits it into a train
 * and a test set with a fixed, seeded permutation. See digits.h.
 */
#include "digits.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define DIGITS__LINE_MAX 4096 /* a valid line is about 200 bytes */

static void digits__msg(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void digits__msg(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* Appends one image to the growing arrays, doubling their capacity when full. */
static int digits__push(digits *d, size_t *cap, const float *px, uint8_t label)
{
    if (d->n == *cap) {
        size_t ncap = *cap ? *cap * 2 : 2048;
        float *x = realloc(d->x, ncap * DIGITS_FEATURES * sizeof *x);
        if (!x) return -ENOMEM;
        d->x = x;
        uint8_t *y = realloc(d->y, ncap * sizeof *y);
        if (!y) return -ENOMEM;
        d->y = y;
        *cap = ncap;
    }
    memcpy(d->x + d->n * DIGITS_FEATURES, px, DIGITS_FEATURES * sizeof *px);
    d->y[d->n] = label;
    d->n++;
    return 0;
}

/*
 * Parses one CSV line of 65 numbers into px (normalized) and *label.
 * Returns 0, 1 for a blank line, or -EINVAL with a message in err.
 */
static int digits__parse(const char *line, float *px, uint8_t *label, char *err, size_t errlen)
{
    const char *p = line;
    while (*p == ' ' || *p == '\t') p++;
    if (*p == '\0' || *p == '\n' || *p == '\r') return 1;
    for (int col = 0; col <= DIGITS_FEATURES; col++) {
        char *end;
        errno = 0;
        double v = strtod(p, &end);
        if (end == p || errno != 0 || !isfinite(v)) {
            digits__msg(err, errlen, "column %d is not a number", col + 1);
            return -EINVAL;
        }
        p = end;
        while (*p == ' ' || *p == '\t') p++;
        if (col < DIGITS_FEATURES) {
            if (v < 0.0 || v > 16.0) {
                digits__msg(err, errlen, "pixel %d = %g is outside 0..16", col + 1, v);
                return -EINVAL;
            }
            px[col] = (float)v / 16.0f;
            if (*p != ',') {
                digits__msg(err, errlen, "expected 65 comma-separated values, found %d", col + 1);
                return -EINVAL;
            }
            p++;
        } else {
            if (v < 0.0 || v >= DIGITS_CLASSES || v != floor(v)) {
                digits__msg(err, errlen, "label %g is not an integer in 0..%d", v,
                            DIGITS_CLASSES - 1);
                return -EINVAL;
            }
            *label = (uint8_t)v;
        }
    }
    if (*p == '\r') p++;
    if (*p == '\n') p++;
    if (*p != '\0') {
        digits__msg(err, errlen, "more than 65 values on the line");
        return -EINVAL;
    }
    return 0;
}

int digits_load(const char *path, digits *out, char *err, size_t errlen)
{
    if (!out) return -EINVAL;
    memset(out, 0, sizeof *out);
    if (!path) path = DIGITS_DEFAULT_PATH;

    errno = 0;
    gzFile gz = gzopen(path, "rb");
    if (!gz) {
        int e = errno ? errno : ENOMEM;
        digits__msg(err, errlen,
                    "cannot open the digits data set '%s': %s (it ships with Debian's %s: "
                    "apt-get install %s; or pass --data PATH, or set " DIGITS_DATA_ENV ")",
                    path, strerror(e), DIGITS_PACKAGE, DIGITS_PACKAGE);
        return -e;
    }

    digits d = {0};
    size_t cap = 0;
    char line[DIGITS__LINE_MAX];
    float px[DIGITS_FEATURES];
    size_t lineno = 0;
    int rc = 0;
    for (;;) {
        if (!gzgets(gz, line, (int)sizeof line)) break;
        lineno++;
        size_t len = strlen(line);
        if (len == sizeof line - 1 && line[len - 1] != '\n') {
            digits__msg(err, errlen, "%s:%zu: line longer than %d bytes", path, lineno,
                        DIGITS__LINE_MAX - 2);
            rc = -EINVAL;
            break;
        }
        uint8_t label = 0;
        char why[128];
        int prc = digits__parse(line, px, &label, why, sizeof why);
        if (prc == 1) continue;
        if (prc < 0) {
            digits__msg(err, errlen, "%s:%zu: malformed line: %s", path, lineno, why);
            rc = prc;
            break;
        }
        rc = digits__push(&d, &cap, px, label);
        if (rc < 0) {
            digits__msg(err, errlen, "%s: out of memory after %zu images", path, d.n);
            break;
        }
    }
    if (rc == 0) {
        int zerr = Z_OK;
        const char *zmsg = gzerror(gz, &zerr);
        if (zerr != Z_OK && zerr != Z_STREAM_END) {
            int e = zerr == Z_ERRNO ? (errno ? errno : EIO) : EIO;
            digits__msg(err, errlen, "%s: read error after line %zu: %s", path, lineno,
                        zerr == Z_ERRNO ? strerror(e) : zmsg);
            rc = -e;
        } else if (d.n == 0) {
            digits__msg(err, errlen, "%s: no images in the file", path);
            rc = -EINVAL;
        }
    }
    gzclose(gz);
    if (rc < 0) {
        digits_free(&d);
        return rc;
    }
    *out = d;
    return 0;
}

static uint64_t digits__splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Copies images perm[from .. from+count) of src into a new set. */
static int digits__gather(const digits *src, const size_t *perm, size_t from, size_t count,
                          digits *dst)
{
    dst->x = malloc(count * DIGITS_FEATURES * sizeof *dst->x);
    dst->y = malloc(count * sizeof *dst->y);
    if (!dst->x || !dst->y) {
        digits_free(dst);
        return -ENOMEM;
    }
    for (size_t i = 0; i < count; i++) {
        size_t k = perm[from + i];
        memcpy(dst->x + i * DIGITS_FEATURES, src->x + k * DIGITS_FEATURES,
               DIGITS_FEATURES * sizeof *dst->x);
        dst->y[i] = src->y[k];
    }
    dst->n = count;
    return 0;
}

int digits_split(const digits *all, double test_fraction, uint64_t seed, digits *train,
                 digits *test)
{
    if (!all || !train || !test) return -EINVAL;
    memset(train, 0, sizeof *train);
    memset(test, 0, sizeof *test);
    if (!(test_fraction > 0.0 && test_fraction < 1.0)) return -EINVAL;
    size_t n_test = (size_t)(test_fraction * (double)all->n + 0.5);
    if (n_test == 0 || n_test >= all->n) return -EINVAL;

    size_t *perm = malloc(all->n * sizeof *perm);
    if (!perm) return -ENOMEM;
    for (size_t i = 0; i < all->n; i++) perm[i] = i;
    uint64_t state = seed;
    for (size_t i = all->n - 1; i > 0; i--) {
        /* j uniform in [0, i] (multiply-shift; the bias is below 2^-32 for this size). */
        uint64_t r = digits__splitmix64(&state) >> 32;
        size_t j = (size_t)((r * (uint64_t)(i + 1)) >> 32);
        size_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    int rc = digits__gather(all, perm, 0, n_test, test);
    if (rc == 0) rc = digits__gather(all, perm, n_test, all->n - n_test, train);
    if (rc < 0) digits_free(test);
    free(perm);
    return rc;
}

void digits_free(digits *d)
{
    if (!d) return;
    free(d->x);
    free(d->y);
    memset(d, 0, sizeof *d);
}
