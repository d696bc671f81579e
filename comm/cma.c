/*
 * cma.c - single-copy writes into another process of the same host for the state transfer
 * (cma.h has the contract): the identity that tells two processes share a kernel and a PID
 * namespace (and, with its start time, that a pid still names the same process), and the write
 * itself (process_vm_writev, resumed after a partial write); ftrt_alloc()'s memory files of
 * huge pages (include/ftrt.h), the table of its blocks, and a source's mapping of a receiver's
 * file.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "base/log.h"
#include "comm/cma.h"
#include "ftrt.h"

/* The first line of a small file, without its newline ("" when it cannot be read). */
static void first_line(const char *path, char *out, size_t cap)
{
    out[0] = '\0';
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    ssize_t n = read(fd, out, cap - 1);
    close(fd);
    if (n < 0) n = 0;
    out[n] = '\0';
    out[strcspn(out, "\n")] = '\0';
}

/* Field 22 of /proc/<pid>/stat, the start time (0 when it cannot be read). The command name
 * (field 2) may hold spaces and parentheses: the fields are counted after its last ')'. */
static uint64_t start_time(int64_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%lld/stat", (long long)pid);
    first_line(path, buf, sizeof buf);
    const char *p = strrchr(buf, ')');
    if (!p) return 0;
    int field = 2;
    for (; *p && field < 22; p++)
        if (*p == ' ') field++;
    return field == 22 ? strtoull(p, NULL, 10) : 0;
}

void ftrt__cma_self(ftrt__cma_ident *id)
{
    char host[64] = "", boot[48];
    struct stat ns = {0};
    memset(id, 0, sizeof *id);
    gethostname(host, sizeof host - 1);
    first_line("/proc/sys/kernel/random/boot_id", boot, sizeof boot);
    if (stat("/proc/self/ns/pid", &ns) != 0) memset(&ns, 0, sizeof ns);
    snprintf(id->where, sizeof id->where, "%s|%s|%llx:%llx", host, boot,
             (unsigned long long)ns.st_dev, (unsigned long long)ns.st_ino);
    id->pid = (int64_t)getpid();
    id->start = start_time(id->pid);
}

int ftrt__cma_alive(const ftrt__cma_ident *id)
{
    return id->pid > 0 && id->start != 0 && start_time(id->pid) == id->start;
}

int ftrt__cma_same_host(const ftrt__cma_ident *peer)
{
    ftrt__cma_ident me;
    ftrt__cma_self(&me);
    return memcmp(me.where, peer->where, sizeof me.where) == 0 && peer->pid > 0;
}

