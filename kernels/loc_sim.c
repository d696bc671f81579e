/*
 * loc_sim.c - the simulated device: a backend of the location interface (location.h) whose
 * "device" memory the host cannot touch. THIS IS A TEST ARRANGEMENT, not a device: it lets the
 * device-region paths (checkpoint, restore, the recovery's state transfer, partner replicas,
 * fingerprints) run and be tested in CI without a GPU, and catches any path that dereferences a device pointer on
 * the host. Selected by the test knob FTRT_TEST_SIM_DEVICE=1 (base/knobs.h; ftrt_init()
 * installs it as the active device backend) or by a unit test (ftrt__loc_set_device).
 *
 * Each allocation (ftrt__sim_alloc) is its own anonymous mapping, PROT_NONE except inside the
 * backend's calls: a call takes the backend's mutex, finds the allocation(s) that hold its
 * device range (FTRT_EINVAL when none does: a host pointer passed as a device one), makes them
 * readable and writable, does the work with the host backend (memcpy fused with CRC32C), makes
 * them PROT_NONE again and releases the mutex. So a host access to simulated device memory
 * faults (SIGSEGV) whenever no backend call is running. Limit: while one thread is inside a call, the allocation it works on is open, and a
 * stray host access from another thread to that same allocation at that moment is not caught;
 * the calls are short and serialized, and the tests that check the trap run with no call in
 * flight. Speed is not a goal: every call pays two mprotect system calls.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/crc32c.h"
#include "base/log.h"
#include "ftrt.h"
#include "ftrt_sim.h"
#include "kernels/location.h"

#define SIM_MAX 4096 /* live allocations */

typedef struct sim_block {
    unsigned char *base;
    size_t bytes; /* what was asked for */
    size_t len;   /* mapped: bytes rounded up to whole pages */
} sim_block;

static pthread_mutex_t sim_lock = PTHREAD_MUTEX_INITIALIZER;
static sim_block blocks[SIM_MAX];
static int nblocks;

/* The allocation holding [p, p + bytes), or NULL. Caller holds sim_lock. */
static sim_block *find_block(const void *p, size_t bytes)
{
    uintptr_t a = (uintptr_t)p;
    for (int i = 0; i < nblocks; i++) {
        uintptr_t b = (uintptr_t)blocks[i].base;
        if (a >= b && a - b <= blocks[i].bytes && bytes <= blocks[i].bytes - (a - b))
            return &blocks[i];
    }
    return NULL;
}

/* Opens (prot = PROT_READ | PROT_WRITE) or closes (PROT_NONE) an allocation. */
static int set_prot(sim_block *b, int prot)
{
    if (mprotect(b->base, b->len, prot) == 0) return 0;
    int rc = -errno;
    ftrt_log_error("simulated device: mprotect(%p, %zu) failed: %s", (void *)b->base, b->len,
                   strerror(errno));
    return rc;
}

/* Finds and opens the allocation of a device range; logs and returns FTRT_EINVAL when there is
 * none. Caller holds sim_lock. */
static int open_range(const void *p, size_t bytes, const char *what, sim_block **out)
{
    sim_block *b = find_block(p, bytes);
    if (!b) {
        ftrt_log_error("simulated device: %s: [%p, +%zu) is not simulated device memory", what,
                       p, bytes);
        return FTRT_EINVAL;
    }
    *out = b;
    return set_prot(b, PROT_READ | PROT_WRITE);
}

/* One backend call on one device range [dev, dev + bytes): opens its allocation, runs the host
 * backend's operation, closes it again. */
enum { OP_TO_HOST, OP_FROM_HOST, OP_CRC };
static const char *const op_name[] = {"to_host", "from_host", "crc"};

static int sim_op(int op, void *dev, void *host, size_t bytes, uint32_t *crc)
{
    sim_block *b;
    pthread_mutex_lock(&sim_lock);
    int rc = open_range(dev, bytes, op_name[op], &b);
    if (rc == 0) {
        const ftrt__loc_ops *h = &ftrt__loc_host;
        rc = op == OP_TO_HOST     ? h->to_host(host, dev, bytes, crc)
             : op == OP_FROM_HOST ? h->from_host(dev, host, bytes, *crc)
                                  : h->crc(dev, bytes, crc);
        int rc2 = set_prot(b, PROT_NONE);
        if (!rc) rc = rc2;
    }
    pthread_mutex_unlock(&sim_lock);
    return rc;
}

static int sim_to_host(void *dst, const void *src, size_t bytes, uint32_t *crc)
{
    *crc = 0;
    return bytes ? sim_op(OP_TO_HOST, (void *)src, dst, bytes, crc) : 0;
}

