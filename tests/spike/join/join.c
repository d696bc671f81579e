/* Join spike (issue 35): can a process started after the job began become a member of the
 * training communicator through Open MPI's dynamic processes?  One program, several roles:
 *
 *   join accept  [--kill R] [--over live|world] [--port-file F] [--name N] [--kill-merged M]
 *       job A: every rank waits; rank R (if given) SIGKILLs itself first; the others build the
 *       "accept communicator" (the live ranks through MPI_Comm_create_group, as ftrt's recovery
 *       does; or MPI_COMM_WORLD), its rank 0 opens a port and publishes it (MPI_Publish_name,
 *       and into the port file when given), then all call MPI_Comm_accept over it, merge
 *       (MPI_Intercomm_merge, A low), allreduce over the merged communicator and check the sums,
 *       then rebuild a communicator from the merged one's group the way ftrt's recovery would
 *       (MPI_Comm_create_group over the merged communicator; with ULFM MPI_Comm_create_from_group)
 *       and allreduce over that too.
 *   join connect [--port-file F] [--name N]
 *       job B (1 process, started later): MPI_Lookup_name (or the port file), MPI_Comm_connect
 *       over MPI_COMM_SELF, merge (high), the same allreduces.
 *   join spawn   [--kill R] [--over live|world]
 *       the running job spawns 1 new process (this program, role "child") with MPI_Comm_spawn
 *       over the accept communicator, merges, allreduces.
 *   --kill-merged M (accept, connect, spawn): after the first allreduce over the merged
 *       communicator, its rank M SIGKILLs itself and the others rebuild from the merged group
 *       without it: a recovery after the join, built from the merged communicator.
 *   join jaccept [--port-file F] [--via all|one] [--die-before-accept 1]
 *       the joiner the other way round (1 process): opens a port, writes it into F (standing in
 *       for ftrt's control plane, which would carry it to the job), then MPI_Comm_accept over
 *       MPI_COMM_SELF; --die-before-accept 1: it SIGKILLs itself after writing F instead (a
 *       joiner lost between "ready" and its accept). --via one: the job's rank 0 alone connected
 *       to it; the joiner then meets the job's whole communicator in MPI_Intercomm_create,
 *       with the 2-process merged communicator as the peer communicator.
 *   join jconnect [--kill R] [--over live|world] [--port-file F] [--via all|one]
 *       job A the other way round: every rank of its (live) communicator MPI_Comm_connect's to
 *       the port read from F (--via all), or (--via one) rank 0 alone connects over
 *       MPI_COMM_SELF, tells the others with an MPI_Bcast over their communicator whether it
 *       got through, and only then do they all enter MPI_Intercomm_create with the joiner:
 *       a joiner lost before its accept then blocks rank 0 alone, in a wait that
 *       pmix_base_exchange_timeout may bound.
 *   --spare S (jaccept: 1; jconnect: S = a world rank of job A): job A's rank S stays out of
 *       the join (an idle spare of MPI_COMM_WORLD); after e7's join the merged communicator
 *       (A's others and the joiner) and rank S meet in MPI_Intercomm_create with
 *       MPI_COMM_WORLD as the peer communicator of the two leaders (A's rank 0 and S), merge,
 *       and allreduce: a later epoch holding a joined member and a promoted world spare.
 *   join block   [--interrupt none|close|selfconnect] [--wait S]
 *       1 process calls MPI_Comm_accept on an opened port that nobody connects to; with
 *       --interrupt a second thread tries to end the wait after 2 s (MPI_Close_port on the port,
 *       or MPI_Comm_connect to the port from the same process).  Prints whether and when the
 *       accept returned; the caller runs it under `timeout`.
 *
 * Every line the checker (run.sh) reads starts with "SPIKE ".  Timings are CLOCK_MONOTONIC.
 */
#define _GNU_SOURCE
#include <mpi.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <mpi-ext.h> /* Open MPI's extensions: ULFM's ftmpi in Open MPI 5 */
#if defined(OMPI_HAVE_MPI_EXT_FTMPI) && OMPI_HAVE_MPI_EXT_FTMPI
#define HAVE_ULFM 1
#else
#define HAVE_ULFM 0
#endif

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static const char *errstr(int rc)
{
    static char buf[MPI_MAX_ERROR_STRING + 16];
    int len = 0;
    if (MPI_Error_string(rc, buf, &len) != MPI_SUCCESS)
        snprintf(buf, sizeof buf, "error %d", rc);
    return buf;
}

