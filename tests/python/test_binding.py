"""Unit tests of the ctypes binding: prototypes and structs against include/ftrt.h, error
mapping, configuration from the environment, buffers. No MPI job is started here."""
import ctypes
import os
import re
import shutil
import subprocess
import sys
import threading

import pytest

from conftest import REPO, needs_torch

import ftrt
from ftrt import _lib

HEADER = os.path.join(REPO, "include", "ftrt.h")
GPU_HEADER = os.path.join(REPO, "include", "ftrt_gpu.h")


def generated_include():
    """<build>/include, where CMake generates ftrt_version.h (ftrt.h includes it): beside the
    loaded libftrt (FTRT_LIB = <build>/libftrt.so under ctest), else the tree's build/."""
    here = os.path.join(os.path.dirname(os.path.abspath(ftrt.lib_path())), "include")
    return here if os.path.exists(os.path.join(here, "ftrt_version.h")) else \
        os.path.join(REPO, "build", "include")


def header_text(path):
    with open(path) as f:
        text = f.read()
    return re.sub(r"/\*.*?\*/", " ", text, flags=re.S)


def c_prototypes(path):
    """{name: (return type, [param types])} of every FTRT_API function in a header."""
    text = header_text(path)
    out = {}
    for m in re.finditer(r"FTRT_API\s+([^;{]+?)\b(ftrt_\w+)\s*\(([^)]*)\)\s*;", text):
        ret, name, params = m.group(1), m.group(2), m.group(3)
        types = []
        for p in params.split(","):
            p = " ".join(p.replace("*", " * ").split())
            if p in ("void", ""):
                continue
            types.append(p.rsplit(" ", 1)[0])  # drop the parameter name
        out[name] = (" ".join(ret.replace("*", " * ").split()), types)
    return out


C_TO_CTYPES = {
    "int": ctypes.c_int, "int *": ctypes.POINTER(ctypes.c_int), "unsigned": ctypes.c_uint, "size_t": ctypes.c_size_t,
    "int64_t": ctypes.c_int64, "double": ctypes.c_double, "const char *": ctypes.c_char_p,
    "ftrt_dtype": ctypes.c_int, "ftrt_op": ctypes.c_int, "void *": ctypes.c_void_p,
    "const void *": ctypes.c_void_p, "uint32_t *": ctypes.POINTER(ctypes.c_uint32),
    "cudaStream_t": ctypes.c_void_p,
    "int64_t *": ctypes.POINTER(ctypes.c_int64), "double *": ctypes.POINTER(ctypes.c_double),
    "char *": ctypes.c_char_p,
    "const size_t *": ctypes.POINTER(ctypes.c_size_t),
    "const int *": ctypes.POINTER(ctypes.c_int),
    "void * const *": ctypes.POINTER(ctypes.c_void_p),
    "void * *": ctypes.POINTER(ctypes.c_void_p),
    "size_t *": ctypes.POINTER(ctypes.c_size_t), "long long": ctypes.c_longlong,
    "ftrt_config *": ctypes.POINTER(_lib.Config),
    "const ftrt_config *": ctypes.POINTER(_lib.Config),
    "ftrt_bucket_config *": ctypes.POINTER(_lib.BucketConfig),
    "const ftrt_bucket_config *": ctypes.POINTER(_lib.BucketConfig),
    "ftrt_ckpt_stats *": ctypes.POINTER(_lib.CkptStats),
}
for handle in ("ftrt_ctx", "ftrt_request", "ftrt_bucketer", "ftrt_gpu"):
    C_TO_CTYPES[f"{handle} *"] = ctypes.c_void_p
    C_TO_CTYPES[f"const {handle} *"] = ctypes.c_void_p
    C_TO_CTYPES[f"{handle} * *"] = ctypes.POINTER(ctypes.c_void_p)