static int sim_from_host(void *dst, const void *src, size_t bytes, uint32_t expect)
{
    if (!bytes) return expect == 0 ? 0 : FTRT_ECORRUPT;
    return sim_op(OP_FROM_HOST, dst, (void *)src, bytes, &expect);
}

static int sim_crc(const void *src, size_t bytes, uint32_t *crc)
{
    *crc = 0;
    return bytes ? sim_op(OP_CRC, (void *)src, NULL, bytes, crc) : 0;
}

static int sim_d2d(void *dst, const void *src, size_t bytes)
{
    if (!bytes) return 0;
    sim_block *bd, *bs = NULL;
    pthread_mutex_lock(&sim_lock);
    int rc = open_range(dst, bytes, "d2d (destination)", &bd);
    if (rc == 0) {
        rc = open_range(src, bytes, "d2d (source)", &bs);
        if (rc == 0) rc = ftrt__loc_host.d2d(dst, src, bytes);
        int rc2 = bs && bs != bd ? set_prot(bs, PROT_NONE) : 0;
        int rc3 = set_prot(bd, PROT_NONE);
        if (!rc) rc = rc2 ? rc2 : rc3;
    }
    pthread_mutex_unlock(&sim_lock);
    return rc;
}

static const ftrt__loc_ops sim_ops = {.name = "sim",
                                      .to_host = sim_to_host,
                                      .from_host = sim_from_host,
                                      .crc = sim_crc,
                                      .d2d = sim_d2d};

const ftrt__loc_ops *ftrt__loc_sim(void) { return &sim_ops; }

void *ftrt__sim_alloc(size_t bytes)
{
    long psz = sysconf(_SC_PAGESIZE);
    size_t page = psz > 0 ? (size_t)psz : 4096;
    if (bytes == 0 || bytes > SIZE_MAX - page) return NULL;
    size_t len = (bytes + page - 1) / page * page;
    pthread_mutex_lock(&sim_lock);
    void *p = NULL;
    if (nblocks < SIM_MAX) {
        p = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) p = NULL;
        else blocks[nblocks++] = (sim_block){.base = p, .bytes = bytes, .len = len};
    }
    pthread_mutex_unlock(&sim_lock);
    return p;
}

void ftrt__sim_free(void *p)
{
    if (!p) return;
    pthread_mutex_lock(&sim_lock);
    int i = 0;
    while (i < nblocks && blocks[i].base != p) i++;
    if (i == nblocks) {
        pthread_mutex_unlock(&sim_lock);
        ftrt_log_error("simulated device: ftrt__sim_free(%p): not an allocation", p);
        return;
    }
    munmap(blocks[i].base, blocks[i].len);
    blocks[i] = blocks[--nblocks];
    pthread_mutex_unlock(&sim_lock);
}

int ftrt__sim_write(void *dst_dev, const void *src_host, size_t bytes)
{
    uint32_t crc;
    (void)ftrt__loc_host.crc(src_host, bytes, &crc); /* never fails */
    return sim_from_host(dst_dev, src_host, bytes, crc);
}

int ftrt__sim_read(void *dst_host, const void *src_dev, size_t bytes)
{
    uint32_t crc;
    int rc = sim_to_host(dst_host, src_dev, bytes, &crc);
    if (rc == 0 && bytes && ftrt__crc32c(0, dst_host, bytes) != crc) rc = FTRT_ECORRUPT;
    return rc;
}

/* ---- the public face (ftrt_sim.h) ---------------------------------------------------------- */

FTRT_API int ftrt_sim_alloc(size_t bytes, void **dev)
{
    if (!dev || bytes == 0) return FTRT_EINVAL;
    *dev = ftrt__sim_alloc(bytes);
    return *dev ? 0 : -ENOMEM;
}

FTRT_API int ftrt_sim_free(void *dev)
{
    if (!dev) return 0;
    pthread_mutex_lock(&sim_lock);
    int found = 0;
    for (int i = 0; i < nblocks && !found; i++) found = blocks[i].base == dev;
    pthread_mutex_unlock(&sim_lock);
    if (!found) {
        ftrt_log_error("ftrt_sim_free(%p): not the start of a simulated device allocation", dev);
        return FTRT_EINVAL;
    }
    ftrt__sim_free(dev);
    return 0;
}

FTRT_API int ftrt_sim_write(void *dst_dev, const void *src_host, size_t bytes)
{
    if (!dst_dev || !src_host) return FTRT_EINVAL;
    return ftrt__sim_write(dst_dev, src_host, bytes);
}

FTRT_API int ftrt_sim_read(void *dst_host, const void *src_dev, size_t bytes)
{
    if (!dst_host || !src_dev) return FTRT_EINVAL;
    return ftrt__sim_read(dst_host, src_dev, bytes);
}
