"""Low-level ctypes binding of libftrt: loading, struct mirrors, prototypes, error mapping,
and the internals of the high-level API (lib(), load(), check(), error_for(), buffer_of()).

Private: the public names are re-exported by ``ftrt`` (ftrt/__init__.py, its ``__all__``).
Everything here mirrors include/ftrt.h (and, when the loaded library is libftrt_gpu,
include/ftrt_gpu.h) one to one. Use this module directly only for what the wrappers do not
cover (``ftrt._lib.lib().ftrt_xxx(...)`` with the declared argtypes; every int-returning
function returns the raw code, unchecked); it may change between minor versions.

Finding libftrt (see candidates() and load()), first that loads wins:
  1. ``FTRT_LIB``: the path of the library (libftrt.so or libftrt_gpu.so); nothing else is
     tried when it is set (the tests set it; it also overrides a packaged library);
  2. the library inside this package, ``ftrt/libftrt.so.<major>`` beside this file: what
     ``pip install .`` at the repository root puts there (CMake through scikit-build-core,
     pyproject.toml). It is loaded by its path, so it needs no RPATH, LD_LIBRARY_PATH or
     ldconfig;
  3. the installed library through the dynamic loader: ``libftrt.so.<major>`` (the soname of
     this package's major version; LD_LIBRARY_PATH, ld.so.cache, the default directories),
     then ``ctypes.util.find_library("ftrt")``;
  4. ``pkg-config --variable=libdir ftrt`` (an install prefix on PKG_CONFIG_PATH, e.g. one that
     is not in ld.so.conf);
  5. the build tree of the source tree this package lives in (``<repo>/build/libftrt.so``),
     when it is imported from ``bindings/python`` of a checkout.
3 to 5 are for development trees and for a libftrt installed with ``cmake --install``. When
none loads, OSError lists every candidate and why it failed. Open MPI's plugins (mca_*.so) are
linked against libmpi's symbols without depending on it, so libmpi must be loaded with
RTLD_GLOBAL before libftrt, or MPI_Init fails to load its components when ftrt is loaded from
Python (a C program gets this for free from the dynamic linker).
"""
import ctypes
import ctypes.util
import os
import shutil
import subprocess
import threading
from typing import Any, Dict, List, Optional, Tuple, Type, TypeVar, Union

from ._version import __version__

# A buffer argument: a contiguous torch.Tensor, a C-contiguous writable numpy array, a ctypes
# array/structure, or an int address (see buffer_of()). Any: torch and numpy are optional.
Buffer = Any

# ----------------------------------------------------------------------------------------------
# Return codes (FTRT_ERROR_MAP of ftrt.h: the positive results and the errors). tests/python
# checks this table against the header and against ftrt_err_name() of the loaded library.
# ----------------------------------------------------------------------------------------------

OK = 0
DONE = 1                 # FTRT_DONE: ftrt_init() of the coordinator or an unused spare
SKIP_MPI_FINALIZE = 2    # FTRT_SKIP_MPI_FINALIZE: ftrt_finalize(), caller owns MPI
SKIPPED = 3              # FTRT_SKIPPED: checkpoint not taken under FTRT_CKPT_POLICY=skip

ERECOVER = -1001
ENOSPARE = -1002
ECOORD = -1003
EABORT = -1004
ECONFIG = -1005
ECORRUPT = -1006
ENOCKPT = -1007
EMISMATCH = -1008
EPROTO = -1009
EMPI = -1010
EINVAL = -1011
ESTATE = -1012
ETIMEDOUT = -1013
ENODEV = -1014
ECUDA = -1015
ENCCL = -1016
ENOTSUP = -1017
EDRAINED = -1018
EJOIN = -1019

# Region flags, dtypes, ops, checkpoint policy and stats flags.
REGION_REPLICATED = 0
REGION_SHARDED = 1
REGION_DEVICE = 2
REGION_OPTIONAL = 4  # FTRT_REGION_OPTIONAL: a checkpoint without it still restores

# FTRT_NO_SPARE values (Config.no_spare; docs/detection-and-recovery.md "No spare left")
NO_SPARE_STOP = 0
NO_SPARE_SHRINK = 1
NO_SPARE_FOLD = 2
# FTRT_SHARD_REDUNDANCY values (Config.shard_redundancy; docs/detection-and-recovery.md)
SHARD_REPLICA = 0
SHARD_ERASURE = 1
FLOAT32, FLOAT64, INT64, BFLOAT16, FLOAT16 = 0, 1, 2, 3, 4  # ftrt_dtype
SUM, MIN, MAX = 0, 1, 2
CKPT_WAIT, CKPT_SKIP = 0, 1
CKPT_STAT_DIRECT, CKPT_STAT_FIXED, CKPT_STAT_STREAMING = 1, 2, 4