int ftrt__cma_write(int64_t pid, uint64_t dst, const void *src, size_t len)
{
    while (len > 0) {
        struct iovec l = {(void *)src, len}, r = {(void *)(uintptr_t)dst, len};
        ssize_t n = process_vm_writev((pid_t)pid, &l, 1, &r, 1, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return -errno;
        if (n == 0) return -EFAULT;
        src = (const char *)src + n;
        dst += (uint64_t)n;
        len -= (size_t)n;
    }
    return 0;
}

/* A block of ftrt_alloc(): len bytes at p; fd >= 0: a memory file of huge pages. */
typedef struct block {
    unsigned char *p;
    size_t len;
    int fd;
    struct block *next;
} block;

static pthread_mutex_t blocks_mu = PTHREAD_MUTEX_INITIALIZER;
static block *blocks;

/* The default huge page size (/proc/meminfo's Hugepagesize, the size MFD_HUGETLB uses); 0 when
 * it cannot be read. */
static size_t huge_page_size(void)
{
    char buf[4096];
    int fd = open("/proc/meminfo", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    buf[n > 0 ? n : 0] = '\0';
    const char *h = strstr(buf, "Hugepagesize:");
    unsigned long kib = h ? strtoul(h + 13, NULL, 10) : 0;
    return (size_t)kib << 10;
}

/* bytes rounded up to a multiple of unit (> 0); 0 when that overflows. */
static size_t round_up(size_t bytes, size_t unit)
{
    return bytes > SIZE_MAX - unit ? 0 : (bytes + unit - 1) / unit * unit;
}

/* b->p and b->len from a memory file of huge pages of at least `bytes`, when one can be had
 * (reserved now: MAP_SHARED of hugetlbfs reserves its pages at mmap). */
static void alloc_huge(block *b, size_t bytes)
{
    size_t hp = huge_page_size();
    size_t len = hp ? round_up(bytes, hp) : 0;
    if (len == 0) return;
    int fd = memfd_create("ftrt-state", MFD_CLOEXEC | MFD_HUGETLB);
    if (fd < 0) return;
    void *p = MAP_FAILED;
    if (ftruncate(fd, (off_t)len) == 0)
        p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        close(fd);
        return;
    }
    b->p = p, b->len = len, b->fd = fd;
}

int ftrt_alloc(size_t bytes, void **ptr)
{
    if (!ptr || bytes == 0) return FTRT_EINVAL;
    *ptr = NULL;
    block *b = calloc(1, sizeof *b);
    if (!b) return -ENOMEM;
    b->fd = -1;
    alloc_huge(b, bytes);
    if (!b->p) {
        size_t len = round_up(bytes, (size_t)sysconf(_SC_PAGESIZE));
        void *p = len ? mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                      : MAP_FAILED;
        if (p == MAP_FAILED) {
            free(b);
            return -ENOMEM;
        }
        b->p = p, b->len = len;
    }
    (void)madvise(b->p, b->len, MADV_DONTFORK);
    ftrt_log_debug("ftrt_alloc: %zu bytes at %p: %s", bytes, (void *)b->p,
                   b->fd >= 0 ? "a memory file of huge pages" : "anonymous memory (no huge pages)");
    pthread_mutex_lock(&blocks_mu);
    b->next = blocks;
    blocks = b;
    pthread_mutex_unlock(&blocks_mu);
    *ptr = b->p;
    return 0;
}

int ftrt_free(void *ptr)
{
    if (!ptr) return 0;
    pthread_mutex_lock(&blocks_mu);
    block **pp = &blocks;
    while (*pp && (*pp)->p != ptr) pp = &(*pp)->next;
    block *b = *pp;
    if (b) *pp = b->next;
    pthread_mutex_unlock(&blocks_mu);
    if (!b) return FTRT_EINVAL;
    munmap(b->p, b->len);
    if (b->fd >= 0) close(b->fd);
    free(b);
    return 0;
}

ftrt__cma_file ftrt__cma_file_of(const void *p, size_t len)
{
    ftrt__cma_file f = {-1, 0};
    const unsigned char *q = p;
    if (!p || len == 0) return f;
    pthread_mutex_lock(&blocks_mu);
    for (const block *b = blocks; b; b = b->next)
        if (b->fd >= 0 && q >= b->p && (size_t)(q - b->p) <= b->len &&
            len <= b->len - (size_t)(q - b->p)) {
            f.fd = b->fd;
            f.off = (uint64_t)(q - b->p);
            break;
        }
    pthread_mutex_unlock(&blocks_mu);
    return f;
}

unsigned char *ftrt__cma_map(const ftrt__cma_ident *id, const ftrt__cma_file *f, size_t len,
                             void **base, size_t *maplen)
{
    *base = NULL, *maplen = 0;
    if (f->fd < 0 || len == 0) return NULL;
    char path[64];
    snprintf(path, sizeof path, "/proc/%lld/fd/%lld", (long long)id->pid, (long long)f->fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) return NULL;
    struct statfs sf;
    struct stat st;
    void *m = MAP_FAILED;
    uint64_t a = 0;
    size_t ml = 0;
    if (fstatfs(fd, &sf) == 0 && sf.f_type == HUGETLBFS_MAGIC && sf.f_bsize > 0 &&
        fstat(fd, &st) == 0 && f->off <= (uint64_t)st.st_size &&
        len <= (uint64_t)st.st_size - f->off) {
        uint64_t hp = (uint64_t)sf.f_bsize; /* hugetlbfs: the huge page size */
        a = f->off / hp * hp;
        ml = (size_t)((f->off - a + len + hp - 1) / hp * hp);
        m = mmap(NULL, ml, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)a);
    }
    close(fd);
    if (m == MAP_FAILED) return NULL;
    *base = m, *maplen = ml;
    return (unsigned char *)m + (f->off - a);
}

void ftrt__cma_unmap(void *base, size_t maplen)
{
    if (base) munmap(base, maplen);
}
