"""Simulated hosts of a multi-host run (tests/hosts/ftrt-hosts) and the ground truth of who
writes what after a partition (fanotify)."""
import ctypes
import fcntl
import os
import struct
import subprocess
import threading
import time

from .common import FTRT_HOSTS, now


class Arrangement:
    """The simulated hosts of a multi-host run (tests/hosts/ftrt-hosts, as root): made here
    (make=True: `up N SLOTS`, under the same lock as tests/harness Hosts(), `down` at close())
    or made by the caller (names and slots read from its hostfile). Host names, the hostfile,
    the mpirun options, pids per host, link cuts and mends; the environment's FTRT_HOSTS_*
    settings choose the arrangement, as for ftrt-hosts."""

    def __init__(self, n=None, slots=None, make=False):
        self.n, self.slots, self.make = n, slots, make
        self.prefix = os.environ.get("FTRT_HOSTS_PREFIX", "ftrt-h")
        self.dir = os.environ.get("FTRT_HOSTS_DIR", f"/run/ftrt-hosts/{self.prefix}")
        self.names, self.opts, self.cut_hosts = [], [], set()
        self._lock = None

    def tool(self, *args, check=True):
        r = subprocess.run([FTRT_HOSTS] + [str(x) for x in args], capture_output=True, text=True)
        if check and r.returncode != 0:
            raise RuntimeError(f"ftrt-hosts {' '.join(map(str, args))}: exit {r.returncode}: "
                               f"{(r.stdout + r.stderr).strip()}")
        return r

    def open(self):
        """Makes (or finds) the hosts. Returns None, or (exit status, why) when it cannot:
        77 where namespaces cannot be made here."""
        if self.make:
            r = self.tool("check", check=False)
            if r.returncode != 0:
                return (77 if r.returncode == 77 else 1,
                        (r.stdout + r.stderr).strip() or "ftrt-hosts check failed")
            os.makedirs(os.path.dirname(self.dir), exist_ok=True)
            self._lock = open(self.dir + ".inuse", "w")
            fcntl.flock(self._lock, fcntl.LOCK_EX)  # the same lock as ftrt_harness.Hosts
            try:
                self.tool("up", self.n, self.slots)
            except RuntimeError as e:
                self.tool("down", check=False)
                self._lock.close()
                self._lock = None
                return (1, str(e))
        hostfile = self.tool("hostfile").stdout.strip()
        try:
            with open(hostfile) as f:
                lines = [ln.split() for ln in f if ln.strip()]
        except OSError as e:
            return (1, f"no hosts arrangement ({hostfile}: {e.strerror}); ftrt-hosts up?")
        self.names = [ln[0] for ln in lines]
        self.slots = int(lines[0][1].split("=")[1]) if lines and len(lines[0]) > 1 else 1
        self.n = len(self.names)
        self.opts = self.tool("mpirun-opts").stdout.split()
        self.hostfile_path = hostfile
        return None

    def close(self):
        if self.make:
            self.tool("down", check=False)
        else:
            for h in sorted(self.cut_hosts):
                self.mend(h)
        if self._lock:
            self._lock.close()
            self._lock = None

    def name(self, spec):
        """A host name from NAME or a number."""
        return f"{self.prefix}{spec}" if spec.isdigit() else spec

    def pids(self, host):
        r = self.tool("pids", host, check=False)
        return [int(x) for x in r.stdout.split()] if r.returncode == 0 else []

    def cut(self, host):
        """Its link down: the bridge's end of its veth first (both directions stop at once),
        then its own end (as ftrt-hosts cut)."""
        self.cut_hosts.add(host)
        for cmd in (["ip", "link", "set", host + "v", "down"],
                    ["ip", "-n", host, "link", "set", "eth0", "down"]):
            subprocess.run(cmd, capture_output=True)

    def mend(self, host):
        """Link up again, and wait (up to 5 s) until the host reaches the head."""
        self.tool("mend", host, check=False)
        self.cut_hosts.discard(host)
        net = os.environ.get("FTRT_HOSTS_NET", "10.77.0")
        for _ in range(10):
            r = self.tool("exec", host, "timeout", "1", "bash", "-c",
                          f"exec 3<>/dev/tcp/{net}.254/9", check=False)
            if r.returncode == 0 or "refused" in r.stderr:
                return True
            time.sleep(0.5)
        return False

    def write_hostfile(self, path, names, slots):
        with open(path, "w") as f:
            for h in names:
                f.write(f"{h} slots={slots}\n")
        return path


class WriteWatch:
    """Ground truth of who writes what: every file modified (FAN_MODIFY) or closed after
    writing (FAN_CLOSE_WRITE) on the file systems of `paths`, with the writer's pid (its thread
    group: io_uring workers count as their process), from construction to stop(). Linux
    fanotify (root). Only events under `paths` are kept: (time read, pid, path, mask)."""
    FAN_MODIFY, FAN_CLOSE_WRITE, FAN_Q_OVERFLOW = 0x2, 0x8, 0x4000

    def __init__(self, paths):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.fanotify_mark.argtypes = [ctypes.c_int, ctypes.c_uint, ctypes.c_uint64,
                                       ctypes.c_int, ctypes.c_char_p]
        # FAN_CLASS_NOTIF | FAN_CLOEXEC | FAN_NONBLOCK; event fds O_RDONLY | O_LARGEFILE
        self.fd = libc.fanotify_init(0x1 | 0x2, os.O_RDONLY | getattr(os, "O_LARGEFILE", 0))
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "fanotify_init: " + os.strerror(ctypes.get_errno()))
        self.roots = sorted({os.path.abspath(p) for p in paths if p})
        for p in self.roots:
            d = p if os.path.isdir(p) else os.path.dirname(p)
            # FAN_MARK_ADD | FAN_MARK_FILESYSTEM, AT_FDCWD: the whole file system, not one mount
            # (`ip netns exec` gives the hosts' processes their own mount namespace: copies of
            # the mounts, which a mount mark would not see)
            if libc.fanotify_mark(self.fd, 0x1 | 0x100, self.FAN_MODIFY | self.FAN_CLOSE_WRITE,
                                  -100, d.encode()) != 0:
                e = ctypes.get_errno()
                os.close(self.fd)
                raise OSError(e, f"fanotify_mark {d}: {os.strerror(e)}")
        self.events, self.overflow = [], False
        self._stop = threading.Event()
        self._th = threading.Thread(target=self._loop, daemon=True)
        self._th.start()

    def _keep(self, path):
        return any(path == r or path.startswith(r + "/") or path.startswith(r + ".tmp.")
                   for r in self.roots)

    def _drain(self):
        while True:
            try:
                buf = os.read(self.fd, 65536)
            except BlockingIOError:
                return
            t, off = now(), 0
            while off + 24 <= len(buf):
                ln, _v, _r, _m, mask, efd, pid = struct.unpack_from("<IBBHQii", buf, off)
                if mask & self.FAN_Q_OVERFLOW:
                    self.overflow = True
                if efd >= 0:
                    try:
                        path = os.readlink(f"/proc/self/fd/{efd}")
                    except OSError:
                        path = None
                    os.close(efd)
                    if path and self._keep(path):
                        self.events.append((t, pid, path, mask))
                off += ln

    def _loop(self):
        import select
        while not self._stop.is_set():
            select.select([self.fd], [], [], 0.05)
            self._drain()

    def stop(self):
        self._stop.set()
        self._th.join()
        self._drain()
        os.close(self.fd)
        return self.events
