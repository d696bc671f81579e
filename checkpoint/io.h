/*
 * io.h - the checkpoint's file I/O (io.c): one io_uring engine, with a synchronous fallback,
 * that every checkpoint read and write goes through (the shard writers of shard.c, the shard
 * reader and the restore's verified reads, the commit's header checks). Internal to
 * checkpoint/ and its tests.
 *
 * A transfer (ftrt__io_run) is a stream of requests produced one at a time by the caller's
 * next() into a fixed set of request slots, several in flight; each request that completes is
 * handed to the caller's done() (which may consume the slot's buffer) before its slot is
 * reused. Short transfers are continued, -EAGAIN/-EINTR completions re-queued a bounded
 * number of times, any other error ends the transfer (after every submitted request
 * completed: buffers stay the kernel's until then). Without a ring (the kernel refuses one, or
 * the io_force_sync test knob) the same requests run one at a time with pread/pwrite; a ring
 * that fails (a submission refused, a completion lost) is torn down and further transfers on
 * it run synchronously.
 */
#ifndef FTRT_CKPT_IO_H
#define FTRT_CKPT_IO_H

#include <liburing.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

/* Largest request of the plain transfers (ftrt__io_read, ftrt__io_write) and staging chunk of
 * the synchronous (streaming) shard writer. */
#define FTRT__IO_CHUNK (8u << 20)
/* Requests those keep in flight per file. */
#define FTRT__IO_DEPTH 4u
/* Ring entries of a reader's or the streaming writer's ring. */
#define FTRT__IO_ENTRIES 64u

/* An io_uring, or the synchronous fallback (pread/pwrite/fdatasync) when the kernel refuses
 * one (ENOSYS, EPERM in a sandbox, ...); the fallback is said once at warn level. */
typedef struct ftrt__io {
    struct io_uring ring;
    int have_ring;
    unsigned nfixed;   /* registered buffers (0: plain requests) */
    struct iovec *iov; /* the registered buffers */
} ftrt__io;

/* Sets up io with room for `entries` requests. Never fails: without io_uring (refused by the
 * kernel, or the io_force_sync test knob) transfers use the synchronous fallback. */
void ftrt__io_init(ftrt__io *io, unsigned entries);
/* Unregisters the buffers and tears the ring down. Idempotent. */
void ftrt__io_exit(ftrt__io *io);
/* Replaces the registered buffers with iov[0..n) (each at most 1 GiB; n = 0 unregisters).
 * Requests whose memory lies in a registered buffer are then fixed-buffer requests. Returns 0,
 * -ENOSYS (no ring), -ENOMEM, or -errno (registration refused, e.g. RLIMIT_MEMLOCK; requests
 * then use unregistered buffers). */
int ftrt__io_register(ftrt__io *io, const struct iovec *iov, unsigned n);

/* One request: len bytes between buf and file offset off. */
typedef struct ftrt__io_req {
    unsigned char *buf;   /* set by next() */
    uint64_t off;         /* set by next() */
    size_t len;           /* set by next() */
    size_t need;          /* reads, set by next() or 0 (= len): bytes that must arrive before
                             the end of the file (the rest is alignment) */
    size_t done;          /* bytes transferred */
    unsigned char *stage; /* the caller's buffer for this slot (staging, bounce), or NULL */
    size_t idx;           /* the caller's (e.g. chunk index) */
    int busy, retries;    /* the engine's */
} ftrt__io_req;

/* A transfer on one file. */
typedef struct ftrt__io_job {
    int fd;
    int write;              /* 1: pwrite/write requests; 0: reads */
    ftrt__io_req *reqs;     /* the slots: depth of them, stage set by the caller */
    unsigned depth;         /* requests in flight, >= 1 */
    /* Produces the next request into r (buf, off, len, optionally need; r->stage is the
     * slot's). Returns 1, 0 when there is no more, or a negative code (ends the transfer). */
    int (*next)(void *arg, ftrt__io_req *r);
    /* Optional: r completed (r->done >= r->need). Returns 0 or a negative code. */
    int (*done)(void *arg, ftrt__io_req *r);
    /* Optional: polled before each request; non-zero ends the transfer with FTRT_ERECOVER. */
    int (*abandoned)(void *arg);
    void *arg;
    int delay_ms;      /* test knob: sleep after each completed request */
    int einval_first;  /* out: the first request (offset 0, nothing transferred) failed with
                          -EINVAL, as O_DIRECT writes to a file system without it do */
} ftrt__io_job;

/* Runs the transfer j on io. Returns 0, the first error (-errno; -EIO for a write that makes no
 * progress, -ENODATA for a read that ends before r->need bytes), next()'s or done()'s code, or
 * FTRT_ERECOVER (abandoned). Never returns with a request in flight. */
int ftrt__io_run(ftrt__io *io, ftrt__io_job *j);

/* Reads exactly len bytes at file offset off into buf, in FTRT__IO_CHUNK requests,
 * FTRT__IO_DEPTH in flight. Returns 0, -ENODATA when the file ends first, or -errno. */
int ftrt__io_read(ftrt__io *io, int fd, void *buf, size_t len, uint64_t off);
/* Writes buf[0..len) at file offset off, the same way. Returns 0 or -errno. */
int ftrt__io_write(ftrt__io *io, int fd, const void *buf, size_t len, uint64_t off);
/* fdatasync(fd) through the ring (directly without one). Returns 0 or -errno. */
int ftrt__io_fdatasync(ftrt__io *io, int fd);

/* Opens path read-only with O_DIRECT. Returns the fd, or -errno (-EINVAL: not supported here,
 * said once; also when direct is 0 or the ckpt_force_buffered test knob is set). */
int ftrt__io_open_direct(const char *path, int direct);
/* Says once per process, at warn level, that the file system of path refused O_DIRECT (err)
 * and checkpoint I/O goes through the page cache. */
void ftrt__io_warn_buffered(const char *path, int err);

/* Maps len bytes of anonymous memory aligned to 2 MiB and advised for transparent huge pages
 * (I/O over 2 MiB pages needs far fewer DMA segments than over 4 KiB ones). Returns NULL on
 * failure; release with ftrt__unmap_huge(p, len). */
void *ftrt__map_huge(size_t len);
void ftrt__unmap_huge(void *p, size_t len);

/* Verified reads: bounce buffers on io's ring. */
typedef struct ftrt__reader {
    ftrt__io *io;
    unsigned char *bounce; /* qd x chunk bytes, mapped (huge pages where possible) */
    size_t len;            /* bytes mapped at bounce */
    size_t chunk;
    unsigned qd;
    int fixed; /* bounce registered with io's ring */
} ftrt__reader;

/* Allocates qd bounce buffers of chunk bytes (a multiple of 4096) and registers them with io's
 * ring when it can. Returns 0 or -ENOMEM. */
int ftrt__reader_init(ftrt__reader *r, ftrt__io *io, unsigned qd, size_t chunk);
void ftrt__reader_free(ftrt__reader *r);
/* Reads len bytes at file offset off (4096-aligned) of fd into dst, qd chunks in flight, each
 * copied into dst with the fused copy + CRC32C as it completes; *crc receives the CRC32C of
 * the len bytes. fd may be an O_DIRECT descriptor (reads are 4 KiB-aligned and sized). Returns
 * 0, -ENODATA (the file ends first), or -errno (-EINVAL from a file system that refuses the
 * direct read: retry with a buffered descriptor). */
int ftrt__reader_read(ftrt__reader *r, int fd, uint64_t off, void *dst, size_t len,
                      uint32_t *crc);

#endif
