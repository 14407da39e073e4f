"""The live engine: records in, snapshot out. The same code serves the live view and replay.

``Engine.apply(record)`` folds one record (see :mod:`trainmeter.core.records`) into the state;
``Engine.snapshot(now)`` returns a plain JSON-able dict, the one shape every surface draws
(widget, page, summary line, ``tm replay --json``). Every figure in it comes from the pure
functions in :mod:`trainmeter.core.metrics`, :mod:`trainmeter.core.flops` and
:mod:`trainmeter.core.peaks`; docs/spec.md "Snapshot" defines each key.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field, fields
from typing import Any

from trainmeter.core import flops, metrics, peaks
from trainmeter.core.timeline import Timeline

WINDOW_STEPS = 20  # steps in the "recent" throughput window (about a few seconds of a real run)
EMA_BETA = 0.9
MAX_NOTES = 20
_SHAPE_FIELDS = {f.name for f in fields(flops.ModelShape)}
_END_STATE = {"ok": "finished", "error": "failed", "interrupted": "interrupted"}


@dataclass
class _Clock:
    """Rank 0's optimizer steps: the run's step clock."""

    step: int = 0
    tokens: int = 0
    samples: int = 0
    last_t: float | None = None  # time of the previous step in this segment (None: none yet)
    timed_tokens: int = 0  # tokens of steps that have a previous step in the same segment
    timed_s: float = 0.0
    recent: deque = field(default_factory=lambda: deque(maxlen=WINDOW_STEPS))  # (dt, tokens)
    recent_tokens: int = 0  # sums over `recent`, kept as it slides (exact for tokens)
    recent_s: float = 0.0

    def push(self, dt: float, tokens: int) -> None:
        """Slide the recent window by one timed step."""
        if len(self.recent) == self.recent.maxlen:
            old_dt, old_tokens = self.recent[0]
            self.recent_s -= old_dt
            self.recent_tokens -= old_tokens
        self.recent.append((dt, tokens))
        self.recent_tokens += tokens
        self.recent_s += dt
        if self.step % 1024 == 0:  # re-sum now and then: no float drift over a long run
            self.recent_s = math.fsum(d for d, _ in self.recent)


class Engine:
    """Fold records into the state of one run.

    Args:
        timeline_cap: points kept per chart series (see :class:`Timeline`).
    """

    def __init__(self, timeline_cap: int = 2000) -> None:
        self.run: dict[str, Any] = {"state": "idle", "segment": 0}
        self.opts: dict[str, Any] = {}
        self.agents: dict[int, dict[str, Any]] = {}
        self.model: dict[str, Any] | None = None
        self.shape: flops.ModelShape | None = None
        self.clock = _Clock()
        self.rank_steps: dict[int, int] = {}
        self.series: dict[str, dict[str, Any]] = {}
        self.notes: deque[str] = deque(maxlen=MAX_NOTES)
        self.timeline = Timeline(timeline_cap)
        self.active_s = 0.0  # closed segments' duration
        self.segment_t0: float | None = None
        self.last_t: float | None = None
        self.records = 0

    # -- records in -------------------------------------------------------------------------
    def apply(self, rec: dict[str, Any]) -> None:
        """Fold one validated record into the state (unknown kinds are ignored)."""
        self.records += 1
        self.last_t = rec["t"] if self.last_t is None else max(self.last_t, rec["t"])
        handler = getattr(self, "_on_" + rec["k"], None)
        if handler is not None:
            handler(rec)

    def _on_run_start(self, rec: dict) -> None:
        keep = ("id", "name", "argv", "version", "cwd", "host")
        self.run.update({k: rec[k] for k in keep if k in rec}, started=rec["t"])
        self.opts = dict(rec.get("opts") or {})
        if self.segment_t0 is None:
            self._start_segment(rec["t"], self.run["segment"] or 1)

    def _on_segment_start(self, rec: dict) -> None:
        self._close_segment(rec["t"])
        # a later cell keeps earlier options it does not restate
        self.opts.update({k: v for k, v in (rec.get("opts") or {}).items() if v is not None})
        self._start_segment(rec["t"], rec["segment"])

    def _start_segment(self, t: float, segment: int) -> None:
        self.segment_t0 = t
        self.run.update(segment=segment, state="running")
        self.clock.last_t = None  # the gap between cells is not training time

    def _close_segment(self, t: float) -> None:
        if self.segment_t0 is not None:
            self.active_s += max(0.0, t - self.segment_t0)
            self.segment_t0 = None

    def _on_segment_end(self, rec: dict) -> None:
        self._close_segment(rec["t"])
        self.run["state"] = _END_STATE.get(rec["status"], "finished")
        if rec.get("error"):
            self.run["error"] = rec["error"]

    def _on_run_end(self, rec: dict) -> None:
        self._close_segment(rec["t"])
        self.run.update(state=_END_STATE.get(rec["status"], "finished"), ended=rec["t"])
        self.run["exit_code"] = rec.get("exit_code")

    def _on_agent_hello(self, rec: dict) -> None:
        keep = ("pid", "rank", "world_size", "host", "python", "torch")
        self.agents[rec["pid"]] = {k: rec.get(k) for k in keep}

    def _on_model(self, rec: dict) -> None:
        self.model = {k: v for k, v in rec.items() if k not in ("v", "k", "t")}
        args = {k: v for k, v in self.model.items() if k in _SHAPE_FIELDS}
        try:
            self.shape = flops.ModelShape(**args)
        except (TypeError, ValueError) as exc:
            self.shape = None
            self.notes.append(f"model record not usable for FLOPs: {exc}")

    def _on_step(self, rec: dict) -> None:
        rank = rec["rank"]
        self.rank_steps[rank] = self.rank_steps.get(rank, 0) + 1
        if rank != 0:
            return
        c, t = self.clock, rec["t"]
        tokens = rec.get("tokens") or 0
        c.step = rec["step"]
        c.tokens += tokens * self._world()
        c.samples += (rec.get("samples") or 0) * self._world()
        if c.last_t is not None and t > c.last_t:
            dt = t - c.last_t
            c.timed_s += dt
            c.timed_tokens += tokens * self._world()
            c.push(dt, tokens * self._world())
            rate = metrics.throughput(c.recent_tokens, c.recent_s)
            if rate is not None:
                self.timeline.append("tokens_per_s", c.step, rate)
        c.last_t = t
        if self.run["state"] == "idle":
            self.run["state"] = "running"

    def _on_series(self, rec: dict) -> None:
        name, value = rec["name"], float(rec["value"])
        step = rec.get("step")
        if step is None:
            step = self.clock.step
        prev = self.series.get(name)
        ema = metrics.ema(prev["ema"] if prev else None, value, EMA_BETA)
        self.series[name] = {"step": step, "value": value, "ema": ema}
        self.timeline.append(name, step, value)

    def _on_note(self, rec: dict) -> None:
        src = rec.get("source")
        self.notes.append(f"{src}: {rec['text']}" if src else rec["text"])

    def _world(self) -> int:
        """Ranks in the job: the largest world size any agent reported (a launcher such as
        torchrun runs an agent too, alone in its world of 1)."""
        return max((int(a.get("world_size") or 1) for a in self.agents.values()), default=1)

    # -- snapshot out -----------------------------------------------------------------------
    def snapshot(self, now: float | None = None) -> dict[str, Any]:
        """The run's state as a JSON-able dict (keys defined in docs/spec.md "Snapshot").

        Args:
            now: wall-clock seconds used for the running segment's elapsed time; defaults to
                the newest record time, so replay is deterministic.
        """
        now = self.last_t if now is None else now
        c = self.clock
        recent_s = c.recent_s
        rate = metrics.throughput(c.recent_tokens, recent_s)
        rate_avg = metrics.throughput(c.timed_tokens, c.timed_s)
        budget = self.opts.get("budget_tokens")
        convention = self.opts.get("convention") or flops.DEFAULT_CONVENTION
        fpt = flops.all_conventions(self.shape) if self.shape else {}
        peak = self._peak()
        gpus = self._gpus()
        notes = list(self.notes) + self._gap_notes(peak, fpt)
        return {
            "v": 1,
            "run": dict(self.run),
            "step": c.step,
            "tokens": c.tokens,
            "samples": c.samples,
            "elapsed_s": self._elapsed(now),
            "train_time_s": c.timed_s,
            "tokens_per_s": rate,
            "tokens_per_s_avg": rate_avg,
            "step_time_s": recent_s / len(c.recent) if c.recent else None,
            "budget_tokens": budget,
            "progress": metrics.progress(c.tokens, budget),
            # no ETA once the run (or the cell) has ended: nothing is moving towards the budget
            "eta_s": metrics.eta_s(c.tokens, budget, rate) if self._moving() else None,
            "model": self.model,
            "ranks": {str(r): n for r, n in sorted(self.rank_steps.items())},
            "convention": convention,
            "flops_per_token": fpt,
            "flops_spent": {k: (v * c.tokens if v is not None else None) for k, v in fpt.items()},
            "peak": _peak_dict(peak),
            "mfu": _mfu(rate, fpt, gpus, peak),
            "mfu_avg": _mfu(rate_avg, fpt, gpus, peak),
            "series": {k: dict(v) for k, v in self.series.items()},
            "notes": notes,
        }

    def _moving(self) -> bool:
        return self.run["state"] in ("running", "idle")

    def _elapsed(self, now: float | None) -> float:
        running = 0.0
        if self.segment_t0 is not None and now is not None:
            running = max(0.0, now - self.segment_t0)
        return self.active_s + running

    def _gpus(self) -> int:
        m = self.model or {}
        if m.get("device") != "cuda":
            return int(self.opts.get("gpus") or 0)  # a declared peak on CPU counts one device
        return int(m.get("gpus") or 1) * self._world()

    def _peak(self) -> peaks.ResolvedPeak | None:
        m = self.model or {}
        device = self.opts.get("device") or m.get("device_name")
        return peaks.resolve_peak(device, m.get("run_dtype"), self.opts.get("peak_flops"))

    def _gap_notes(self, peak: peaks.ResolvedPeak | None, fpt: dict) -> list[str]:
        out = []
        if self.shape is None:
            out.append("FLOPs/token: no model seen yet (found at the first training forward pass)")
        if peak is None:
            m = self.model or {}
            device = self.opts.get("device") or m.get("device_name") or m.get("device") or "unknown"
            out.append(f"no MFU: no dense peak is known for {device}; declare one with --peak")
        return out


def _peak_dict(peak: peaks.ResolvedPeak | None) -> dict[str, Any] | None:
    if peak is None:
        return None
    keys = ("flops", "dtype", "device", "source", "citation", "verified")
    return {k: getattr(peak, k) for k in keys}


def _mfu(rate, fpt: dict, gpus: int, peak) -> dict[str, float | None] | None:
    if peak is None or rate is None or not fpt:
        return None
    gpus = max(gpus, 1)
    return {k: metrics.mfu(rate, v, gpus, peak.flops) for k, v in fpt.items()}


def replay(lines) -> Engine:
    """Fold an iterable of record lines (bytes or str) into a fresh :class:`Engine`.

    Malformed lines are skipped and counted in a note, never fatal: a run log cut short by a
    crash still replays up to its last whole line.
    """
    from trainmeter.core.records import RecordError, decode

    eng, bad = Engine(), 0
    for line in lines:
        if not line.strip():
            continue
        try:
            eng.apply(decode(line))
        except RecordError:
            bad += 1
    if bad:
        eng.notes.append(f"replay skipped {bad} malformed line(s)")
    return eng
