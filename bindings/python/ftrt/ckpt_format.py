"""Reading an ftrt checkpoint directory from outside the job, for `python3 -m ftrt.ckpt`
(ftrt/ckpt.py): its steps, their shard files' headers and region tables, every CRC32C
checked, and the regions' bytes gathered from the shards. Read-only; no torch.

The format is that of checkpoint/format.h (docs/checkpoint.md "Shard format"), read here
from its documentation: <dir>/step-<S>/rank-<r>.ftrt per logical rank r of N trainers (a
40-byte header, a 112-byte table entry per region, 4 KiB-aligned data), MANIFEST (JSON) in a
committed step, LATEST naming the newest. A REPLICATED region of B bytes is cut into N slices,
rank r holding [B*r/N, B*(r+1)/N); a SHARDED region is each rank's own, whole. CRCs are
computed by libftrt's ftrt_crc32c() (ftrt._lib.crc32c), the function the writer uses.

Damage is reported as Problem(file, region, message) records: scan_step() collects every
problem of a step (verify), read_step() raises CkptError at the first one (export).
"""
import json
import os
import re
import struct
from dataclasses import dataclass, field
from typing import BinaryIO, Dict, Iterator, List, Optional, Tuple

from ._lib import crc32c

__all__ = ["KIND_REPLICATED", "KIND_SHARDED", "CkptError", "Problem", "Entry", "Shard",
           "StepInfo", "list_steps", "latest_step", "step_info", "read_table", "scan_step",
           "read_step", "Regions"]

KIND_REPLICATED, KIND_SHARDED = 0, 1
KIND_NAMES = {KIND_REPLICATED: "REPLICATED", KIND_SHARDED: "SHARDED"}
MAGIC = b"FTRTSHRD"
VERSION = 1
HDR_BYTES, ENT_BYTES, MAX_REGIONS = 40, 112, 4096
CHUNK = 8 << 20  # bytes read at a time when only checking
_STEP_RE = re.compile(r"^step-(0|[1-9][0-9]{0,18})$")
_RANK_RE = re.compile(r"^rank-(0|[1-9][0-9]*)\.ftrt$")


class CkptError(Exception):
    """A checkpoint that cannot be read as asked: `file` and `region` name where (None when
    it is not about one), str() says what."""

    def __init__(self, message: str, file: Optional[str] = None,
                 region: Optional[str] = None) -> None:
        super().__init__(message)
        self.file, self.region = file, region


@dataclass
class Problem:
    """One damage found by scan_step(): the file, the region (None: the file or MANIFEST as
    a whole) and what is wrong."""
    file: str
    region: Optional[str]
    message: str

    def __str__(self) -> str:
        where = self.file + (f": region \"{self.region}\"" if self.region else "")
        return f"{where}: {self.message}"


@dataclass
class Entry:
    """A region table entry of one shard (byte counts and offsets in bytes)."""
    name: str
    kind: int
    total_bytes: int
    slice_offset: int
    slice_bytes: int
    file_offset: int
    data_crc: int


@dataclass
class Shard:
    """A shard file's header and region table (size: the file's bytes)."""
    path: str
    step: int
    rank: int
    nranks: int
    size: int
    header_crc: int
    entries: List[Entry] = field(default_factory=list)


@dataclass
class StepInfo:
    """A step directory: committed (has a MANIFEST), latest (LATEST names it), nranks (from
    MANIFEST or the shard headers; 0 when unknown), files (shard paths present), nbytes (their
    total size), regions (region names of the first readable shard, in table order)."""
    step: int
    path: str
    committed: bool
    latest: bool
    nranks: int
    files: List[str]
    nbytes: int
    regions: List[Tuple[str, int, int]]  # (name, kind, total bytes)


def latest_step(directory: str) -> Optional[int]:
    """The step <dir>/LATEST names ("step-<S>" and an optional newline), or None (missing or
    garbage: ftrt's restore then takes the newest committed step too)."""
    try:
        with open(os.path.join(directory, "LATEST"), "rb") as f:
            text = f.read(64).decode("ascii", "replace")
    except OSError:
        return None
    m = _STEP_RE.match(text[:-1] if text.endswith("\n") else text)
    return int(m.group(1)) if m else None