class FtrtError(Exception):
    """A negative return code of libftrt.

    Attributes:
      code:    the int code (an FTRT_E* value below -1000, or -errno).
      name:    its symbolic name from ftrt_err_name() ("FTRT_ERECOVER", "ENOSPC", ...).
      message: ftrt_strerror(code).
      call:    the C function that returned it (e.g. "ftrt_bucketer_wait_all"), or None.
    """

    def __init__(self, code: int, call: Optional[str] = None) -> None:
        self.code = int(code)
        self.name = err_name(self.code)
        self.message = strerror(self.code)
        self.call = call
        where = f"{call}: " if call else ""
        super().__init__(f"{where}{self.message} ({self.name}, {self.code})")

    @property
    def errno(self) -> Optional[int]:
        """The positive errno for -errno codes, else None."""
        return -self.code if -1000 < self.code < 0 else None


class FtrtRecover(FtrtError):
    """FTRT_ERECOVER: a rank failed and the epoch changed. Catch it in the training loop, call
    ftrt_recover() (Context.recover() / ftrt.pytorch.recover()) and resume at the step it
    returns."""


class FtrtNoSpare(FtrtError):
    """FTRT_ENOSPARE: a trainer failed and no hot spare is left; exit non-zero, a relaunch
    resumes from the last committed checkpoint."""


class FtrtCoordLost(FtrtError):
    """FTRT_ECOORD: the coordinator (world rank 0) is gone."""


class FtrtAborted(FtrtError):
    """FTRT_EABORT: the coordinator aborted the job."""


class FtrtConfigError(FtrtError):
    """FTRT_ECONFIG: invalid configuration (the log names the variable and value)."""


class FtrtCorrupt(FtrtError):
    """FTRT_ECORRUPT: checkpoint data failed its integrity check."""


class FtrtNoCheckpoint(FtrtError):
    """FTRT_ENOCKPT: checkpoints exist but none is usable."""


class FtrtMismatch(FtrtError):
    """FTRT_EMISMATCH: registered regions differ from the checkpoint or the other ranks."""


class FtrtProtocol(FtrtError):
    """FTRT_EPROTO: control-plane protocol error."""


class FtrtMPIError(FtrtError):
    """FTRT_EMPI: an MPI call failed (FTRT_LOG=debug has the MPI error string)."""


class FtrtInvalid(FtrtError):
    """FTRT_EINVAL: invalid argument."""


class FtrtState(FtrtError):
    """FTRT_ESTATE: call not valid in this state or role."""


class FtrtTimeout(FtrtError):
    """FTRT_ETIMEDOUT: timed out waiting on the control plane."""


class FtrtNoDevice(FtrtError):
    """FTRT_ENODEV: no usable CUDA device."""


class FtrtCudaError(FtrtError):
    """FTRT_ECUDA: a CUDA runtime call failed."""


class FtrtNcclError(FtrtError):
    """FTRT_ENCCL: an NCCL call failed."""


class FtrtNotSupported(FtrtError):
    """FTRT_ENOTSUP: not supported by this build of libftrt (e.g. a device region without
    CUDA)."""


class FtrtDrained(FtrtError):
    """FTRT_EDRAINED: this process was drained (tools/ftrt-ctl drain): its logical rank went to
    a hot spare, the job goes on without it. Finalize and exit 0; write none of the job's
    outputs (another process holds the logical rank now). FaultTolerant.step() does this by
    itself (it raises SystemExit(0))."""


class FtrtJoinRefused(FtrtError):
    """FTRT_EJOIN: this process asked to join a running job as a hot spare (ftrt-run --join)
    and the job's coordinator (or the process itself) refused it; the log says why (the secret,
    another version, a job not joinable, out of join slots or ended, or a job or joiner not on
    the job's mpirun's node: Open MPI 4.1's limit, docs/join.md "Limits")."""


# name in ftrt.h -> (code, exception class)
ERRORS = {
    "FTRT_ERECOVER": (ERECOVER, FtrtRecover),
    "FTRT_ENOSPARE": (ENOSPARE, FtrtNoSpare),
    "FTRT_ECOORD": (ECOORD, FtrtCoordLost),
    "FTRT_EABORT": (EABORT, FtrtAborted),
    "FTRT_ECONFIG": (ECONFIG, FtrtConfigError),
    "FTRT_ECORRUPT": (ECORRUPT, FtrtCorrupt),
    "FTRT_ENOCKPT": (ENOCKPT, FtrtNoCheckpoint),
    "FTRT_EMISMATCH": (EMISMATCH, FtrtMismatch),
    "FTRT_EPROTO": (EPROTO, FtrtProtocol),
    "FTRT_EMPI": (EMPI, FtrtMPIError),
    "FTRT_EINVAL": (EINVAL, FtrtInvalid),
    "FTRT_ESTATE": (ESTATE, FtrtState),
    "FTRT_ETIMEDOUT": (ETIMEDOUT, FtrtTimeout),
    "FTRT_ENODEV": (ENODEV, FtrtNoDevice),
    "FTRT_ECUDA": (ECUDA, FtrtCudaError),
    "FTRT_ENCCL": (ENCCL, FtrtNcclError),
    "FTRT_ENOTSUP": (ENOTSUP, FtrtNotSupported),
    "FTRT_EDRAINED": (EDRAINED, FtrtDrained),
    "FTRT_EJOIN": (EJOIN, FtrtJoinRefused),
}
_CLASS_OF: Dict[int, Type[FtrtError]] = {code: cls for code, cls in ERRORS.values()}


