/*
 * format.c - the codec of the checkpoint's on-disk format (format.h): the shard header and
 * region table (encoding, and decoding with every check a reader relies on), the MANIFEST
 * parser and the parsers of step directory names and LATEST.
 *
 * The decoders take untrusted bytes (a file on a shared file system, or a fuzzer's input):
 * each is bounded by its input's length and returns FTRT_ECORRUPT with a static description
 * of the first problem instead of trusting a field. They do no I/O and keep no state, so
 * they are thread-safe; the fuzz targets (tests/fuzz/) call them directly.
 */
#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/crc32c.h"
#include "checkpoint/format.h"
#include "checkpoint/region.h" /* FTRT__KIND_* */
#include "ftrt.h"

/* ---- little-endian codec ----------------------------------------------------------------- */

static void put_u32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static void put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get_u32(const unsigned char *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
    return v;
}

static uint64_t get_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

void ftrt__slice(uint64_t total, uint32_t r, uint32_t n, uint64_t *off, uint64_t *len)
{
    /* B*r/n == (B/n)*r + (B%n)*r/n exactly; (B%n)*r < n*n < 2^64. */
    uint64_t q = total / n, m = total % n;
    uint64_t lo = q * r + (m * r) / n;
    uint64_t hi = q * (r + 1u) + (m * (r + 1u)) / n;
    *off = lo;
    *len = hi - lo;
}

static uint32_t table_crc(const unsigned char *buf, uint32_t table_bytes)
{
    static const unsigned char zero[4];
    uint32_t c = ftrt__crc32c(0, buf, 36);
    c = ftrt__crc32c(c, zero, 4);
    return ftrt__crc32c(c, buf + FTRT__SHARD_HDR_BYTES, table_bytes - FTRT__SHARD_HDR_BYTES);
}

void ftrt__shard_encode(void *buf, ftrt__shard_hdr *hdr, const ftrt__shard_ent *ents)
{
    unsigned char *p = buf;
    memset(p, 0, hdr->table_bytes);
    memcpy(p, FTRT__SHARD_MAGIC, 8);
    put_u32(p + 8, FTRT__SHARD_VERSION);
    put_u32(p + 12, hdr->table_bytes);
    put_u64(p + 16, (uint64_t)hdr->step);
    put_u32(p + 24, hdr->rank);
    put_u32(p + 28, hdr->nranks);
    put_u32(p + 32, hdr->nregions);
    for (uint32_t i = 0; i < hdr->nregions; i++) {
        unsigned char *e = p + FTRT__SHARD_HDR_BYTES + (size_t)i * FTRT__SHARD_ENT_BYTES;
        size_t nl = strnlen(ents[i].name, FTRT__NAME_MAX - 1);
        memcpy(e, ents[i].name, nl);
        put_u32(e + 64, ents[i].kind);
        put_u64(e + 72, ents[i].total_bytes);
        put_u64(e + 80, ents[i].slice_offset);
        put_u64(e + 88, ents[i].slice_bytes);
        put_u64(e + 96, ents[i].file_offset);
        put_u32(e + 104, ents[i].data_crc);
    }
    hdr->version = FTRT__SHARD_VERSION;
    hdr->header_crc = table_crc(p, hdr->table_bytes);
    put_u32(p + 36, hdr->header_crc);
}

#define BAD(msg)                                                                               \
    do {                                                                                       \
        if (why) *why = (msg);                                                                 \
        return FTRT_ECORRUPT;                                                                  \
    } while (0)

int ftrt__shard_peek(const void *buf, size_t len, uint32_t *table_bytes, const char **why)
{
    const unsigned char *p = buf;
    if (len < FTRT__SHARD_HDR_BYTES) BAD("file shorter than the 40-byte header");
    if (memcmp(p, FTRT__SHARD_MAGIC, 8) != 0) BAD("bad magic (not an ftrt shard)");
    if (get_u32(p + 8) != FTRT__SHARD_VERSION) BAD("unsupported format version");
    uint32_t n = get_u32(p + 32), tb = get_u32(p + 12);
    if (n > FTRT__SHARD_MAX_REGIONS) BAD("region count above the limit of 4096");
    if (tb != FTRT__SHARD_HDR_BYTES + FTRT__SHARD_ENT_BYTES * n)
        BAD("header size field disagrees with the region count");
    *table_bytes = tb;
    return 0;
}

