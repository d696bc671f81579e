"""mpirun's standard error, forwarded to ftrt-run's as it comes, less Open MPI 4.1's harmless
PMIx notice; the first ftrt ERROR line and the last line are kept for ftrt-run's last line."""
from __future__ import annotations

import os
import re
import select
import threading
import time
from typing import IO


# Open MPI 4.1 with --enable-recovery notifies the survivors of a rank's abnormal exit with a
# PMIx event whose custom range PMIx 4.2 (Debian 12: 4.2.2) refuses: mpirun prints this line a
# few times after every kill, and nothing is wrong. PMIx prints it through its error stream 0,
# which no MCA or PMIx setting silences alone (PMIX_OUTPUT_REDIRECT=syslog would take every
# PMIx error away), so ftrt-run leaves out exactly this line and forwards every other byte.
PMIX_NOTICE = re.compile(rb"\[[^\]\n]*\] PMIX ERROR: BAD-PARAM in file "
                         rb"\S*event/pmix_event_notification\.c at line 1033\r?\n")
NOTICE_TAIL = b"PMIX ERROR: BAD-PARAM in file "
FTRT_ERROR = re.compile(rb"ftrt\[w\d+\] ERROR [^:\s]+:\d+: (.*)")
HOLD_S = 0.1  # the longest a partial line that may be the notice is held back


def may_be_notice(partial: bytes) -> bool:
    """True when a partial line (no newline yet) may still become the PMIx notice."""
    if not partial.startswith(b"["):
        return False
    end = partial.find(b"] ")
    if end < 0:
        return len(partial) < 256
    rest = partial[end + 2:]
    n = min(len(rest), len(NOTICE_TAIL))
    return rest[:n] == NOTICE_TAIL[:n] and len(rest) < 512


class StderrFilter:
    """Copies mpirun's standard error (a pipe) to ftrt-run's as it comes, chunk by chunk,
    leaving out whole lines that are the PMIx notice. Only a partial line that may still become
    the notice is held back, HOLD_S at most, so prompts and interleaving are kept. Remembers the
    first ftrt ERROR line and the last line (the cause named in ftrt-run's last line)."""

    def __init__(self, pipe: IO[bytes]) -> None:
        self.fd = pipe.fileno()
        self.pending = b""
        self.held_since = None
        self.first_error = self.last_line = None
        self.dropped = 0
        self._th = threading.Thread(target=self._loop, daemon=True)
        self._th.start()

    def _out(self, data):
        try:
            while data:
                data = data[os.write(2, data):]
        except OSError:
            pass

    def _lines(self, data):
        """Forwards the complete lines of pending + data; keeps the rest pending."""
        buf = self.pending + data
        out, start = [], 0
        while True:
            nl = buf.find(b"\n", start)
            if nl < 0:
                break
            line = buf[start:nl + 1]
            if PMIX_NOTICE.fullmatch(line):
                self.dropped += 1
            else:
                out.append(line)
                text = line.decode(errors="replace").strip()[:400]
                if text.strip("-"):  # not a blank line or a border of Open MPI's help boxes
                    self.last_line = text
                m = FTRT_ERROR.match(line) if self.first_error is None else None
                if m:
                    self.first_error = m.group(1).decode(errors="replace").strip()
            start = nl + 1
        rest = buf[start:]
        if rest and not may_be_notice(rest):
            out.append(rest)
            rest = b""
        self._out(b"".join(out))
        self.pending = rest
        self.held_since = (self.held_since or time.monotonic()) if rest else None

    def _loop(self):
        while True:
            ready, _, _ = select.select([self.fd], [], [], HOLD_S)
            if ready:
                try:
                    data = os.read(self.fd, 65536)
                except OSError:
                    data = b""
                if not data:
                    break
                self._lines(data)
            elif self.pending and time.monotonic() - self.held_since >= HOLD_S:
                self._out(self.pending)
                self.pending, self.held_since = b"", None
        self._out(self.pending)
        self.pending = b""

    def close(self, timeout: float = 1.0) -> None:
        """Waits (up to timeout: a process of the job on another host may still hold the pipe)
        for the end of mpirun's standard error."""
        self._th.join(timeout)
