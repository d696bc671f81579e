/*
 * join.c - the start of a process that joins a running job as a hot spare (tools/ftrt-run
 * --join; docs/join.md "How a join works"), in place of the world's bootstrap of context.c:
 * its MPI_COMM_WORLD is its own `mpirun`'s, so it learns where the job's coordinator is and the
 * job's secret from FTRT_JOIN_ADDRS, FTRT_JOIN_PORT and FTRT_JOIN_SECRET, opens an MPI port
 * first (fully initialised before it is offered), then asks on its own TCP connection (JOIN;
 * never through a host agent: it keeps that connection for the job) and, admitted, publishes
 * the port under the name the members look up when a recovery promotes it (comm/join.c). From
 * there on it is a hot spare like any other (context.c spare_wait).
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/fence.h"
#include "base/knobs.h"
#include "base/log.h"
#include "base/net.h"
#include "comm/join.h"
#include "runtime/internal.h"

int ftrt__join_mode(void)
{
    const char *a = getenv("FTRT_JOIN_ADDRS");
    return a && *a;
}

/* FTRT_JOIN_PORT and FTRT_JOIN_SECRET (16 hex digits) into *port and *secret. Returns 0 or
 * FTRT_ECONFIG (logged). */
static int join_env(int *port, uint64_t *secret)
{
    const char *p = getenv("FTRT_JOIN_PORT"), *s = getenv("FTRT_JOIN_SECRET");
    char *end = NULL;
    long v = p ? strtol(p, &end, 10) : -1;
    if (!p || !*p || *end || v < 1 || v > 65535) {
        ftrt_log_error("FTRT_JOIN_PORT: expected the coordinator's TCP port, got '%s'",
                       p ? p : "(unset)");
        return FTRT_ECONFIG;
    }
    *port = (int)v;
    if (ftrt__secret_parse(s, secret)) {
        ftrt_log_error("FTRT_JOIN_SECRET: expected the job's secret, 16 hex digits (ftrt-run "
                       "--join sets it)");
        return FTRT_ECONFIG;
    }
    return 0;
}

/* Reads exactly n bytes from fd within timeout_ms. Returns 0, -ETIMEDOUT, -ECONNRESET (EOF)
 * or -errno. (Exactly: what the coordinator sends after JOIN_OK stays for the agent thread.) */
static int read_exact(int fd, void *buf, size_t n, int timeout_ms)
{
    size_t got = 0;
    while (got < n) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        int pr = poll(&pf, 1, timeout_ms);
        if (pr == 0) return -ETIMEDOUT;
        if (pr < 0 && errno == EINTR) continue;
        if (pr < 0) return -errno;
        ssize_t r = recv(fd, (char *)buf + got, n - got, 0);
        if (r == 0) return -ECONNRESET;
        if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (r < 0) return -errno;
        got += (size_t)r;
    }
    return 0;
}

/* One JOIN on a new connection: 0 with *ok and *fd (the connection, kept), or the refusal's
 * code (FTRT_EJOIN, FTRT_ESTATE: try again; why[n] says why), -errno or FTRT_EPROTO. */
static int ask(ftrt_ctx *ctx, const char *addrs, int port, uint64_t secret, ftrt__join_ok *ok,
               int *fd, char *why, size_t n)
{
    char used[64];
    int s = ftrt__connect_any(addrs, port, ctx->cfg.init_timeout_ms, used, sizeof used);
    if (s < 0) {
        snprintf(why, n, "cannot reach the coordinator at any of [%s] port %d: %s", addrs, port,
                 strerror(-s));
        return s;
    }
    ftrt__join j = {.secret = secret, .pid = (int32_t)getpid(),
                    .version = ftrt__knobs.join_version ? ftrt__knobs.join_version
                                                        : FTRT__PROTO_JOIN};
    memcpy(j.host, ctx->host, sizeof j.host);
    ftrt__msghdr h;
    int rc = ftrt__msg_send(s, FTRT__MSG_JOIN, &j, sizeof j);
    if (!rc) rc = read_exact(s, &h, sizeof h, ctx->cfg.init_timeout_ms);
    if (rc == -ECONNRESET)
        snprintf(why, n, "the coordinator closed the connection without an answer (a job whose "
                         "ftrt takes no joins: another version?)");
    else if (rc)
        snprintf(why, n, "no answer from the coordinator: %s", strerror(-rc));
    if (!rc && ftrt__msg_check(&h)) {
        snprintf(why, n, "a malformed answer from the coordinator");
        rc = FTRT_EPROTO;
    }
    ftrt__join_refused no;
    if (!rc && h.type == FTRT__MSG_JOIN_OK && h.len == sizeof *ok) {
        rc = read_exact(s, ok, sizeof *ok, ctx->cfg.init_timeout_ms);
        if (!rc) {
            *fd = s;
            return 0;
        }
    } else if (!rc && h.type == FTRT__MSG_JOIN_REFUSED && h.len == sizeof no &&
               !(rc = read_exact(s, &no, sizeof no, ctx->cfg.init_timeout_ms))) {
        no.why[sizeof no.why - 1] = 0;
        snprintf(why, n, "%s", no.why);
        rc = no.code == FTRT_ESTATE ? FTRT_ESTATE : FTRT_EJOIN;
    } else if (!rc) {
        snprintf(why, n, "an unexpected answer from the coordinator (type %u)", h.type);
        rc = FTRT_EPROTO;
    }
    close(s);
    return rc;
}

