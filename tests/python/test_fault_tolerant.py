"""Unit tests of ftrt.pytorch's high-level API (FaultTolerant, PyState, step_seed) without an
MPI job: a fake Context stands in for ftrt (it snapshots the registered tensors at each step and
writes a snapshot back into them, in place, on recovery, as ftrt_recover() does) and a fake
GradAverager for the bucketer (one trainer: the mean is the local gradient; it can raise
FtrtRecover at a chosen step). The real runtime is exercised by test_mpi_lm.py and
test_mpi_torch.py."""
import collections
import threading
import types

import pytest

from conftest import needs_torch

pytestmark = needs_torch

torch = pytest.importorskip("torch")
import ftrt  # noqa: E402
import ftrt.pytorch as ftp  # noqa: E402
from ftrt import _lib  # noqa: E402

STEPS = 12


class FakeCtx:
    """Trainer 0 of 1. snapshots[s]: every registered region after s steps (taken at
    step_done); recover() writes snapshots[resume] back in place and returns resume."""

    def __init__(self, restore_from=None):
        self.regions, self.snapshots, self.checkpoints = {}, {}, []
        self.epoch, self.resume, self.restore_from = 0, None, restore_from
        self.rank, self.size, self.is_trainer = 0, 1, True
        self.data_rank = 0
        self.after_recover = None  # (rank, size, data_rank) a recover() gives, e.g. a shrink's

    def register(self, name, buf, nbytes=None, flags=0):
        assert name not in self.regions
        self.regions[name] = buf

    def _snap(self):
        return {n: t.detach().clone() for n, t in self.regions.items()}

    def _write(self, snap):
        with torch.no_grad():
            for n, t in self.regions.items():
                t.copy_(snap[n])

    def restore(self):
        if self.restore_from is None:
            return False, 0
        step, snap = self.restore_from
        self._write(snap)
        return True, step

    def step_done(self, step):
        self.last_done = step

    def checkpoint(self, step):
        self.checkpoints.append(step)
        return 0

    def checkpoint_prepare(self):
        pass

    def set_job_info(self, *a):
        self.job_info = a  # (total steps, FLOPs per step, peak FLOP/s): the latest

    host_ranks = 1  # host_trainers(): the ranks the CPU's peak is split among

    def host_trainers(self):
        return self.host_ranks

    def recover(self):
        self.epoch += 1
        self._write(self.snapshots[self.resume])
        if self.after_recover:
            self.rank, self.size, self.data_rank = self.after_recover
        return self.resume

    broadcasts = 0

    def broadcast(self, buf, count=None, dtype=None, root=0):
        assert root == 0
        self.broadcasts += 1  # one trainer: the root's bytes are already here

    allreduce_ops = ()
    differ = ()  # region indices whose hash another (imagined) trainer has otherwise

    def allreduce(self, buf, count=None, dtype=None, op=_lib.SUM):
        self.allreduce_ops += (op,)
        for i in self.differ:
            buf[i] += 1 if op == _lib.MAX else 0

    gather_fail_at = set()  # steps (last_done + 1) at which all_gather raises FtrtRecover once
    gathers = 0

    def all_gather(self, send, recv, count=None, dtype=None):
        step = getattr(self, "last_done", -1) + 1
        if step in self.gather_fail_at:
            self.gather_fail_at.discard(step)
            send.add_(1.0)  # what a half-done step leaves; the recovery must undo it
            raise _lib.error_for(_lib.ERECOVER, "ftrt_allgather")
        self.gathers += 1
        recv.copy_(send)  # one trainer

    def reduce_scatter(self, send, recv, count=None, dtype=None, op=_lib.SUM):
        recv.copy_(send[:recv.numel()])

    def finalize(self):
        raise AssertionError("the caller owns the context")


class FakeAverager:
    fail_at = set()  # steps (ctx.last_done + 1) at which wait() raises FtrtRecover once

    def __init__(self, ctx, params, bucket_bytes=None, sync_in_backward=False,
                 gradient_as_bucket_view=False):
        self.ctx, self.params, self.buckets = ctx, list(params), 1
        self.resets = 0
        self.gradient_as_bucket_view = gradient_as_bucket_view

    def wait(self):
        step = getattr(self.ctx, "last_done", -1) + 1
        if step in self.fail_at:
            self.fail_at.discard(step)
            raise _lib.error_for(_lib.ERECOVER, "ftrt_bucketer_wait_all")

    def reset(self):
        self.resets += 1

    connects = []         # (ctx.epoch, ctx.last_done) at each connect(), every averager
    connect_fail_at = set()  # connect() numbers (1-based, in `connects`) that raise FtrtRecover

    def connect(self):
        self.connects.append((self.ctx.epoch, getattr(self.ctx, "last_done", -1)))
        if len(self.connects) in self.connect_fail_at:
            self.connect_fail_at.discard(len(self.connects))
            raise _lib.error_for(_lib.ERECOVER, "ftrt_gpu_connect")

    def close(self):
        pass

    def no_sync(self):
        raise NotImplementedError


