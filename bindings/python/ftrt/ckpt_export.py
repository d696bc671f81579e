"""Turning one step of an ftrt checkpoint into what any PyTorch program loads, for
`python3 -m ftrt.ckpt export` (ftrt/ckpt.py): a torch.save() file holding the model's
state_dict, the optimizer's (state and param_groups), the schedulers', the scaler's and the
extra state of a FaultTolerant job, and the model's tensors as safetensors where the
`safetensors` package imports (pip install .[safetensors]).

What maps bytes to names: the layout record "py:layout" (ftrt/pytorch_layout.py) that
register_state() writes, and FaultTolerant's "py:state" (a pickle: param_groups'
hyperparameters, schedulers, scaler, extra state), unpickled here with only plain Python
types and collections.OrderedDict allowed unless trust_pickle. Without a layout (a C job such
as train_mlp, or a checkpoint older than the record) every region is exported raw: a 1-D
uint8 tensor per region named as the region, "<name>@rank<r>" per rank for a SHARDED one.
Everything that cannot be mapped is named in the result's "ftrt"]["unmapped"].

Nothing partial is ever written: the whole step is read and every CRC32C checked first
(ftrt/ckpt_format.py read_step: a damaged shard raises CkptError naming the file and the
region), then each output goes to a temporary file beside it, fsynced, and is renamed into
place only when every output is complete.
"""
import io
import json
import math
import os
import pickle
import struct
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import torch

from .ckpt_format import KIND_SHARDED, CkptError, Regions
from .pytorch_layout import LAYOUT_FORMAT, LAYOUT_REGION, LAYOUT_VERSION

__all__ = ["EXPORT_FORMAT", "Export", "build_export", "raw_tensors", "write_outputs",
           "safetensors_available"]

EXPORT_FORMAT = "ftrt-export"
PYSTATE_REGION = "py:state"
PYSTATE_MAGIC = b"FTRTPY01"
_SAFE_GLOBALS = {("collections", "OrderedDict"), ("builtins", "set"),
                 ("builtins", "frozenset"), ("builtins", "complex"), ("builtins", "slice")}


@dataclass
class Export:
    """What export writes: obj (the torch.save() object), model (the tensors for
    safetensors), unmapped (what could not be mapped, one line each), notes (said, not
    missing), raw (True: regions exported as bytes, no layout used)."""
    obj: Dict[str, Any]
    model: Dict[str, torch.Tensor]
    unmapped: List[str] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)
    raw: bool = False