def error_for(code: int, call: Optional[str] = None) -> FtrtError:
    """The exception instance (not raised) for negative `code`: FtrtRecover for
    FTRT_ERECOVER, ..., plain FtrtError for -errno and codes this binding does not know. `call`
    names the C function that returned it. Loads libftrt (for the code's name and message)."""
    return _CLASS_OF.get(int(code), FtrtError)(code, call)


# ----------------------------------------------------------------------------------------------
# Structs (exact mirrors of ftrt.h; tests/python compiles a C program to compare every offset)
# ----------------------------------------------------------------------------------------------

class _StrFields(ctypes.Structure):
    """A Structure with helpers for its NUL-terminated char[] fields."""

    def set_str(self, field: str, value: "str | bytes") -> None:
        """Sets char[] field `field` to `value` (str, UTF-8 encoded, or bytes; copied). Raises
        ValueError when it does not fit with its NUL terminator, AttributeError when `field`
        is not a char[] field."""
        raw = value.encode() if isinstance(value, str) else bytes(value)
        ftype = dict(self._fields_).get(field)
        if ftype is None or getattr(ftype, "_type_", None) is not ctypes.c_char:
            raise AttributeError(f"{type(self).__name__} has no char[] field {field!r}")
        cap = ctypes.sizeof(ftype)
        if b"\0" in raw or len(raw) >= cap:
            raise ValueError(f"{field}: {len(raw)} bytes do not fit in char[{cap}] "
                             f"(with the terminating NUL), or contain a NUL")
        setattr(self, field, raw)

    def get_str(self, field: str) -> str:
        """The char[] field `field` decoded as UTF-8 (errors replaced)."""
        return getattr(self, field).decode(errors="replace")


_C = TypeVar("_C", bound="Config")
_B = TypeVar("_B", bound="BucketConfig")


class Config(_StrFields):
    """ftrt_config (include/ftrt.h), field for field (ctest unit.settings_table checks the
    fields, their order and types against the settings table of base/config.c; tests/python
    their offsets against the compiler). Fill it with Config.from_env() (which calls
    ftrt_config_init() with ctypes.sizeof(Config)), then override fields; string fields with
    cfg.set_str("ckpt_dir", path). Units are those of the header: *_ms milliseconds, *_s
    seconds, *_kb KiB, *_mb MiB, *_us microseconds, peak_flops FLOP/s. The struct is append-only:
    a newer library accepts this mirror and gives the fields it lacks their defaults."""

    _fields_ = [
        ("size", ctypes.c_uint32),
        ("version", ctypes.c_uint32),
        ("spares", ctypes.c_int),
        ("heartbeat_ms", ctypes.c_int),
        ("heartbeat_timeout_ms", ctypes.c_int),
        ("init_timeout_ms", ctypes.c_int),
        ("ckpt_keep", ctypes.c_int),
        ("log_level", ctypes.c_int),
        ("ckpt_dir", ctypes.c_char * 1024),
        ("status_file", ctypes.c_char * 1024),
        ("report_file", ctypes.c_char * 1024),
        ("fault_log", ctypes.c_char * 1024),
        ("coord_addr", ctypes.c_char * 256),
        ("progress_timeout_ms", ctypes.c_int),
        ("straggler_ratio", ctypes.c_double),
        ("peak_flops", ctypes.c_double),
        ("mtbf_s", ctypes.c_double),
        ("metrics_file", ctypes.c_char * 1024),
        ("progress", ctypes.c_int),
        ("timeline_max", ctypes.c_int),
        ("ckpt_qd", ctypes.c_int),
        ("ckpt_chunk_kb", ctypes.c_int),
        ("ckpt_staging_mb", ctypes.c_int),
        ("ckpt_policy", ctypes.c_int),
        ("ckpt_direct", ctypes.c_int),
        ("async_progress", ctypes.c_int),
        ("progress_poll_us", ctypes.c_int),
        ("sdc_every", ctypes.c_int),
        ("shard_replica_every", ctypes.c_int),
        ("host_agents", ctypes.c_int),
        ("standby", ctypes.c_int),
        ("timeline_budget_mb", ctypes.c_int),
        ("timeline_ranks", ctypes.c_int),
        ("nccl_cta_policy", ctypes.c_int),
        ("nccl_min_ctas", ctypes.c_int),
        ("nccl_max_ctas", ctypes.c_int),
        ("sigterm", ctypes.c_int),
        ("no_spare", ctypes.c_int),
        ("fold_max", ctypes.c_int),
        ("shard_redundancy", ctypes.c_int),
        ("ec_group", ctypes.c_int),
        ("joinable", ctypes.c_int),
    ]

    @classmethod
    def from_env(cls: Type[_C], strict: bool = False) -> _C:
        """Defaults, then the FTRT_* environment (ftrt_config_init()).

        A bad environment value (FTRT_ECONFIG) keeps that field's default; it is raised as
        FtrtConfigError when `strict`, else reported with warnings.warn (the library's log
        names the variable). A library with a larger ftrt_config (newer than this binding)
        gives the fields this mirror lacks their defaults; raises FtrtInvalid when this mirror is
        larger than the library's ftrt_config (the binding is newer than the library)."""
        cfg = cls()
        rc = lib().ftrt_config_init(ctypes.byref(cfg), ctypes.sizeof(cfg))
        if rc == ECONFIG and not strict:
            import warnings
            warnings.warn(f"ftrt_config_init: {strerror(rc)} ({err_name(rc)}); the defaults are "
                          f"kept for those variables", RuntimeWarning, stacklevel=2)
        elif rc < 0:
            raise error_for(rc, "ftrt_config_init")
        return cfg


