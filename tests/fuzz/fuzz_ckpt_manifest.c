/*
 * fuzz_ckpt_manifest.c - libFuzzer target for the MANIFEST parser and the LATEST parser
 * (checkpoint/format.c). The first byte picks the parser and the step the MANIFEST must name;
 * the rest is the file's contents. Neither may crash or read outside the
 * buffer; an accepted MANIFEST names every rank exactly once with a size of at least a header;
 * an accepted LATEST is canonical (printing the step gives back the same text).
 *
 * Built like fuzz_ckpt_shard.c: libFuzzer (bench/fuzz_ckpt.sh) or with replay_main.c (ctest).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/knobs.h"
#include "checkpoint/format.h"
#include "ftrt.h"

#ifdef FTRT_FUZZ_STANDALONE
/* The libFuzzer build links checkpoint/ and base/ without base/config.c: the (all off) test
 * knobs come from here. */
struct ftrt__knobs ftrt__knobs;
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    unsigned sel = data[0];
    data++;
    size--;
    char *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    if (sel & 1) {
        int64_t step = -1;
        int ok = ftrt__latest_parse(buf, size, &step);
        if (ok) {
            char again[64];
            int n = snprintf(again, sizeof again, "step-%" PRId64, step);
            size_t len = size && buf[size - 1] == '\n' ? size - 1 : size;
            if (step < 0 || (size_t)n != len || memcmp(again, buf, len) != 0) abort();
        }
    } else {
        int64_t step = (int64_t)(sel >> 1) - 1; /* -1 .. 126 */
        ftrt__manifest m;
        const char *why = NULL;
        int rc = ftrt__manifest_parse(buf, size, step, &m, &why);
        if (rc == 0) {
            if (m.nranks < 1 || !m.bytes || !m.hcrc) abort();
            for (int r = 0; r < m.nranks; r++)
                if (m.bytes[r] < FTRT__SHARD_HDR_BYTES) abort();
            ftrt__manifest_free(&m);
        } else if (rc == FTRT_ECORRUPT) {
            if (!why || m.bytes || m.hcrc) abort();
        } else if (rc != -ENOMEM) {
            abort();
        }
    }
    free(buf);
    return 0;
}