def _step_dirs(directory: str) -> Iterator[Tuple[int, str]]:
    try:
        names = os.listdir(directory)
    except OSError as e:
        raise CkptError(f"cannot list the checkpoint directory: {e.strerror}", directory)
    for name in names:
        m = _STEP_RE.match(name)
        path = os.path.join(directory, name)
        if m and os.path.isdir(path):
            yield int(m.group(1)), path


def _shard_files(path: str) -> Dict[int, str]:
    out = {}
    for name in os.listdir(path):
        m = _RANK_RE.match(name)
        if m:
            out[int(m.group(1))] = os.path.join(path, name)
    return out


def list_steps(directory: str) -> List[StepInfo]:
    """Every step directory of a checkpoint directory, oldest first. Raises CkptError when
    `directory` cannot be listed."""
    latest = latest_step(directory)
    return [step_info(directory, s, latest) for s, _ in sorted(_step_dirs(directory))]


def _read_manifest(path: str, step: int) -> Dict[int, Tuple[str, int, int]]:
    """{rank: (file, bytes, header_crc32c)} of <step dir>/MANIFEST. Raises CkptError."""
    mpath = os.path.join(path, "MANIFEST")
    try:
        with open(mpath, "rb") as f:
            doc = json.loads(f.read())
        if doc.get("format") != 1 or doc.get("step") != step:
            raise ValueError(f"format {doc.get('format')!r}, step {doc.get('step')!r}")
        shards = {int(s["rank"]): (str(s["file"]), int(s["bytes"]), int(s["header_crc32c"]))
                  for s in doc["shards"]}
        if sorted(shards) != list(range(int(doc["nranks"]))):
            raise ValueError(f"shards {sorted(shards)} for nranks {doc['nranks']}")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise CkptError(f"unreadable MANIFEST: {e}", mpath)
    return shards


def step_info(directory: str, step: int, latest: Optional[int] = None) -> StepInfo:
    """What `ls` shows of one step (headers only: no data is read or checked)."""
    path = os.path.join(directory, f"step-{step}")
    files = _shard_files(path)
    committed = os.path.isfile(os.path.join(path, "MANIFEST"))
    nranks, regions = 0, []
    if committed:
        try:
            nranks = len(_read_manifest(path, step))
        except CkptError:
            nranks = 0
    for r in sorted(files):
        try:
            sh = read_table(files[r])
        except CkptError:
            continue
        nranks = nranks or sh.nranks
        regions = [(e.name, e.kind, e.total_bytes) for e in sh.entries]
        break
    nbytes = sum(os.path.getsize(p) for p in files.values())
    return StepInfo(step, path, committed, latest == step, nranks,
                    [files[r] for r in sorted(files)], nbytes, regions)


def _parse_header(path: str, head: bytes, size: int) -> Tuple[Shard, int]:
    """(the shard without its entries, header + table bytes). Raises CkptError."""
    if len(head) < HDR_BYTES or head[:8] != MAGIC:
        raise CkptError("not an ftrt shard (bad magic)", path)
    version, table_bytes, step, rank, nranks, nreg, hcrc = struct.unpack_from("<IIqIIII", head, 8)
    if version != VERSION:
        raise CkptError(f"shard format version {version}, this tool reads {VERSION}", path)
    if nreg > MAX_REGIONS or table_bytes != HDR_BYTES + ENT_BYTES * nreg or nranks < 1 or \
            rank >= nranks or step < 0:
        raise CkptError(f"bad header (regions {nreg}, table {table_bytes} bytes, rank "
                        f"{rank} of {nranks}, step {step})", path)
    if table_bytes > size:
        raise CkptError(f"truncated: {size} bytes, the table alone needs {table_bytes}", path)
    return Shard(path, step, rank, nranks, size, hcrc), table_bytes


def _parse_entry(path: str, raw: bytes, off: int) -> Entry:
    name_raw = raw[off:off + 64]
    nul = name_raw.find(b"\0")
    if nul <= 0:
        raise CkptError(f"region table entry at byte {off}: bad name", path)
    name = name_raw[:nul].decode("utf-8", "replace")
    kind, _, total, s_off, s_len, f_off, crc, _ = struct.unpack_from("<IIQQQQII", raw, off + 64)
    if kind not in KIND_NAMES:
        raise CkptError(f"unknown kind {kind}", path, name)
    return Entry(name, kind, total, s_off, s_len, f_off, crc)