class BucketConfig(ctypes.Structure):
    """ftrt_bucket_config: bucket_bytes / first_bucket_bytes in bytes (defaults 25 MiB / 1 MiB,
    DDP's), reverse (1: gradients become ready from the last tensor to the first), average (1:
    the mean over the trainers, 0: the sum), piece_bytes (largest single allreduce, bytes;
    default 4 MiB, 0 = whole buckets), in_place (1: pieces whose tensors lie back to back in
    bucket order are reduced on that memory, no copy; include/ftrt.h says what the CPU plane
    gives up). Fill it with BucketConfig.defaults()."""

    _fields_ = [
        ("size", ctypes.c_uint32),
        ("version", ctypes.c_uint32),
        ("bucket_bytes", ctypes.c_size_t),
        ("first_bucket_bytes", ctypes.c_size_t),
        ("reverse", ctypes.c_int),
        ("average", ctypes.c_int),
        ("piece_bytes", ctypes.c_size_t),
        ("in_place", ctypes.c_int),
    ]

    @classmethod
    def defaults(cls: Type[_B]) -> _B:
        """ftrt_bucket_config_init() with ctypes.sizeof(BucketConfig) (a library with a
        larger struct fills the fields this mirror has; its newer fields take their defaults).
        Raises FtrtInvalid when this mirror is smaller than the oldest struct the library
        takes."""
        cfg = cls()
        check(lib().ftrt_bucket_config_init(ctypes.byref(cfg), ctypes.sizeof(cfg)),
              "ftrt_bucket_config_init")
        return cfg