def expected(ctype):
    key = ctype.replace("* *", "* *")
    if key not in C_TO_CTYPES:
        pytest.fail(f"test_binding.py: no ctypes mapping for C type {ctype!r}: extend "
                    f"C_TO_CTYPES and the binding")
    return C_TO_CTYPES[key]


@pytest.mark.parametrize("path,table", [(HEADER, _lib.PROTOTYPES),
                                        (GPU_HEADER, _lib.GPU_PROTOTYPES)])
def test_every_function_declared_with_the_header_types(path, table):
    if not os.path.exists(path):
        pytest.skip(f"{path} does not exist")
    protos = c_prototypes(path)
    assert len(protos) >= (30 if path == HEADER else 5), "header parse found too few functions"
    missing = sorted(set(protos) - set(table))
    extra = sorted(set(table) - set(protos))
    assert not missing, f"functions of {os.path.basename(path)} without a prototype: {missing}"
    assert not extra, f"prototypes of functions not in {os.path.basename(path)}: {extra}"
    for name, (ret, params) in protos.items():
        res, args = table[name]
        assert res is expected(ret), f"{name}: restype {res} for C {ret!r}"
        assert len(args) == len(params), f"{name}: {len(args)} argtypes, C has {len(params)}"
        for i, (a, p) in enumerate(zip(args, params)):
            assert a is expected(p), f"{name} argument {i}: {a} for C {p!r}"


def test_loaded_library_has_every_function_with_argtypes():
    so = _lib.lib()
    for name, (res, args) in _lib.PROTOTYPES.items():
        fn = getattr(so, name)
        assert fn.argtypes == args and fn.restype is res, name
    assert os.path.exists(ftrt.lib_path())


def test_structs_accepted_by_the_init_functions():
    cfg = _lib.Config()
    assert _lib.lib().ftrt_config_init(ctypes.byref(cfg), ctypes.sizeof(cfg)) in (0, ftrt.ECONFIG)
    assert cfg.size == ctypes.sizeof(_lib.Config), "library's sizeof(ftrt_config) differs"
    assert cfg.version == ftrt.version()[0]
    # Append-only: an older, smaller struct is accepted (here: one that ended before
    # async_progress), a larger one (a binding newer than the library) refused.
    small = _lib.Config()
    ctypes.memset(ctypes.byref(small), 0x5a, ctypes.sizeof(small))
    old = _lib.Config.async_progress.offset
    assert _lib.lib().ftrt_config_init(ctypes.byref(small), old) in (0, ftrt.ECONFIG)
    assert small.size == old and small.heartbeat_ms == cfg.heartbeat_ms
    assert small.async_progress == 0x5a5a5a5a  # past the size: not written
    big = (ctypes.c_char * (ctypes.sizeof(_lib.Config) + 8))()
    assert _lib.lib().ftrt_config_init(ctypes.cast(big, ctypes.POINTER(_lib.Config)),
                                       ctypes.sizeof(big)) == ftrt.EINVAL
    assert _lib.lib().ftrt_config_init(ctypes.byref(small), 7) == ftrt.EINVAL
    bc = _lib.BucketConfig()
    assert _lib.lib().ftrt_bucket_config_init(ctypes.byref(bc), ctypes.sizeof(bc)) == 0
    assert bc.size == ctypes.sizeof(_lib.BucketConfig)
    assert (bc.bucket_bytes, bc.first_bucket_bytes, bc.reverse, bc.average) == (25 << 20,
                                                                               1 << 20, 1, 1)
    assert _lib.lib().ftrt_bucket_config_init(ctypes.byref(bc), ctypes.sizeof(bc) - 1) == ftrt.EINVAL


