"""Unit tests of ftrt.pytorch_flops (what eMFU needs, found without the user): the analytic
FLOP count against counts computed by hand (linear layers, convolutions, matrix products,
nn.MultiheadAttention, train_lm.py's transformer), its dtype under autocast, that counting
leaves the step's results bitwise unchanged, the count against torch's FlopCounterMode where
the torch has it, and the peak FLOP/s: the table of GPU peaks, FTRT_PEAK_FLOPS, the CPU
measurement and the time-weighted peak of several dtypes. No MPI job: FaultTolerant's use of
it is in test_fault_tolerant.py, a real job's report in test_mpi_lm.py."""
import math
import os
import sys

import pytest

from conftest import REPO, needs_torch

pytestmark = needs_torch

torch = pytest.importorskip("torch")
import ftrt  # noqa: E402
import ftrt.pytorch_flops as fl  # noqa: E402

nn = torch.nn


def fwd_bwd(model, x, counter=None):
    """One forward and backward pass of model(x).sum() under `counter` (entered here)."""
    if counter is not None:
        counter.start()
    model(x).float().sum().backward()
    return counter.stop() if counter is not None else None


def test_linear_layers_by_hand():
    """Linear(8, 16) -> ReLU -> Linear(16, 4), batch 5, the input without a gradient:
    forward 2*5*8*16 + 2*5*16*4; backward: dW of both, dX of the second only."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    x = torch.randn(5, 8)
    f1, f2 = 2 * 5 * 8 * 16, 2 * 5 * 16 * 4
    c = fwd_bwd(m, x, fl.StepFlopCounter(m, use_torch=False))
    assert c.method == "analytic" and c.total == c.analytic == f1 * 2 + f2 * 3
    assert c.by_dtype == {("cpu", "fp32"): f1 * 2 + f2 * 3} and c.not_counted == []
    a = fl.AnalyticFlopCounter()
    with torch.no_grad(), a:  # no backward to come: the forward only
        m(x)
    assert a.flops == f1 + f2 and a.by_op == {"linear": f1 + f2}
    x.requires_grad_(True)  # now dX of the first layer too
    assert fwd_bwd(m, x, fl.StepFlopCounter(m, use_torch=False)).total == 3 * (f1 + f2)


def test_products_by_hand():
    """matmul with broadcasting, @ from either side, mm, bmm, addmm, baddbmm, addbmm and a
    two-operand einsum, forward only (no_grad)."""
    a, b = torch.randn(3, 4, 5), torch.randn(5, 6)
    m, n = torch.randn(4, 5), torch.randn(5, 6)
    bb = torch.randn(3, 5, 6)
    want = {"matmul": 2 * 3 * 4 * 5 * 6 * 3 + 2 * 4 * 5 * 6 * 2 + 2 * 3 * 4 * 5 * 6,
            "addmm": 2 * 4 * 5 * 6 + 2 * 3 * 4 * 5 * 6,
            "addbmm": 2 * 3 * 4 * 5 * 6,
            "einsum": 2 * 4 * 5 * 6}
    c = fl.AnalyticFlopCounter()
    with torch.no_grad(), c:
        torch.matmul(a, b)
        a @ b
        b.__rmatmul__(a)           # a @ b, written from b's side
        torch.mm(m, n)
        m.mm(n)
        torch.bmm(a, bb)
        torch.addmm(torch.zeros(4, 6), m, n)
        torch.baddbmm(torch.zeros(3, 4, 6), a, bb)
        torch.addbmm(torch.zeros(4, 6), a, bb)
        torch.einsum("ij,jk->ik", m, n)
        torch.einsum("bij,bjk,bkl->bil", a, bb, torch.randn(3, 6, 2))  # not covered: named
    assert c.by_op == want, c.by_op
    assert c.flops == sum(want.values())
    assert list(c.not_counted) == ["einsum: einsum other than two operands without '...'"]


def test_convolutions_by_hand():
    """Conv2d: 2 x output elements x (in channels / groups x kernel); ConvTranspose2d: 2 x
    input elements x (out channels / groups x kernel); an input that needs its gradient
    triples a layer's count (forward, dX, dW)."""
    conv, convt = nn.Conv2d(3, 6, 3, padding=1, groups=3), nn.ConvTranspose2d(6, 4, 3)
    x = torch.randn(2, 3, 5, 5, requires_grad=True)
    f_conv = 2 * (2 * 6 * 5 * 5) * (1 * 3 * 3)
    f_convt = 2 * (2 * 6 * 5 * 5) * (4 * 3 * 3)
    c = fl.StepFlopCounter(use_torch=False)
    c.start()
    convt(conv(x)).sum().backward()
    assert c.stop().total == 3 * f_conv + 3 * f_convt


