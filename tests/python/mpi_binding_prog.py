"""An MPI program that exercises the binding inside a real ftrt job (run by
test_mpi_torch.py::test_binding_in_a_job under mpirun: 1 coordinator + N trainers, no spare).

Every trainer checks the results of the collectives, the bucketer (also with gradients posted
from other threads), checkpoints and the PyTorch GradAverager (against a manual mean of every
rank's local gradient; with hooks on worker threads, against the same pass on the context's
thread) and prints "rank R: PASS" at the end; any failed check raises, and the process exits 1
(trainer_prog.py)."""
import ctypes
import sys

import numpy as np

from trainer_prog import ftrt, run_trainers

U = 2.0 ** -24  # unit roundoff of float32


def gamma(k):
    return k * U / (1 - k * U)


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def collectives(ctx):
    r, n = ctx.rank, ctx.size
    a = np.full(1000, r + 1, dtype=np.float32)
    ctx.allreduce(a)
    check(np.all(a == n * (n + 1) / 2), "allreduce SUM float32")
    b = np.array([r, -r, 10 * r], dtype=np.int64)
    ctx.allreduce(b, op=ftrt.MAX)
    check(list(b) == [n - 1, 0, 10 * (n - 1)], "allreduce MAX int64")
    b[0] = r
    ctx.allreduce(b.ctypes.data, count=1, dtype=ftrt.INT64, op=ftrt.MIN)
    check(list(b) == [0, 0, 10 * (n - 1)], "allreduce MIN by address and count")
    c = np.arange(5000, dtype=np.float64) * (r + 1)
    with ctx.allreduce_start(c) as req:
        req.wait()
        check(req.test() is True, "request final after wait")
    check(np.array_equal(c, np.arange(5000) * (n * (n + 1) / 2)), "allreduce_start float64")


def ordered(ctx):
    """ftrt_allreduce_ordered through Context.allreduce_ordered: 2 * size logical ranks, trainer
    r holding 2r and 2r + 1; the bytes must be the logical-order float32 sum computed here."""
    r, n, k = ctx.rank, ctx.size, 2001
    rng = [np.random.default_rng(1000 + lr) for lr in range(2 * n)]
    c = [(g.standard_normal(k) * np.exp2(g.integers(-20, 20, k))).astype(np.float32)
         for g in rng]
    ref = c[0].copy()
    for x in c[1:]:
        ref = (ref + x).astype(np.float32)
    out = np.zeros(k, dtype=np.float32)
    ctx.allreduce_ordered([c[2 * r], c[2 * r + 1]], out, [2 * r, 2 * r + 1], nlogical=2 * n)
    check(out.tobytes() == ref.tobytes(), "allreduce_ordered: the logical-order sum, bitwise")
    try:
        ctx.allreduce_ordered([c[2 * r]], out, [2 * r], nlogical=2 * n)  # half the ranks missing
        check(False, "allreduce_ordered: held lists short of nlogical refused")
    except ftrt.FtrtInvalid:
        pass