@pytest.fixture(autouse=True)
def fresh_fake_averager():
    """No FakeAverager schedule carries over from one test to the next."""
    FakeAverager.fail_at, FakeAverager.connects, FakeAverager.connect_fail_at = set(), [], set()


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(6, 16), torch.nn.Linear(16, 3)
        self.drop = torch.nn.Dropout(0.3)

    def forward(self, x):
        return self.b(self.drop(torch.relu(self.a(x))))


def setup(extra=None, scaler=None):
    torch.manual_seed(5)
    model = Net()
    opt = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 4) * 0.9 ** s)
    return model, opt, sched


def batch(step):
    g = torch.Generator().manual_seed(1000 + step)
    return torch.randn(10, 6, generator=g), torch.randint(0, 3, (10,), generator=g)


def plain_run(steps=STEPS, seed=0):
    """The single-process loop, with the reseeding rule applied by hand."""
    model, opt, sched = setup()
    ftp.init_optimizer_state(opt)
    tokens = 0
    for step in range(steps):
        torch.default_generator.manual_seed(ftp.step_seed(seed, 0, step))
        x, y = batch(step)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        tokens += len(x)
        opt.step()
        sched.step()
    return model, opt, sched, tokens


class Scaler:
    """A duck-typed gradient scaler: counts its calls, has state."""

    def __init__(self):
        self.calls = 0

    def step(self, opt):
        opt.step()

    def update(self):
        self.calls += 1

    def state_dict(self):
        return {"calls": self.calls}

    def load_state_dict(self, sd):
        self.calls = sd["calls"]


class Counter:
    def __init__(self):
        self.n = 0

    def state_dict(self):
        return {"n": self.n}

    def load_state_dict(self, sd):
        self.n = sd["n"]


def ft_run(monkeypatch, fail_at=(), resume=None, ctx=None, scaler=None, steps=STEPS,
           connect_fail_at=(), before_step=None):
    monkeypatch.setattr(ftp, "GradAverager", FakeAverager)
    FakeAverager.fail_at = set(fail_at)
    FakeAverager.connects = []
    FakeAverager.connect_fail_at = set(connect_fail_at)
    model, opt, sched = setup()
    ctx = ctx or FakeCtx()
    counter = Counter()
    ft = ftp.FaultTolerant(model, opt, scheduler=sched, scaler=scaler, ctx=ctx,
                           extra_state={"tokens": 0, "counter": counter}, verbose=False)
    if resume is not None:
        ctx.resume = resume
    seen, results = [], []
    for step in ft.steps(steps):
        seen.append(step)
        x, y = batch(step)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        ft.state["tokens"] += len(x)
        counter.n += 1
        if before_step is not None:
            before_step(opt)
        ok = ft.step()
        results.append(ok)
        if ok:
            ctx.snapshots[ft.step_count] = ctx._snap()
    return model, opt, sched, ft, seen, results, counter


def same_params(m1, m2):
    return all(torch.equal(p, q) for p, q in zip(m1.parameters(), m2.parameters()))


def test_step_seed():
    s = ftp.step_seed(1, 2, 3)
    assert s == ftp.step_seed(1, 2, 3) and 0 <= s < 2 ** 63
    assert len({ftp.step_seed(1, r, t) for r in range(4) for t in range(50)}) == 200
    assert ftp.step_seed(2, 2, 3) != s


def test_pystate_round_trip_and_capacity():
    st = ftp.PyState(256)
    assert st.unpack() is None  # never packed: zeros
    st.pack({"a": [1, 2.5], "b": "x"})
    assert st.unpack() == {"a": [1, 2.5], "b": "x"}
    copy = ftp.PyState(256)
    copy.tensor.copy_(st.tensor)  # what a restore does to the region
    assert copy.unpack() == {"a": [1, 2.5], "b": "x"}
    with pytest.raises(ValueError, match="state_capacity"):
        st.pack(list(range(1000)))
    with pytest.raises(ValueError):
        ftp.PyState(10)