class _PlainUnpickler(pickle.Unpickler):
    """Refuses every global but plain containers: a checkpoint's pickle runs no code."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _SAFE_GLOBALS:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not a plain Python type")


def _bytes_tensor(data: bytes) -> torch.Tensor:
    if not data:
        return torch.empty(0, dtype=torch.uint8)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def raw_tensors(regions: Regions) -> Dict[str, torch.Tensor]:
    """Each region as a 1-D uint8 tensor of its bytes: REPLICATED ones by their name, SHARDED
    ones as "<name>@rank<r>" per rank, in table order."""
    out: Dict[str, torch.Tensor] = {}
    for name in regions.order:
        if regions.kinds[name] == KIND_SHARDED:
            for r, data in sorted(regions.sharded[name].items()):
                out[f"{name}@rank{r}"] = _bytes_tensor(data)
        else:
            out[name] = _bytes_tensor(regions.replicated[name])
    return out


def _typed(data: bytes, dtype: str, shape: List[int]) -> torch.Tensor:
    """The tensor of dtype and shape whose bytes are data. Raises ValueError on a mismatch."""
    dt = getattr(torch, dtype, None)
    if not isinstance(dt, torch.dtype):
        raise ValueError(f"unknown dtype {dtype!r}")
    numel = 1
    for d in shape:
        numel *= int(d)
    itemsize = torch.empty(0, dtype=dt).element_size()
    if numel * itemsize != len(data):
        raise ValueError(f"{len(data)} bytes, {dtype}{list(shape)} needs {numel * itemsize}")
    if numel == 0:
        return torch.empty(shape, dtype=dt)
    return torch.frombuffer(bytearray(data), dtype=dt).reshape(shape)


class _Mapper:
    """Builds an Export from regions and a layout document, noting what does not map."""

    def __init__(self, regions: Regions, layout: Dict[str, Any]) -> None:
        self.regions, self.layout = regions, layout
        self.used = {LAYOUT_REGION, PYSTATE_REGION}
        self.ex = Export({}, {})

    def tensor(self, region: str, what: str) -> Optional[torch.Tensor]:
        """The region as the tensor its layout entry describes (rank 0's for SHARDED), or
        None with an unmapped line."""
        desc = self.layout["tensors"].get(region)
        if region in self.regions.replicated:
            data = self.regions.replicated[region]
        elif region in self.regions.sharded:
            data = self.regions.sharded[region].get(0, b"")
            self.ex.notes.append(f"{what}: region \"{region}\" is SHARDED (each trainer's "
                                 f"own): logical rank 0's exported")
        else:
            self.ex.unmapped.append(f"{what}: region \"{region}\" is not in the checkpoint")
            return None
        self.used.add(region)
        if desc is None:
            self.ex.unmapped.append(f"{what}: region \"{region}\" has no layout entry")
            return None
        try:
            return _typed(data, desc["dtype"], desc["shape"])
        except ValueError as e:
            self.ex.unmapped.append(f"{what}: region \"{region}\": {e}")
            return None

    def model(self) -> Dict[str, torch.Tensor]:
        sd: Dict[str, torch.Tensor] = {}
        for key, region, dtype, shape in self.layout["model"]["state_dict"]:
            t = None
            if region is not None:
                t = self.tensor(region, f"model {key}")
            elif math.prod(int(d) for d in shape) != 0:
                self.ex.unmapped.append(f"model {key}: not registered with ftrt (not in the "
                                        f"checkpoint)")
            else:
                t = torch.empty(shape, dtype=getattr(torch, dtype))  # empty: nothing to store
            if t is not None:
                sd[key] = t
        return sd

    def optimizer(self, pystate: Optional[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
        opt = self.layout.get("optimizer")
        if opt is None:
            return None
        state: Dict[int, Dict[str, Any]] = {}
        for idx, keys in opt["state"].items():
            for key, region in keys.items():
                t = self.tensor(region, f"optimizer state {idx}.{key}")
                if t is not None:
                    state.setdefault(int(idx), {})[key] = t
        self._sharded_state(state)
        hyper = (pystate or {}).get("param_groups")
        if hyper is None or len(hyper) != len(opt["param_groups"]):
            self.ex.unmapped.append("optimizer param_groups hyperparameters (lr, ...): not "
                                    "recorded (only FaultTolerant stores them, in py:state); "
                                    "the param_groups hold 'params' only")
            hyper = [{} for _ in opt["param_groups"]]
        groups = [dict(h, params=list(g["params"])) for h, g in zip(hyper, opt["param_groups"])]
        return {"state": state, "param_groups": groups}


    def _flat(self, region: str, desc: Dict[str, Any]) -> Optional[torch.Tensor]:
        """The group's flat state of a ZeRO region: every rank's slice in rank order (a
        scalar region: rank 0's), or None with an unmapped line."""
        ranks = self.regions.sharded.get(region)
        if not ranks:
            self.ex.unmapped.append(f"sharded state \"{region}\": not in the checkpoint")
            return None
        self.used.add(region)
        try:
            if desc["scalar"]:
                return _typed(ranks[min(ranks)], desc["dtype"], desc["shape"])
            n = len(ranks)
            if sorted(ranks) != list(range(n)):
                raise ValueError(f"ranks {sorted(ranks)} of {n}")
            return torch.cat([_typed(ranks[r], desc["dtype"], [desc["per_rank"]])
                              for r in range(n)])
        except ValueError as e:
            self.ex.unmapped.append(f"sharded state \"{region}\": {e}")
            return None

    def _sharded_state(self, state: Dict[int, Dict[str, Any]]) -> None:
        """ZeroOptimizer's state (layout "sharded"): each parameter's slice of the gathered
        flat state, as the unsharded optimizer would hold it (a scalar such as Adam's step
        given to every parameter of the group)."""
        for region, desc in self.layout.get("sharded", {}).items():
            flat = self._flat(region, desc)
            if flat is None:
                continue
            for idx, off, shape in desc["params"]:
                n = math.prod(int(d) for d in shape)
                t = flat.clone() if desc["scalar"] else flat[off:off + n].reshape(shape).clone()
                state.setdefault(int(idx), {})[desc["key"]] = t
            if not desc["scalar"]:
                self.ex.notes.append(f"sharded state \"{region}\": {len(flat)} elements "
                                     f"gathered from {len(flat) // desc['per_rank']} ranks")


def _pystate(regions: Regions, trust_pickle: bool, ex: Export) -> Optional[Dict[str, Any]]:
    """FaultTolerant's Python state (PyState: magic, u64 length, pickle), or None."""
    data = regions.replicated.get(PYSTATE_REGION)
    if data is None:
        return None
    if len(data) < 16 or data[:8] != PYSTATE_MAGIC:
        ex.unmapped.append("py:state: holds no Python state (no FTRTPY01 header)")
        return None
    n = struct.unpack_from("<Q", data, 8)[0]
    if n > len(data) - 16:
        ex.unmapped.append(f"py:state: names {n} bytes in a {len(data)}-byte region")
        return None
    try:
        blob = data[16:16 + n]
        obj = pickle.loads(blob) if trust_pickle else _PlainUnpickler(io.BytesIO(blob)).load()
    except Exception as e:  # noqa: BLE001 (any unpickling error is reported, not raised)
        ex.unmapped.append(f"py:state: not unpickled ({e}); the schedulers, scaler, extra "
                           f"state and hyperparameters are left out (--trust-pickle unpickles "
                           f"any object, as torch.load does)")
        return None
    return obj if isinstance(obj, dict) else None


def _layout(regions: Regions) -> Tuple[Optional[Dict[str, Any]], Optional[str]]:
    data = regions.replicated.get(LAYOUT_REGION)
    if data is None:
        return None, "no layout record (region py:layout): not a PyTorch job of this ftrt"
    try:
        doc = json.loads(data.decode())
    except (UnicodeDecodeError, ValueError) as e:
        return None, f"layout record unreadable: {e}"
    if doc.get("format") != LAYOUT_FORMAT or doc.get("version") != LAYOUT_VERSION:
        return None, (f"layout record {doc.get('format')!r} version {doc.get('version')!r}, "
                      f"this tool reads {LAYOUT_FORMAT} {LAYOUT_VERSION}")
    return doc, None


def _build_torch(regions: Regions, layout: Dict[str, Any], trust_pickle: bool) -> Export:
    m = _Mapper(regions, layout)
    ex = m.ex
    py = _pystate(regions, trust_pickle, ex)
    ex.model = m.model()
    ex.obj["model"] = ex.model
    ex.obj["optimizer"] = m.optimizer(py)
    scheds = list(py.get("schedulers", [])) if py else []
    ex.obj["schedulers"] = scheds
    ex.obj["scheduler"] = scheds[0] if len(scheds) == 1 else None
    ex.obj["scaler"] = py.get("scaler") if py else None
    ex.obj["extra_state"] = {k: v for k, (_, v) in py.get("extra", {}).items()} if py else {}
    if py is None and PYSTATE_REGION not in regions.replicated:
        ex.notes.append("no py:state (not a FaultTolerant job): no scheduler, scaler or "
                        "extra state")
    left = [n for n in regions.order if n not in m.used]
    for n in left:
        if n in layout["tensors"]:  # e.g. a non-persistent buffer: registered, no key
            ex.notes.append(f"region \"{n}\": registered, in no state_dict (a "
                            f"non-persistent buffer?): kept raw in ['ftrt']['raw']")
        else:
            ex.unmapped.append(f"region \"{n}\": not described by the layout (kept raw "
                               f"in ['ftrt']['raw'])")
    raw = raw_tensors(regions)
    ex.obj["ftrt_raw"] = {k: v for k, v in raw.items() if k.split("@rank")[0] in left}
    return ex


def build_export(regions: Regions, step: int, committed: bool, source: str,
                 raw: bool = False, trust_pickle: bool = False) -> Export:
    """The export of one step's regions (read_step()): the state_dicts of a PyTorch job when
    the step holds a layout record and not raw, else every region raw. obj["ftrt"] says
    where it came from (step, committed, nranks, source directory) and what was unmapped."""
    layout, why = (None, "raw export asked for (--raw)") if raw else _layout(regions)
    if layout is None:
        ex = Export({"regions": raw_tensors(regions)}, {}, raw=True)
        ex.model = dict(ex.obj["regions"])
        ex.notes.append(f"{why}: every region exported raw (uint8, its bytes)")
        left_raw = None
    else:
        ex = _build_torch(regions, layout, trust_pickle)
        left_raw = ex.obj.pop("ftrt_raw")
    ex.obj["ftrt"] = {"format": EXPORT_FORMAT, "version": 1, "step": step,
                      "committed": committed, "nranks": regions.nranks,
                      "source": os.path.abspath(source), "unmapped": list(ex.unmapped),
                      "notes": list(ex.notes)}
    if left_raw is not None:
        ex.obj["ftrt"]["raw"] = left_raw
    return ex


def safetensors_available() -> bool:
    """True when `safetensors.torch` imports (the optional extra: pip install .[safetensors])."""
    try:
        import safetensors.torch  # noqa: F401
        return True
    except ImportError:
        return False


def _tmp(path: str) -> str:
    d, b = os.path.split(os.path.abspath(path))
    return os.path.join(d, f".{b}.tmp.{os.getpid()}")


def _fsync_file(path: str) -> None:
    """fsync(path), after giving it the mode a new file gets here (0666 less the umask: the
    safetensors writer creates its files 0600)."""
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(path, 0o666 & ~mask)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_outputs(ex: Export, out: str, safetensors_out: Optional[str]) -> List[str]:
    """Writes ex.obj with torch.save() to `out` and, when safetensors_out, ex.model there
    (safetensors.torch.save_file); each through a temporary file renamed into place only
    when all are written and fsynced (an error leaves no output and no temporary file).
    Returns the paths written. Raises OSError / RuntimeError from the writers."""
    plan: List[Tuple[str, str]] = [(out, _tmp(out))]
    if safetensors_out:
        plan.append((safetensors_out, _tmp(safetensors_out)))
    try:
        torch.save(ex.obj, plan[0][1])
        if safetensors_out:
            from safetensors.torch import save_file
            tensors = {k: v.contiguous() for k, v in ex.model.items()}
            save_file(tensors, plan[1][1], metadata={"ftrt_step": str(ex.obj["ftrt"]["step"])})
        for _, tmp in plan:
            _fsync_file(tmp)
        for final, tmp in plan:
            os.replace(tmp, final)
    finally:
        for _, tmp in plan:
            if os.path.exists(tmp):
                os.unlink(tmp)
    return [final for final, _ in plan]