def test_multihead_attention_by_hand():
    """nn.MultiheadAttention(8, 2 heads, batch_first), self-attention on [2, 7, 8] without
    an input gradient: the q, k, v projections (forward + dW), QK^T and AV (forward + two
    products each), the output projection (forward + dX + dW)."""
    torch.manual_seed(1)
    mha = nn.MultiheadAttention(8, 2, batch_first=True)
    q = torch.randn(2, 7, 8)
    N, L, E = 2, 7, 8
    proj = 2 * L * N * E * E
    att = 2 * N * L * L * E
    c = fl.StepFlopCounter(use_torch=False)
    c.start()
    mha(q, q, q)[0].sum().backward()
    assert c.stop().total == 3 * proj * 2 + 2 * att * 3 + proj * 3


@pytest.mark.skipif(not hasattr(torch.nn.functional, "scaled_dot_product_attention"),
                    reason="F.scaled_dot_product_attention needs torch >= 2.0 (Debian 12's "
                           "python3-torch is 1.13)")
def test_sdpa_by_hand():
    q, k, v = (torch.randn(2, 3, 5, 4, requires_grad=True) for _ in range(3))
    c = fl.StepFlopCounter(use_torch=False)
    c.start()
    torch.nn.functional.scaled_dot_product_attention(q, k, v).sum().backward()
    assert c.stop().total == 3 * (2 * 2 * 3 * 5 * 5 * 4) * 2