def test_loop_matches_the_plain_loop(monkeypatch):
    """No failure: FaultTolerant's loop is bitwise the plain loop (AdamW, LambdaLR, dropout
    reseeded by the rule), and step() records each step and checkpoints."""
    pm, po, ps, tokens = plain_run()
    ctx = FakeCtx()
    m, o, s, ft, seen, res, counter = ft_run(monkeypatch, ctx=ctx)
    assert seen == list(range(STEPS)) and all(res)
    assert same_params(pm, m)
    assert s.last_epoch == ps.last_epoch == STEPS and o.param_groups[0]["lr"] == \
        po.param_groups[0]["lr"]
    assert ft.state["tokens"] == tokens and counter.n == STEPS
    assert ctx.last_done == STEPS - 1 and ft.step_count == STEPS
    assert "py:state" in ctx.regions


def test_recovery_rolls_back_to_the_resume_step(monkeypatch):
    """FtrtRecover at step 8 with a resume at step 5: step() returns False, the loop goes on at
    5 with the parameters, AdamW state, scheduler, LR, extra_state (plain values and a
    stateful object) of step 5 and the same dropout masks; the end result is bitwise that of
    the plain loop."""
    pm, po, ps, tokens = plain_run()
    m, o, s, ft, seen, res, counter = ft_run(monkeypatch, fail_at={8}, resume=5)
    assert seen == list(range(8)) + [8] + list(range(5, STEPS)), seen
    assert res.count(False) == 1 and ft.recoveries == 1
    assert same_params(pm, m)
    assert s.last_epoch == STEPS and o.param_groups[0]["lr"] == po.param_groups[0]["lr"]
    assert ft.state["tokens"] == tokens and counter.n == STEPS


def test_recovery_forward(monkeypatch):
    """A survivor behind the most advanced one: FtrtRecover in step 6, resume at 7 (the state
    another trainer reached, here from an earlier run's snapshots): the loop skips to 7."""
    pm, _, _, tokens = plain_run()
    full = FakeCtx()
    ft_run(monkeypatch, ctx=full)
    ctx = FakeCtx()
    ctx.snapshots = dict(full.snapshots)
    m, o, s, ft, seen, res, counter = ft_run(monkeypatch, ctx=ctx, fail_at={6}, resume=7)
    assert seen == list(range(STEPS)) and res.count(False) == 1
    assert same_params(pm, m) and ft.step_count == STEPS and ft.state["tokens"] == tokens
    assert counter.n == STEPS


def test_identity_follows_a_shrink(monkeypatch):
    """A recovery that renumbered this trainer (FTRT_NO_SPARE=shrink: logical rank 2 of 4 is
    now 1 of 3, its data rank still 2): rank, world_size and data_rank follow, and the step's
    RNG seed is the data rank's (the same dropout masks as before the renumbering)."""
    ctx = FakeCtx()
    ctx.rank, ctx.size, ctx.data_rank = 2, 4, 2
    ctx.after_recover = (1, 3, 2)
    m, o, s, ft, seen, res, counter = ft_run(monkeypatch, ctx=ctx, fail_at={6}, resume=5)
    assert (ft.rank, ft.world_size, ft.data_rank) == (1, 3, 2) and ft.recoveries == 1
    assert ft.step_seed(4) == ftp.step_seed(0, 2, 4) != ftp.step_seed(0, 1, 4)


def test_fold_is_refused_before_the_job():
    """FTRT_NO_SPARE=fold would give a survivor two data ranks, which FaultTolerant cannot
    train: NotImplementedError naming the policy, before the job is joined."""
    model, opt, _ = setup()
    cfg = ftrt.Config.from_env()
    cfg.no_spare = ftrt.NO_SPARE_FOLD
    with pytest.raises(NotImplementedError, match="FTRT_NO_SPARE=fold"):
        ftp.FaultTolerant(model, opt, config=cfg, verbose=False)


def test_scaler_state_is_replicated(monkeypatch):
    sc = Scaler()
    m, o, s, ft, seen, res, counter = ft_run(monkeypatch, fail_at={8}, resume=5, scaler=sc)
    assert sc.calls == STEPS  # 8 updates, rolled back to 5, 7 more


class AmpScaler(Scaler):
    """torch.cuda.amp.GradScaler's per-step bookkeeping (CUDA-only in torch 1.13, so mimicked
    here): unscale_() marks the optimizer in _per_optimizer_states and refuses a second call
    before update(), which starts afresh."""

    def __init__(self):
        super().__init__()
        self._per_optimizer_states = collections.defaultdict(lambda: {"stage": "ready"})

    def unscale_(self, opt):
        st = self._per_optimizer_states[id(opt)]
        if st["stage"] == "unscaled":
            raise RuntimeError("unscale_() has already been called on this optimizer since "
                               "the last update().")
        st["stage"] = "unscaled"

    def update(self):
        super().update()
        self._per_optimizer_states = collections.defaultdict(lambda: {"stage": "ready"})