class CkptStats(ctypes.Structure):
    """ftrt_ckpt_stats (ftrt_checkpoint_stats()): counters, seconds (*_s) and bytes."""

    _fields_ = [
        ("size", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("started", ctypes.c_int64),
        ("skipped", ctypes.c_int64),
        ("persisted", ctypes.c_int64),
        ("failed", ctypes.c_int64),
        ("abandoned", ctypes.c_int64),
        ("committed", ctypes.c_int64),
        ("last_committed_step", ctypes.c_int64),
        ("stall_s", ctypes.c_double),
        ("last_stall_s", ctypes.c_double),
        ("last_snapshot_s", ctypes.c_double),
        ("last_persist_s", ctypes.c_double),
        ("last_write_s", ctypes.c_double),
        ("last_bytes", ctypes.c_uint64),
        ("staging_bytes", ctypes.c_uint64),
        ("staging_slots", ctypes.c_int32),
        ("pad", ctypes.c_int32),
        ("last_restore_s", ctypes.c_double),
        ("last_restore_bytes", ctypes.c_uint64),
    ]

    def as_dict(self) -> Dict[str, Any]:
        """The fields as a dict (without size and pad)."""
        return {n: getattr(self, n) for n, _ in self._fields_ if n not in ("size", "pad")}


# ----------------------------------------------------------------------------------------------
# Prototypes: every FTRT_API function of ftrt.h (checked against the header by the tests)
# ----------------------------------------------------------------------------------------------

_c_int, _c_size, _c_i64, _c_dbl = ctypes.c_int, ctypes.c_size_t, ctypes.c_int64, ctypes.c_double
_vp = ctypes.c_void_p                      # opaque handles (ftrt_ctx*, ftrt_request*, ...)
_pvp = ctypes.POINTER(ctypes.c_void_p)     # handle out-parameters (ftrt_ctx **, ...)
_pi64 = ctypes.POINTER(ctypes.c_int64)

_pint = ctypes.POINTER(ctypes.c_int)

PROTOTYPES = {
    "ftrt_strerror": (ctypes.c_char_p, [_c_int]),
    "ftrt_err_name": (ctypes.c_char_p, [_c_int]),
    "ftrt_version": (_c_int, [_pint, _pint, _pint]),
    "ftrt_last_error": (ctypes.c_char_p, []),
    "ftrt_crc32c": (_c_int, [_vp, _c_size, ctypes.POINTER(ctypes.c_uint32)]),
    "ftrt_alloc": (_c_int, [_c_size, _pvp]),
    "ftrt_free": (_c_int, [_vp]),
    "ftrt_config_init": (_c_int, [ctypes.POINTER(Config), _c_size]),
    "ftrt_init": (_c_int, [ctypes.POINTER(Config), _pvp]),
    "ftrt_finalize": (_c_int, [_vp]),
    "ftrt_rank": (_c_int, [_vp]),
    "ftrt_size": (_c_int, [_vp]),
    "ftrt_data_rank": (_c_int, [_vp]),
    "ftrt_data_ranks": (_c_int, [_vp, _pint, _c_int]),
    "ftrt_data_size": (_c_int, [_vp]),
    "ftrt_world_rank": (_c_int, [_vp]),
    "ftrt_epoch": (_c_int, [_vp]),
    "ftrt_register": (_c_int, [_vp, ctypes.c_char_p, _vp, _c_size, ctypes.c_uint]),
    "ftrt_unregister": (_c_int, [_vp, ctypes.c_char_p]),
    "ftrt_restore": (_c_int, [_vp, _pi64]),
    "ftrt_checkpoint_start": (_c_int, [_vp, _c_i64]),
    "ftrt_checkpoint_prepare": (_c_int, [_vp]),
    "ftrt_checkpoint_wait_snapshot": (_c_int, [_vp]),
    "ftrt_checkpoint": (_c_int, [_vp, _c_i64]),
    "ftrt_checkpoint_wait_commit": (_c_int, [_vp, _c_i64, _c_int]),
    "ftrt_checkpoint_stats": (_c_int, [_vp, ctypes.POINTER(CkptStats), _c_size]),
    "ftrt_allreduce": (_c_int, [_vp, _vp, _c_size, _c_int, _c_int]),
    "ftrt_allreduce_start": (_c_int, [_vp, _vp, _c_size, _c_int, _c_int, _pvp]),
    "ftrt_allreduce_ordered": (_c_int, [_vp, _c_int, _pint, _c_int, _pvp, _vp, _c_size, _c_int]),
    "ftrt_broadcast": (_c_int, [_vp, _vp, _c_size, _c_int, _c_int]),
    "ftrt_broadcast_start": (_c_int, [_vp, _vp, _c_size, _c_int, _c_int, _pvp]),
    "ftrt_reduce_scatter": (_c_int, [_vp, _vp, _vp, _c_size, _c_int, _c_int]),
    "ftrt_reduce_scatter_start": (_c_int, [_vp, _vp, _vp, _c_size, _c_int, _c_int, _pvp]),
    "ftrt_allgather": (_c_int, [_vp, _vp, _vp, _c_size, _c_int]),
    "ftrt_allgather_start": (_c_int, [_vp, _vp, _vp, _c_size, _c_int, _pvp]),
    "ftrt_request_test": (_c_int, [_vp]),
    "ftrt_request_wait": (_c_int, [_vp]),
    "ftrt_request_free": (_c_int, [_vp]),
    "ftrt_bucket_config_init": (_c_int, [ctypes.POINTER(BucketConfig), _c_size]),
    "ftrt_bucketer_create": (_c_int, [_vp, ctypes.POINTER(ctypes.c_size_t), _c_int, _c_int,
                                      ctypes.POINTER(BucketConfig), _pvp]),
    "ftrt_bucketer_ready": (_c_int, [_vp, _c_int, _vp]),
    "ftrt_bucketer_ready_from_any_thread": (_c_int, [_vp, _c_int, _vp]),
    "ftrt_bucketer_drain": (_c_int, [_vp]),
    "ftrt_bucketer_wait_all": (_c_int, [_vp]),
    "ftrt_bucketer_reset": (_c_int, [_vp]),
    "ftrt_bucketer_buckets": (_c_int, [_vp]),
    "ftrt_bucketer_bucket_of": (_c_int, [_vp, _c_int]),
    "ftrt_bucketer_pieces": (_c_int, [_vp]),
    "ftrt_bucketer_layout": (_c_int, [_vp, _c_int, ctypes.POINTER(ctypes.c_size_t)]),
    "ftrt_bucketer_packed_bytes": (ctypes.c_longlong, [_vp]),
    "ftrt_bucketer_free": (_c_int, [_vp]),
    "ftrt_step_done": (_c_int, [_vp, _c_i64]),
    "ftrt_set_job_info": (_c_int, [_vp, _c_i64, _c_dbl, _c_dbl]),
    "ftrt_cpu_peak_flops": (_c_int, [_c_int, _c_int, ctypes.POINTER(ctypes.c_double),
                                     ctypes.c_char_p, _c_size]),
    "ftrt_host_trainers": (_c_int, [_vp]),
    "ftrt_check": (_c_int, [_vp]),
    "ftrt_recover": (_c_int, [_vp, _pi64]),
    "ftrt_set_exit_code": (_c_int, [_vp, _c_int]),
}

# include/ftrt_gpu.h: present only in libftrt_gpu (cudaStream_t is a pointer). Declared when
# the loaded library has them; pytorch.GradAverager uses the plane and its bucketer for CUDA
# parameters.
GPU_PROTOTYPES = {
    "ftrt_gpu_create": (_c_int, [_vp, _c_int, _pvp]),
    "ftrt_gpu_free": (_c_int, [_vp]),
    "ftrt_gpu_connect": (_c_int, [_vp]),
    "ftrt_gpu_stream": (_vp, [_vp]),
    "ftrt_gpu_allreduce_start": (_c_int, [_vp, _vp, _c_size, _c_int, _c_int, _vp, _pvp]),
    "ftrt_gpu_broadcast_start": (_c_int, [_vp, _vp, _c_size, _c_int, _c_int, _vp, _pvp]),
    "ftrt_gpu_reduce_scatter_start": (_c_int, [_vp, _vp, _vp, _c_size, _c_int, _c_int, _vp,
                                               _pvp]),
    "ftrt_gpu_allgather_start": (_c_int, [_vp, _vp, _vp, _c_size, _c_int, _vp, _pvp]),
    "ftrt_gpu_request_order": (_c_int, [_vp, _vp]),
    "ftrt_gpu_bucketer_create": (_c_int, [_vp, ctypes.POINTER(ctypes.c_size_t), _c_int, _c_int,
                                          ctypes.POINTER(BucketConfig), _pvp]),
    "ftrt_gpu_bucketer_ready": (_c_int, [_vp, _c_int, _vp, _vp]),
    "ftrt_gpu_bucketer_ready_from_any_thread": (_c_int, [_vp, _c_int, _vp, _vp]),
    "ftrt_gpu_bucketer_order": (_c_int, [_vp, _vp]),
    "ftrt_gpu_bucketer_order_from_any_thread": (_c_int, [_vp, _vp]),
}

# ----------------------------------------------------------------------------------------------
# Loading
# ----------------------------------------------------------------------------------------------

_lock = threading.Lock()
_lib: Optional[ctypes.CDLL] = None
_lib_path: Optional[str] = None
_mpi: Optional[ctypes.CDLL] = None

# The soname of this package's major version, and the file name of the library a wheel holds
# in the package directory (CMakeLists.txt, `if(SKBUILD)`: one file, no symlinks).
SONAME = "libftrt.so.%s" % __version__.split(".")[0]
PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def packaged_library() -> Optional[str]:
    """The path of the libftrt inside this package (ftrt/libftrt.so.<major>, put there by
    `pip install .`), or None when the package holds none (a source tree, or bindings/python
    on sys.path)."""
    path = os.path.join(PACKAGE_DIR, SONAME)
    return path if os.path.exists(path) else None


def _pkg_config_libdir() -> Optional[str]:
    """`pkg-config --variable=libdir ftrt`, or None (no pkg-config, no ftrt.pc)."""
    if shutil.which("pkg-config") is None:
        return None
    try:
        r = subprocess.run(["pkg-config", "--variable=libdir", "ftrt"], capture_output=True,
                           text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return os.path.normpath(r.stdout.strip()) if r.returncode == 0 and r.stdout.strip() else None


def _source_tree() -> Optional[str]:
    """The checkout this package lives in (bindings/python/ftrt of it), or None (installed)."""
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.normpath(os.path.join(here, "..", "..", ".."))
    marker = os.path.join(repo, "include", "ftrt.h")
    return repo if os.path.exists(marker) else None


def candidates() -> List[Tuple[str, str]]:
    """[(how, name or path)] in the order load() tries them (see the module docstring): only
    ("FTRT_LIB", path) when FTRT_LIB is set; else ("package", path) when this package holds a
    libftrt, then the loader's, pkg-config's and the build tree's. A name without "/" goes to
    the dynamic loader's search. Runs pkg-config (at most 30 s); loads nothing."""
    env = os.environ.get("FTRT_LIB")
    if env:
        return [("FTRT_LIB", env)]
    out: List[Tuple[str, str]] = []
    packaged = packaged_library()
    if packaged:
        out.append(("package", packaged))
    out.append(("loader", SONAME))
    found = ctypes.util.find_library("ftrt")
    if found and found != SONAME:
        out.append(("loader (find_library)", found))
    libdir = _pkg_config_libdir()
    if libdir:
        out += [("pkg-config", os.path.join(libdir, SONAME)),
                ("pkg-config", os.path.join(libdir, "libftrt.so"))]
    repo = _source_tree()
    if repo:
        out.append(("build tree", os.path.join(repo, "build", "libftrt.so")))
    return out


def _load_mpi() -> None:
    """Loads libmpi with RTLD_GLOBAL (see the module docstring). FTRT_LIBMPI overrides the
    name. A missing libmpi is left to libftrt's own loading to report."""
    global _mpi
    if _mpi is not None:
        return
    names = [os.environ["FTRT_LIBMPI"]] if os.environ.get("FTRT_LIBMPI") else []
    names += ["libmpi.so.40", "libmpi.so"]
    found = ctypes.util.find_library("mpi")
    if found:
        names.append(found)
    for name in names:
        try:
            _mpi = ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)
            return
        except OSError:
            continue


def _declare(so: ctypes.CDLL) -> None:
    for name, (res, args) in PROTOTYPES.items():
        fn = getattr(so, name)  # AttributeError: the library lacks a function of ftrt.h
        fn.restype, fn.argtypes = res, args
    for name, (res, args) in GPU_PROTOTYPES.items():
        fn = getattr(so, name, None)
        if fn is not None:
            fn.restype, fn.argtypes = res, args


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def _loaded_path(so: ctypes.CDLL, name: str) -> str:
    """The file the loader opened for `name` (dladdr() of ftrt_version: a bare soname becomes
    the path it resolved to), else `name`."""
    try:
        dladdr = ctypes.CDLL(None).dladdr
        dladdr.argtypes, dladdr.restype = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)], ctypes.c_int
        info = _DlInfo()
        if dladdr(ctypes.cast(so.ftrt_version, ctypes.c_void_p), ctypes.byref(info)) and \
                info.dli_fname:
            return os.fsdecode(info.dli_fname)
    except (AttributeError, OSError):
        pass
    return name