def rsag(ctx):
    """Reduce-scatter and all-gather, blocking and started, against values computed here."""
    r, n, k = ctx.rank, ctx.size, 1000
    # every trainer q sends q + 1 + j * 0.5 at element j: block r reduces to n(n+1)/2 + j n/2
    send = (np.arange(n * k, dtype=np.float32) * 0.5 + (r + 1)).astype(np.float32)
    recv = np.zeros(k, dtype=np.float32)
    ctx.reduce_scatter(send, recv)
    j = np.arange(r * k, (r + 1) * k, dtype=np.float64)
    check(np.array_equal(recv, (n * (n + 1) / 2 + j * 0.5 * n).astype(np.float32)),
          "reduce_scatter SUM float32")
    mx = np.zeros(k, dtype=np.float32)
    with ctx.reduce_scatter_start(send, mx, op=ftrt.MAX) as req:
        req.wait()
    check(np.array_equal(mx, (n + j * 0.5).astype(np.float32)), "reduce_scatter_start MAX")
    mine = np.arange(7, dtype=np.int64) + 100 * r
    full = np.full(7 * n, -1, dtype=np.int64)
    ctx.all_gather(mine, full)
    want = np.concatenate([np.arange(7, dtype=np.int64) + 100 * q for q in range(n)])
    check(np.array_equal(full, want), "all_gather int64")
    full[:] = -1
    with ctx.all_gather_start(mine, full) as req:
        req.wait()
    check(np.array_equal(full, want), "all_gather_start int64")
    inplace = np.zeros(7 * n, dtype=np.int64)
    inplace[7 * r:7 * (r + 1)] = mine
    ctx.all_gather(inplace[7 * r:7 * (r + 1)], inplace)  # MPI_IN_PLACE's layout: a view
    check(np.array_equal(inplace, want), "all_gather in place")
    for bad in (lambda: ctx.reduce_scatter(send[:n * k - 1], recv),
                lambda: ctx.all_gather(mine, full[:-1]),
                lambda: ctx.all_gather(mine.ctypes.data, full)):
        try:
            bad()
        except ValueError:
            continue
        raise AssertionError("a buffer too small (or an address without count) not refused")
    try:
        ctx.all_gather(full[1:8], full)  # overlapping, not at a whole block
    except ftrt.FtrtInvalid:
        pass
    else:
        raise AssertionError("all_gather: a misaligned overlap not refused")


def bucketer(ctx):
    r, n = ctx.rank, ctx.size
    cfg = ftrt.BucketConfig.defaults()
    cfg.first_bucket_bytes, cfg.bucket_bytes = 64, 256
    counts = [10, 40, 3, 100, 7]
    b = ctx.bucketer(counts, ftrt.FLOAT32, cfg)
    # DDP's assignment, walked from the last tensor: bucket 0 = [4, 3] (28 + 400 B >= 64 B),
    # bucket 1 = [2, 1, 0] (12 + 160 + 40 B, below 256 B, closed by the end).
    check(b.buckets == 2, f"2 buckets, got {b.buckets}")
    check([b.bucket_of(i) for i in range(5)] == [1, 1, 1, 0, 0], "bucket assignment")
    for step in range(3):
        ts = [np.full(c, (r + 1) * (step + 1) + i, dtype=np.float32) for i, c in enumerate(counts)]
        for i in reversed(range(len(ts))):
            b.ready(i, ts[i])
        b.wait_all()
        for i, t in enumerate(ts):
            total = np.float32(sum((k + 1) * (step + 1) + i for k in range(n)))
            want = np.float32(total * np.float32(1.0 / n))  # the sum times (float)(1/N)
            check(np.all(t == want), f"bucketer mean, step {step} tensor {i}: {t[0]} != {want}")
    bucketer_threads(b, r, counts)
    ts = [np.zeros(c, dtype=np.float32) for c in counts]
    b.ready(4, ts[4])
    try:
        b.ready(4, ts[4])
        check(False, "second ready of a tensor accepted")
    except ftrt.FtrtInvalid:
        pass
    try:
        b.wait_all()
        check(False, "wait_all with tensors not ready accepted")
    except ftrt.FtrtState:
        pass
    b.reset()
    b.free()
    b.free()  # idempotent


def bucketer_threads(b, r, counts):
    """Gradients posted by two other threads (ready_from_any_thread) while this thread drains:
    bit for bit the results of ready() on this thread over the same data."""
    import threading
    for step in range(3):
        ref = [np.full(c, (r + 1) * (step + 2) - 0.3 * i, dtype=np.float32)
               for i, c in enumerate(counts)]
        ts = [t.copy() for t in ref]
        for i in reversed(range(len(ref))):
            b.ready(i, ref[i])
        b.wait_all()
        errors = []

        def post(mine):
            try:
                for i in mine:
                    b.ready_from_any_thread(i, ts[i])
            except Exception as e:  # reported by the owning thread
                errors.append(e)
        th = [threading.Thread(target=post, args=(m,)) for m in ([4, 2, 0], [3, 1])]
        for t in th:
            t.start()
        marked = 0
        while any(t.is_alive() for t in th):
            marked += b.drain()
        for t in th:
            t.join()
        marked += b.drain()
        check(not errors and marked == len(counts), f"posts: {errors}, {marked} marked")
        b.wait_all()
        check(all(np.array_equal(t, u) for t, u in zip(ts, ref)),
              f"step {step}: posted gradients reduced differently")
    # a second post of a tensor in a step is refused to the thread that makes it
    ts = [np.zeros(c, dtype=np.float32) for c in counts]
    seen = []

    def twice():
        b.ready_from_any_thread(1, ts[1])
        try:
            b.ready_from_any_thread(1, ts[1])
        except ftrt.FtrtInvalid:
            seen.append("refused")
    t = threading.Thread(target=twice)
    t.start()
    t.join()
    check(seen == ["refused"], "a second post of tensor 1 accepted")
    b.reset()


