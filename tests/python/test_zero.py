"""ftrt.pytorch.ZeroOptimizer (ZeRO stages 1 and 2) without MPI: N trainers as N threads, each
with its own copy of a model, over a fake world whose collectives sum in rank order (as a
fixed-order reduction does). The sharded optimizer must give the parameters that one
unsharded optimizer gives on the averaged gradient, bitwise; the state it keeps must be 1/N;
what it cannot run on must be refused. tests/python/test_mpi_zero.py runs it on real ranks."""
import threading

import pytest
import torch

from conftest import needs_torch
from ftrt import _lib
from ftrt.pytorch_zero import ZeroOptimizer

pytestmark = [needs_torch]

torch.set_num_threads(1)


class World:
    """n threads meeting at each collective: every rank's contribution, in rank order."""

    def __init__(self, n):
        self.n, self.barrier, self.slots = n, threading.Barrier(n), [None] * n

    def exchange(self, rank, t):
        self.slots[rank] = t.detach().clone()
        self.barrier.wait()
        out = list(self.slots)
        self.barrier.wait()
        return out

    @staticmethod
    def ordered_sum(parts):
        acc = parts[0].clone()
        for p in parts[1:]:
            acc += p
        return acc


class RankCtx:
    def __init__(self, world, rank):
        self.world, self.rank, self.size = world, rank, world.n
        self.regions = {}
        self.calls = []

    def register(self, name, t, flags=0):
        assert name not in self.regions
        self.regions[name] = (t, flags)

    def allreduce(self, buf, count=None, dtype=None, op=_lib.SUM):
        self.calls.append("allreduce")
        buf.copy_(World.ordered_sum(self.world.exchange(self.rank, buf)))

    def all_gather(self, send, recv, count=None, dtype=None):
        self.calls.append("all_gather")
        recv.copy_(torch.cat(self.world.exchange(self.rank, send)))

    def reduce_scatter(self, send, recv, count=None, dtype=None, op=_lib.SUM):
        self.calls.append("reduce_scatter")
        c = recv.numel()
        total = World.ordered_sum(self.world.exchange(self.rank, send))
        recv.copy_(total[self.rank * c:(self.rank + 1) * c])


def make_model(seed=5):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(7, 13), torch.nn.Tanh(), torch.nn.Linear(13, 3))


def batch(rank, step):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(6, 7, generator=g), torch.randn(6, 3, generator=g)


def local_grads(model, rank, step):
    model.zero_grad(set_to_none=True)
    x, y = batch(rank, step)
    torch.nn.functional.mse_loss(model(x), y).backward()
    return [p.grad.detach().clone() for p in model.parameters()]


def reference(n, steps, opt_class, kw, clip=None):
    """One model, one unsharded optimizer, each step's gradient the mean of the n ranks'
    (summed in rank order, times 1/n as the averager rounds it)."""
    models = [make_model() for _ in range(n)]
    model = make_model()
    opt = opt_class(model.parameters(), **kw)
    for s in range(steps):
        grads = [local_grads(models[r], r, s) for r in range(n)]
        for i, p in enumerate(model.parameters()):
            p.grad = World.ordered_sum([g[i] for g in grads]).mul_(1.0 / n)
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        for m in models:  # every rank's model follows the shared parameters
            with torch.no_grad():
                for q, p in zip(m.parameters(), model.parameters()):
                    q.copy_(p)
    return [p.detach().clone() for p in model.parameters()]