def test_scaler_unscale_before_a_recovered_step(monkeypatch):
    """scaler.unscale_(opt) before ft.step() (to clip gradients), and a failure in that
    step's averaging: the recovery forgets the abandoned step's unscale_, so the redone step
    may call it again."""
    sc = AmpScaler()
    m, o, s, ft, seen, res, counter = ft_run(monkeypatch, fail_at={6}, resume=4, scaler=sc,
                                             before_step=sc.unscale_)
    assert res.count(False) == 1 and ft.step_count == STEPS and sc.calls == STEPS


def test_restore_from_a_checkpoint(monkeypatch):
    """A relaunch: the state after 5 steps written into the regions by restore(); the loop
    starts at 5 and ends bitwise as the plain loop."""
    pm, po, ps, tokens = plain_run()
    ctx = FakeCtx()
    ft_run(monkeypatch, ctx=ctx, steps=5)
    ctx2 = FakeCtx(restore_from=(5, ctx.snapshots[5]))
    m, o, s, ft, seen, res, counter = ft_run(monkeypatch, ctx=ctx2)
    assert ft.restored and seen == list(range(5, STEPS))
    assert same_params(pm, m) and s.last_epoch == STEPS and ft.state["tokens"] == tokens
    assert counter.n == STEPS


def test_step_must_be_called(monkeypatch):
    monkeypatch.setattr(ftp, "GradAverager", FakeAverager)
    model, opt, sched = setup()
    ft = ftp.FaultTolerant(model, opt, ctx=FakeCtx(), verbose=False)
    with pytest.raises(RuntimeError, match="did not call ft.step"):
        for _ in ft.steps(3):
            pass
    ft2 = ftp.FaultTolerant(*setup()[:2], ctx=FakeCtx(), verbose=False)
    with pytest.raises(RuntimeError, match="twice"):
        for _ in ft2.steps(3):
            ft2.step()
            ft2.step()


def test_state_capacity_is_checked(monkeypatch):
    monkeypatch.setattr(ftp, "GradAverager", FakeAverager)
    model, opt, sched = setup()
    with pytest.raises(ValueError, match="state_capacity"):
        ftp.FaultTolerant(model, opt, ctx=FakeCtx(), extra_state={"big": "x" * 5000},
                          state_capacity=4096, verbose=False)


def test_devices_are_checked_before_the_job(monkeypatch):
    """FaultTolerant takes a model on the CPU or on one CUDA device (with libftrt_gpu); a model
    on another device type (meta, which needs no GPU) is refused by name, and a CUDA model
    without libftrt_gpu with FtrtNotSupported naming it, before anything is registered."""
    monkeypatch.setattr(ftp, "GradAverager", FakeAverager)
    model = torch.nn.Linear(4, 2, device="meta")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ctx = FakeCtx()
    with pytest.raises(NotImplementedError, match="meta"):
        ftp.FaultTolerant(model, opt, ctx=ctx, verbose=False)
    assert not ctx.regions

    class OnCuda(torch.nn.Module):  # the device is only asked, never used: no GPU needed
        def parameters(self, recurse=True):
            return iter([types.SimpleNamespace(device=torch.device("cuda", 0),
                                               requires_grad=True)])

    if ftrt.has_gpu_plane():
        pytest.skip("libftrt_gpu is loaded: a CUDA model would be taken")
    with pytest.raises(ftrt.FtrtNotSupported, match="libftrt_gpu"):
        ftp.FaultTolerant(OnCuda(), opt, ctx=ctx, verbose=False)
    assert not ctx.regions


def test_connect_at_init_each_step_and_after_recovery(monkeypatch):
    """FaultTolerant calls the averager's connect() (CUDA: this epoch's NCCL communicator, so
    that the next backward's buckets start on autograd's threads) at init, at the end of
    every step, and right after each recovery, before the next backward."""
    m, o, s, ft, seen, res, counter = ft_run(monkeypatch, fail_at={8}, resume=5)
    c = FakeAverager.connects
    assert c[0] == (0, -1)                      # init, before any step
    assert (1, 7) in c                          # after the recovery in step 8 (epoch 1)
    i = c.index((1, 7))
    assert c[i - 1] == (0, 7) and c[i + 1] == (1, 5)  # no step between recovery and connect
    assert len(c) == 1 + res.count(True) + ft.recoveries