/* Checks one decoded entry against the header and the previous entry's data end. */
static const char *check_ent(const ftrt__shard_hdr *h, const ftrt__shard_ent *e,
                             uint64_t prev_end, uint64_t file_size)
{
    if (e->name[0] == '\0') return "empty region name";
    if (e->kind == FTRT__KIND_SHARDED) {
        if (e->slice_offset != 0 || e->slice_bytes != e->total_bytes)
            return "SHARDED region entry is not stored whole";
    } else if (e->kind == FTRT__KIND_REPLICATED) {
        uint64_t off, len;
        ftrt__slice(e->total_bytes, h->rank, h->nranks, &off, &len);
        if (e->slice_offset != off || e->slice_bytes != len)
            return "REPLICATED slice is not this rank's share";
    } else {
        return "unknown region kind";
    }
    if (e->file_offset % FTRT__SHARD_ALIGN != 0) return "region data offset not 4 KiB-aligned";
    if (e->file_offset < prev_end) return "region data overlaps the table or previous region";
    if (e->file_offset > file_size || e->slice_bytes > file_size - e->file_offset)
        return "region data extends beyond the end of the file (truncated?)";
    return NULL;
}

int ftrt__shard_parse(const void *buf, size_t len, uint64_t file_size, ftrt__shard_hdr *hdr,
                      ftrt__shard_ent **ents, const char **why)
{
    const unsigned char *p = buf;
    uint32_t tb;
    *ents = NULL;
    int rc = ftrt__shard_peek(buf, len, &tb, why);
    if (rc < 0) return rc;
    if (len < tb) BAD("region table truncated");
    if (file_size < tb) BAD("file shorter than its region table");
    ftrt__shard_hdr h = {
        .version = get_u32(p + 8),
        .table_bytes = tb,
        .step = (int64_t)get_u64(p + 16),
        .rank = get_u32(p + 24),
        .nranks = get_u32(p + 28),
        .nregions = get_u32(p + 32),
        .header_crc = get_u32(p + 36),
    };
    if (table_crc(p, tb) != h.header_crc) BAD("header/table CRC32C mismatch");
    if (h.step < 0) BAD("negative step");
    if (h.nranks == 0 || h.nranks > FTRT__MAX_RANKS || h.rank >= h.nranks)
        BAD("rank/nranks out of range");

    ftrt__shard_ent *e = NULL;
    if (h.nregions > 0) {
        e = calloc(h.nregions, sizeof *e);
        if (!e) return -ENOMEM;
    }
    uint64_t prev_end = tb;
    for (uint32_t i = 0; i < h.nregions; i++) {
        const unsigned char *q = p + FTRT__SHARD_HDR_BYTES + (size_t)i * FTRT__SHARD_ENT_BYTES;
        const char *bad = NULL;
        if (!memchr(q, '\0', FTRT__NAME_MAX))
            bad = "region name not NUL-terminated";
        else if (get_u32(q + 68) != 0 || get_u32(q + 108) != 0)
            bad = "reserved field not zero";
        if (!bad) {
            memcpy(e[i].name, q, FTRT__NAME_MAX);
            e[i].kind = get_u32(q + 64);
            e[i].total_bytes = get_u64(q + 72);
            e[i].slice_offset = get_u64(q + 80);
            e[i].slice_bytes = get_u64(q + 88);
            e[i].file_offset = get_u64(q + 96);
            e[i].data_crc = get_u32(q + 104);
            bad = check_ent(&h, &e[i], prev_end, file_size);
        }
        for (uint32_t j = 0; !bad && j < i; j++)
            if (strcmp(e[j].name, e[i].name) == 0) bad = "duplicate region name";
        if (bad) {
            free(e);
            BAD(bad);
        }
        prev_end = e[i].file_offset + e[i].slice_bytes; /* <= file_size: no overflow */
    }
    *hdr = h;
    *ents = e;
    return 0;
}

#undef BAD

/* ---- MANIFEST ---------------------------------------------------------------------------- */

static int get_int(json_object *o, const char *key, int64_t lo, int64_t hi, int64_t *v)
{
    json_object *f;
    if (!json_object_object_get_ex(o, key, &f) || !json_object_is_type(f, json_type_int))
        return -1;
    int64_t x = json_object_get_int64(f);
    if (x < lo || x > hi) return -1;
    *v = x;
    return 0;
}