def run_zero(n, steps, opt_class, kw, stage, clip=None):
    world = World(n)
    out, errors, ctxs, opts = [None] * n, [], [None] * n, [None] * n
    models = [make_model() for _ in range(n)]  # here: torch.manual_seed is process-wide

    def trainer(r):
        try:
            model = models[r]
            opt = ZeroOptimizer(model.parameters(), opt_class, stage=stage, **kw)
            ctx = RankCtx(world, r)
            opt.bind(ctx)
            opt.register(ctx)
            ctxs[r], opts[r] = ctx, opt
            for s in range(steps):
                local_grads(model, r, s)
                if stage == 1:  # what GradAverager does in backward()
                    for p in model.parameters():
                        ctx.allreduce(p.grad)
                        p.grad.mul_(1.0 / n)
                elif clip is not None:
                    opt.clip_grad_norm_(clip)
                opt.step()
            out[r] = [p.detach().clone() for p in model.parameters()]
        except BaseException as e:  # noqa: BLE001 (reported below)
            errors.append(e)
            world.barrier.abort()

    threads = [threading.Thread(target=trainer, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    return out, ctxs, opts


@pytest.mark.parametrize("stage", [1, 2])
@pytest.mark.parametrize("n", [2, 3, 4])
@pytest.mark.parametrize("opt_class,kw", [
    (torch.optim.AdamW, {"lr": 1e-2, "weight_decay": 0.1}),
    (torch.optim.SGD, {"lr": 0.05, "momentum": 0.9}),
    (torch.optim.Adagrad, {"lr": 1e-2}),
])
def test_sharded_step_is_bitwise_the_unsharded_one(stage, n, opt_class, kw):
    """Every trainer ends with the parameters of one unsharded optimizer, bitwise (n = 3:
    the 13*7+13+13*3+3 = 146 elements pad to 147, the last rank's slice holds padding)."""
    ref = reference(n, 6, opt_class, kw)
    out, _, _ = run_zero(n, 6, opt_class, kw, stage)
    for r in range(n):
        for a, b in zip(out[r], ref):
            assert torch.equal(a, b), (r, (a - b).abs().max())


def test_stage2_clip_matches_torch_clip():
    ref = reference(4, 5, torch.optim.Adam, {"lr": 1e-2}, clip=0.05)
    out, _, opts = run_zero(4, 5, torch.optim.Adam, {"lr": 1e-2}, 2, clip=0.05)
    assert opts[0].last_grad_norm is not None and opts[0].last_grad_norm > 0.05  # it clipped
    for a, b in zip(out[0], ref):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)


def test_stage_collectives_and_regions():
    _, ctxs, opts = run_zero(2, 1, torch.optim.Adam, {"lr": 1e-3}, 1)
    assert ctxs[0].calls.count("all_gather") == 1 and "reduce_scatter" not in ctxs[0].calls
    assert sorted(ctxs[0].regions) == ["zero:g0:exp_avg", "zero:g0:exp_avg_sq", "zero:g0:step"]
    assert all(fl == _lib.REGION_SHARDED for _, fl in ctxs[0].regions.values())
    _, ctxs, _ = run_zero(2, 1, torch.optim.Adam, {"lr": 1e-3}, 2)
    assert ctxs[1].calls == ["reduce_scatter", "all_gather"]


@pytest.mark.parametrize("n", [2, 4])
def test_state_is_one_nth(n):
    _, _, opts = run_zero(n, 1, torch.optim.AdamW, {"lr": 1e-3}, 1)
    mem = opts[0].memory()
    numel = sum(p.numel() for p in make_model().parameters())
    per_rank = -(-numel // n)
    assert mem["optimizer_state"] == 2 * 4 * per_rank + 4  # exp_avg, exp_avg_sq; step
    assert mem["optimizer_state_replicated"] == 2 * 4 * numel + 4
    assert mem["params"] == 4 * n * per_rank


def test_parameters_become_views_of_the_flat_buffer():
    _, _, opts = run_zero(2, 1, torch.optim.SGD, {"lr": 0.1, "momentum": 0.5}, 1)
    g = opts[1].groups[0]
    for p, off in zip(g.params, g.offsets):
        assert p.data_ptr() == g.flat[off:].data_ptr()


def test_reshard_cuts_the_slice_again():
    _, _, opts = run_zero(2, 2, torch.optim.SGD, {"lr": 0.1, "momentum": 0.5}, 1)
    g = opts[1].groups[0]
    with torch.no_grad():
        g.flat.add_(1.0)
    opts[1].reshard()
    assert torch.equal(g.shard, g.flat[g.lo:g.lo + g.per_rank])


@pytest.mark.parametrize("cls", [torch.optim.LBFGS, torch.optim.SparseAdam])
def test_non_elementwise_optimizers_refused(cls):
    with pytest.raises(ValueError, match="not element-wise"):
        ZeroOptimizer(make_model().parameters(), cls, lr=0.1)


def test_bad_arguments():
    with pytest.raises(ValueError, match="stage must be 1 or 2"):
        ZeroOptimizer(make_model().parameters(), torch.optim.SGD, stage=3, lr=0.1)
    with pytest.raises(TypeError):
        ZeroOptimizer(make_model().parameters(), "Adam", lr=0.1)
    opt = ZeroOptimizer(make_model().parameters(), torch.optim.SGD, lr=0.1)
    with pytest.raises(RuntimeError, match="not bound"):
        opt.step()
    with pytest.raises(NotImplementedError, match="sharded"):
        opt.state_dict()
    m = make_model()
    m[0].weight.data = m[0].weight.data.double()
    bad = ZeroOptimizer(m.parameters(), torch.optim.SGD, lr=0.1)
    with pytest.raises(ValueError, match="one floating-point dtype"):
        bad.bind(RankCtx(World(1), 0))


def test_schedulers_and_hyperparameters_reach_the_shard():
    """Outer param_groups carry every hyperparameter (a scheduler sets lr there); step()
    copies them to the inner optimizer."""
    m = make_model()
    opt = ZeroOptimizer(m.parameters(), torch.optim.AdamW, lr=0.1)
    assert opt.param_groups[0]["betas"] == (0.9, 0.999) and opt.param_groups[0]["lr"] == 0.1
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5)
    opt.bind(RankCtx(World(1), 0))
    m(torch.ones(1, 7)).sum().backward()
    opt.step()
    sched.step()
    opt.step()
    assert opt.inner.param_groups[0]["lr"] == pytest.approx(0.05)


def test_stage2_reduce_scatter_in_pieces(monkeypatch):
    """Stage 2 packs at most _RS_CHUNK elements per rank at a time (here 7 of a 37-element
    slice: 6 reduce-scatters a step), ends bitwise as the unsharded optimizer, and releases
    every p.grad after the step (only the shard's gradient is kept)."""
    import ftrt.pytorch_zero as pz
    monkeypatch.setattr(pz, "_RS_CHUNK", 7)
    ref = reference(4, 3, torch.optim.AdamW, {"lr": 1e-2})
    out, ctxs, opts = run_zero(4, 3, torch.optim.AdamW, {"lr": 1e-2}, 2)
    assert ctxs[2].calls.count("reduce_scatter") == 3 * 6, ctxs[2].calls
    for a, b in zip(out[3], ref):
        assert torch.equal(a, b)
    assert all(p.grad is None for p in opts[0].groups[0].params)
    assert opts[0].memory()["grad_flat"] == 4 * 7 * 4
