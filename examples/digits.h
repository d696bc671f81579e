/*
 * digits.h - loader for the UCI optical-recognition handwritten digits (1,797 8x8 images, 10
 * classes) as shipped by Debian's python3-sklearn, used by the example training jobs.
 *
 * The file is gzip-compressed CSV without a header: 65 comma-separated integers per line, 64
 * pixel values 0..16 (row-major 8x8) followed by the label 0..9.
 */
#ifndef FTRT_EXAMPLES_DIGITS_H
#define FTRT_EXAMPLES_DIGITS_H

#include <stddef.h>
#include <stdint.h>

#define DIGITS_FEATURES 64 /* pixels per image */
#define DIGITS_CLASSES 10  /* labels 0..9 */
#define DIGITS_DEFAULT_PATH "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz"
#define DIGITS_PACKAGE "python3-sklearn"
/* The environment variable that, when set and not empty, replaces DIGITS_DEFAULT_PATH as
 * train_mlp's default --data (e.g. the copy in scripts/gpu-kit.sh's kit, on a machine without
 * Debian's python3-sklearn). */
#define DIGITS_DATA_ENV "DIGITS_DATA"

/* A set of n images: x holds n * DIGITS_FEATURES floats in [0, 1] (pixel / 16), row-major;
 * y holds n labels in [0, DIGITS_CLASSES). Owned by the struct; release with digits_free(). */
typedef struct digits {
    size_t n;
    float *x;
    uint8_t *y;
} digits;

/*
 * Reads the gzip CSV at `path` (NULL = DIGITS_DEFAULT_PATH) into *out and normalizes pixels.
 *   err, errlen: receive a one-line message on failure (naming the path and, when the file
 *                cannot be opened, the Debian package that provides it).
 * Returns 0; -errno when the file cannot be opened or read; -EINVAL on a malformed line;
 * -ENOMEM. *out is zeroed on failure.
 */
int digits_load(const char *path, digits *out, char *err, size_t errlen);

/*
 * Splits `all` into disjoint train and test sets with a fixed permutation: a Fisher-Yates
 * shuffle driven by splitmix64 seeded with `seed`; the first round(test_fraction * n) shuffled
 * images become the test set (in shuffled order), the rest the training set.
 *   test_fraction: in (0, 1); both parts are non-empty or the call fails.
 * Returns 0, -EINVAL (bad fraction, or a part would be empty) or -ENOMEM (outputs zeroed).
 */
int digits_split(const digits *all, double test_fraction, uint64_t seed, digits *train,
                 digits *test);

/* Releases a set's arrays and zeroes it. NULL and zeroed sets are accepted. */
void digits_free(digits *d);

#endif
