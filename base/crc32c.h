/*
 * crc32c.h - CRC32C (Castagnoli), the integrity check of shards, transfers and fingerprints
 * (internal to libftrt; base layer). Hardware instruction where the CPU has one (SSE4.2,
 * ARMv8 CRC), table-driven otherwise.
 */
#ifndef FTRT_BASE_CRC32C_H
#define FTRT_BASE_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* CRC32C (Castagnoli) of len bytes at buf, continuing from crc (start with 0). Uses the
 * SSE4.2 / ARMv8 CRC instruction when the CPU has it. Thread-safe. */
uint32_t ftrt__crc32c(uint32_t crc, const void *buf, size_t len);

/* Copies len bytes from src to dst and returns the CRC32C of them continued from crc, in one
 * pass over the data. dst and src must not overlap. Copies of 1 MiB or more use non-temporal
 * stores (followed by a store fence), so dst is not left in the cache. Thread-safe. */
uint32_t ftrt__copy_crc32c(void *dst, const void *src, size_t len, uint32_t crc);

/* CRC32C of A || B from crc1 = CRC32C(A) and crc2 = CRC32C(B), len2 = |B| bytes (zlib's
 * crc32_combine for the Castagnoli polynomial; O(log len2)). Thread-safe. */
uint32_t ftrt__crc32c_combine(uint32_t crc1, uint32_t crc2, uint64_t len2);

/* Software CRC32C (the reference the hardware paths are tested against). Thread-safe. */
uint32_t ftrt__crc32c_sw(uint32_t crc, const void *buf, size_t len);
/* 1 when the hardware CRC32C instruction is used. */
int ftrt__crc32c_hw(void);

#endif
