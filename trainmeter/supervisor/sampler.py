"""The supervisor's hardware sampler: GPU counters (NVML/GPM or a fake) and the host, on a timer.

A daemon thread reads the GPU backend and the host every ``1/hz`` seconds and hands one ``gpu``
record per tick to :meth:`Live.ingest` (the one writer of the run log); a ``gpu_devices`` record
with the backend and the static device facts goes first in every run. The first reading is
taken at once, so a sample reaches the log within a second of the start.

Why 1 Hz by default (docs/spec.md "Sampling rate"): NVML's GPU-Util is an average over a sample
period of 1/6 s to 1 s by product, board power a 1 s average, and the energy counter should be
differenced over windows of about 1 s (docs/spec.md "Hardware sampling"); GPM needs at
least 100 ms between its two samples. Sampling faster repeats the same averages and grows the
run log; 1 Hz keeps an 8-GPU node's log near 10 MB an hour.

The sampler never creates a CUDA context (NVML only, ``trainmeter/sources/gpu.py``) and never
raises: a failing backend is noted once and sampling stops; training goes on.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from trainmeter.core import records

DEFAULT_HZ = 1.0
MIN_HZ, MAX_HZ = 1.0, 10.0  # 1 to 10 Hz; GPM needs >= 100 ms between samples


class Sampler:
    """Sample ``backend`` and ``host`` into ``live`` until :meth:`stop`.

    Args:
        live: the supervisor's :class:`trainmeter.supervisor.live.Live`.
        backend: a ``trainmeter.sources.GpuBackend`` (``open_backend(spec)``).
        host: a ``trainmeter.sources.HostSource`` or None.
        hz: samples per second, 1 to 10.
        pids: returns the training processes' pids (RSS and per-process GPU memory).
        clock: wall-clock seconds (records' ``t``).
        active: returns whether to sample now (the notebook's supervisor: only while a cell
            runs); None: whenever a run is open. The first sample after a pause carries
            ``resume: true``, so the energy used while nothing trained is not counted.
        process: returns the watched process's facts as a dict (``tm attach``:
            ``sources.process.ProcessSource.sample().as_dict()``); each ``gpu`` record carries
            the fields that changed since the log last got them, as ``process``.
    Raises:
        ValueError: ``hz`` outside 1..10.
    """

    def __init__(
        self,
        live,
        backend,
        host=None,
        *,
        hz: float = DEFAULT_HZ,
        pids: Callable[[], Iterable[int]] = tuple,
        clock: Callable[[], float] = time.time,
        active: Callable[[], bool] | None = None,
        process: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        if not MIN_HZ <= hz <= MAX_HZ:
            raise ValueError(f"sampling rate must be {MIN_HZ:g} to {MAX_HZ:g} Hz, got {hz:g}")
        self.live, self.backend, self.host = live, backend, host
        self.period = 1.0 / hz
        self.pids, self.clock, self.active = pids, clock, active
        self.process = process
        self._proc_sent: dict[str, Any] = {}  # the process fields the log last got
        self._paused = False  # a tick found the sampler inactive since the last sample
        self._stop = threading.Event()
        self._run_id: str | None = None  # the run the device facts were written for
        self._devices: list[dict] | None = None
        self._missing: dict[int, dict] = {}  # last `missing` logged per device (sent on change)
        self._thread = threading.Thread(target=self._loop, name="trainmeter-sampler", daemon=True)

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def stop(self, timeout: float = 2.0, *, last: bool = False) -> None:
        """Stop the thread and close the backend (never raises). ``last``: log the process
        facts once more after the thread has stopped (``tm attach``: the process's end), with
        no GPU or host reading (one taken a moment ago would lack GPM's 100 ms window)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        if last and not self._thread.is_alive():
            try:
                self.tick(process_only=True)
            except Exception:  # the run closes all the same
                pass
        try:
            self.backend.close()
        except Exception:  # a backend that fails to close must not block tm's exit
            pass

    def _loop(self) -> None:
        try:
            while True:
                self.tick()
                if self._stop.wait(self.period):
                    return
        except Exception as exc:  # never take the supervisor down: say so once, stop sampling
            self.live.note(f"hardware sampling stopped: {type(exc).__name__}: {exc}")

    def tick(self, *, process_only: bool = False) -> bool:
        """Take one reading and ingest it; False when no run is open or the sampler is not
        active (nothing written). ``process_only``: a record with no GPU or host reading (the
        engine keeps their last figures) and the process facts."""
        run_id = self.live.run_id
        if run_id is None:
            return False
        if self.active is not None and not self.active():
            self._paused = True
            return False
        new_run = run_id != self._run_id
        recs = [self._devices_record()] if new_run else []
        missing = {} if new_run else dict(self._missing)
        proc_sent = {} if new_run else dict(self._proc_sent)
        rec = self._sample_record(missing, proc_sent, process_only)
        if self._paused and not new_run:
            rec["resume"] = True
        with self.live.cond:  # the cell may have ended, or a run begun, while NVML was read
            if self.live.run_id != run_id or (self.active is not None and not self.active()):
                self._paused = self._paused or self.live.run_id == run_id
                return False
            written = self.live.ingest([*recs, rec])
        if written:  # commit only what reached the log
            self._run_id, self._missing, self._paused = run_id, missing, False
            self._proc_sent = proc_sent
        return written

    def _devices_record(self) -> dict[str, Any]:
        if self._devices is None:
            self._devices = [d.as_dict() for d in self.backend.devices()]
        kind = getattr(self.backend, "kind", "none")
        reason = getattr(self.backend, "reason", None)
        return records.make("gpu_devices", self.clock(), backend=str(kind), devices=self._devices,
                            reason=reason)  # fmt: skip

    def _sample_record(self, missing: dict[int, dict], proc_sent: dict,
                       process_only: bool = False) -> dict[str, Any]:  # fmt: skip
        gpus, host = [], None
        if not process_only:
            gpus = [self._compact(s.as_dict(), missing) for s in self.backend.sample()]
            host = self.host.sample(list(self.pids())).as_dict() if self.host else None
        if host is not None:
            host.pop("rss_by_pid", None)  # the sum is what the dashboard shows
        extra = {}
        if self.process is not None:  # only what changed: the command line is written once
            now = self.process()
            changed = {k: v for k, v in now.items() if k not in proc_sent or proc_sent[k] != v}
            if changed:
                extra["process"] = changed
            proc_sent.update(now)
        return records.make("gpu", self.clock(), gpus=gpus, host=host, **extra)

    @staticmethod
    def _compact(sample: dict[str, Any], sent: dict[int, dict]) -> dict[str, Any]:
        """Drop None fields, and ``missing`` when it equals ``sent[index]`` (what the log last
        got for this device; updated here; core/hardware.py carries it): an 8-GPU node then
        writes a few hundred bytes per GPU per tick."""
        i = sample.get("index")
        missing = sample.pop("missing", None) or {}
        out = {k: v for k, v in sample.items() if v is not None}
        if sent.get(i) != missing:
            sent[i] = missing
            out["missing"] = missing
        if out.get("process_mem_bytes") == {}:
            del out["process_mem_bytes"]
        return out


def start_sampler(live, spec: str | None, hz: float, pids: Callable[[], Iterable[int]], *,
                  active: Callable[[], bool] | None = None):  # fmt: skip
    """Open the GPU backend ``spec`` and the host source and start sampling into ``live``;
    returns the :class:`Sampler`, or None after a note when the backend cannot open (an
    explicit ``nvml`` on a machine without it): the run goes on without counters. ``active``:
    as in :class:`Sampler`."""
    from trainmeter.sources import HostSource, open_backend

    try:
        backend = open_backend(spec)
    except Exception as exc:
        live.note(f"no GPU counters: {exc}")
        return None
    return Sampler(live, backend, HostSource(), hz=hz, pids=pids, active=active).start()