static const char *tag = "?";
static int g_kill_merged = -1; /* --kill-merged R: merged rank R SIGKILLs itself after the first
                                  allreduce; the rebuild then leaves it out (a later recovery) */
static int wrank = -1;

#define SAY(...)                                                                                   \
    do {                                                                                           \
        printf("SPIKE %s w%d: ", tag, wrank);                                                      \
        printf(__VA_ARGS__);                                                                       \
        printf("\n");                                                                              \
        fflush(stdout);                                                                            \
    } while (0)

#define CHECK(call)                                                                                \
    do {                                                                                           \
        double t0_ = now();                                                                        \
        int rc_ = (call);                                                                          \
        if (rc_ != MPI_SUCCESS) {                                                                  \
            SAY("FAIL %s after %.3f s: %s", #call, now() - t0_, errstr(rc_));                      \
            _exit(3);                                                                              \
        }                                                                                          \
    } while (0)

/* An allreduce of (rank in c, 1) over c into s, its time into *t (may be NULL): 1 when the
 * sums are those of c's size (every member took part, each with its own rank), else 0. */
static int rank_sums(MPI_Comm c, long s[2], double *t)
{
    int r, n;
    MPI_Comm_rank(c, &r);
    MPI_Comm_size(c, &n);
    long v[2] = {r, 1};
    s[0] = s[1] = 0;
    double t0 = now();
    CHECK(MPI_Allreduce(v, s, 2, MPI_LONG, MPI_SUM, c));
    if (t)
        *t = now() - t0;
    return s[0] == (long)n * (n - 1) / 2 && s[1] == n;
}

/* Merge, allreduce over the merged communicator, then build a communicator from the merged
 * one's whole group as ftrt's recovery builds an epoch's from MPI_COMM_WORLD's group. */
static int after_connect(MPI_Comm inter, int high, double t_connect)
{
    double t0 = now();
    MPI_Comm merged;
    CHECK(MPI_Intercomm_merge(inter, high, &merged));
    double t_merge = now() - t0;
    MPI_Comm_set_errhandler(merged, MPI_ERRORS_RETURN);
    int r, n, rsz;
    MPI_Comm_rank(merged, &r);
    MPI_Comm_size(merged, &n);
    MPI_Comm_remote_size(inter, &rsz);

    long s[2];
    double t_ar;
    int ok = rank_sums(merged, s, &t_ar);
    SAY("merged rank %d of %d (remote size %d): connect/accept %.3f s, merge %.3f s, "
        "first allreduce %.6f s: sums %ld %ld %s",
        r, n, rsz, t_connect, t_merge, t_ar, s[0], s[1], ok ? "correct" : "WRONG");

    /* ftrt's rebuild, from the merged communicator instead of MPI_COMM_WORLD */
    int n0 = n;
    if (g_kill_merged >= 0) {
        if (r == g_kill_merged) {
            SAY("merged rank %d: SIGKILL myself (pid %d) after the first allreduce", r, (int)getpid());
            raise(SIGKILL);
        }
        sleep(1);
        n = n0 - 1;
    }
    MPI_Group g, g2;
    MPI_Comm_group(merged, &g);
    int *ranks = malloc(sizeof(int) * n0);
    int m = 0;
    for (int i = n0 - 1; i >= 0; i--) /* reversed: the joiner first, as a new logical order */
        if (i != g_kill_merged)
            ranks[m++] = i;
    MPI_Group_incl(g, m, ranks, &g2);
    int expect_r2 = -1;
    for (int i = 0; i < m; i++)
        if (ranks[i] == r)
            expect_r2 = i;
    free(ranks);
    MPI_Comm rebuilt;
    t0 = now();
#if HAVE_ULFM
    CHECK(MPI_Comm_create_from_group(g2, "ftrt.spike.join", MPI_INFO_NULL, MPI_ERRORS_RETURN,
                                     &rebuilt));
    const char *how = "MPI_Comm_create_from_group";
#else
    CHECK(MPI_Comm_create_group(merged, g2, 7, &rebuilt));
    const char *how = "MPI_Comm_create_group(merged)";
#endif
    double t_rb = now() - t0;
    MPI_Comm_set_errhandler(rebuilt, MPI_ERRORS_RETURN);
    int r2;
    MPI_Comm_rank(rebuilt, &r2);
    int ok2 = rank_sums(rebuilt, s, NULL) && r2 == expect_r2;
    SAY("rebuilt from the merged group%s with %s in %.3f s: rank %d of %d, allreduce sums %ld %ld %s",
        g_kill_merged >= 0 ? " less the killed rank" : "", how, t_rb, r2, n, s[0], s[1],
        ok2 ? "correct" : "WRONG");
    if (ok && ok2)
        SAY("RESULT ok");
    MPI_Group_free(&g);
    MPI_Group_free(&g2);
    /* everyone has printed before anyone leaves; then the clean way out */
    MPI_Barrier(rebuilt);
    MPI_Comm_free(&rebuilt);
    if (g_kill_merged >= 0)
        return ok && ok2 ? 0 : 1; /* a dead member: no disconnect (it would wait for it) */
    MPI_Comm_free(&merged);
    t0 = now();
    int drc = MPI_Comm_disconnect(&inter);
    SAY("MPI_Comm_disconnect %.3f s: %s", now() - t0, drc == MPI_SUCCESS ? "ok" : errstr(drc));
    return ok && ok2 ? 0 : 1;
}

/* The live ranks' communicator (every rank but `killed`), built the way ftrt builds an epoch's. */
static MPI_Comm live_comm(int killed, int size)
{
    if (killed < 0)
        return MPI_COMM_WORLD;
    MPI_Group wg, lg;
    MPI_Comm_group(MPI_COMM_WORLD, &wg);
    int ex[1] = {killed};
    MPI_Group_excl(wg, 1, ex, &lg);
    MPI_Comm c;
    double t0 = now();
#if HAVE_ULFM
    CHECK(MPI_Comm_create_from_group(lg, "ftrt.spike.live", MPI_INFO_NULL, MPI_ERRORS_RETURN, &c));
#else
    CHECK(MPI_Comm_create_group(MPI_COMM_WORLD, lg, 5, &c));
#endif
    SAY("live communicator (%d of %d ranks) built in %.3f s", size - 1, size, now() - t0);
    MPI_Group_free(&wg);
    MPI_Group_free(&lg);
    MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
    return c;
}

static int g_kill = -1;
static const char *g_over = "live";
static const char *g_port_file = NULL;
static const char *g_name = "ftrt-join-spike";
static const char *g_interrupt = "none";
static double g_wait = 2.0;
static const char *g_via = "all";
static int g_spare = -1;

/* An allreduce of (rank, 1) over c, checked; prints what and RESULT ok when correct. */
static int final_check(MPI_Comm c, const char *what)
{
    int r, n;
    MPI_Comm_rank(c, &r);
    MPI_Comm_size(c, &n);
    long s[2];
    int ok = rank_sums(c, s, NULL);
    SAY("%s: rank %d of %d, allreduce sums %ld %ld %s", what, r, n, s[0], s[1],
        ok ? "correct" : "WRONG");
    if (ok)
        SAY("RESULT ok");
    MPI_Barrier(c);
    return ok ? 0 : 1;
}

/* --spare: the communicator `low` (A's members and the joiner) and A's idle world rank
 * g_spare meet in MPI_Intercomm_create, peer MPI_COMM_WORLD (significant at the leaders
 * only), and merge (the spare high). leader_world: A's rank 0 as a world rank. */
static int with_spare(MPI_Comm low, int is_spare)
{
    MPI_Comm inter, all;
    double t0 = now();
    if (is_spare)
        CHECK(MPI_Intercomm_create(MPI_COMM_SELF, 0, MPI_COMM_WORLD, 0, 4343, &inter));
    else
        CHECK(MPI_Intercomm_create(low, 0, MPI_COMM_WORLD, g_spare, 4343, &inter));
    CHECK(MPI_Intercomm_merge(inter, is_spare, &all));
    char what[160];
    snprintf(what, sizeof what, "joined member + world spare: MPI_Intercomm_create (peer "
             "MPI_COMM_WORLD) and merge %.3f s", now() - t0);
    return final_check(all, what);
}
static int g_die_before = 0;

/* Writes the port into g_port_file (write, then rename: a reader never sees half of it). */
static void write_port_file(const char *port)
{
    if (!g_port_file)
        return;
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", g_port_file);
    FILE *f = fopen(tmp, "w");
    if (f) {
        fprintf(f, "%s\n", port);
        fclose(f);
        rename(tmp, g_port_file);
    }
}

/* Reads the port from g_port_file, waiting up to 60 s for it; "" if it never came. */
static void read_port_file(char *port)
{
    double t0 = now();
    port[0] = 0;
    for (int i = 0; i < 600 && port[0] == 0; i++) {
        FILE *f = fopen(g_port_file, "r");
        if (f) {
            if (!fgets(port, MPI_MAX_PORT_NAME, f))
                port[0] = 0;
            fclose(f);
            port[strcspn(port, "\n")] = 0;
        }
        if (!port[0])
            usleep(100000);
    }
    SAY("port from file after %.3f s: %s", now() - t0, port);
}

static MPI_Comm prepare_job(int *size)
{
    MPI_Comm_size(MPI_COMM_WORLD, size);
    MPI_Barrier(MPI_COMM_WORLD);
    if (g_kill >= 0) {
        if (wrank == g_kill) {
            SAY("SIGKILL myself (pid %d)", (int)getpid());
            raise(SIGKILL);
        }
        sleep(1); /* let the runtime see the death */
    }
    if (strcmp(g_over, "world") == 0) {
        SAY("using MPI_COMM_WORLD (%d ranks, %s dead)", *size, g_kill >= 0 ? "one" : "none");
        return MPI_COMM_WORLD;
    }
    return live_comm(g_kill, *size);
}

static int role_accept(void)
{
    int size;
    MPI_Comm c = prepare_job(&size);
    int r;
    MPI_Comm_rank(c, &r);
    char port[MPI_MAX_PORT_NAME] = "";
    if (r == 0) {
        CHECK(MPI_Open_port(MPI_INFO_NULL, port));
        int prc = MPI_Publish_name(g_name, MPI_INFO_NULL, port);
        SAY("port opened: %s; MPI_Publish_name(%s): %s", port, g_name,
            prc == MPI_SUCCESS ? "ok" : errstr(prc));
        write_port_file(port);
    }
    SAY("waiting in MPI_Comm_accept");
    double t0 = now();
    MPI_Comm inter;
    CHECK(MPI_Comm_accept(port, MPI_INFO_NULL, 0, c, &inter));
    double t_acc = now() - t0;
    int rc = after_connect(inter, 0, t_acc);
    if (r == 0) {
        MPI_Unpublish_name(g_name, MPI_INFO_NULL, port);
        MPI_Close_port(port);
    }
    return rc;
}

static int role_connect(void)
{
    char port[MPI_MAX_PORT_NAME] = "";
    double t0 = now();
    if (g_port_file) {
        read_port_file(port);
    } else {
        int rc = MPI_ERR_NAME;
        for (int i = 0; i < 200; i++) { /* job A may not have published yet */
            rc = MPI_Lookup_name(g_name, MPI_INFO_NULL, port);
            if (rc == MPI_SUCCESS)
                break;
            usleep(100000);
        }
        if (rc != MPI_SUCCESS) {
            SAY("FAIL MPI_Lookup_name(%s) after %.3f s: %s", g_name, now() - t0, errstr(rc));
            return 3;
        }
        SAY("MPI_Lookup_name after %.3f s: %s", now() - t0, port);
    }
    MPI_Comm inter;
    t0 = now();
    CHECK(MPI_Comm_connect(port, MPI_INFO_NULL, 0, MPI_COMM_SELF, &inter));
    return after_connect(inter, 1, now() - t0);
}

/* The joiner accepting over MPI_COMM_SELF (the job connects to it); --via one: then the
 * job's whole communicator through MPI_Intercomm_create, the peer communicator being the one
 * merged with the job's rank 0. */
static int role_jaccept(void)
{
    char port[MPI_MAX_PORT_NAME];
    CHECK(MPI_Open_port(MPI_INFO_NULL, port));
    write_port_file(port);
    SAY("joiner: port written (%s); accepting over MPI_COMM_SELF (via %s)", port, g_via);
    if (g_die_before) {
        SAY("joiner: SIGKILL myself (pid %d) before MPI_Comm_accept", (int)getpid());
        raise(SIGKILL);
    }
    double t0 = now();
    MPI_Comm inter;
    CHECK(MPI_Comm_accept(port, MPI_INFO_NULL, 0, MPI_COMM_SELF, &inter));
    double t_acc = now() - t0;
    if (strcmp(g_via, "one") != 0)
        return after_connect(inter, 1, t_acc);
    MPI_Comm m0, inter2;
    CHECK(MPI_Intercomm_merge(inter, 1, &m0)); /* {the job's rank 0, the joiner} */
    t0 = now();
    CHECK(MPI_Intercomm_create(MPI_COMM_SELF, 0, m0, 0, 4242, &inter2));
    SAY("joiner: MPI_Intercomm_create with the job's communicator %.3f s", now() - t0);
    if (g_spare >= 0) { /* then the job's idle world spare too */
        MPI_Comm m3;
        CHECK(MPI_Intercomm_merge(inter2, 1, &m3));
        return with_spare(m3, 0);
    }
    int rc = after_connect(inter2, 1, t_acc + (now() - t0));
    MPI_Comm_free(&m0);
    MPI_Comm_disconnect(&inter);
    return rc;
}

/* The job connecting to the joiner's port: every rank (--via all), or rank 0 alone over
 * MPI_COMM_SELF and then every rank through MPI_Intercomm_create (--via one). */
static int role_jconnect(void)
{
    int size;
    MPI_Comm c;
    if (g_spare >= 0) { /* rank g_spare idles; the others join */
        MPI_Comm_size(MPI_COMM_WORLD, &size);
        MPI_Barrier(MPI_COMM_WORLD);
        if (wrank == g_spare)
            return with_spare(MPI_COMM_NULL, 1);
        c = live_comm(g_spare, size);
    } else {
        c = prepare_job(&size);
    }
    int r;
    MPI_Comm_rank(c, &r);
    char port[MPI_MAX_PORT_NAME] = "";
    if (r == 0)
        read_port_file(port);
    double t0 = now();
    MPI_Comm inter;
    if (strcmp(g_via, "one") != 0) {
        SAY("connecting over the job's communicator");
        CHECK(MPI_Comm_connect(port, MPI_INFO_NULL, 0, c, &inter));
        return after_connect(inter, 0, now() - t0);
    }
    MPI_Comm inter0 = MPI_COMM_NULL, m0 = MPI_COMM_NULL;
    int ok = 1;
    if (r == 0) {
        int rc = MPI_Comm_connect(port, MPI_INFO_NULL, 0, MPI_COMM_SELF, &inter0);
        SAY("rank 0: MPI_Comm_connect over MPI_COMM_SELF %.3f s: %s", now() - t0,
            rc == MPI_SUCCESS ? "ok" : errstr(rc));
        ok = rc == MPI_SUCCESS;
        if (ok)
            CHECK(MPI_Intercomm_merge(inter0, 0, &m0));
    }
    CHECK(MPI_Bcast(&ok, 1, MPI_INT, 0, c)); /* (ftrt: the coordinator's word) */
    if (!ok) { /* the job goes on without the joiner: its communicator still works? */
        long sum[2];
        int good = rank_sums(c, sum, NULL);
        SAY("the connect failed at rank 0; nobody else entered a join call; an allreduce over "
            "the job's communicator after it: %s", good ? "correct: RESULT escaped" : "WRONG");
        return good ? 0 : 1;
    }
    double t1 = now();
    CHECK(MPI_Intercomm_create(c, 0, r == 0 ? m0 : c, 1, 4242, &inter));
    SAY("MPI_Intercomm_create with the joiner %.3f s", now() - t1);
    if (g_spare >= 0) {
        MPI_Comm m3;
        CHECK(MPI_Intercomm_merge(inter, 0, &m3));
        return with_spare(m3, 0);
    }
    int rc = after_connect(inter, 0, now() - t0);
    if (r == 0) {
        MPI_Comm_free(&m0);
        MPI_Comm_disconnect(&inter0);
    }
    return rc;
}

static const char *g_argv0;

static int role_spawn(void)
{
    int size;
    MPI_Comm c = prepare_job(&size);
    char kbuf[16], kmbuf[16];
    snprintf(kbuf, sizeof kbuf, "%d", g_kill);
    snprintf(kmbuf, sizeof kmbuf, "%d", g_kill_merged);
    char *args[] = {"child", "--kill", kbuf, "--kill-merged", kmbuf, NULL}; /* -1: none */
    MPI_Comm inter;
    int errcode = 0;
    double t0 = now();
    SAY("calling MPI_Comm_spawn");
    CHECK(MPI_Comm_spawn((char *)g_argv0, args, 1, MPI_INFO_NULL, 0, c, &inter, &errcode));
    return after_connect(inter, 0, now() - t0);
}

static int role_child(void)
{
    MPI_Comm parent;
    MPI_Comm_get_parent(&parent);
    if (parent == MPI_COMM_NULL) {
        SAY("FAIL no parent");
        return 3;
    }
    MPI_Comm_set_errhandler(parent, MPI_ERRORS_RETURN);
    return after_connect(parent, 1, 0.0);
}

static char g_block_port[MPI_MAX_PORT_NAME];

static void *interrupter(void *arg)
{
    (void)arg;
    usleep((useconds_t)(g_wait * 1e6));
    if (strcmp(g_interrupt, "close") == 0) {
        SAY("interrupter: MPI_Close_port from a second thread");
        int rc = MPI_Close_port(g_block_port);
        SAY("interrupter: MPI_Close_port returned: %s", rc == MPI_SUCCESS ? "ok" : errstr(rc));
    } else if (strcmp(g_interrupt, "selfconnect") == 0) {
        SAY("interrupter: MPI_Comm_connect to the same port from a second thread");
        MPI_Comm inter;
        double t0 = now();
        int rc = MPI_Comm_connect(g_block_port, MPI_INFO_NULL, 0, MPI_COMM_SELF, &inter);
        SAY("interrupter: MPI_Comm_connect returned after %.3f s: %s", now() - t0,
            rc == MPI_SUCCESS ? "ok" : errstr(rc));
    }
    return NULL;
}

static int role_block(void)
{
    CHECK(MPI_Open_port(MPI_INFO_NULL, g_block_port));
    pthread_t th;
    int have_thread = strcmp(g_interrupt, "none") != 0;
    if (have_thread)
        pthread_create(&th, NULL, interrupter, NULL);
    SAY("MPI_Comm_accept on %s, nobody connects (interrupt: %s)", g_block_port, g_interrupt);
    double t0 = now();
    MPI_Comm inter;
    int rc = MPI_Comm_accept(g_block_port, MPI_INFO_NULL, 0, MPI_COMM_SELF, &inter);
    SAY("MPI_Comm_accept returned after %.3f s: %s", now() - t0,
        rc == MPI_SUCCESS ? "ok" : errstr(rc));
    if (have_thread)
        pthread_join(th, NULL);
    return 0;
}

int main(int argc, char **argv)
{
    g_argv0 = argv[0];
    const char *role = argc > 1 ? argv[1] : "";
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--kill"))
            g_kill = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--kill-merged"))
            g_kill_merged = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--over"))
            g_over = argv[i + 1];
        else if (!strcmp(argv[i], "--port-file"))
            g_port_file = argv[i + 1];
        else if (!strcmp(argv[i], "--name"))
            g_name = argv[i + 1];
        else if (!strcmp(argv[i], "--interrupt"))
            g_interrupt = argv[i + 1];
        else if (!strcmp(argv[i], "--wait"))
            g_wait = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--spare"))
            g_spare = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--via"))
            g_via = argv[i + 1];
        else if (!strcmp(argv[i], "--die-before-accept"))
            g_die_before = atoi(argv[i + 1]);
    }
    tag = role;
    int provided;
    double t0 = now();
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
    if (wrank == 0 || !strcmp(role, "child") || !strcmp(role, "connect") ||
        !strcmp(role, "jaccept"))
        SAY("MPI_Init_thread %.3f s, thread level %d (MULTIPLE=%d), ULFM %d (OMPI_MCA_mpi_ft_enable=%s), "
            "pid %d",
            now() - t0, provided, MPI_THREAD_MULTIPLE, HAVE_ULFM,
            getenv("OMPI_MCA_mpi_ft_enable") ? getenv("OMPI_MCA_mpi_ft_enable") : "unset", (int)getpid());
    int rc;
    if (!strcmp(role, "accept"))
        rc = role_accept();
    else if (!strcmp(role, "connect"))
        rc = role_connect();
    else if (!strcmp(role, "spawn"))
        rc = role_spawn();
    else if (!strcmp(role, "child"))
        rc = role_child();
    else if (!strcmp(role, "block"))
        rc = role_block();
    else if (!strcmp(role, "jaccept"))
        rc = role_jaccept();
    else if (!strcmp(role, "jconnect"))
        rc = role_jconnect();
    else {
        fprintf(stderr, "usage: join accept|connect|spawn|block|jaccept|jconnect [options] (see "
                        "the source)\n");
        rc = 2;
    }
    /* With a dead rank (or a blocked accept) MPI_Finalize may wait on it: leave without it then;
     * the spike only needs the lines above. */
    if (g_kill < 0 && g_kill_merged < 0 && strcmp(role, "block") != 0) {
        double tf = now();
        MPI_Finalize();
        SAY("MPI_Finalize %.3f s", now() - tf);
    }
    SAY("exit %d", rc);
    fflush(stdout);
    _exit(rc);
}