/* JOIN until admitted or refused for good (FTRT_ESTATE: again every 0.5 s, up to
 * cfg.init_timeout_ms). Returns ask()'s result; the refusal logged. */
static int ask_until(ftrt_ctx *ctx, const char *addrs, int port, uint64_t secret,
                     ftrt__join_ok *ok, int *fd)
{
    double until = ftrt__now() + ctx->cfg.init_timeout_ms / 1000.0;
    char why[256] = "";
    int rc;
    while ((rc = ask(ctx, addrs, port, secret, ok, fd, why, sizeof why)) == FTRT_ESTATE &&
           ftrt__now() < until)
        usleep(500 * 1000);
    if (rc == FTRT_ESTATE) rc = FTRT_ETIMEDOUT;
    if (rc) ftrt_log_error("cannot join the job: %s", why);
    return rc;
}

/* Admitted: this process's place in the job from JOIN_OK, its configuration checked against
 * the job's world. Returns 0 or FTRT_ECONFIG. */
static int take_place(ftrt_ctx *ctx, const ftrt__join_ok *ok)
{
    ctx->joined = 1;
    ctx->world_rank = ok->slot;
    ctx->world_size = ok->world_size;
    ftrt__log_rank = ok->slot;
    ctx->local_tag = ok->tag;
    int rc = ftrt__config_check(&ctx->cfg, ctx->world_size, &ctx->nspares);
    ctx->ntrainers_initial = ctx->world_size - 1 - ctx->nspares;
    pthread_mutex_lock(&ctx->cp.lock);
    ctx->cp.welcome = ok->welcome;
    ctx->cp.welcomed = 1;
    pthread_mutex_unlock(&ctx->cp.lock);
    return rc;
}

int ftrt__joiner_start(ftrt_ctx *ctx, uint64_t *secret)
{
    const char *addrs = getenv("FTRT_JOIN_ADDRS");
    int port, rc = join_env(&port, secret);
    if (rc) return rc;
    ctx->cfg.host_agents = 0; /* its own connection (the coordinator's tables have no agent for
                                 it), never a host agent of the job's host */
    if (ftrt__parent_is("orted")) { /* (runtime/coordinator/join.c one_node: the job's side) */
        ftrt_log_error("cannot join the job: this process runs under an Open MPI daemon "
                       "(orted); an Open MPI 4.1 join needs the job and the joiner on the "
                       "job's mpirun's node (docs/join.md \"Limits\"): run the joiner's "
                       "mpirun there, without a hostfile");
        return FTRT_EJOIN;
    }
    if (MPI_Open_port(MPI_INFO_NULL, ctx->join_port) != MPI_SUCCESS) {
        ftrt_log_error("cannot join the job: MPI_Open_port failed");
        return FTRT_EMPI;
    }
    ftrt__join_ok ok;
    int fd = -1;
    if ((rc = ask_until(ctx, addrs, port, *secret, &ok, &fd)) != 0) return rc;
    if ((rc = take_place(ctx, &ok)) != 0) {
        close(fd);
        return rc;
    }
    char name[64];
    ftrt__join_service(name, sizeof name, ctx->local_tag, ctx->world_rank);
    if (MPI_Publish_name(name, MPI_INFO_NULL, ctx->join_port) != MPI_SUCCESS) {
        ftrt_log_error("cannot join the job: MPI_Publish_name(%s) failed (was this mpirun "
                       "started with the job's --ompi-server? ftrt-run --join does it)", name);
        close(fd); /* (the coordinator sees this spare leave) */
        return FTRT_EMPI;
    }
    snprintf(ctx->coord_addr, sizeof ctx->coord_addr, "%s", addrs);
    ctx->coord_port = port;
    ftrt_log_warn("joined the job as a hot spare (slot %d of a world of %d)", ctx->world_rank,
                  ctx->world_size);
    return ftrt__agent_run(ctx, fd, *secret);
}