def test_connect_failure_recovers(monkeypatch):
    """A trainer failure met by connect() (FtrtRecover) is a recovery: at the end of step 3
    (step() returns False, the job resumes at 2) and again in the connect() that follows that
    recovery (recovered again, connected on the third try); the result is still bitwise the
    plain loop's."""
    pm, _, _, tokens = plain_run()
    m, o, s, ft, seen, res, counter = ft_run(monkeypatch, resume=2, connect_fail_at={5, 6})
    assert res.count(False) == 1 and ft.recoveries == 2
    assert seen == [0, 1, 2, 3, 2] + list(range(3, STEPS)), seen
    assert FakeAverager.connects[4:7] == [(0, 3), (1, 3), (2, 3)]
    assert same_params(pm, m) and ft.state["tokens"] == tokens


class FakeBucketer:
    """The bucketer under HandOver: records on which thread the step ended or was reset."""

    def __init__(self):
        self.handle, self.buckets, self.ends = None, 1, []

    def wait_all(self):
        self.ends.append(("wait_all", threading.get_ident()))

    def reset(self):
        self.ends.append(("reset", threading.get_ident()))

    def free(self):
        pass


class HandOver(ftp.GradAverager):
    """GradAverager's CUDA hand-over with the C calls replaced by recorders, over CPU tensors:
    no CUDA runs here. It checks the Python side only: which thread marks, orders and ends
    the step, the zeros of unused parameters, the fallback to the owner. The C side is
    unit.bucket_direct; the real thing is tests/python/gpu_ft_prog.py on a GPU."""

    def __init__(self, ctx, params, order_rc=0, fail=None):
        self.calls, self.order_rc, self.fail = [], order_rc, fail
        super().__init__(ctx, params, sync_in_backward=True)
        self._gpu = True  # as with a CUDA plane: the end callback may run off the owner

    def _stream(self):
        return 0xC0FFEE  # "the current stream"

    def _ready_fns(self):
        def rec(kind):
            def f(h, i, ptr):
                self.calls.append((kind, threading.get_ident(), i))
                return _lib.ERECOVER if i == self.fail else 0
            return f
        return rec("ready"), rec("post")

    def _order_fns(self):
        def rec(kind, rc):
            def f(h, stream):
                self.calls.append((kind, threading.get_ident(), stream))
                return rc
            return f
        return rec("order", 0), rec("order_any", self.order_rc)


def handover_run(order_rc=0, fail=None):
    """One backward() on a thread of its own (as autograd's device thread runs CUDA hooks and,
    at times, the end callback) of a model with an unused layer, through HandOver."""
    class FakeBucketCtx(FakeCtx):
        def bucketer(self, counts, dtype, cfg):
            self.b = FakeBucketer()
            return self.b

    torch.manual_seed(1)
    used, unused = torch.nn.Linear(4, 3), torch.nn.Linear(4, 3)
    ctx = FakeBucketCtx()
    avg = HandOver(ctx, list(used.parameters()) + list(unused.parameters()), order_rc, fail)
    loss = used(torch.randn(5, 4)).sum()
    th = threading.Thread(target=loss.backward)
    th.start()
    th.join()
    return avg, ctx.b, th.ident, unused


def test_handover_orders_the_stream_off_the_owner():
    avg, b, worker, unused = handover_run()
    posts = [c for c in avg.calls if c[0] == "post"]
    assert sorted(i for _, _, i in posts) == [0, 1, 2, 3]   # the unused layer's too
    assert all(t == worker for _, t, _ in posts)
    assert avg.calls[-1] == ("order_any", worker, 0xC0FFEE)  # after every post
    assert all(torch.equal(p.grad, torch.zeros_like(p)) for p in unused.parameters())
    assert avg.synced and not b.ends
    avg.wait()  # the owner's check of the step, nothing ordered again
    assert b.ends == [("wait_all", threading.get_ident())]
    assert not any(c[0] in ("order", "ready") for c in avg.calls) and not avg.synced


def test_handover_falls_back_to_the_owner():
    """FTRT_ESTATE from the any-thread order (a bucket left to the owner): nothing synced,
    wait() orders the owner's stream and ends the step on the owner."""
    avg, b, worker, _ = handover_run(order_rc=_lib.ESTATE)
    assert avg.calls[-1] == ("order_any", worker, 0xC0FFEE) and not avg.synced
    avg.wait()
    me = threading.get_ident()
    assert avg.calls[-1] == ("order", me, 0xC0FFEE) and b.ends == [("wait_all", me)]


def test_handover_error_reaches_wait():
    """A post that fails (FtrtRecover) on the worker: nothing ordered; wait() on the owner
    abandons the step (reset) and raises it."""
    avg, b, worker, _ = handover_run(fail=3)
    assert not any(c[0] == "order_any" for c in avg.calls) and not avg.synced
    with pytest.raises(ftrt.FtrtRecover):
        avg.wait()
    assert b.ends == [("reset", threading.get_ident())]