def _check_major(so: ctypes.CDLL) -> None:
    """Warns when the library's major version is not this package's (the structs mirrored here
    are append-only within a major version only)."""
    major = ctypes.c_int(-1)
    so.ftrt_version(ctypes.byref(major), None, None)
    want = int(__version__.split(".")[0])
    if major.value != want:
        import warnings
        warnings.warn(f"libftrt {_lib_path} has major version {major.value}, this ftrt package "
                      f"{__version__}: its structs and functions may differ", RuntimeWarning,
                      stacklevel=3)


def load(path: Optional[str] = None) -> ctypes.CDLL:
    """Loads libftrt once per process and returns the ctypes.CDLL with every prototype
    declared. `path` names the library; else the candidates() in order: FTRT_LIB; the library
    inside this package; the installed library through the loader (libftrt.so.<major>,
    find_library("ftrt")); pkg-config's libdir of ftrt; <repo>/build/libftrt.so of this source
    tree. Raises OSError listing every candidate tried and why it failed (or when another
    library is already loaded than `path`), AttributeError when the library lacks a function
    of ftrt.h (an older libftrt). Thread-safe; the library stays loaded for the process."""
    global _lib, _lib_path
    with _lock:
        if _lib is not None:
            if path and os.path.realpath(path) != os.path.realpath(_lib_path or ""):
                raise OSError(f"libftrt is already loaded from {_lib_path}; cannot load {path}")
            return _lib
        cands = [("argument", path)] if path else candidates()
        _load_mpi()
        errors = []
        for how, cand in cands:
            if how in ("package", "pkg-config", "build tree") and not os.path.exists(cand):
                errors.append(f"{how}: {cand}: no such file")
                continue
            try:
                so = ctypes.CDLL(cand, mode=ctypes.RTLD_GLOBAL)
            except OSError as e:
                errors.append(f"{how}: {e}")
                continue
            _declare(so)
            _lib, _lib_path = so, _loaded_path(so, cand)
            _check_major(so)
            return so
        raise OSError("cannot load libftrt; tried, in order: " + "; ".join(errors) +
                      ". Install the package with its library (`pip install .` at the "
                      "repository root), set FTRT_LIB to the path of libftrt.so, install "
                      "libftrt (cmake --install) where the loader or pkg-config finds it, or "
                      "build it in the source tree's build/")