def checkpoints(ctx):
    r = ctx.rank
    state = np.arange(4096, dtype=np.float32) + 1000 * r
    ctx.register("state", state, flags=ftrt.REGION_SHARDED)
    restored, step = ctx.restore()
    check((restored, step) == (False, 0), f"fresh start, got {(restored, step)}")
    check(ctx.checkpoint(7) in (0, ftrt.SKIPPED), "checkpoint")
    check(ctx.checkpoint_wait_commit(7, 30000) == 0, "checkpoint 7 committed")
    st = ctx.checkpoint_stats()
    check(st.committed >= 1 and st.last_committed_step == 7 and st.size == ctypes.sizeof(st),
          f"checkpoint stats {st.as_dict()}")
    try:
        ctx.register("state", state)
        check(False, "duplicate region name accepted")
    except ftrt.FtrtInvalid:
        pass
    ctx.unregister("state")


def grad_averager(ctx, sync_in_backward=False):
    """GradAverager's result against a manual mean of every rank's local gradient; with
    sync_in_backward, the mean must be in p.grad as soon as backward() returns."""
    import torch
    import ftrt.pytorch as ftp
    torch.set_num_threads(1)
    r, n = ctx.rank, ctx.size
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 32),
                                torch.nn.Tanh(), torch.nn.Linear(32, 4))
    unused = torch.nn.Parameter(torch.ones(3))  # gets no gradient: averaged as zeros
    params = list(model.parameters()) + [unused]
    avg = ftp.GradAverager(ctx, params, bucket_bytes=2048, first_bucket_bytes=512,
                           sync_in_backward=sync_in_backward)
    check(avg.buckets >= 3, f"several buckets ({avg.buckets})")
    check(avg.sync_in_backward == sync_in_backward, "autograd's queue_callback is available")
    used = [p for p in params if p is not unused]
    sizes = [p.numel() for p in params]
    total = sum(sizes)
    for step in range(4):
        g = torch.Generator().manual_seed(1000 * step + r)
        x, y = torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)
        for p in params:
            p.grad = None
        halves = [(x[:4], y[:4]), (x[4:], y[4:])] if step == 3 else [(x, y)]
        # the local gradient of every rank (autograd.grad: no hook runs, p.grad untouched),
        # gathered exactly (x + 0 + ... = x) below
        parts = [torch.autograd.grad((model(xb) - yb).square().mean(), used)
                 for xb, yb in halves]
        local = torch.cat([sum(gs[i] for gs in parts).reshape(-1) for i in range(len(used))]
                          + [torch.zeros(3)])
        if step == 3:  # gradient accumulation: two micro-batches, one averaging
            with avg.no_sync():
                (model(x[:4]) - y[:4]).square().mean().backward()
            check(not avg.synced, "no averaging inside no_sync()")
            (model(x[4:]) - y[4:]).square().mean().backward()
        else:
            (model(x) - y).square().mean().backward()
        check(avg.synced == sync_in_backward, "averaging ended by backward() iff sync_in_backward")
        if sync_in_backward:
            ended = torch.cat([p.grad.reshape(-1) for p in params]).clone()
        avg.wait()
        if sync_in_backward:
            check(torch.equal(ended, torch.cat([p.grad.reshape(-1) for p in params])),
                  "wait() after a synced backward changes nothing")
        got = torch.cat([p.grad.reshape(-1) for p in params]).numpy()
        gather = np.zeros((n, total), dtype=np.float32)
        gather[r] = local.numpy()
        ctx.allreduce(gather)
        exact = gather.astype(np.float64).mean(axis=0)
        # N - 1 float32 additions in any order, then the rounding of (float)(1/N) and of the
        # product: |result - mean| <= gamma(N + 1) * mean_i |g_i| (see docs/pytorch.md, "Parity with torch.distributed, and the tolerance")
        bound = gamma(n + 1) * np.abs(gather.astype(np.float64)).mean(axis=0) + 2.0 ** -149
        err = np.abs(got.astype(np.float64) - exact)
        worst = int(np.argmax(err / bound))
        check(np.all(err <= bound), f"step {step}: averaged gradient off the mean by "
                                    f"{err[worst]:.3g} > bound {bound[worst]:.3g}")
        check(np.all(got[-3:] == 0), "unused parameter averaged as zeros")
        check(np.any(gather[0] != gather[-1]), "ranks had different local gradients")
        # every trainer holds the same averaged gradient, bitwise
        same = np.zeros((n, total), dtype=np.float32)
        same[r] = got
        ctx.allreduce(same)
        check(all(np.array_equal(same[0], same[k]) for k in range(n)), "identical on all ranks")
    avg.close()