def test_struct_layouts_match_the_compiler(tmp_path):
    """Every field's offset and size, and every struct's size, as the C compiler sees them."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler")
    structs = {"ftrt_config": _lib.Config, "ftrt_bucket_config": _lib.BucketConfig,
               "ftrt_ckpt_stats": _lib.CkptStats}
    lines = ["#include <stddef.h>", "#include <stdio.h>", '#include "ftrt.h"', "int main(void) {"]
    for cname, py in structs.items():
        lines.append(f'printf("{cname} %zu\\n", sizeof({cname}));')
        for fname, _ in py._fields_:
            lines.append(f'printf("{cname}.{fname} %zu %zu\\n", offsetof({cname}, {fname}), '
                         f'sizeof((({cname} *)0)->{fname}));')
    lines += ["return 0;", "}"]
    src = tmp_path / "layout.c"
    src.write_text("\n".join(lines) + "\n")
    exe = tmp_path / "layout"
    r = subprocess.run([cc, "-std=c11", "-I", os.path.join(REPO, "include"), "-I",
                        generated_include(), str(src), "-o", str(exe)],
                       capture_output=True, text=True)
    assert r.returncode == 0, f"a field of the ctypes mirror is not in ftrt.h:\n{r.stderr}"
    got = dict(l.split(" ", 1) for l in subprocess.check_output([str(exe)], text=True).split("\n")
               if l)
    for cname, py in structs.items():
        assert int(got[cname]) == ctypes.sizeof(py), f"sizeof({cname})"
        for fname, _ in py._fields_:
            off, size = map(int, got[f"{cname}.{fname}"].split())
            f = getattr(py, fname)
            assert (f.offset, f.size) == (off, size), f"{cname}.{fname}"


def test_error_codes_match_the_header_and_the_library():
    text = header_text(HEADER)
    table = {m.group(1): int(m.group(2))
             for m in re.finditer(r"X\((FTRT_\w+),\s*(-?\d+)", open(HEADER).read())}
    header = {k: v for k, v in table.items() if v < 0}
    assert header, "FTRT_ERROR_MAP not found"
    assert {k: v[0] for k, v in _lib.ERRORS.items()} == header
    positive = {"FTRT_DONE": ftrt.DONE, "FTRT_SKIP_MPI_FINALIZE": ftrt.SKIP_MPI_FINALIZE,
                "FTRT_SKIPPED": ftrt.SKIPPED}
    assert {k: v for k, v in table.items() if v >= 0} == positive
    for name, code in positive.items():
        assert ftrt.err_name(code) == name
        assert ftrt.strerror(code) != "unknown ftrt error code"
    for name, (code, cls) in _lib.ERRORS.items():
        assert ftrt.err_name(code) == name
        assert ftrt.strerror(code) and ftrt.strerror(code) != "UNKNOWN"
        e = _lib.error_for(code, "ftrt_x")
        assert type(e) is cls and isinstance(e, ftrt.FtrtError)
        assert (e.code, e.name, e.message, e.call) == (code, name, ftrt.strerror(code), "ftrt_x")
        assert e.errno is None and name in str(e) and "ftrt_x" in str(e)
    for macro, value in (("FTRT_REGION_REPLICATED", ftrt.REGION_REPLICATED),
                         ("FTRT_REGION_SHARDED", ftrt.REGION_SHARDED),
                         ("FTRT_REGION_DEVICE", ftrt.REGION_DEVICE),
                         ("FTRT_CKPT_WAIT", ftrt.CKPT_WAIT), ("FTRT_CKPT_SKIP", ftrt.CKPT_SKIP),
                         ("FTRT_NO_SPARE_STOP", ftrt.NO_SPARE_STOP),
                         ("FTRT_NO_SPARE_SHRINK", ftrt.NO_SPARE_SHRINK),
                         ("FTRT_NO_SPARE_FOLD", ftrt.NO_SPARE_FOLD)):
        m = re.search(rf"#define {macro} (\d+)", text)
        assert m and int(m.group(1)) == value, macro
    for name, value in (("FTRT_FLOAT32", ftrt.FLOAT32), ("FTRT_FLOAT64", ftrt.FLOAT64),
                        ("FTRT_INT64", ftrt.INT64), ("FTRT_BFLOAT16", ftrt.BFLOAT16),
                        ("FTRT_FLOAT16", ftrt.FLOAT16)):
        m = re.search(rf"\b{name} = (\d+)", text)
        assert m and int(m.group(1)) == value, name
    assert "FTRT_SUM = 0, FTRT_MIN = 1, FTRT_MAX = 2" in text


def test_errno_codes_and_check():
    e = _lib.error_for(-28)
    assert type(e) is ftrt.FtrtError and e.name == "ENOSPC" and e.errno == 28
    assert _lib.check(0) == 0 and _lib.check(3) == 3
    with pytest.raises(ftrt.FtrtRecover) as ei:
        _lib.check(ftrt.ERECOVER, "ftrt_allreduce")
    assert ei.value.code == -1001 and ei.value.call == "ftrt_allreduce"
    with pytest.raises(ftrt.FtrtNoSpare):
        _lib.check(ftrt.ENOSPARE)
    assert ftrt.err_name(-999999) == "UNKNOWN"


def test_config_from_env(monkeypatch):
    monkeypatch.setenv("FTRT_HEARTBEAT_MS", "250")
    monkeypatch.setenv("FTRT_CKPT_DIR", "/tmp/some-ckpt")
    monkeypatch.setenv("FTRT_SPARES", "2")
    monkeypatch.setenv("FTRT_STRAGGLER_RATIO", "2.5")
    cfg = ftrt.Config.from_env()
    assert cfg.heartbeat_ms == 250 and cfg.spares == 2 and cfg.straggler_ratio == 2.5
    assert cfg.get_str("ckpt_dir") == "/tmp/some-ckpt"
    assert cfg.heartbeat_timeout_ms == 1000  # a default
    cfg.set_str("report_file", "r.json")
    assert cfg.get_str("report_file") == "r.json"
    with pytest.raises(ValueError):
        cfg.set_str("coord_addr", "x" * 256)  # char[256] needs room for the NUL
    cfg.set_str("coord_addr", "x" * 255)
    with pytest.raises(AttributeError):
        cfg.set_str("spares", "1")


def test_config_bad_env_value(monkeypatch):
    monkeypatch.setenv("FTRT_LOG", "error")  # keep the library's complaint short
    monkeypatch.setenv("FTRT_HEARTBEAT_MS", "not-a-number")
    with pytest.warns(RuntimeWarning, match="FTRT_ECONFIG"):
        cfg = ftrt.Config.from_env()
    assert cfg.heartbeat_ms == 100  # the default is kept
    with pytest.raises(ftrt.FtrtConfigError) as ei:
        ftrt.Config.from_env(strict=True)
    assert ei.value.code == ftrt.ECONFIG


def test_version_is_the_cmake_project_version():
    """One version number: project(VERSION) of CMakeLists.txt, through the generated header
    into the library, read by ftrt.__version__."""
    with open(os.path.join(REPO, "CMakeLists.txt")) as f:
        m = re.search(r"project\(ftrt VERSION (\d+)\.(\d+)\.(\d+)", f.read())
    assert m, "project(ftrt VERSION x.y.z) not found in CMakeLists.txt"
    want = tuple(int(g) for g in m.groups())
    assert ftrt.version() == want
    assert ftrt.__version__ == "%d.%d.%d" % want
    major = ctypes.c_int(-1)
    code = _lib.lib().ftrt_version(ctypes.byref(major), None, None)
    assert major.value == want[0] and code == want[0] * 10000 + want[1] * 100 + want[2]


def test_last_error(monkeypatch):
    monkeypatch.setenv("FTRT_LOG", "error")
    monkeypatch.setenv("FTRT_CKPT_QD", "9999")
    with pytest.raises(ftrt.FtrtConfigError):
        ftrt.Config.from_env(strict=True)
    assert 'FTRT_CKPT_QD="9999" is not an integer in [1, 256]' in ftrt.last_error()
    seen = []
    t = threading.Thread(target=lambda: seen.append(ftrt.last_error()))
    t.start()
    t.join()
    assert seen == [""]  # per thread


def test_null_handles_are_refused():
    so = _lib.lib()
    assert so.ftrt_rank(None) == ftrt.ESTATE
    assert so.ftrt_bucketer_wait_all(None) == ftrt.EINVAL
    assert so.ftrt_request_free(None) == 0
    assert so.ftrt_finalize(None) == 0


def test_buffer_of():
    np = pytest.importorskip("numpy")
    a = np.zeros(10, dtype=np.float32)
    addr, n, dt, dev = _lib.buffer_of(a)
    assert (addr, n, dt, dev) == (a.ctypes.data, 40, ftrt.FLOAT32, "cpu")
    assert _lib.buffer_of(a, 8)[1] == 8
    with pytest.raises(ValueError):
        _lib.buffer_of(a, 41)
    with pytest.raises(ValueError):
        _lib.buffer_of(np.zeros((4, 4), dtype=np.float64)[:, 1])  # not contiguous
    c = (ctypes.c_double * 3)()
    assert _lib.buffer_of(c)[1:3] == (24, ftrt.FLOAT64)
    assert _lib.buffer_of(1234, 16) == (1234, 16, None, "cpu")
    with pytest.raises(ValueError):
        _lib.buffer_of(1234)
    with pytest.raises(TypeError):
        _lib.buffer_of("text")


@needs_torch
def test_buffer_of_tensor():
    import torch
    t = torch.zeros(3, 5, dtype=torch.float64)
    assert _lib.buffer_of(t) == (t.data_ptr(), 120, ftrt.FLOAT64, "cpu")
    with pytest.raises(ValueError):
        _lib.buffer_of(t.t())


@needs_torch
def test_grad_averager_device_rules():
    """GradAverager's device choice (ftrt/pytorch.py _cuda_device): CPU parameters take the CPU
    bucketer, one CUDA device the GPU bucketer (libftrt_gpu only: FtrtNotSupported otherwise),
    a mix or another device type is refused by name."""
    import types
    torch = pytest.importorskip("torch")
    import ftrt.pytorch as ftp
    assert ftp._cuda_device([torch.zeros(2), torch.zeros(3)]) is None
    meta = torch.zeros(2, device="meta")
    with pytest.raises(ValueError, match="one device"):
        ftp._cuda_device([torch.zeros(2), meta])
    with pytest.raises(NotImplementedError, match="meta"):
        ftp._cuda_device([meta])
    cuda1 = types.SimpleNamespace(device=torch.device("cuda", 1))  # no GPU needed to ask
    if ftrt.has_gpu_plane():
        assert ftp._cuda_device([cuda1]) == 1
    else:
        with pytest.raises(ftrt.FtrtNotSupported, match="libftrt_gpu"):
            ftp._cuda_device([cuda1])


def test_region_names_are_short_and_unique():
    from ftrt.pytorch import region_name
    assert region_name("param", "0.weight") == "param:0.weight"
    a = region_name("optim", "encoder." * 10 + "a", "momentum_buffer")
    b = region_name("optim", "encoder." * 10 + "b", "momentum_buffer")
    assert len(a.encode()) <= 63 and len(b.encode()) <= 63 and a != b


@needs_torch
@pytest.mark.parametrize("make", [
    lambda ps: __import__("torch").optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.01),
    lambda ps: __import__("torch").optim.Adam(ps, lr=0.01, weight_decay=0.01),
    lambda ps: __import__("torch").optim.AdamW(ps, lr=0.01),
    lambda ps: __import__("torch").optim.Adagrad(ps, lr=0.01),
], ids=["sgd", "adam", "adamw", "adagrad"])
def test_init_optimizer_state_matches_lazy_init(make):
    """Eagerly created state gives bitwise the same training as torch.optim's lazy state, and
    the state tensors are updated in place (their storage never moves)."""
    import torch
    from ftrt.pytorch import init_optimizer_state

    def model():
        torch.manual_seed(3)
        return torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))

    x = torch.randn(8, 5, generator=torch.Generator().manual_seed(1))
    ma, mb = model(), model()
    oa, ob = make(ma.parameters()), make(mb.parameters())
    before = [p.detach().clone() for p in mb.parameters()]
    init_optimizer_state(ob)
    assert all(torch.equal(p, q) for p, q in zip(before, mb.parameters())), "params changed"
    assert all(p.grad is None for p in mb.parameters()), "grads changed"
    state = {(id(p), k): (v, v.data_ptr()) for p in mb.parameters()
             for k, v in ob.state[p].items()}
    assert state
    for _ in range(3):
        for m, o in ((ma, oa), (mb, ob)):
            o.zero_grad()
            m(x).square().mean().backward()
            o.step()
    for p, q in zip(ma.parameters(), mb.parameters()):
        assert torch.equal(p, q)
    for p in mb.parameters():
        for k, v in ob.state[p].items():
            old, ptr = state[(id(p), k)]
            assert v is old and v.data_ptr() == ptr, f"state {k} moved"


@needs_torch
def test_init_optimizer_state_refuses_python_scalar_state():
    """torch 1.13's RMSprop keeps 'step' as a Python int: it could not be recovered."""
    import torch
    from ftrt.pytorch import init_optimizer_state
    m = torch.nn.Linear(3, 2)
    with pytest.raises(ValueError, match="step"):
        init_optimizer_state(torch.optim.RMSprop(m.parameters(), lr=0.01))


