"""One running process watched from outside (``tm attach``): its facts from Linux's /proc, and
the GPUs it uses from NVML's process lists.

API:

``check_pid(pid) -> None``
    Whether ``tm attach`` may watch ``pid``: ``ProcessLookupError`` when no such process runs,
    ``PermissionError`` when it belongs to another user (``os.kill(pid, 0)``: the permission
    check of kill(2) without sending any signal).
``ProcessSource(pid, proc="/proc", *, clock=time.time, redact=list)``
    Raises ``ProcessLookupError`` when the process is gone or a zombie. ``argv() -> list[str]``:
    its command line as it is now (not redacted). ``alive() -> bool``:
    the same process still runs (a zombie has ended; a reused pid with another start time is
    not it). ``pids() -> list[int]``: the process and its descendants (the tree), at most
    ``MAX_TREE``. ``sample() -> ProcessSample``: never raises; the first call primes the CPU
    counters; once the process has ended, the last facts it had (command line, user, start)
    with ``alive`` false, ``state`` "ended", ``ended`` (epoch s, when it was first seen gone)
    and no figures. ``redact`` maps the command line's argv to what may be logged (secrets
    hidden).
``ProcessSample`` (``as_dict()`` is JSON-ready)
    pid, alive, cmdline (argv joined by spaces, at most ``MAX_CMDLINE`` characters), user,
    uid (real uid), started (epoch s), ended (epoch s or None), state (a word: running,
    sleeping, ..., ended), cpu_percent, rss_bytes, threads, children (descendants), pids (the
    tree), missing {field: reason}.
``gpus_used(samples, pids) -> list[int]``: the indices of the ``GpuSample`` dicts whose
``process_mem_bytes`` lists one of ``pids``. ``OnlyDevices(backend, indices)``: a GPU backend
that passes on those devices only.

Definitions (proc(5)); the tree's figures are sums over the process and its descendants, so a
launcher (torchrun) counts with its workers:

- ``/proc/<pid>/stat``: the fields after the command name's closing parenthesis start at field 3
  (state); utime and stime (fields 14, 15) and starttime (22) in clock ticks
  (``sysconf(_SC_CLK_TCK)``), num_threads (20). ``started = btime + starttime / ticks``, btime
  from ``/proc/stat`` (boot time, epoch s).
- ``cpu_percent = 100 × Δ(utime + stime) / ticks / Δt`` over the processes present at both
  readings: top's %CPU (100 = one CPU busy; above 100 with several busy threads).
- ``rss_bytes``: ``VmRSS`` of each process (``sources.host.read_rss``); ``threads``: num_threads.
- Descendants: ``/proc/<pid>/task/<tid>/children`` (Linux 3.5+, CONFIG_PROC_CHILDREN), else a
  scan of every ``/proc/<n>/stat`` for its parent pid.

Standard library only.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from trainmeter.sources.host import read_rss

MAX_TREE = 64  # processes of a tree followed (a node's ranks and their loader workers fit)
MAX_CMDLINE = 1000  # characters of the command line kept
_STATES = {"R": "running", "S": "sleeping", "D": "waiting on I/O", "Z": "zombie",
           "T": "stopped", "t": "stopped by a debugger", "X": "dead", "I": "idle"}  # fmt: skip
_ENDED = ("Z", "X")
_FIGURES = ("cpu_percent", "rss_bytes", "threads", "children")


@dataclass
class ProcessSample:
    """One reading of the watched process and its tree (see the module docstring)."""

    pid: int
    alive: bool = True
    cmdline: str | None = None
    user: str | None = None
    uid: int | None = None
    started: float | None = None
    ended: float | None = None
    state: str | None = None
    cpu_percent: float | None = None
    rss_bytes: int | None = None
    threads: int | None = None
    children: int | None = None
    pids: list[int] = field(default_factory=list)
    missing: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict:
        """A JSON-ready copy."""
        return asdict(self)


@dataclass(frozen=True)
class Stat:
    """The fields of ``/proc/<pid>/stat`` used here (ticks are clock ticks)."""

    state: str
    ppid: int
    cpu_ticks: int  # utime + stime
    threads: int
    start_ticks: int  # since boot


def read_stat(proc: str | os.PathLike, pid: int) -> Stat:
    """``/proc/<pid>/stat``; the command name may hold spaces and parentheses, so the fields are
    read after its last ``)``. Raises OSError (gone) or ValueError (unreadable)."""
    text = (Path(proc) / str(int(pid)) / "stat").read_text()
    rest = text[text.rindex(")") + 1 :].split()
    return Stat(rest[0], int(rest[1]), int(rest[11]) + int(rest[12]), int(rest[17]),
                int(rest[19]))  # fmt: skip


def read_uid(proc: str | os.PathLike, pid: int) -> int:
    """The real uid of ``pid`` (``Uid:`` in ``/proc/<pid>/status``)."""
    with open(Path(proc) / str(int(pid)) / "status") as f:
        for line in f:
            if line.startswith("Uid:"):
                return int(line.split()[1])
    raise ValueError(f"no Uid line for pid {pid}")


def read_boot_time(proc: str | os.PathLike) -> float:
    """Boot time in seconds since the epoch (``btime`` in ``/proc/stat``)."""
    with open(Path(proc) / "stat") as f:
        for line in f:
            if line.startswith("btime "):
                return float(line.split()[1])
    raise ValueError("no btime line in /proc/stat")


def read_children(proc: str | os.PathLike, pid: int) -> list[int]:
    """Direct children of ``pid``: each thread's ``children`` file, else a scan of /proc."""
    base = Path(proc) / str(int(pid)) / "task"
    files = list(base.glob("*/children"))
    if files:
        return sorted({int(c) for f in files for c in f.read_text().split()})
    out = []
    for d in Path(proc).iterdir():
        if d.name.isdigit():
            try:
                if read_stat(proc, int(d.name)).ppid == pid:
                    out.append(int(d.name))
            except (OSError, ValueError):
                continue  # ended while we looked
    return sorted(out)