def grad_averager_threads(ctx):
    """GradAverager with hooks on threads other than the context's: a backward() on a worker
    thread, and two at once on disjoint parameters, while this thread drains; the averaged
    gradients bit for bit those of the same pass on this thread, and every hook of those passes
    handed its gradient over with ftrt_bucketer_ready_from_any_thread (counted here)."""
    import threading
    import torch
    import ftrt.pytorch as ftp
    torch.set_num_threads(1)
    r = ctx.rank
    torch.manual_seed(1)
    nets = [torch.nn.Sequential(torch.nn.Linear(16, h), torch.nn.Tanh(), torch.nn.Linear(h, 4))
            for h in (32, 24)]
    params = [p for net in nets for p in net.parameters()]
    import ftrt.pytorch_grad as ftg  # GradAverager's module: its `lib` is swapped below
    real, posts = ftg.lib(), []

    class Counting:  # the library, with the posting function counted
        def __getattr__(self, name):
            f = getattr(real, name)
            if name != "ftrt_bucketer_ready_from_any_thread":
                return f

            def post(*args):
                posts.append(threading.get_ident())
                return f(*args)
            return post
    saved, ftg.lib = ftg.lib, lambda: Counting()
    try:  # the hooks take their functions here
        avg = ftp.GradAverager(ctx, params, bucket_bytes=1024, first_bucket_bytes=256,
                               sync_in_backward=True)
    finally:
        ftg.lib = saved
    check(avg.buckets >= 3, f"several buckets ({avg.buckets})")

    def loss(k, x, y):
        return (nets[k](x) - y).square().mean()

    def on_threads(fns):
        go = threading.Barrier(len(fns))  # the backward passes start together

        def run(f):
            go.wait()
            f()
        th = [threading.Thread(target=run, args=(f,)) for f in fns]
        for t in th:
            t.start()
        while any(t.is_alive() for t in th):
            avg.bucketer.drain()  # start what the posts completed while they run
        for t in th:
            t.join()
        return {t.ident for t in th}
    for step in range(3):
        g = torch.Generator().manual_seed(500 * step + r)
        x, y = torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)
        for p in params:
            p.grad = None
        del posts[:]
        (loss(0, x, y) + loss(1, x, y)).backward()  # on this thread: ready()
        check(avg.synced and not posts, f"the owning thread's pass: synced {avg.synced}, "
                                        f"{len(posts)} posts")
        avg.wait()
        want = [p.grad.clone() for p in params]
        for workers in ([lambda: (loss(0, x, y) + loss(1, x, y)).backward()],
                        [lambda: loss(0, x, y).backward(), lambda: loss(1, x, y).backward()]):
            for p in params:
                p.grad = None
            del posts[:]
            idents = on_threads(workers)
            check(not avg.synced, "a worker's backward ended the averaging")
            avg.wait()
            check(len(posts) == len(params) and set(posts) == idents,
                  f"{len(posts)} posts from {len(set(posts))} threads, {len(params)} expected")
            check(all(torch.equal(p.grad, w) for p, w in zip(params, want)),
                  f"step {step}: gradients from {len(workers)} worker thread(s) averaged "
                  f"differently")
    avg.close()