PUBLIC_CLASSES = ("Context", "Config", "BucketConfig", "CkptStats", "Bucketer", "Request",
                  "FtrtError", "FtrtRecover", "FtrtNoSpare")
INTERNALS = ("lib", "load", "check", "error_for", "buffer_of")


def test_public_api():
    """ftrt's __all__ names the public API, every name of it exists, and the ctypes internals
    are ftrt._lib's only; the package is typed (py.typed); every error class of ftrt.h is
    public."""
    missing = [n for n in ftrt.__all__ if not hasattr(ftrt, n)]
    assert not missing, f"in __all__ but not defined: {missing}"
    assert len(set(ftrt.__all__)) == len(ftrt.__all__), "duplicates in __all__"
    for n in PUBLIC_CLASSES + ("init", "version", "lib_path", "FLOAT32", "ERECOVER"):
        assert n in ftrt.__all__, n
    for _, cls in _lib.ERRORS.values():
        assert cls.__name__ in ftrt.__all__ and getattr(ftrt, cls.__name__) is cls
    for n in INTERNALS:
        assert not hasattr(ftrt, n), f"ftrt.{n} is an internal: ftrt._lib.{n} only"
        assert callable(getattr(_lib, n))
    assert "FaultTolerant" not in ftrt.__all__  # `from ftrt import *` must not need torch
    assert os.path.exists(os.path.join(os.path.dirname(ftrt.__file__), "py.typed"))
    with pytest.raises(AttributeError):
        ftrt.no_such_name  # noqa: B018  (the module __getattr__ raises for unknown names)


def test_import_does_not_import_torch():
    """`import ftrt` and `from ftrt import *` neither import torch nor load libftrt; the first
    use of ftrt.FaultTolerant imports ftrt.pytorch (when torch is installed)."""
    code = ("import sys; sys.path.insert(0, %r)\n"
            "import ftrt\nfrom ftrt import *\n"
            "print('torch' in sys.modules, ftrt._lib._lib is not None)\n"
            "try:\n    import torch\nexcept ImportError:\n    print('no torch'); sys.exit(0)\n"
            "ft = ftrt.FaultTolerant\n"
            "print(ft is sys.modules['ftrt.pytorch'].FaultTolerant)\n"
            % os.path.join(REPO, "bindings", "python"))
    r = subprocess.run([PYTHON_EXE, "-c", code], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.split("\n")
    assert lines[0] == "False False", r.stdout
    assert lines[1] in ("True", "no torch"), r.stdout


PYTHON_EXE = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