def lib() -> ctypes.CDLL:
    """The loaded library (load() on first use; raises as load())."""
    return _lib if _lib is not None else load()


def lib_path() -> str:
    """The path of the file the library was loaded from (loads it on first use; raises
    OSError as load() when it cannot be loaded). Thread-safe."""
    lib()
    assert _lib_path is not None
    return _lib_path


def has_gpu_plane() -> bool:
    """True when the loaded library is libftrt_gpu (has the ftrt_gpu.h functions). Loads the
    library on first use (OSError as load())."""
    return getattr(lib(), "ftrt_gpu_create", None) is not None


def strerror(code: int) -> str:
    """ftrt_strerror(code): the message of any return code (str). Loads the library on first
    use (OSError as load()). Thread-safe."""
    return lib().ftrt_strerror(int(code)).decode(errors="replace")


def err_name(code: int) -> str:
    """ftrt_err_name(code): "FTRT_ERECOVER", "ENOSPC", "OK", ..., or "UNKNOWN". Loads the
    library on first use (OSError as load()). Thread-safe."""
    return lib().ftrt_err_name(int(code)).decode(errors="replace")


def version() -> Tuple[int, int, int]:
    """ftrt_version(): the loaded library's version as a (major, minor, patch) tuple of ints
    (ftrt.__version__ is this package's). Loads the library on first use (OSError as load())."""
    major, minor, patch = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    lib().ftrt_version(ctypes.byref(major), ctypes.byref(minor), ctypes.byref(patch))
    return major.value, minor.value, patch.value