def check_pid(pid: int) -> None:
    """Raise ``ProcessLookupError`` (no such process) or ``PermissionError`` (another user's)."""
    os.kill(pid, 0)  # signal 0: only the existence and permission checks, nothing is sent


def _user(uid: int) -> str | None:
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):  # no passwd entry (a container's uid): the uid still shows
        return None


class ProcessSource:
    """Facts of one process and its tree for the sampler thread. Not thread-safe."""

    def __init__(
        self,
        pid: int,
        proc: str | os.PathLike = "/proc",
        *,
        clock: Callable[[], float] = time.time,
        redact: Callable[[list[str]], list[str]] = list,
    ) -> None:
        self.pid, self.proc, self._clock, self._redact = int(pid), Path(proc), clock, redact
        try:
            first = read_stat(self.proc, self.pid)
        except (OSError, ValueError):
            raise ProcessLookupError(f"no process {pid} in {proc}") from None
        if first.state in _ENDED:
            raise ProcessLookupError(f"process {pid} has already ended (a zombie)")
        self._start = first.start_ticks
        self._hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self._last: tuple[float, dict[int, tuple[int, int]]] | None = None  # (t, {pid: ticks})
        self._prev: ProcessSample | None = None  # the last reading while it ran
        self._users: dict[int, str | None] = {}

    def argv(self) -> list[str]:
        """The command line as it is now (``/proc/<pid>/cmdline``; empty for a kernel thread)."""
        raw = (self.proc / str(self.pid) / "cmdline").read_bytes()
        return [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]

    def alive(self) -> bool:
        """The same process still runs: not gone, not a zombie, same start time."""
        try:
            st = read_stat(self.proc, self.pid)
        except (OSError, ValueError):
            return False
        return st.state not in _ENDED and st.start_ticks == self._start

    def pids(self) -> list[int]:
        """The process and its descendants, breadth first, at most ``MAX_TREE`` (empty once the
        process has ended)."""
        if not self.alive():
            return []
        tree, i = [self.pid], 0
        while i < len(tree) and len(tree) < MAX_TREE:
            try:
                tree.extend(c for c in read_children(self.proc, tree[i]) if c not in tree)
            except (OSError, ValueError):
                pass  # that process ended while we looked
            i += 1
        return tree[:MAX_TREE]

    def sample(self) -> ProcessSample:
        """One ``ProcessSample``. Never raises."""
        if not self.alive():
            return self._ended()
        s = ProcessSample(pid=self.pid)
        for name, read in (("facts", self._facts), ("tree", self._tree)):
            try:
                read(s)
            except Exception as err:  # a field we cannot read is a reason, never an exception
                s.missing[name] = f"could not read /proc: {type(err).__name__}: {err}"
        if s.alive:  # it may have ended while we read
            self._prev = s
        return s

    def _ended(self) -> ProcessSample:
        """The last facts it had, marked ended, with no figures."""
        if self._prev is None or self._prev.alive:
            base = self._prev or ProcessSample(pid=self.pid)
            why = f"process {self.pid} has ended"
            self._prev = replace(base, alive=False, ended=self._clock(), state="ended", pids=[],
                                 cpu_percent=None, rss_bytes=None, threads=None, children=None,
                                 missing=dict.fromkeys(_FIGURES, why))  # fmt: skip
        return replace(self._prev)

    def _facts(self, s: ProcessSample) -> None:
        argv = self.argv()
        s.cmdline = " ".join(self._redact(argv))[:MAX_CMDLINE] if argv else None
        s.uid = read_uid(self.proc, self.pid)
        if s.uid not in self._users:
            self._users[s.uid] = _user(s.uid)
        s.user = self._users[s.uid]
        st = read_stat(self.proc, self.pid)
        s.alive = st.state not in _ENDED and st.start_ticks == self._start
        s.state = _STATES.get(st.state, st.state)
        s.started = read_boot_time(self.proc) + st.start_ticks / self._hz
        if s.cmdline is None:
            s.missing["cmdline"] = "empty (a kernel thread, or the process is exiting)"

    def _tree(self, s: ProcessSample) -> None:
        s.pids = self.pids()
        s.children = max(len(s.pids) - 1, 0)
        ticks: dict[int, tuple[int, int]] = {}
        threads = rss = 0
        for pid in s.pids:
            try:
                st = read_stat(self.proc, pid)
                rss += read_rss(self.proc, pid)
            except (OSError, ValueError):
                continue  # ended between the listing and this read
            ticks[pid] = (st.start_ticks, st.cpu_ticks)
            threads += st.threads
        s.threads, s.rss_bytes = threads, rss
        now, last = self._clock(), self._last
        self._last = (now, ticks)
        if last is None or now <= last[0]:
            s.missing["cpu_percent"] = "needs two readings (the first one primes the counters)"
            return
        busy = sum(t[1] - last[1][p][1] for p, t in ticks.items()
                   if p in last[1] and last[1][p][0] == t[0])  # fmt: skip
        s.cpu_percent = 100.0 * max(busy, 0) / self._hz / (now - last[0])


def gpus_used(samples: Iterable[dict], pids: Iterable[int]) -> list[int]:
    """Indices of the GPU sample dicts whose ``process_mem_bytes`` lists one of ``pids`` (NVML
    reports host pids: inside a container with its own pid namespace nothing matches)."""
    wanted = {str(p) for p in pids}
    return [s["index"] for s in samples
            if wanted & {str(p) for p in (s.get("process_mem_bytes") or {})}]  # fmt: skip


class OnlyDevices:
    """A GPU backend (``sources.base.GpuBackend``) that passes on ``indices`` only, keeping their
    indices, so ``tm attach`` logs the GPUs its process uses and not the whole node's."""

    def __init__(self, backend, indices: Iterable[int]) -> None:
        self.inner, self.keep = backend, set(indices)
        self.kind, self.reason = backend.kind, backend.reason

    def devices(self):
        return [d for d in self.inner.devices() if d.index in self.keep]

    def sample(self):
        return [s for s in self.inner.sample() if s.index in self.keep]

    def close(self) -> None:
        self.inner.close()
