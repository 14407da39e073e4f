"""Host CPU and memory, and the resident memory of given processes, from Linux's /proc.

API:

``HostSource(proc="/proc", *, clock=time.time)``
    ``sample(pids=()) -> HostSample``; never raises. The first call primes the CPU counters,
    so its ``cpu_util`` is None ("needs two readings"); later calls give the share since the
    previous call.
``HostSample`` (``as_dict()`` is JSON-ready)
    time_s (wall clock), cpu_util (fraction 0..1 of all CPUs busy over the interval),
    mem_used_bytes, mem_total_bytes, rss_bytes (sum over the given pids that still exist),
    rss_by_pid {pid: bytes; JSON turns the keys into strings}, missing {field: reason}.
``read_cpu_times(proc) -> (busy, total)``, ``read_meminfo(proc) -> (used, total)``,
``read_rss(proc, pid) -> int``: the single reads (raise OSError/ValueError; ``sample`` catches).

Definitions (proc(5)):

- CPU: the first line of ``/proc/stat`` is ``cpu user nice system idle iowait irq softirq steal
  guest guest_nice`` in clock ticks. total = user + nice + system + idle + iowait + irq +
  softirq + steal (guest time is already inside user and nice), idle = idle + iowait, busy =
  total - idle; ``cpu_util = Δbusy / Δtotal`` between two samples.
- Memory: ``/proc/meminfo`` ``MemTotal`` and ``MemAvailable`` (kB = KiB); used = total -
  available, as ``free``'s "used" in procps-ng 4 (the memory not available to start new work).
- RSS: ``VmRSS`` of ``/proc/<pid>/status`` (kB = KiB): the process's resident memory.

Standard library only.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass
class HostSample:
    """One reading of the host (see the module docstring for definitions)."""

    time_s: float
    cpu_util: float | None = None
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    rss_bytes: int | None = None
    rss_by_pid: dict[int, int] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict:
        """A JSON-ready copy."""
        return asdict(self)


def read_cpu_times(proc: str | os.PathLike = "/proc") -> tuple[int, int]:
    """(busy, total) clock ticks of all CPUs since boot, from ``/proc/stat``."""
    with open(Path(proc) / "stat") as f:
        first = f.readline().split()
    if not first or first[0] != "cpu":
        raise ValueError("no aggregate 'cpu' line in /proc/stat")
    ticks = [int(x) for x in first[1:9]] + [0] * (9 - len(first))
    user, nice, system, idle, iowait, irq, softirq, steal = ticks[:8]
    total = user + nice + system + idle + iowait + irq + softirq + steal
    return total - idle - iowait, total


def read_meminfo(proc: str | os.PathLike = "/proc") -> tuple[int, int]:
    """(used, total) bytes from ``/proc/meminfo``: total - MemAvailable, MemTotal."""
    values = {}
    with open(Path(proc) / "meminfo") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("MemTotal", "MemAvailable"):
                values[key] = int(rest.split()[0]) * 1024
    if "MemTotal" not in values or "MemAvailable" not in values:
        raise ValueError("MemTotal or MemAvailable missing from /proc/meminfo")
    return values["MemTotal"] - values["MemAvailable"], values["MemTotal"]


def read_rss(proc: str | os.PathLike, pid: int) -> int:
    """Resident memory of ``pid`` in bytes (``VmRSS`` in ``/proc/<pid>/status``)."""
    with open(Path(proc) / str(int(pid)) / "status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise ValueError(f"no VmRSS for pid {pid} (a kernel thread or a zombie)")


def _why(err: BaseException) -> str:
    if isinstance(err, FileNotFoundError):
        return f"not available on this system: {err.filename} is missing (Linux /proc needed)"
    return f"could not read /proc: {type(err).__name__}: {err}"


class HostSource:
    """Host readings for the sampler thread (see the module docstring). Not thread-safe."""

    def __init__(
        self, proc: str | os.PathLike = "/proc", *, clock: Callable[[], float] = time.time
    ) -> None:
        self.proc = Path(proc)
        self._clock = clock
        self._last_cpu: tuple[int, int] | None = None

    def sample(self, pids: Iterable[int] = ()) -> HostSample:
        """One ``HostSample``; RSS summed over ``pids`` still alive. Never raises."""
        s = HostSample(time_s=self._clock())
        try:
            self._cpu(s)
        except Exception as err:
            s.missing["cpu_util"] = _why(err)
        try:
            s.mem_used_bytes, s.mem_total_bytes = read_meminfo(self.proc)
        except Exception as err:
            s.missing["mem_used_bytes"] = s.missing["mem_total_bytes"] = _why(err)
        try:
            self._rss(s, pids)
        except Exception as err:
            s.missing["rss_bytes"] = _why(err)
        return s

    def _cpu(self, s: HostSample) -> None:
        now = read_cpu_times(self.proc)
        last, self._last_cpu = self._last_cpu, now
        if last is None:
            s.missing["cpu_util"] = "needs two readings (the first one primes the counters)"
            return
        busy, total = now[0] - last[0], now[1] - last[1]
        if total <= 0 or busy < 0:
            s.missing["cpu_util"] = "no CPU time passed since the previous reading"
            return
        s.cpu_util = min(busy / total, 1.0)

    def _rss(self, s: HostSample, pids: Iterable[int]) -> None:
        pids = list(pids)
        if not pids:
            s.missing["rss_bytes"] = "no training process to measure at this reading"
            return
        gone = []
        for pid in pids:
            try:
                s.rss_by_pid[int(pid)] = read_rss(self.proc, pid)
            except (OSError, ValueError):
                gone.append(int(pid))
        if s.rss_by_pid:
            s.rss_bytes = sum(s.rss_by_pid.values())
        if gone and not s.rss_by_pid:
            if not self.proc.is_dir():
                s.missing["rss_bytes"] = _why(FileNotFoundError(2, "missing", str(self.proc)))
            else:
                s.missing["rss_bytes"] = f"process {', '.join(map(str, gone))} not running"
        elif gone:
            s.missing["rss_by_pid"] = f"not running any more: {', '.join(map(str, gone))}"
