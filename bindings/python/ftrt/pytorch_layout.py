"""The layout record of a PyTorch job's checkpoint: what register_state() registered, as a
JSON document kept in one small REPLICATED region, "py:layout", so that a checkpoint can be
turned back into named tensors outside ftrt (`python3 -m ftrt.ckpt export`, ftrt/ckpt.py).

The shard files hold bytes per region name; this record says what those bytes are: for each
registered tensor its dtype and shape, which state_dict() keys of the model each region
fills (tied parameters: several keys, one region; a buffer left out of the registration: no
region), and the optimizer's param_groups as state_dict() numbers them, with the region of
each state tensor. It holds nothing that changes while training or between relaunches of the
same job (no hyperparameter, no step count: FaultTolerant keeps those in "py:state"), so its
size, which restore checks like any region's, is a function of the model's structure only.

Document (format "ftrt-layout", version 1; JSON, UTF-8, no padding; docs/checkpoint.md
"The layout record"):

    {"format": "ftrt-layout", "version": 1,
     "tensors": {<region>: {"dtype": "float32", "shape": [64, 10]}, ...},
     "model": {"class": "<module path>.<class>",
               "state_dict": [[<key>, <region or null>, <dtype>, <shape>], ...]},
     "optimizer": null | {"class": "torch.optim.sgd.SGD",
                          "param_groups": [{"params": [0, 1], "names": ["0.weight", ...]}],
                          "state": {"<index>": {"<state key>": <region>}}},
     "sharded": {}}

"sharded" describes flat state split over the trainers (ftrt.pytorch.ZeroOptimizer's state,
SHARDED regions "zero:g<group>:<key>"; empty otherwise): an entry per region name
{"group": <param group>, "key": <state key>, "dtype": ..., "per_rank": <elements each rank
holds>, "scalar": <true for a per-shard scalar such as Adam's step, the same on every rank>,
"shape": <the region's shape>, "params": [[<param index>, <element offset>, <shape>], ...]}:
rank r of N holds elements [r*per_rank, (r+1)*per_rank) of the group's flat tensor (zero
padded at the end), parameter i its elements [offset, offset + numel). "optimizer" is then the
inner optimizer class's, numbered over the ZeroOptimizer's param_groups, with "state" {}.
"""
import json
from typing import Any, Dict, List, Optional

import torch

__all__ = ["LAYOUT_REGION", "LAYOUT_FORMAT", "LAYOUT_VERSION", "dtype_name", "build_layout",
           "layout_tensor"]

LAYOUT_REGION = "py:layout"
LAYOUT_FORMAT = "ftrt-layout"
LAYOUT_VERSION = 1


def dtype_name(dtype: torch.dtype) -> str:
    """"float32" for torch.float32: the attribute of `torch` that names the dtype."""
    return str(dtype).replace("torch.", "")


def _tensor_desc(t: torch.Tensor) -> Dict[str, Any]:
    return {"dtype": dtype_name(t.dtype), "shape": list(t.shape)}


def _qualname(obj: Any) -> str:
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def _model_part(model: torch.nn.Module, region_of: Dict[int, str]) -> Dict[str, Any]:
    rows: List[List[Any]] = []
    for key, t in model.state_dict(keep_vars=True).items():
        if torch.is_tensor(t):
            rows.append([key, region_of.get(id(t)), dtype_name(t.dtype), list(t.shape)])
    return {"class": _qualname(model), "state_dict": rows}


def _optimizer_part(optimizer: torch.optim.Optimizer, param_name: Dict[int, str],
                    region_of_state: Dict[Any, str]) -> Dict[str, Any]:
    """param_groups numbered as Optimizer.state_dict() numbers them: in group order, from 0."""
    groups: List[Dict[str, Any]] = []
    state: Dict[str, Dict[str, str]] = {}
    index = 0
    for g in optimizer.param_groups:
        ids, names = [], []
        for p in g["params"]:
            ids.append(index)
            names.append(param_name.get(id(p), f"#{index}"))
            keys = {k: r for (pid, k), r in region_of_state.items() if pid == id(p)}
            if keys:
                state[str(index)] = keys
            index += 1
        groups.append({"params": ids, "names": names})
    return {"class": _qualname(optimizer), "param_groups": groups, "state": state}


def build_layout(model: torch.nn.Module, optimizer: Optional[torch.optim.Optimizer],
                 entries: List[Any], zero: Optional[Dict[str, Any]] = None) -> bytes:
    """The layout document (UTF-8 JSON bytes) of the regions in `entries`: StateRegistry
    entries (region name, tensor, data_ptr, optimizer owner (param, key) or None), registered
    for `model` and `optimizer` (None: "optimizer" is null). Deterministic: the same model
    structure and registration give the same bytes on every trainer. zero: a ZeroOptimizer's
    {"optimizer": ..., "sharded": ...} (ZeroOptimizer.layout_part()), replacing those parts."""
    tensors: Dict[str, Any] = {}
    region_of: Dict[int, str] = {}
    region_of_state: Dict[Any, str] = {}
    for name, t, _, owner in entries:
        if name == LAYOUT_REGION:
            continue  # (a rebuilt record does not describe itself)
        tensors[name] = _tensor_desc(t)
        region_of.setdefault(id(t), name)
        if owner is not None:
            region_of_state[(id(owner[0]), str(owner[1]))] = name
    param_name = {id(p): n for n, p in model.named_parameters()}
    doc = {"format": LAYOUT_FORMAT, "version": LAYOUT_VERSION, "tensors": tensors,
           "model": _model_part(model, region_of),
           "optimizer": None if optimizer is None else
           _optimizer_part(optimizer, param_name, region_of_state),
           "sharded": {}}
    if zero is not None:  # a ZeroOptimizer's: its class, numbering and flat shards
        doc["optimizer"], doc["sharded"] = zero["optimizer"], zero["sharded"]
    return json.dumps(doc, separators=(",", ":")).encode()


def layout_tensor(doc: bytes) -> torch.Tensor:
    """A CPU uint8 tensor holding `doc` (the region registered as LAYOUT_REGION)."""
    return torch.frombuffer(bytearray(doc), dtype=torch.uint8).clone()