/* Validates the parsed MANIFEST; returns a description of the problem or NULL. */
static const char *check_manifest(json_object *root, int64_t step, ftrt__manifest *m)
{
    int64_t v;
    json_object *shards;
    if (!json_object_is_type(root, json_type_object)) return "not a JSON object";
    if (get_int(root, "format", 1, 1, &v) < 0) return "missing or unsupported \"format\"";
    if (get_int(root, "step", 0, INT64_MAX, &v) < 0) return "missing or bad \"step\"";
    if (v != step) return "\"step\" differs from the directory's step";
    if (get_int(root, "nranks", 1, FTRT__MAX_RANKS, &v) < 0) return "missing or bad \"nranks\"";
    m->nranks = (int)v;
    if (!json_object_object_get_ex(root, "shards", &shards) ||
        !json_object_is_type(shards, json_type_array))
        return "missing \"shards\" array";
    if (json_object_array_length(shards) != (size_t)m->nranks)
        return "\"shards\" length differs from \"nranks\"";
    m->bytes = calloc((size_t)m->nranks, sizeof *m->bytes);
    m->hcrc = calloc((size_t)m->nranks, sizeof *m->hcrc);
    if (!m->bytes || !m->hcrc) return "out of memory";
    for (int i = 0; i < m->nranks; i++) {
        json_object *s = json_object_array_get_idx(shards, (size_t)i), *f;
        int64_t r, bytes, crc;
        char want[32];
        if (!json_object_is_type(s, json_type_object)) return "a shard entry is not an object";
        if (get_int(s, "rank", 0, m->nranks - 1, &r) < 0) return "a shard has a bad \"rank\"";
        if (m->bytes[r] != 0) return "two shard entries name the same rank";
        if (get_int(s, "bytes", FTRT__SHARD_HDR_BYTES, INT64_MAX, &bytes) < 0)
            return "a shard has a bad \"bytes\"";
        if (get_int(s, "header_crc32c", 0, UINT32_MAX, &crc) < 0)
            return "a shard has a bad \"header_crc32c\"";
        snprintf(want, sizeof want, "rank-%d.ftrt", (int)r);
        if (!json_object_object_get_ex(s, "file", &f) ||
            !json_object_is_type(f, json_type_string) ||
            strcmp(json_object_get_string(f), want) != 0)
            return "a shard's \"file\" is not rank-<rank>.ftrt";
        m->bytes[r] = (uint64_t)bytes;
        m->hcrc[r] = (uint32_t)crc;
    }
    return NULL;
}

void ftrt__manifest_free(ftrt__manifest *m)
{
    free(m->bytes);
    free(m->hcrc);
    memset(m, 0, sizeof *m);
}

int ftrt__manifest_parse(const char *buf, size_t len, int64_t step, ftrt__manifest *m,
                         const char **why)
{
    const char *bad = NULL;
    int rc = 0;
    memset(m, 0, sizeof *m);
    if (len == 0 || len > FTRT__MANIFEST_MAX) {
        if (why) *why = "empty or too large";
        return FTRT_ECORRUPT;
    }
    json_tokener *tok = json_tokener_new();
    if (!tok) return -ENOMEM;
    json_object *root = json_tokener_parse_ex(tok, buf, (int)len);
    if (!root || json_tokener_get_error(tok) != json_tokener_success) {
        bad = "not valid JSON";
    } else {
        for (size_t i = json_tokener_get_parse_end(tok); i < len && !bad; i++)
            if (buf[i] != ' ' && buf[i] != '\n' && buf[i] != '\t' && buf[i] != '\r')
                bad = "trailing bytes after the JSON object";
        if (!bad) bad = check_manifest(root, step, m);
        if (bad && strcmp(bad, "out of memory") == 0) rc = -ENOMEM;
    }
    json_object_put(root);
    json_tokener_free(tok);
    if (bad) {
        ftrt__manifest_free(m);
        if (why) *why = bad;
        return rc ? rc : FTRT_ECORRUPT;
    }
    return 0;
}

/* ---- step names and LATEST --------------------------------------------------------------- */

int ftrt__parse_step_name(const char *name, int64_t *step)
{
    if (strncmp(name, "step-", 5) != 0) return 0;
    const char *p = name + 5;
    if (*p < '0' || *p > '9') return 0;
    if (p[0] == '0' && p[1] != '\0') return 0; /* not canonical */
    uint64_t v = 0;
    for (; *p; p++) {
        if (*p < '0' || *p > '9') return 0;
        uint64_t d = (uint64_t)(*p - '0');
        if (v > ((uint64_t)INT64_MAX - d) / 10) return 0; /* before it can wrap (fuzzing) */
        v = v * 10 + d;
    }
    *step = (int64_t)v;
    return 1;
}

int ftrt__latest_parse(const char *buf, size_t len, int64_t *step)
{
    /* "step-<S>" with an optional '\n', nothing else (no NUL bytes, no second line). */
    char name[64];
    if (len > 0 && buf[len - 1] == '\n') len--;
    if (len == 0 || len >= sizeof name || memchr(buf, '\0', len) != NULL) return 0;
    memcpy(name, buf, len);
    name[len] = '\0';
    return ftrt__parse_step_name(name, step);
}
