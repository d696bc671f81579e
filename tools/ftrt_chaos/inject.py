"""ftrt-chaos's injections: each fault kind's handler (see the usage in cli.py), the choice of
targets, and the ground truth of every injection (the fault log, Chaos.injections)."""
import json
import math
import os
import signal
import struct
import threading
import time

from .drain import Drains
from .join import Joins
from .common import HOST_KINDS, alive, committed_steps, fill, gone, latest_step, now
from .hosts import WriteWatch
from .plan import WHEN


class Injector:
    """Mixin of Chaos (chaos.py): needs self.a, st(), ranks(), job, ckpt, hosts, rng, lock,
    injections, launches, fault_log, status, report, write_watch, lost_hosts, tmpfs, filler."""

    def pick_trainers(self, st, target, n=1):
        trainers = sorted(self.ranks(st, "trainer"), key=lambda r: r["logical_rank"])
        if target == "remote":  # a trainer on another host than the coordinator's
            ch = self.coord_host(st)
            trainers = [r for r in trainers if r.get("host") != ch]
        if target and target.startswith("trainer:"):
            want = int(target.split(":")[1])
            trainers = [r for r in trainers if r["logical_rank"] == want] + \
                [r for r in trainers if r["logical_rank"] != want]
            return trainers[:n]
        self.rng.shuffle(trainers)
        return trainers[:n]

    def record(self, kind, targets, extra=None):
        st = self.st() or {}
        entry = {"time": now(), "kind": kind, "launch": len(self.launches),
                 "epoch_before": st.get("epoch", 0),
                 "targets": [{k: t.get(k) for k in ("pid", "world_rank", "role", "logical_rank",
                                                    "host")}
                             for t in targets]}
        if self.a.sharded is not None:
            entry["partners"] = self.partners(st)
        if extra:
            entry.update(extra)
        with open(self.fault_log, "a") as f:
            for t in targets or [{}]:
                f.write(json.dumps({"time": entry["time"], "kind": kind, "pid": t.get("pid"),
                                    "world_rank": t.get("world_rank")}) + "\n")
        with self.lock:
            self.injections.append(entry)
        tgt = ", ".join(f"{t.get('role')} w{t.get('world_rank')} pid {t.get('pid')}"
                        + (f" on {t['host']}" if self.hosts and t.get("host") else "")
                        for t in targets) or "-"
        print(f"ftrt-chaos: inject {kind} -> {tgt}", flush=True)
        return entry

    def partners(self, st):
        """{"n": trainers, "shift": s}: the trainer holding logical rank r's partner replica is
        r + s (mod n), s the smallest shift putting every partner on another host (the status
        file's hosts), else 1 - as runtime/replica.c's partner_shift. Also the LATEST step now."""
        tr = sorted(self.ranks(st, "trainer"), key=lambda r: r["logical_rank"])
        n = len(tr)
        hosts = [r.get("host") for r in tr]
        shift = 1
        for s in range(1, n):
            if all(hosts[r] != hosts[(r + s) % n] for r in range(n)):
                shift = s
                break
        return {"n": n, "shift": shift, "latest": latest_step(self.ckpt) if self.ckpt else None}

    def signal_all(self, targets, sig):
        for t in targets:
            try:
                os.kill(t["pid"], sig)
            except ProcessLookupError:
                pass

    def newest_shard(self):
        steps = committed_steps(self.ckpt) if self.ckpt else []
        if not steps:
            return None
        d = os.path.join(self.ckpt, f"step-{steps[0]}")
        shards = sorted(n for n in os.listdir(d) if n.endswith(".ftrt"))
        return os.path.join(d, shards[0]) if shards else None
    def inject(self, f):
        """Injects plan entry f (its kind's handler), then its "then" entries, each after its
        optional delay_s and, with "when", once the status file shows that recovery stage
        (wait_when). A handler returns True when the "then" entries follow (not after a
        skip, nor after a kill during a checkpoint write, as before the split)."""
        handler = self.HANDLERS.get(f["kind"])
        if handler is None:
            return self.skip(f["kind"], "unknown kind")
        if not handler(self, f, self.st()):
            return None
        for sub in f.get("then", []):
            time.sleep(sub.get("delay_s", 0))
            seen = self.wait_when(sub)
            if seen is None:
                continue
            n = len(self.injections)
            self.inject(sub)
            if seen and len(self.injections) > n:  # the status file the injection followed
                self.injections[n]["when"] = sub["when"]
                self.injections[n]["status_at"] = seen
        return None

    def wait_when(self, f, timeout_s=30.0):
        """f's "when" (plan.WHEN: a recovery stage, as the status file shows it) reached:
        polls the status file every 2 ms while the launch runs, up to timeout_s. Returns {} when
        f has no "when", the status file's recovery fields then, or None after a skip."""
        want = f.get("when")
        if want is None:
            return {}
        deadline = now() + timeout_s
        while now() < deadline and self.job.poll() is None:
            st = self.st()
            if st and WHEN[want](st):
                return {k: st.get(k) for k in ("job", "epoch", "failure_sent_epoch",
                                               "plan_sent_epoch")}
            time.sleep(0.002)
        self.skip(f["kind"], f"the status file never showed {want!r}")
        return None

    def inject_signal_trainer(self, f, st):
        """kill-trainer, hang-trainer (SIGSTOP), pause-trainer (SIGSTOP, SIGCONT after
        --pause-ms), corrupt-replica (SIGKILL; the job corrupts its replicas itself)."""
        kind = f["kind"]
        if kind == "corrupt-replica" and (self.a.sharded is None or self.a.erasure is not None):
            return self.skip(kind, "needs --sharded without --erasure (a job with partner "
                                   "replicas)")
        t = self.pick_trainers(st, f.get("target"))
        if not t:
            return self.skip(kind, "no trainer")
        sig = signal.SIGSTOP if kind in ("hang-trainer", "pause-trainer") else signal.SIGKILL
        e = self.record(kind, t)
        self.signal_all(t, sig)
        if kind == "pause-trainer":
            time.sleep(self.a.pause_ms / 1000.0)
            self.signal_all(t, signal.SIGCONT)
            e["pause_ms"] = self.a.pause_ms
        return True

    def inject_kill_two(self, f, st):
        t = self.pick_trainers(st, f.get("target"), 2)
        self.record(f["kind"], t)
        self.signal_all(t, signal.SIGKILL)
        return True

    def inject_kill_partners(self, f, st):
        kind = f["kind"]
        t = self.pick_trainers(st, f.get("target"))
        p = self.partners(st)
        if not t or p["n"] < 2:
            return self.skip(kind, "needs 2 trainers")
        hl = (t[0]["logical_rank"] + p["shift"]) % p["n"]
        t += [r for r in self.ranks(st, "trainer") if r["logical_rank"] == hl]
        self.record(kind, t, {"holder_logical_rank": hl})
        self.signal_all(t, signal.SIGKILL)
        return True

    def inject_kill_spare(self, f, st):
        t = self.ranks(st, "spare")[:1]
        if not t:
            return self.skip(f["kind"], "no spare left")
        self.record(f["kind"], t)
        self.signal_all(t, signal.SIGKILL)
        return True

    def inject_kill_beyond_spares(self, f, st):
        n = len(self.ranks(st, "spare")) + 1
        t = self.pick_trainers(st, f.get("target"), n)
        self.record(f["kind"], t, {"spares": n - 1})
        self.signal_all(t, signal.SIGKILL)
        return True

    def inject_kill_coordinator(self, f, st):
        t = self.ranks(st, "coordinator")
        self.record(f["kind"], t)
        self.signal_all(t, signal.SIGKILL)
        return True

    def inject_hang_coordinator(self, f, st):
        """SIGSTOP of the coordinator. With a standby coordinator, it takes over (the status file
        names another coordinator: watched up to 30 s); the frozen one is then resumed
        (SIGCONT) and must give up by itself within 5 s, writing nothing (the status file keeps
        naming the new coordinator). Without one, every other rank must leave (watched up to
        30 s). Then SIGKILL: a frozen process never leaves, that is the supervisor's job."""
        t = self.ranks(st, "coordinator")
        others = [r for r in (st or {}).get("ranks", []) if r["role"] != "coordinator"
                  and r["role"] != "failed"]
        e = self.record(f["kind"], t)
        self.signal_all(t, signal.SIGSTOP)
        old = {x["pid"] for x in t}
        deadline = now() + 30
        while now() < deadline:
            new = [r for r in self.ranks(self.st(), "coordinator") if r["pid"] not in old]
            if new:
                e["taken_over_s"] = now() - e["time"]
                e["new_coordinator"] = new[0]["world_rank"]
                break
            if not any(alive(r["pid"]) for r in others):
                e["others_left_s"] = now() - e["time"]
                break
            time.sleep(0.01)
        if "taken_over_s" in e:
            self.signal_all(t, signal.SIGCONT)
            t0 = now()
            while now() - t0 < 5 and any(alive(x["pid"]) for x in t):
                time.sleep(0.01)
            e["resumed_left_s"] = None if any(alive(x["pid"]) for x in t) else now() - t0
            time.sleep(0.3)  # the status file is rewritten by the new coordinator meanwhile
            e["status_after_resume"] = [r["world_rank"] for r in
                                        self.ranks(self.st(), "coordinator") if r["pid"] not in old]
        self.signal_all(t, signal.SIGKILL)
        return True

    def inject_flip_bit(self, f, st):
        kind = f["kind"]
        t = self.pick_trainers(st, f.get("target"))
        if not t:
            return self.skip(kind, "no trainer")
        why = self.flip_bit(kind, t[0])
        if why:
            return self.skip(kind, why)
        return True

    def inject_host_fault(self, f, st):
        if not self.hosts:
            return self.skip(f["kind"], "needs --hosts, --hosts-made or --slurm")
        self.inject_host(f, st)
        return True

    def inject_during_ckpt(self, f, st):
        """SIGKILL of a trainer while a checkpoint is being written (waits up to 30 s): a step
        directory with files but no MANIFEST. Once the trainer is dead (up to 2 s) it records
        whether its shard of that step (rank-<logical>.ftrt, which a trainer renames into place
        after its data is durable and before it reports the shard done) was in place: the
        ground truth of whether that step may be committed with it (shard_at_death, by logical
        rank; None where the trainer was not seen dead)."""
        kind = f["kind"]
        if not self.ckpt:
            return self.skip(kind, "needs --ckpt-dir")
        deadline = now() + 30
        while now() < deadline and self.job.poll() is None:
            inflight = [n for n in os.listdir(self.ckpt) if n.startswith("step-") and
                        not os.path.exists(os.path.join(self.ckpt, n, "MANIFEST")) and
                        os.listdir(os.path.join(self.ckpt, n))]
            if inflight:
                t = self.pick_trainers(self.st(), f.get("target"))
                entry = self.record(kind, t, {"inflight": inflight[0]})
                self.signal_all(t, signal.SIGKILL)
                dead_by = now() + 2
                while now() < dead_by and not all(gone(x["pid"]) for x in t):
                    time.sleep(0.0005)
                entry["shard_at_death"] = {
                    str(x["logical_rank"]): os.path.exists(os.path.join(
                        self.ckpt, inflight[0], f"rank-{x['logical_rank']}.ftrt"))
                    if gone(x["pid"]) else None for x in t}
                return False
            time.sleep(0.001)
        return self.skip(kind, "no checkpoint write seen in flight")

    def inject_damage_shard(self, f, st):
        """corrupt-shard (one bit of region data flipped) or truncate-shard (cut to half) of
        the newest committed shard, once an older committed step exists to fall back to
        (waits for it up to 60 s while the job runs: with one committed step the damage would
        leave a relaunch nothing to restore, a lost job rather than a test of the fallback)."""
        kind = f["kind"]
        deadline = now() + 60
        while len(committed_steps(self.ckpt) if self.ckpt else []) < 2:
            if now() > deadline or self.job.poll() is not None:
                return self.skip(kind, "no older committed step to fall back to")
            time.sleep(0.01)
        path = self.newest_shard()
        if not path:
            return self.skip(kind, "no committed shard")
        size = os.path.getsize(path)
        if kind == "corrupt-shard":
            off = self.data_offset(path)
            with open(path, "r+b") as fh:
                fh.seek(off)
                b = fh.read(1)
                fh.seek(off)
                fh.write(bytes([b[0] ^ (1 << self.rng.randrange(8))]))
            extra = {"file": path, "offset": off}
        else:
            os.truncate(path, size // 2)
            extra = {"file": path, "truncated_to": size // 2}
        self.record(kind, [], dict(extra, step=int(path.split("step-")[1].split("/")[0])))
        return True

    def inject_enospc(self, f, st):
        """Fills the checkpoint tmpfs for --enospc-hold-s."""
        kind = f["kind"]
        if not self.tmpfs:
            return self.skip(kind, "needs --ckpt-tmpfs")
        self.filler = os.path.join(self.ckpt, ".ftrt-chaos-filler")
        fill(self.filler)
        self.record(kind, [], {"hold_s": self.a.enospc_hold_s})
        threading.Timer(self.a.enospc_hold_s, self.release_filler).start()
        return True

    def published(self, world_rank):
        """(pid, params address, bytes, steps address, busy address or None) that trainer
        world_rank published (train_mlp --publish-addr; the busy address with --device sim),
        or None."""
        if not self.a.addr_prefix:
            return None
        try:
            with open(f"{self.a.addr_prefix}.w{world_rank}") as f:
                fields = f.read().split()
            if len(fields) not in (4, 5):
                return None
            busy = int(fields[4], 16) if len(fields) == 5 else None
            return (int(fields[0]), int(fields[1], 16), int(fields[2]), int(fields[3], 16),
                    busy)
        except (OSError, ValueError):
            return None

    def stopped_idle(self, t, pid, busy_addr, tries=500):
        """stopped(pid) at a moment when the int32 at busy_addr (None: no such flag) is 0: the
        trainer is not between reading its device state and writing it back, which would
        overwrite a flip. Else lets it go on for a millisecond and tries again. True when
        stopped so."""
        for _ in range(tries):
            if not self.stopped(pid):
                return False
            if busy_addr is None:
                return True
            try:
                with open(f"/proc/{pid}/mem", "rb", buffering=0) as m:
                    m.seek(busy_addr)
                    (busy,) = struct.unpack("<i", m.read(4))
            except OSError:
                return False
            if busy == 0:
                return True
            self.signal_all([t], signal.SIGCONT)
            time.sleep(0.001)
        return False

    def stopped(self, pid, timeout=2.0):
        """SIGSTOP pid and wait until every thread of it is stopped. True when it is."""
        os.kill(pid, signal.SIGSTOP)
        deadline = now() + timeout
        while now() < deadline:
            try:
                states = []
                for tid in os.listdir(f"/proc/{pid}/task"):
                    with open(f"/proc/{pid}/task/{tid}/stat") as f:
                        states.append(f.read().rsplit(")", 1)[1].split()[0])
            except (OSError, IndexError):
                return False
            if states and all(x in ("T", "t") for x in states):
                return True
            time.sleep(0.0005)
        return False

    def flip_bit(self, kind, t):
        """Silent data corruption from outside ftrt: stops trainer t (SIGSTOP, every thread),
        reads the steps it has done from the address it published, flips one bit of one
        float32 of its parameters through /proc/<pid>/mem, logs the ground truth and lets it
        go on (SIGCONT) - a pause of a few milliseconds, far below the heartbeat timeout.
        Stopped, the trainer cannot be half-way through writing that float, so the flip
        cannot be lost; with a published busy flag (state in device memory, train_mlp
        --device sim) it is stopped only while not between reading that state and writing it
        back (stopped_idle). The bit is one of --flip-bits (default 16-22: the upper mantissa) of a
        weight with |w| >= --flip-min-abs: big enough that the next updates' rounding never
        absorbs it, small enough that the weight stays finite (a flip of the exponent's top
        bits makes it ~1e38, and within a step every replica holds the same NaN: divergence,
        which no comparison of replicas can attribute). Returns None, or why it could not."""
        pub = self.published(t["world_rank"])
        if not pub:
            return f"nothing published for world rank {t['world_rank']} (--addr-prefix)"
        pid, addr, nbytes, steps_addr, busy_addr = pub
        if pid != t["pid"] or nbytes < 4:
            return f"the published pid {pid} is not the trainer's ({t['pid']})"
        lo, hi = (int(x) for x in self.a.flip_bits.split("-"))
        if not self.stopped_idle(t, pid, busy_addr):
            self.signal_all([t], signal.SIGCONT)
            return f"could not stop pid {pid}"
        try:
            with open(f"/proc/{pid}/mem", "r+b", buffering=0) as m:
                m.seek(steps_addr)
                (step,) = struct.unpack("<q", m.read(8))
                for _ in range(10000):
                    i = self.rng.randrange(nbytes // 4)
                    m.seek(addr + 4 * i)
                    (before,) = struct.unpack("<f", m.read(4))
                    if math.isfinite(before) and abs(before) >= self.a.flip_min_abs:
                        break
                else:
                    return f"no weight with |w| >= {self.a.flip_min_abs}"
                bit = self.rng.randint(lo, hi)
                off = 4 * i + bit // 8
                m.seek(addr + off)
                b = m.read(1)[0]
                m.seek(addr + off)
                m.write(bytes([b ^ (1 << (bit % 8))]))
                m.seek(addr + 4 * i)
                (after,) = struct.unpack("<f", m.read(4))
            # Logged while the trainer is still stopped: nothing can detect it before this.
            self.record(kind, [t], {"step": step, "offset": off, "bit": bit, "before": before,
                                    "after": after})
        except OSError as e:
            return f"/proc/{pid}/mem: {e}"
        finally:
            self.signal_all([t], signal.SIGCONT)
        return None

    # ------------------------------------------------------------------ hosts
    def coord_host(self, st):
        return next((r.get("host") for r in self.ranks(st, "coordinator")), None)

    def pick_host(self, st, target):
        """The host named by target (see the usage in cli.py), or None."""
        ranks = (st or {}).get("ranks", [])
        ch = self.coord_host(st)
        if target == "coordinator":
            return ch
        if target == "standby":  # the standby coordinator's: the highest spare elsewhere
            sp = [r for r in ranks if r["role"] == "spare" and r.get("host") != ch]
            return max(sp, key=lambda r: r["world_rank"]).get("host") if sp else None
        if target and target.startswith("host:"):
            return self.hosts.name(target[5:])

        def covered(h):
            return sum(r["role"] == "trainer" for r in ranks if r.get("host") == h) <= \
                sum(r["role"] == "spare" for r in ranks if r.get("host") != h)
        cands = sorted({r.get("host") for r in ranks if r["role"] == "trainer"} - {ch, None})
        if target == "covered":
            cands = [h for h in cands if covered(h)]
        elif target == "uncovered":
            cands = [h for h in cands if not covered(h)]
        return self.rng.choice(cands) if cands else None

    def inflight(self):
        """Step directories with files but no MANIFEST yet (a checkpoint being written)."""
        try:
            return [n for n in os.listdir(self.ckpt) if n.startswith("step-") and
                    not os.path.exists(os.path.join(self.ckpt, n, "MANIFEST")) and
                    os.listdir(os.path.join(self.ckpt, n))]
        except OSError:
            return []

    def inject_host(self, f, st):
        kind = f["kind"]
        if f.get("in_ckpt"):  # wait for a checkpoint write in flight
            deadline, got = now() + 30, []
            while now() < deadline and self.job.poll() is None:
                got = self.inflight()
                if got:
                    break
                time.sleep(0.001)
            if not got:
                return self.skip(kind, "no checkpoint write seen in flight")
            st = self.st()
        host = self.pick_host(st, f.get("target"))
        if not host or host not in self.hosts.names:
            return self.skip(kind, f"no host for target {f.get('target')!r} ({host})")
        ranks = (st or {}).get("ranks", [])
        on = [r for r in ranks if r.get("host") == host and r["role"] != "failed" and r["pid"] > 0]
        trainers = sum(r["role"] == "trainer" for r in on)
        spares = sum(r["role"] == "spare" for r in ranks if r.get("host") != host)
        ch = self.coord_host(st)
        others = [dict(pid=r["pid"], world_rank=r["world_rank"], host=r.get("host"))
                  for r in ranks if r.get("host") != host and r["role"] != "failed"
                  and r["pid"] > 0]
        pids = self.hosts.pids(host)  # every process there: its orted, its ranks
        extra = {"host": host, "coordinator_host": host == ch, "trainers_on_host": trainers,
                 "inflight": self.inflight() if self.ckpt else [],
                 "spares_elsewhere": spares, "covered": trainers <= spares,
                 "host_pids": pids, "coordinator_pid": next(
                     (r["pid"] for r in ranks if r["role"] == "coordinator"), None),
                 "hb_timeout_s": self.hb_timeout_s}
        if kind == "partition-host":
            paths = [self.ckpt, self.status, self.report, self.a.params, self.fault_log]
            if self.write_watch is None:
                try:
                    self.write_watch = WriteWatch(paths)
                    time.sleep(0.05)  # what was written before the cut is read before it
                except OSError as e:
                    extra["write_watch"] = f"unavailable: {e}"
        e = self.record(kind, on, extra)
        if kind == "kill-host":
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        else:
            self.hosts.cut(host)
        if hasattr(self.hosts, "node_lost"):  # --slurm: the node DOWN, as after SlurmdTimeout
            self.hosts.node_lost(host)
        self.lost_hosts.append(host)
        # whose exits to watch: the host's ranks (a partition: they must leave by themselves),
        # and, for the coordinator's host, every other rank (without a standby they must leave
        # promptly)
        e["watch"] = [dict(pid=t["pid"], world_rank=t["world_rank"], host=host) for t in on] + \
            (others if e["coordinator_host"] else [])
        e["watch_from"] = e["time"]

    def data_offset(self, path):
        """A random byte inside some region's data (not the zero padding between regions,
        which holds nothing), from the shard's region table (checkpoint/format.h): u32
        nregions at byte 32, 112-byte entries from byte 40 with u64 slice_bytes at +88 and
        u64 file_offset at +96. Falls back to a header byte when the table is unreadable."""
        with open(path, "rb") as fh:
            head = fh.read(4096)
        try:
            (nreg,) = struct.unpack_from("<I", head, 32)
            spans = []
            for i in range(min(nreg, (len(head) - 40) // 112)):
                nbytes, foff = struct.unpack_from("<QQ", head, 40 + 112 * i + 88)
                if nbytes:
                    spans.append((foff, nbytes))
            foff, nbytes = self.rng.choice(spans)
            return foff + self.rng.randrange(nbytes)
        except (struct.error, IndexError, ValueError):
            return self.rng.randrange(40)

    def release_filler(self):
        if self.filler and os.path.exists(self.filler):
            os.unlink(self.filler)
        self.filler = None

    def skip(self, kind, why):
        print(f"ftrt-chaos: could not inject {kind}: {why}", flush=True)
        with self.lock:
            self.injections.append({"time": now(), "kind": kind, "skipped": why,
                                    "launch": len(self.launches), "targets": []})


Injector.HANDLERS = dict(
    {k: Injector.inject_signal_trainer
     for k in ("kill-trainer", "hang-trainer", "pause-trainer", "corrupt-replica")},
    **{k: Injector.inject_damage_shard for k in ("corrupt-shard", "truncate-shard")},
    **{k: Injector.inject_host_fault for k in HOST_KINDS},
    **{"drain-rank": Drains.inject_drain_rank, "sigterm-rank": Drains.inject_drain_rank,
       "drain-host": Drains.inject_drain_host, "join-spare": Joins.inject_join_spare},
    **{"kill-two-trainers": Injector.inject_kill_two,
       "kill-partners": Injector.inject_kill_partners,
       "kill-spare": Injector.inject_kill_spare,
       "kill-beyond-spares": Injector.inject_kill_beyond_spares,
       "kill-coordinator": Injector.inject_kill_coordinator,
       "hang-coordinator": Injector.inject_hang_coordinator,
       "flip-bit": Injector.inject_flip_bit,
       "kill-during-ckpt": Injector.inject_during_ckpt,
       "enospc": Injector.inject_enospc})
