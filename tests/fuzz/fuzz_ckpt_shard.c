/*
 * fuzz_ckpt_shard.c - libFuzzer target for the shard header/table parser (checkpoint/format.c):
 * arbitrary bytes are the start of a shard file; the first 8 bytes pick the file size the
 * parser checks region extents against (so that both "fits" and "truncated" are reached) and,
 * with their top bit, whether the header CRC is fixed up before parsing (so that mutations reach
 * the checks behind the CRC); the rest is the header + table. ftrt__shard_peek and ftrt__shard_parse must never read outside
 * the buffer, never crash, and return 0 or FTRT_ECORRUPT (with a reason); an accepted table's
 * regions must lie inside the file, 4 KiB-aligned, in order, without overlap, and a re-encoded
 * accepted header must parse to the same header and entries.
 *
 * Built two ways: with clang -fsanitize=fuzzer (bench/fuzz_ckpt.sh, a bounded fuzzing run),
 * and linked with replay_main.c as a plain program that replays corpus directories (ctest
 * unit.fuzz_ckpt_corpus).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/crc32c.h"
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
    if (size < 8) return 0;
    uint64_t file_size = 0;
    for (int i = 0; i < 8; i++) file_size |= (uint64_t)data[i] << (8 * i);
    data += 8;
    size -= 8;
    /* Exact-size copy, so that any overread hits the sanitizer's redzone. */
    unsigned char *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    uint32_t tb = 0;
    const char *why = NULL;
    int rc = ftrt__shard_peek(buf, size, &tb, &why);
    if (rc != 0 && (rc != FTRT_ECORRUPT || !why)) abort();
    /* Bit 63 of the size: store a correct header CRC, as a writer would, so that mutations
     * get past the CRC to the field and geometry checks. */
    if ((file_size >> 63) && rc == 0 && tb <= size) {
        memset(buf + 36, 0, 4);
        uint32_t c = ftrt__crc32c(0, buf, tb);
        for (int i = 0; i < 4; i++) buf[36 + i] = (unsigned char)(c >> (8 * i));
    }
    file_size &= ~(1ull << 63);
    ftrt__shard_hdr h;
    ftrt__shard_ent *e = NULL;
    why = NULL;
    rc = ftrt__shard_parse(buf, size, file_size, &h, &e, &why);
    if (rc == 0) {
        uint64_t prev = h.table_bytes;
        if (h.nranks == 0 || h.rank >= h.nranks || h.step < 0) abort();
        for (uint32_t i = 0; i < h.nregions; i++) {
            if (e[i].file_offset % FTRT__SHARD_ALIGN || e[i].file_offset < prev) abort();
            if (e[i].file_offset > file_size || e[i].slice_bytes > file_size - e[i].file_offset)
                abort();
            if (strnlen(e[i].name, FTRT__NAME_MAX) >= FTRT__NAME_MAX || !e[i].name[0]) abort();
            prev = e[i].file_offset + e[i].slice_bytes;
        }
        /* Round trip: encode what was accepted, parse it again. */
        unsigned char *again = malloc(h.table_bytes);
        if (again) {
            ftrt__shard_hdr h2 = h;
            ftrt__shard_encode(again, &h2, e);
            ftrt__shard_hdr h3;
            ftrt__shard_ent *e3 = NULL;
            if (ftrt__shard_parse(again, h.table_bytes, file_size, &h3, &e3, &why) != 0) abort();
            /* The same content (the CRC may differ: bytes after a name's NUL are not kept). */
            if (h3.nregions != h.nregions || h3.step != h.step || h3.rank != h.rank ||
                h3.nranks != h.nranks)
                abort();
            for (uint32_t i = 0; i < h.nregions; i++)
                if (strcmp(e3[i].name, e[i].name) || e3[i].kind != e[i].kind ||
                    e3[i].total_bytes != e[i].total_bytes || e3[i].file_offset != e[i].file_offset ||
                    e3[i].slice_offset != e[i].slice_offset ||
                    e3[i].slice_bytes != e[i].slice_bytes || e3[i].data_crc != e[i].data_crc)
                    abort();
            free(e3);
            free(again);
        }
        free(e);
    } else if (rc == FTRT_ECORRUPT) {
        if (!why || e) abort();
    } else if (rc != -ENOMEM) {
        abort();
    }
    free(buf);
    return 0;
}