def grad_averager_views(ctx):
    """gradient_as_bucket_view: two copies of a model averaged side by side, one with views
    and one without, give bitwise the same gradients through plain steps, a step after
    zero_grad(set_to_none=True) (autograd's new gradients are copied back into the views), no_sync()
    accumulation and an unused parameter; p.grad stays a view of the buckets, and the bucketers
    of the view run pack nothing while the other's pack every byte."""
    import torch
    import ftrt.pytorch as ftp
    torch.set_num_threads(1)
    r = ctx.rank
    models, avgs = [], []
    for views in (True, False):
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(),
                                torch.nn.Linear(32, 4))
        unused = torch.nn.Parameter(torch.ones(3))
        params = list(m.parameters()) + [unused]
        models.append((m, params))
        avgs.append(ftp.GradAverager(ctx, params, bucket_bytes=1024, first_bucket_bytes=256,
                                     sync_in_backward=views, gradient_as_bucket_view=views))
    check(avgs[0].buckets >= 2, f"several buckets ({avgs[0].buckets})")
    flats = {t.data_ptr(): t for t in avgs[0]._flats}

    def is_view(p):
        base = p.grad._base if p.grad is not None else None
        return base is not None and base.data_ptr() in flats

    check(all(is_view(p) for p in models[0][1]), "p.grad is a bucket view before any backward")
    for step in range(4):
        g = torch.Generator().manual_seed(77 * step + r)
        x, y = torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)
        for (m, params), avg in zip(models, avgs):
            for p in params:
                if step == 1:
                    p.grad = None  # zero_grad(set_to_none=True)
                elif p.grad is not None:
                    p.grad.zero_()  # zero_grad(set_to_none=False)
            if step == 2:
                with avg.no_sync():
                    (m(x[:4]) - y[:4]).square().mean().backward()
                (m(x[4:]) - y[4:]).square().mean().backward()
            else:
                (m(x) - y).square().mean().backward()
            avg.wait()
        a = torch.cat([p.grad.reshape(-1) for p in models[0][1]])
        b = torch.cat([p.grad.reshape(-1) for p in models[1][1]])
        check(torch.equal(a, b) and bool(a.abs().sum() > 0),
              f"step {step}: views give the copy path's gradients bitwise")
        check(all(is_view(p) for p in models[0][1]), f"step {step}: p.grad is still a view")
    check(avgs[0].packed_bytes == 0, f"views pack nothing ({avgs[0].packed_bytes} B)")
    total = sum(p.numel() * 4 for p in models[1][1])
    check(avgs[1].packed_bytes == 4 * total, f"without views every byte is packed "
                                              f"({avgs[1].packed_bytes} B of {4 * total})")
    for avg in avgs:
        avg.close()
    check(avgs[0].packed_bytes == 0, "packed_bytes is kept past close()")


def checks(ctx):
    check(0 <= ctx.rank < ctx.size and ctx.epoch == 0 and ctx.world_rank == ctx.rank + 1,
          "identity")
    check(ctx.check() is None, "check(): no failure, the step may go on")
    collectives(ctx)
    rsag(ctx)
    ordered(ctx)
    bucketer(ctx)
    checkpoints(ctx)
    if "--no-torch" not in sys.argv:
        grad_averager(ctx)
        grad_averager(ctx, sync_in_backward=True)
        grad_averager_threads(ctx)
        grad_averager_views(ctx)


def main():
    cfg = ftrt.Config.from_env()
    if len(sys.argv) > 1:
        cfg.set_str("ckpt_dir", sys.argv[1])
    return run_trainers(checks, cfg)


if __name__ == "__main__":
    sys.exit(main())