def test_cnn_with_batchnorm_by_hand():
    """Conv2d (no bias) -> BatchNorm2d -> ReLU -> Conv2d stride 2 -> BatchNorm2d -> ReLU ->
    average pool -> Linear, batch 2 of 3x8x8 without an input gradient: the first conv is
    forward + dW (2x), the second and the linear layer forward + dX + dW (3x); the batch
    norms, activations and pooling count 0, as in the model FLOPs of MFU, and are not named
    as missed."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
                      nn.Conv2d(8, 8, 3, stride=2, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))
    c1 = 2 * (2 * 8 * 8 * 8) * (3 * 3 * 3)
    c2 = 2 * (2 * 8 * 4 * 4) * (8 * 3 * 3)
    fc = 2 * (2 * 10) * 8
    n = fwd_bwd(m, torch.randn(2, 3, 8, 8), fl.StepFlopCounter(m, use_torch=False))
    assert n.total == 2 * c1 + 3 * c2 + 3 * fc, (n.total, 2 * c1 + 3 * c2 + 3 * fc)
    assert n.not_counted == [] and n.by_dtype == {("cpu", "fp32"): n.total}


def module_count(model, x):
    """An independent count from the modules' shapes (forward hooks, not the function mode):
    2 x output elements x (in channels / groups x kernel) per Conv2d, 2 x output elements x
    in features per Linear, each 3x for forward + dX + dW, 2x where the layer's input needs no
    gradient (dX is not computed)."""
    total = [0]

    def hook(mod, inp, out):
        per = (mod.in_channels // mod.groups) * mod.kernel_size[0] * mod.kernel_size[1] \
            if isinstance(mod, nn.Conv2d) else mod.in_features
        total[0] += 2 * out.numel() * per * (3 if inp[0].requires_grad else 2)
    hs = [mm.register_forward_hook(hook) for mm in model.modules()
          if isinstance(mm, (nn.Conv2d, nn.Linear))]
    model(x).sum().backward()
    for h in hs:
        h.remove()
    return total[0]


def test_resnet18_count():
    """torchvision's resnet18 (BatchNorm after every conv, 1x1 downsample convs, a 10-class
    head) on 2 x 3 x 32 x 32: the analytic count of a step equals the count from the modules'
    shapes; and its forward at 224 x 224 is the 1.81 GMAC (x 2 FLOPs) of torchvision's model
    table (pytorch.org/vision/stable/models.html, "GFLOPS" there counts multiply-adds)."""
    tv = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    m = tv.models.resnet18(num_classes=10)
    x = torch.randn(2, 3, 32, 32)
    want = module_count(m, x)
    m.zero_grad()
    n = fwd_bwd(m, x, fl.StepFlopCounter(m, use_torch=False))
    assert n.total == want and n.not_counted == [], (n.total, want, n.not_counted)
    a = fl.AnalyticFlopCounter()
    with torch.no_grad(), a:
        tv.models.resnet18()(torch.randn(1, 3, 224, 224))
    assert math.isclose(a.flops / 2, 1.81e9, rel_tol=0.01), a.flops


def lm_model(d=32, layers=2, heads=4, context=16, extra=()):
    sys.path.insert(0, os.path.join(REPO, "examples"))
    import train_lm
    a = train_lm.parse_args(["--d-model", str(d), "--layers", str(layers), "--heads",
                             str(heads), "--context", str(context), "--batch", "3"]
                            + list(extra))
    vocab = 50
    model, _, _ = train_lm.build(torch, a, vocab, torch.device("cpu"))
    return train_lm, model, a, vocab


def test_train_lm_transformer_by_hand():
    """examples/train_lm.py's model (pre-LN blocks: qkv, attention written with @, output
    projection, a 4x MLP; the output layer tied to the token embedding): per block
    2 x tokens x 12 d^2 for the linear layers plus 2 x 2 x B T^2 d for QK^T and AV, and
    2 x tokens x d x vocab for the output layer; everything after the embeddings needs its
    gradient, so backward doubles it all. The lookups of the embeddings count nothing."""
    train_lm, model, a, V = lm_model()
    B, T, d = a.batch, a.context, a.d_model
    tok = B * T
    fwd = a.layers * (2 * tok * 12 * d * d + 2 * 2 * B * T * T * d) + 2 * tok * d * V
    x = torch.randint(0, V, (B, T))
    y = torch.randint(0, V, (B, T))
    c = fl.StepFlopCounter(model, use_torch=False)
    c.start()
    train_lm.loss_of(torch, a, model, x, y).backward()
    n = c.stop()
    assert n.total == 3 * fwd, (n.total, 3 * fwd)
    assert "analytic" in n.describe() or n.method == "FlopCounterMode"


def test_train_lm_bf16_autocast_counts_as_bf16():
    """train_lm.py --amp bf16 (its forward and loss under torch.autocast("cpu", bfloat16), the
    path --device cuda --amp bf16 takes on a GPU): the same FLOPs as in float32, all of them
    under the bf16 key (the matrix products run in bfloat16; the loss is float32 but does no
    counted FLOPs), and the loss stays float32; the peak eMFU then uses is the bf16 one."""
    train_lm, model, a, V = lm_model(extra=["--amp", "bf16"])
    B, T, d = a.batch, a.context, a.d_model
    tok = B * T
    fwd = a.layers * (2 * tok * 12 * d * d + 2 * 2 * B * T * T * d) + 2 * tok * d * V
    x = torch.randint(0, V, (B, T))
    c = fl.StepFlopCounter(model, use_torch=False)
    c.start()
    loss = train_lm.loss_of(torch, a, model, x, x)
    loss.backward()
    n = c.stop()
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    assert dict(n.by_dtype) == {("cpu", "bf16"): 3 * fwd}, n.by_dtype
    assert all(p.grad.dtype == torch.float32 for p in model.parameters())


def test_counting_leaves_results_bitwise_unchanged():
    """The same step with and without the counter: identical loss, gradients and random
    numbers drawn afterwards (dropout inside)."""
    train_lm, model, a, V = lm_model()
    x = torch.randint(0, V, (a.batch, a.context), generator=torch.Generator().manual_seed(2))
    out = []
    for counted in (False, True):
        model.zero_grad(set_to_none=True)
        torch.manual_seed(9)
        c = fl.StepFlopCounter(model)
        if counted:
            c.start()
        loss = train_lm.loss_of(torch, a, model, x, x)
        loss.backward()
        if counted:
            assert c.stop().total > 0
        out.append((loss.detach().clone(), [p.grad.clone() for p in model.parameters()],
                    torch.rand(3)))
    (l0, g0, r0), (l1, g1, r1) = out
    assert torch.equal(l0, l1) and torch.equal(r0, r1)
    assert all(torch.equal(p, q) for p, q in zip(g0, g1))


def test_autocast_dtype_is_recorded():
    """Under CPU autocast to bfloat16 a linear layer's FLOPs count as bf16 (the dtype the
    product runs in), not as the fp32 of its inputs."""
    lin = nn.Linear(8, 4)
    c = fl.AnalyticFlopCounter()
    with c, torch.autocast("cpu", dtype=torch.bfloat16):
        lin(torch.randn(2, 8))
    assert c.by_dtype == {("cpu", "bf16"): 2 * 2 * 8 * 4 * 2}  # forward + dW


def test_recurrent_layers_are_named():
    """nn.LSTM runs through torch._VF, which the analytic count does not see: the count names
    it instead of passing its FLOPs over in silence."""
    m = nn.LSTM(4, 8)
    c = fl.StepFlopCounter(m, use_torch=False)
    c.start()
    m(torch.randn(3, 2, 4))[0].sum().backward()
    n = c.stop()
    assert n.total == 0 and n.not_counted == ["1 LSTM module(s)"]
    assert "not counted: 1 LSTM module(s)" in n.describe()


@pytest.mark.skipif(not fl.have_flop_counter_mode(),
                    reason=f"torch.utils.flop_counter.FlopCounterMode needs torch >= 2.1 "
                           f"(this is {torch.__version__}; Debian 12's python3-torch is 1.13)")
def test_analytic_count_matches_flop_counter_mode():
    """Where torch has FlopCounterMode the figure used is its count, and the analytic count
    agrees with it on the models above."""
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    conv = nn.Sequential(nn.Conv2d(3, 6, 3, padding=1), nn.ConvTranspose2d(6, 4, 3))
    train_lm, lm, a, V = lm_model()
    cases = [(mlp, torch.randn(5, 8)), (conv, torch.randn(2, 3, 5, 5)),
             (lm, torch.randint(0, V, (a.batch, a.context)))]
    tv = pytest.importorskip("torchvision")
    cases.append((tv.models.resnet18(num_classes=10), torch.randn(2, 3, 32, 32)))
    for model, x in cases:
        n = fwd_bwd(model, x, fl.StepFlopCounter(model))
        assert n.method == "FlopCounterMode" and n.total > 0
        assert math.isclose(n.analytic, n.total, rel_tol=1e-9), (type(model), n)


# ---- peaks ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name,sms,dtype,tf32,want", [
    ("NVIDIA H100 80GB HBM3", 132, "bf16", False, 989.5e12),   # the SXM part's device name
    ("NVIDIA H100 SXM5 80GB", 132, "fp16", False, 989.5e12),
    ("NVIDIA H100 PCIe", 114, "fp32", True, 378e12),           # tf32 on
    ("NVIDIA H100 PCIe", 114, "fp32", False, 51e12),
    ("NVIDIA H200", 132, "bf16", False, 989.5e12),
    ("NVIDIA H200 NVL", 132, "bf16", False, 835.5e12),
    ("NVIDIA GH200 480GB", 132, "bf16", False, 989.5e12),
    ("NVIDIA A100-SXM4-80GB", 108, "bf16", False, 312e12),
    ("NVIDIA A100-PCIE-40GB", 108, "fp64", False, 19.5e12),
    ("NVIDIA A10", 72, "bf16", False, 125e12),                 # not an A100
    ("NVIDIA L4", 58, "fp16", False, 121e12),
    ("NVIDIA L40S", 142, "fp32", False, 91.6e12),
    ("NVIDIA A100-SXM4-40GB MIG 1g.5gb", 14, "bf16", False, 312e12 * 14 / 108),
])
def test_gpu_table(name, sms, dtype, tf32, want):
    p = fl.cuda_peak(name, sms, dtype, tf32=tf32)
    assert math.isclose(p.flops, want, rel_tol=1e-12), p
    assert "datasheet" in p.source


@pytest.mark.parametrize("name,sms,dtype,why", [
    ("NVIDIA GeForce RTX 4090", 128, "bf16", "not in ftrt's table"),
    ("NVIDIA L40S", 142, "fp64", "no fp64 entry"),
    ("NVIDIA A100-SXM4-80GB", 132, "bf16", "more than the 108"),
])
def test_gpu_table_refuses(name, sms, dtype, why):
    p = fl.cuda_peak(name, sms, dtype)
    assert p.flops == 0 and why in p.source, p


def test_peak_from_the_environment_wins():
    p = fl.peak_flops({("cpu", "fp32"): 1e9}, env={"FTRT_PEAK_FLOPS": "2.5e10"})
    assert p.flops == 2.5e10 and p.source == "FTRT_PEAK_FLOPS"


def test_cpu_peak_is_the_table_split_among_ranks():
    """On the CPU the peak is libftrt's table (ftrt.cpu_peak_flops), split among the ranks
    sharing the host: 6 ranks get a sixth of one rank's figure; the source says how it was
    made up. The matrix product measured in the process is not it."""
    p1 = fl.peak_flops({("cpu", "fp32"): 1e9}, env={})
    p6 = fl.peak_flops({("cpu", "fp32"): 1e9}, env={}, ranks_sharing=6)
    want, src = ftrt.cpu_peak_flops(ftrt.FLOAT32, 1)
    assert p1.flops == want > 0 and p1.source == src and "FLOP/cycle/core" in src, p1
    # a sixth, unless an affinity mask of fewer CPUs binds first
    assert p6.flops <= p1.flops and (math.isclose(p6.flops, p1.flops / 6, rel_tol=1e-12)
                                     or "affinity" in p6.source), p6
    assert "6 rank(s) sharing" in p6.source
    # the table is an upper bound: above what a matrix product reaches here
    state = torch.default_generator.get_state()
    m = fl.measure_cpu_peak(torch.float32)
    assert torch.equal(state, torch.default_generator.get_state())  # no random numbers
    assert 0 < m.flops < p1.flops and "measured: torch.mm 512x512 fp32" in m.source, (m, p1)
    assert fl.cpu_peak("int64").flops == 0


def test_cpu_peak_refused_is_said(monkeypatch):
    """A CPU the table does not know: no peak, and the source says why (so the eMFU line
    can ask for FTRT_PEAK_FLOPS)."""
    def refuse(dtype, ranks):
        raise ftrt.FtrtNotSupported(ftrt.ENOTSUP, "ftrt_cpu_peak_flops (not an x86 cpuinfo)")
    monkeypatch.setattr(ftrt, "cpu_peak_flops", refuse)
    p = fl.peak_flops({("cpu", "fp32"): 1e9}, env={})
    assert p.flops == 0 and "not an x86" in p.source, p


def test_mixed_dtypes_take_the_time_weighted_peak(monkeypatch):
    """Half the FLOPs at 1 GFLOP/s, half at 4: the time at peak is 1 s + 0.25 s for 2 GFLOP,
    so the peak is 1.6 GFLOP/s."""
    rates = {"fp32": 1e9, "bf16": 4e9}
    monkeypatch.setattr(fl, "cpu_peak", lambda dtype, ranks: fl.Peak(rates[dtype], "fake"))
    p = fl.peak_flops({("cpu", "fp32"): 1e9, ("cpu", "bf16"): 1e9}, env={})
    assert math.isclose(p.flops, 1.6e9) and "for 50% of the FLOPs" in p.source, p
    assert fl.peak_flops({}, env={}).flops == 0