class DtypeOrder(ftp.GradAverager):
    """GradAverager with the C calls replaced by a recorder of (ftrt dtype, index) per
    hand-over: the feeding order of its bucketers."""

    def __init__(self, ctx, params):
        self.calls = []
        super().__init__(ctx, params)

    def _ready_fns(self):
        def f(h, i, ptr):
            self.calls.append((h, i))
            return 0
        return f, f


def test_one_bucketer_per_dtype_fed_in_order():
    """Layers of bfloat16, float32, bfloat16 (a float32 layer between bf16 ones): two
    bucketers, bfloat16 first (the last parameter's dtype: backward produces it first); the
    float32 gradients, ready in the middle of the backward pass, are held until every bfloat16
    one has been handed over, so every trainer starts the collectives in the same order."""
    class DtypeCtx(FakeCtx):
        def bucketer(self, counts, dtype, cfg):
            b = FakeBucketer()
            b.handle, b.counts = dtype, list(counts)
            self.made.append(b)
            return b

    torch.manual_seed(2)
    a, b, c = torch.nn.Linear(4, 5), torch.nn.Linear(5, 5), torch.nn.Linear(5, 2)
    a.to(torch.bfloat16)
    c.to(torch.bfloat16)
    ctx = DtypeCtx()
    ctx.made = []
    params = list(a.parameters()) + list(b.parameters()) + list(c.parameters())
    avg = DtypeOrder(ctx, params)
    assert [m.handle for m in ctx.made] == [ftrt.BFLOAT16, ftrt.FLOAT32]
    assert ctx.made[0].counts == [20, 5, 10, 2] and ctx.made[1].counts == [25, 5]
    assert avg.bucketer is ctx.made[0] and avg.buckets == 2 and avg.dtype == ftrt.BFLOAT16
    x = torch.randn(3, 4)
    c(b(a(x.bfloat16()).float()).bfloat16()).float().sum().backward()
    assert [h for h, _ in avg.calls] == [ftrt.BFLOAT16] * 4 + [ftrt.FLOAT32] * 2, avg.calls
    assert sorted(avg.calls) == sorted([(ftrt.BFLOAT16, i) for i in range(4)] +
                                       [(ftrt.FLOAT32, i) for i in range(2)])
    assert all(p.grad.dtype == p.dtype for p in params)
    avg.wait()
    assert [m.ends for m in ctx.made] == [[("wait_all", threading.get_ident())]] * 2
    # the next step starts over: bfloat16 first again
    avg.calls.clear()
    c(b(a(x.bfloat16()).float()).bfloat16()).float().sum().backward()
    assert [h for h, _ in avg.calls] == [ftrt.BFLOAT16] * 4 + [ftrt.FLOAT32] * 2
    avg.wait()
    with pytest.raises(ValueError, match="not supported"):
        ftp.GradAverager(ctx, [torch.zeros(3, dtype=torch.complex64, requires_grad=True)])


def emfu_run(monkeypatch, **kw):
    """STEPS steps of Net (batch 10) through FaultTolerant on a FakeCtx, with its log."""
    monkeypatch.setattr(ftp, "GradAverager", FakeAverager)
    FakeAverager.fail_at = set()
    model, opt, sched = setup()
    ctx = FakeCtx()
    ft = ftp.FaultTolerant(model, opt, scheduler=sched, ctx=ctx, **kw)
    for step in ft.steps(STEPS):
        x, y = batch(step)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        ft.step()
    return ft, ctx, model


# Net's FLOPs per step, by hand: Linear(6, 16) on 10 rows, forward + dW (the input needs no
# gradient); Linear(16, 3), forward + dX + dW
NET_FLOPS = 2 * (2 * 10 * 6 * 16) + 3 * (2 * 10 * 16 * 3)


def test_emfu_inputs_are_found(monkeypatch, capsys):
    """Nothing given: FaultTolerant counts the FLOPs of its first step (analytic on torch
    1.13: the hand count), takes the peak from FTRT_PEAK_FLOPS, hands both to
    set_job_info and logical rank 0 says how it found them; the training is bitwise that of
    the plain loop (the count changes nothing)."""
    monkeypatch.setenv("FTRT_PEAK_FLOPS", "3e9")
    pm, _, _, _ = plain_run()
    ft, ctx, model = emfu_run(monkeypatch)
    assert same_params(pm, model)
    assert ft.flop_count.total == NET_FLOPS and ft.peak.source == "FTRT_PEAK_FLOPS"
    assert ctx.job_info == (STEPS, float(NET_FLOPS), 3e9)
    out = capsys.readouterr().out
    line = [ln for ln in out.splitlines() if ln.startswith("ftrt: eMFU inputs: ")]
    assert len(line) == 1, out
    assert f"{NET_FLOPS / 1e9:.4g} GFLOP per trainer per step" in line[0]
    assert ("FlopCounterMode" if ftrt.pytorch_flops.have_flop_counter_mode() else
            "analytic count") in line[0]
    assert "peak 3 GFLOP/s per rank: FTRT_PEAK_FLOPS" in line[0]


