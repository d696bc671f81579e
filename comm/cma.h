/*
 * cma.h - single-copy writes into another process of the same host (Linux cross-memory
 * attach, process_vm_writev), for the recovery's state transfer (internal to libftrt).
 *
 * On one host, MPI's shared-memory path moves a large message with one kernel copy done by the
 * receiver (Open MPI's CMA): every byte of a state transfer is then copied by the one process
 * that receives it, on one core. When the sources write their chunks into the receiver's memory
 * themselves, the copies run on as many cores as there are sources, and each source computes
 * the CRC32C of a chunk while its bytes are still in its cache. A peer is reachable only when it
 * runs on the same kernel, in the same PID namespace (ftrt__cma_ident compares the host name,
 * the boot id and the PID namespace), and the kernel lets this process write into it (same
 * user, ptrace policy): ftrt__cma_write's first call on a peer is the probe.
 *
 * Memory from ftrt_alloc() (cma.c; include/ftrt.h has its contract) is a memory file of huge
 * pages where the host reserves them: a source then maps the receiver's file (through
 * /proc/PID/fd, ftrt__cma_map) and copies each chunk itself, fused with its CRC32C and with
 * non-temporal stores: the floor's own copy, where the kernel's copy of process_vm_writev goes
 * through the cache (1.5 to 2x the floor on the 2-core VM against 1.0 to 1.2x mapped, with the
 * receiver's check; docs/benchmarks.md). Mapping costs a page-table entry per page: 128 for
 * 256 MiB of 2 MiB pages, where 4 KiB pages would cost 65,536 (tens of milliseconds), so only
 * files of huge pages are mapped.
 */
#ifndef FTRT_COMM_CMA_H
#define FTRT_COMM_CMA_H

#include <stddef.h>
#include <stdint.h>

/* Who a process is, as another process of the same host needs it: plain bytes, sent as they
 * are (MPI_BYTE) between processes of one job; two are on the same kernel and PID namespace
 * when their `where` fields are equal (memcmp). */
typedef struct ftrt__cma_ident {
    char where[128]; /* host name, boot id and PID namespace, NUL-padded */
    int64_t pid;
    uint64_t start; /* the process's start time (clock ticks after boot; 0: unknown) */
} ftrt__cma_ident;

/* Fills *id for the calling process. Never fails: what cannot be read is left empty (then no
 * peer matches it unless it lacks the same, which the probe write still checks). Any thread. */
void ftrt__cma_self(ftrt__cma_ident *id);

/* 1 when `peer` (another process's ftrt__cma_self) is on this kernel and PID namespace, else
 * 0. Any thread. */
int ftrt__cma_same_host(const ftrt__cma_ident *peer);

/* 1 when the process `id` names (another process's ftrt__cma_self, on this host) still runs:
 * its pid has the start time it had, so that a pid reused by another process after the one
 * named died is never written into; 0 otherwise. Reads /proc (a few microseconds). Any thread. */
int ftrt__cma_alive(const ftrt__cma_ident *id);

/* Copies len bytes from src (this process) to address dst in process `pid` (of the same
 * host: ftrt__cma_same_host), in one kernel copy, whatever number of calls it takes. Returns 0,
 * or -errno (-EPERM: the kernel refuses, -ESRCH: no such process, -EFAULT: dst is not writable
 * memory there, -ENOSYS: no cross-memory attach); part of the bytes may have been written then.
 * Any thread. */
int ftrt__cma_write(int64_t pid, uint64_t dst, const void *src, size_t len);

/* Where a range of this process's memory lies in a memory file of huge pages from
 * ftrt_alloc(): the file's descriptor here and the range's offset in it. fd < 0: the range
 * is not (entirely) in such a file. */
typedef struct ftrt__cma_file {
    int64_t fd;
    uint64_t off;
} ftrt__cma_file;

/* The ftrt__cma_file of [p, p + len) (fd -1 when len is 0 or the range is not within one block
 * of huge pages from ftrt_alloc). Thread-safe. */
ftrt__cma_file ftrt__cma_file_of(const void *p, size_t len);

/* Maps len bytes at offset off of file descriptor fd of process id (on this host, alive: the
 * caller checked) for writing, when that file is a memory file of huge pages
 * (/proc/PID/fd/FD opened; the kernel's check is ptrace's read access). Returns the address of
 * byte off and sets *base and *maplen to what ftrt__cma_unmap needs; NULL when it cannot be
 * mapped (no such file, not huge pages, refused, too short): then the caller writes with
 * ftrt__cma_write. Any thread. */
unsigned char *ftrt__cma_map(const ftrt__cma_ident *id, const ftrt__cma_file *f, size_t len,
                             void **base, size_t *maplen);

/* Unmaps what ftrt__cma_map mapped (base NULL: nothing). */
void ftrt__cma_unmap(void *base, size_t maplen);

#endif