def last_error() -> str:
    """ftrt_last_error(): the last error-level message libftrt logged on the calling thread
    (str; "" when none; per thread). Not cleared by successful calls: read it right after an
    error. Loads the library on first use (OSError as load())."""
    return lib().ftrt_last_error().decode(errors="replace")


def crc32c(data: Union[bytes, bytearray, memoryview], crc: int = 0) -> int:
    """ftrt_crc32c(): the CRC32C (Castagnoli) of `data` continued from `crc` (0 to start; the
    CRC of a concatenation is crc32c(b, crc32c(a))), as libftrt checks checkpoint shards
    (an int in [0, 2^32)). data: bytes, or a writable contiguous buffer (bytearray, a
    memoryview of one) of any length. Loads the library on first use (OSError as load());
    raises ValueError for a read-only buffer other than bytes. Thread-safe."""
    out = ctypes.c_uint32(crc & 0xFFFFFFFF)
    if isinstance(data, bytes):
        ptr: Any = data
        n = len(data)
    else:
        view = memoryview(data).cast("B")
        n = view.nbytes
        if view.readonly:
            raise ValueError("crc32c: a read-only buffer other than bytes: pass bytes(...)")
        ptr = (ctypes.c_char * n).from_buffer(view) if n else None
    check(lib().ftrt_crc32c(ptr, n, ctypes.byref(out)), "ftrt_crc32c")
    return out.value


def check(rc: int, call: Optional[str] = None) -> int:
    """Returns rc when it is >= 0, else raises error_for(rc, call)."""
    if rc < 0:
        raise error_for(rc, call)
    return rc


# ----------------------------------------------------------------------------------------------
# Buffers: the memory behind a tensor, an array, a ctypes object or an address
# ----------------------------------------------------------------------------------------------

# bytes of an element of each ftrt dtype
ESIZE = {FLOAT32: 4, FLOAT64: 8, INT64: 8, BFLOAT16: 2, FLOAT16: 2}
# ftrt dtype of a tensor's or array's dtype, by its str() (numpy has float16, no bfloat16)
_DTYPE_NAMES = {"float32": FLOAT32, "float64": FLOAT64, "int64": INT64, "float16": FLOAT16,
                "torch.float32": FLOAT32, "torch.float64": FLOAT64, "torch.int64": INT64,
                "torch.bfloat16": BFLOAT16, "torch.float16": FLOAT16}


def _is_tensor(obj: Any) -> bool:
    return hasattr(obj, "data_ptr") and hasattr(obj, "element_size") and hasattr(obj, "device")


def buffer_of(buf: Buffer, nbytes: Optional[int] = None) -> Tuple[int, int, Optional[int], str]:
    """Resolves `buf` to (address, nbytes, ftrt dtype or None, device type str).

    buf: a contiguous torch.Tensor (any device; the caller checks), a C-contiguous writable
    numpy array, a ctypes array/structure, or an int address (then `nbytes` is required).
    `nbytes`, when given for an object, may not exceed its size. The address is only valid
    while `buf` is alive and not reallocated: the caller keeps a reference. Raises ValueError
    (non-contiguous, read-only, bad nbytes) or TypeError (an object without memory)."""
    if isinstance(buf, int):
        if nbytes is None or nbytes < 0:
            raise ValueError("an int address needs nbytes >= 0")
        return buf, int(nbytes), None, "cpu"
    dtype: Optional[int]
    if _is_tensor(buf):
        if not buf.is_contiguous():
            raise ValueError("tensor is not contiguous: its memory is not one block")
        size = buf.numel() * buf.element_size()
        dtype = _DTYPE_NAMES.get(str(buf.dtype))
        addr, dev = buf.data_ptr(), buf.device.type
    elif hasattr(buf, "__array_interface__") and hasattr(buf, "ctypes"):
        if not buf.flags["C_CONTIGUOUS"] or not buf.flags["WRITEABLE"]:
            raise ValueError("numpy array must be C-contiguous and writable")
        size, dtype = buf.nbytes, _DTYPE_NAMES.get(str(buf.dtype))
        addr, dev = buf.ctypes.data, "cpu"
    elif isinstance(buf, (ctypes.Array, ctypes.Structure, ctypes.Union)):
        size, dtype = ctypes.sizeof(buf), None
        addr, dev = ctypes.addressof(buf), "cpu"
        if isinstance(buf, ctypes.Array):
            dtype = {ctypes.c_float: FLOAT32, ctypes.c_double: FLOAT64,
                     ctypes.c_int64: INT64}.get(buf._type_)
    else:
        raise TypeError(f"cannot take the memory of a {type(buf).__name__}: pass a tensor, a "
                        f"numpy array, a ctypes object or an int address with nbytes")
    if nbytes is not None:
        if nbytes < 0 or nbytes > size:
            raise ValueError(f"nbytes {nbytes} outside the object's {size} bytes")
        size = int(nbytes)
    return addr, size, dtype, dev