def test_emfu_peak_from_the_cpu_table(monkeypatch, capsys):
    """No FTRT_PEAK_FLOPS on the CPU: the peak is libftrt's table's fp32 figure split among
    ctx.host_trainers() ranks, said so with its source; the measured matrix-product rate is
    printed beside it and is not the peak."""
    monkeypatch.delenv("FTRT_PEAK_FLOPS", raising=False)
    want, src = ftrt.cpu_peak_flops(ftrt.FLOAT32, 3)
    monkeypatch.setattr(FakeCtx, "host_ranks", 3)
    ft, ctx, _ = emfu_run(monkeypatch)
    assert ctx.job_info[1] == NET_FLOPS and ctx.job_info[2] == ft.peak.flops == want > 0
    assert ft.peak.source == src and "3 rank(s) sharing" in src
    out = capsys.readouterr().out
    assert f"per rank: {src}; for comparison, measured: torch.mm 512x512 fp32" in out, out


def test_emfu_given_or_off(monkeypatch, capsys):
    """flops_per_step and peak_flops given: used as given; flops_per_step=0: nothing counted,
    no peak, FLOPs 0 for the ledger (no eMFU)."""
    ft, ctx, _ = emfu_run(monkeypatch, flops_per_step=1e6, peak_flops=2e9)
    assert ctx.job_info == (STEPS, 1e6, 2e9)
    assert "0.001 GFLOP per trainer per step (as given); peak 2 GFLOP/s" in \
        capsys.readouterr().out
    ft, ctx, _ = emfu_run(monkeypatch, flops_per_step=0, verbose=False)
    assert ft.flop_count is None and ft.peak is None and ctx.job_info[1] == 0
    with pytest.raises(ValueError, match="peak_flops"):
        ftp.FaultTolerant(*setup()[:2], ctx=FakeCtx(), peak_flops=-1, verbose=False)


def test_emfu_counts_a_step_that_ends_in_a_recovery(monkeypatch):
    """A failure in the first step (FtrtRecover from the averaging): its forward and backward
    ran whole, so the count stands and is not taken again."""
    monkeypatch.setenv("FTRT_PEAK_FLOPS", "3e9")
    monkeypatch.setattr(ftp, "GradAverager", FakeAverager)
    FakeAverager.fail_at = {0}
    model, opt, sched = setup()
    ctx = FakeCtx()
    ctx.snapshots[0] = None
    ft = ftp.FaultTolerant(model, opt, ctx=ctx, verbose=False)
    ctx.snapshots[0] = ctx._snap()
    ctx.resume = 0
    results = []
    for step in ft.steps(3):
        x, y = batch(step)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        results.append(ft.step())
    assert results == [False, True, True, True]
    assert ft.flop_count.total == NET_FLOPS and ctx.job_info[1] == NET_FLOPS


# ---- buffers (BatchNorm): ftrt/pytorch_buffers.py --------------------------------------------


class BnNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(6, 8)
        self.bn = torch.nn.BatchNorm1d(8)
        self.out = torch.nn.Linear(8, 3)

    def forward(self, x):
        return self.out(torch.relu(self.bn(self.fc(x))))


def test_syncbatchnorm_is_refused_by_name():
    """SyncBatchNorm needs a torch.distributed process group: refused before the job is
    joined (no ctx is touched), the message naming the module and what to use instead."""
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.SyncBatchNorm(4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match=r"module '1' is a torch.nn.SyncBatchNorm.*"
                                         r"broadcast_buffers=True"):
        ftp.FaultTolerant(model, opt, ctx=object())


class SurvivorCtx(FakeCtx):
    """ftrt_recover() as a survivor sees it when it is the most advanced one: its registered
    memory is kept as it is (nothing written back)."""

    def recover(self):
        self.epoch += 1
        return self.resume