def read_table(path: str) -> Shard:
    """Reads and checks a shard's header and region table (magic, version, sizes, header
    CRC32C, names, kinds, slices within the file). Raises CkptError naming the file (and
    region) on damage, or when the file cannot be read."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(HDR_BYTES)
            sh, table_bytes = _parse_header(path, head, size)
            raw = head + f.read(table_bytes - HDR_BYTES)
    except OSError as err:
        raise CkptError(f"cannot read: {err.strerror}", path)
    want = crc32c(raw[HDR_BYTES:], crc32c(b"\0\0\0\0", crc32c(raw[:36])))
    if want != sh.header_crc:
        raise CkptError(f"header/table CRC32C 0x{want:08x}, the header says "
                        f"0x{sh.header_crc:08x}", path)
    for i in range((table_bytes - HDR_BYTES) // ENT_BYTES):
        ent = _parse_entry(path, raw, HDR_BYTES + ENT_BYTES * i)
        if ent.file_offset + ent.slice_bytes > sh.size or \
                ent.slice_offset + ent.slice_bytes > ent.total_bytes:
            raise CkptError(f"slice [{ent.file_offset}, +{ent.slice_bytes}) outside the "
                            f"{sh.size}-byte file or the region", path, ent.name)
        sh.entries.append(ent)
    return sh


def _slice_crc(f: BinaryIO, e: Entry, keep: bool) -> Tuple[int, Optional[bytes]]:
    """(CRC32C of the slice's bytes as read, the bytes when keep). Raises OSError / EOFError."""
    f.seek(e.file_offset)
    if keep:
        data = f.read(e.slice_bytes)
        if len(data) != e.slice_bytes:
            raise EOFError("truncated")
        return crc32c(data), data
    crc, left = 0, e.slice_bytes
    buf = bytearray(min(CHUNK, max(left, 1)))
    while left:
        n = f.readinto(memoryview(buf)[:min(left, len(buf))])  # type: ignore[attr-defined]
        if not n:
            raise EOFError("truncated")
        crc = crc32c(memoryview(buf)[:n], crc)
        left -= n
    return crc, None


class Regions:
    """The regions of one step as read by read_step(): replicated[name] is the whole region
    (bytes, gathered from every shard's slice in rank order), sharded[name][rank] each rank's
    own bytes; kinds[name] its kind; order the names in table order; nranks the trainers."""

    def __init__(self, nranks: int) -> None:
        self.nranks = nranks
        self.replicated: Dict[str, bytes] = {}
        self.sharded: Dict[str, Dict[int, bytes]] = {}
        self.kinds: Dict[str, int] = {}
        self.order: List[str] = []
        self._parts: Dict[str, List[bytes]] = {}

    def add(self, rank: int, e: Entry, data: bytes) -> None:
        if e.name not in self.kinds:
            self.kinds[e.name] = e.kind
            self.order.append(e.name)
        if e.kind == KIND_SHARDED:
            self.sharded.setdefault(e.name, {})[rank] = data
        else:
            self._parts.setdefault(e.name, []).append(data)

    def finish(self) -> None:
        for name, parts in self._parts.items():
            self.replicated[name] = b"".join(parts)
        self._parts.clear()


def _check_geometry(sh: Shard, r: int, n: int, step: int) -> Optional[str]:
    if sh.step != step or sh.rank != r or sh.nranks != n:
        return (f"header says step {sh.step}, rank {sh.rank} of {sh.nranks}; expected step "
                f"{step}, rank {r} of {n}")
    return None


def _expected_ranks(path: str, step: int, problems: List[Problem]) -> Tuple[int, bool]:
    """(nranks, committed) of a step: from MANIFEST, else from the shards' headers."""
    if os.path.isfile(os.path.join(path, "MANIFEST")):
        try:
            return len(_read_manifest(path, step)), True
        except CkptError as e:
            problems.append(Problem(e.file or path, None, str(e)))
            return 0, True
    for p in sorted(_shard_files(path).values()):
        try:
            return read_table(p).nranks, False
        except CkptError:
            continue
    return 0, False


def _scan_shard(path: str, r: int, n: int, step: int, manifest: Optional[Tuple[str, int, int]],
                out: Optional[Regions], problems: List[Problem]) -> List[Entry]:
    """Checks one shard (its header and every region's CRC32C), appending what is wrong to
    problems; with out, keeps the slices' bytes there. Returns its table ([] if unreadable)."""
    try:
        sh = read_table(path)
    except CkptError as err:
        problems.append(Problem(path, err.region, str(err)))
        return []
    bad = _check_geometry(sh, r, n, step)
    if manifest is not None and (manifest[1] != sh.size or manifest[2] != sh.header_crc):
        bad = (f"MANIFEST records {manifest[1]} bytes and header CRC32C 0x{manifest[2]:08x}, "
               f"the file has {sh.size} bytes and 0x{sh.header_crc:08x}")
    if bad:
        problems.append(Problem(path, None, bad))
        return []
    with open(path, "rb") as f:
        for e in sh.entries:
            try:
                crc, data = _slice_crc(f, e, out is not None)
            except (OSError, EOFError) as err:
                problems.append(Problem(path, e.name, f"cannot read its data: {err}"))
                continue
            if crc != e.data_crc:
                problems.append(Problem(path, e.name, f"data CRC32C 0x{crc:08x}, the table "
                                                      f"says 0x{e.data_crc:08x}"))
            elif out is not None and data is not None:
                out.add(r, e, data)
    return sh.entries


def _check_coverage(path: str, n: int, tables: List[List[Entry]],
                    problems: List[Problem]) -> None:
    """Every region in every shard with one kind and size; a REPLICATED one's slices cover it
    exactly once (restore would refuse the step otherwise)."""
    seen: Dict[str, List[Entry]] = {}
    for t in tables:
        for e in t:
            seen.setdefault(e.name, []).append(e)
    for name, es in seen.items():
        kinds, totals = {e.kind for e in es}, {e.total_bytes for e in es}
        if len(es) != n or len(kinds) != 1:
            problems.append(Problem(path, name, f"in {len(es)} of {n} shards, kinds "
                                                f"{sorted(KIND_NAMES[k] for k in kinds)}"))
            continue
        covered = sum(e.slice_bytes for e in es)
        if es[0].kind == KIND_REPLICATED and (len(totals) != 1 or covered != es[0].total_bytes):
            problems.append(Problem(path, name, f"slices of {covered} bytes for sizes "
                                                f"{sorted(totals)}"))


def scan_step(directory: str, step: int, keep: bool = False) -> Tuple[List[Problem],
                                                                      Optional[Regions], bool]:
    """Checks every shard of step `step`: MANIFEST (when committed: its shards, sizes and
    header CRCs), each shard's header and table, and the CRC32C of every region slice.
    Returns (problems, regions (with keep, else None), committed). No problem: the step's
    bytes are exactly what the job wrote. Raises CkptError when the step does not exist."""
    path = os.path.join(directory, f"step-{step}")
    if not os.path.isdir(path):
        raise CkptError(f"no step {step} (no directory step-{step})", directory)
    problems: List[Problem] = []
    n, committed = _expected_ranks(path, step, problems)
    manifest = _read_manifest(path, step) if committed and n else {}
    if n == 0 and not problems:
        problems.append(Problem(path, None, "no readable shard file rank-<r>.ftrt"))
    out = Regions(n) if keep else None
    tables: List[List[Entry]] = []
    for r in range(n):
        fname = manifest[r][0] if r in manifest else f"rank-{r}.ftrt"
        spath = os.path.join(path, fname)
        if not os.path.isfile(spath):
            problems.append(Problem(spath, None, f"missing (shard of rank {r} of {n})"))
            continue
        tables.append(_scan_shard(spath, r, n, step, manifest.get(r), out, problems))
    if not problems:
        _check_coverage(path, n, tables, problems)
    if out is not None:
        out.finish()
    return problems, out, committed


def read_step(directory: str, step: int) -> Tuple[Regions, bool]:
    """Every region of step `step`, each CRC32C checked: (regions, committed). Raises
    CkptError naming the first damaged file and region (nothing partial is returned)."""
    problems, regions, committed = scan_step(directory, step, keep=True)
    if problems:
        p = problems[0]
        more = f" (and {len(problems) - 1} more problem(s): run verify)" if len(problems) > 1 \
            else ""
        raise CkptError(p.message + more, p.file, p.region)
    assert regions is not None
    return regions, committed