def test_buffers_of_the_last_step_put_back_before_recovery(monkeypatch):
    """The abandoned step's forward pass has changed BatchNorm's running statistics; a
    recovery that keeps the survivor's memory must find those of the last completed step, so
    that the redone step gives bitwise the buffers and parameters of a run without failure.
    Each completed step broadcasts the buffers once; broadcast_buffers=False registers them
    SHARDED and broadcasts nothing."""
    def run(fail_at, ctx, broadcast=True):
        monkeypatch.setattr(ftp, "GradAverager", FakeAverager)
        FakeAverager.fail_at = set(fail_at)
        torch.manual_seed(3)
        model = BnNet()
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        flags = {}
        real_register = ctx.register

        def register(name, buf, nbytes=None, flags_=0, **kw):
            flags[name] = kw.get("flags", flags_)
            real_register(name, buf)
        ctx.register = register
        ft = ftp.FaultTolerant(model, opt, ctx=ctx, verbose=False,
                               broadcast_buffers=broadcast)
        ctx.resume = 5  # the survivor's own state: 5 steps done
        for step in ft.steps(8):
            g = torch.Generator().manual_seed(step)
            x = torch.randn(16, 6, generator=g)
            y = torch.randint(0, 3, (16,), generator=g)
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            ft.step()
        return model, flags
    ref, flags = run((), FakeCtx())
    assert flags["buffer:bn.running_mean"] == _lib.REGION_REPLICATED
    ctx = SurvivorCtx()
    got, _ = run({5}, ctx)
    # steps 0-4 done, the failure in step 5's averaging (after its forward pass changed the
    # buffers, before its broadcast), resumed at 5 with the survivor's memory: 5-7 done
    assert ctx.broadcasts == 8, "one broadcast per completed step"
    for (n, a), b in zip(ref.state_dict().items(), got.state_dict().values()):
        assert torch.equal(a, b), f"{n} differs from the run without failure"
    ctx = SurvivorCtx()
    own, flags = run({5}, ctx, broadcast=False)
    assert flags["buffer:bn.running_var"] == _lib.REGION_SHARDED and ctx.broadcasts == 0
    assert torch.equal(own.bn.running_mean, ref.bn.running_mean)


def test_replicated_regions_that_differ_are_named(monkeypatch):
    """At the first step every replicated region is compared (MIN and MAX of a hash each);
    one that differs between trainers is named instead of an anonymous SDC alarm later."""
    monkeypatch.setattr(ftp, "GradAverager", FakeAverager)
    model = BnNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    ctx = FakeCtx()
    ctx.differ = (1,)  # the second region: param:fc.bias
    ft = ftp.FaultTolerant(model, opt, ctx=ctx, verbose=False)
    with pytest.raises(RuntimeError, match=r"differ between the trainers: param:fc.bias\."):
        for _ in ft.steps(3):
            model(torch.randn(4, 6)).sum().backward()
            ft.step()
    assert ctx.allreduce_ops == (_lib.MIN, _lib.MAX)


@pytest.mark.parametrize("stage", [1, 2])
def test_zero_optimizer_trains_and_recovers_like_the_plain_one(monkeypatch, stage):
    """FaultTolerant with a ZeroOptimizer (one trainer: the shard is everything): its state
    registered SHARDED, the parameters views of its flat buffer, a recovery in the middle of
    its all-gather (the shard already stepped) rolled back by the restored regions and a
    reshard, and the run ends with the plain loop's parameters, bitwise."""
    monkeypatch.setattr(ftp, "GradAverager", FakeAverager)
    torch.manual_seed(5)
    model = Net()
    opt = ftp.ZeroOptimizer(model.parameters(), torch.optim.AdamW, stage=stage, lr=0.01,
                            weight_decay=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 4) * 0.9 ** s)
    ctx = FakeCtx()
    ctx.gather_fail_at = {3}
    ft = ftp.FaultTolerant(model, opt, scheduler=sched, ctx=ctx, verbose=False)
    assert (isinstance(ft.averager, FakeAverager)) == (stage == 1)
    assert sorted(n for n in ctx.regions if n.startswith("zero:")) == \
        ["zero:g0:exp_avg", "zero:g0:exp_avg_sq", "zero:g0:step"]
    ctx.resume = 2
    for step in ft.steps(STEPS):
        x, y = batch(step)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        if ft.step():
            ctx.snapshots[ft.step_count] = ctx._snap()
    assert ft.recoveries == 1 and ctx.gathers == STEPS + 1  # step 2 redone
    ref, ref_opt, _, _ = plain_run()
    assert same_params(model, ref)
    st = opt.inner.state[opt.groups[0].shard]
    flat_ref = torch.cat([ref_opt.state[p]["exp_avg"].reshape(-1) for p in ref.parameters()])
    assert torch.equal(st["exp_avg"][:flat_ref.numel()], flat_ref)
    m = ft.memory()
    shard = sum(t.numel() * t.element_size() for t in st.values())
    assert m["optimizer_state_host"] == shard and m["optimizer_state_device"] == 0
    assert m["params_host"] == sum(p.numel() * 4 for p in model.parameters())
    assert m["replica_images_host"] == m["params_host"] + m["python_state_host"] + 2 * shard
