"""The live engine: records in, snapshot out. The same code serves the live view and replay.

``Engine.apply(record)`` folds one record (see :mod:`trainmeter.core.records`) into the state;
``Engine.snapshot(now)`` returns a plain JSON-able dict, the one shape every surface draws
(widget, page, summary line, ``tm replay --json``). Every figure in it comes from the pure
functions in :mod:`trainmeter.core.metrics`, :mod:`trainmeter.core.flops`,
:mod:`trainmeter.core.peaks` and :mod:`trainmeter.core.plan`; docs/spec.md "Snapshot" defines
each key.

What training code sends is bounded before it is kept (docs/spec.md "Bounds on an update"): at
most ``MAX_SERIES`` series names of at most ``MAX_NAME`` characters, ``MAX_RANKS`` ranks,
``MAX_NOTES`` notes of at most ``MAX_NOTE`` characters, a model record of at most
``MAX_MODEL_FIELDS`` scalar fields, and counts (steps, tokens, samples) below 2**53; what is
past a bound is counted in a note, and the run log still has it.
"""

from __future__ import annotations

import math
import re
from collections import deque
from dataclasses import dataclass, field, fields
from typing import Any

from trainmeter.core import (
    catalog,
    flops,
    fold_steps,
    metrics,
    passport,
    peaks,
    plan,
    rank_models,
    reasons,
)
from trainmeter.core.drops import Drops, drop_text
from trainmeter.core.hardware import MAX_DEVICES, HardwareState, gpu_means
from trainmeter.core.options import LoggedOptions, from_record
from trainmeter.core.rank_counts import RankCounts
from trainmeter.core.ranks import Ranks, over_fastest, startup_s
from trainmeter.core.records import SPAN_KINDS
from trainmeter.core.timeline import DEFAULT_CAP, Timeline, name_key

WINDOW_STEPS = 20  # steps in the "recent" throughput window (about a few seconds of a real run)
EMA_BETA = 0.9
MAX_NOTES = 20  # notes kept (the newest); each at most MAX_NOTE characters
MAX_NOTE = 500  # characters of one note (a sentence or two, and a quoted name)
MAX_SERIES = 64  # distinct series names from training code kept (later names: one note;
# the last place waits for a train loss until one is kept: Engine._series_room)
MAX_NAME = 200  # characters of a series name or a model string (longer: cut, ending in "…")
OWN_SERIES = 64  # timeline names for trainmeter's own series (tokens_per_s, mfu/<c>, gpu<i>/...)
MAX_RANKS = 1024  # distinct ranks kept (one supervisor per node; 1024 leaves room for any node)
MAX_RANK = 2**31 - 1  # largest rank accepted (torch.distributed ranks are C ints)
MAX_MODEL_FIELDS = 48  # scalar fields kept from a model record (the agent sends 22)
MAX_KEY = 64  # characters of a model field name
MAX_COUNT = 2**53  # steps, tokens, samples must be below: JavaScript's exact integers (2**53)
MAX_ERROR = 2000  # characters of a segment's error text (as the supervisor cuts it)
STRAGGLER_MARGIN = 0.15  # a rank is slow when its step time exceeds the ranks' median by this
STRAGGLER_EVALS = 5  # ...at this many consecutive evaluations (rank 0's steps) in a row
SPLIT = ("compute", "data", "checkpoint", "eval", "startup", "other")  # time_split: sum elapsed_s
MAX_SPAN_S = 1e9  # seconds of one span at most (a bad record cannot overflow the sums)
_COUNTED_MAX = 1000  # distinct refused names counted exactly; beyond, "1000+"
_OURS = re.compile(r"tokens_per_s\Z|mfu/|gpu[0-9]+/")  # chart names the engine itself writes


def ours(name: str) -> bool:
    """Whether ``name`` is one the engine charts itself (``tokens_per_s``, ``mfu/<c>``,
    ``gpu<i>/<field>``): a series of the training code's of that name is kept in the series
    table but not charted, so a chart never mixes the two (counted: ``Timeline.clashed``)."""
    return _OURS.match(name) is not None


_SHAPE_FIELDS = {f.name for f in fields(flops.ModelShape)}
_MODEL_FIELDS = (  # the model record's documented fields (docs/spec.md "Run log"), kept first
    *(f.name for f in fields(flops.ModelShape)), "context", "name", "device", "device_name",
    "gpus", "dtype", "run_dtype", "torch", "rank",
)  # fmt: skip
_END_STATE = {"ok": "finished", "error": "failed", "interrupted": "interrupted"}
BACKWARD_LOSS = "backward_loss"  # the series the agent records from backward() (agent/backward.py)
# a run fed samples and no token ids (images, audio, tabular rows): why it has no tokens, and
# why no convention gives FLOPs per token, FLOPs spent or MFU (docs/spec.md "Samples, FLOPs per
# sample and HFU [counted]")
NO_TOKENS = (
    "the model's inputs are not token ids (an image or feature batch), so no tokens, tokens/s "
    "or FLOPs per token apply"
)
CONVENTIONS_NO_TOKENS = (  # short: the page says it under each convention's figure
    "no named convention describes this model: each counts FLOPs per token, and its inputs are "
    "not token ids"
)
HFU_WHY = {  # why hfu_counted.value is null (Engine._hfu); "yet" only while the run is open
    "not counted": "not measured yet: one step's executed FLOPs are counted at the 3rd "
    "optimizer step",
    "never counted": "not measured: no step's executed FLOPs were counted (the 3rd optimizer "
    "step is; a note says why when it could not be)",
    "no counts": "not measured: the counted step's record has neither its tokens nor its "
    "samples (the run ended before that step was read, or an older agent wrote it)",
    "no peak": "no HFU: no dense peak is known; declare one with --peak",
    "no rate": "not measured yet: needs two timed steps",
    "never timed": "not measured: the run had no two steps in one segment, so no step was timed",
}
# record kinds that never change what MFU divides by (devices, peak): after any other kind,
# _mfu_scale looks them up again
_SAME_DIVISOR = frozenset(
    {"step", "series", "span", "step_clock", "tokens_counting", "flops_counted", "note", "dropped"}
)


class StepsFailed(Exception):
    """``Engine.apply_steps``: row ``index`` of the batch raised ``error``."""

    def __init__(self, index: int, error: Exception) -> None:
        super().__init__(f"step row {index}: {type(error).__name__}: {error}")
        self.index, self.error = index, error


def clip(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, the last one an ellipsis when cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass
class _Clock:
    """Rank 0's optimizer steps: the run's step clock."""

    step: int = 0
    tokens: int = 0
    samples: int = 0
    seq_sq: int = 0  # sum over sequences of the squared length (steps that sent it)
    seq_tokens: int = 0  # tokens of the steps that sent seq_sq
    last_t: float | None = None  # time of the previous step in this segment (None: none yet)
    timed_tokens: int = 0  # tokens of steps that have a previous step in the same segment
    timed_s: float = 0.0
    # (dt, tokens, seq_sq, tokens that sent seq_sq, steps) of the recent timed intervals: an
    # interval is one step's, or a merged record's k steps' (records.py ``agg``)
    recent: deque = field(default_factory=lambda: deque(maxlen=WINDOW_STEPS))
    recent_tokens: int = 0  # sums over `recent`, kept as it slides (exact for the ints)
    recent_s: float = 0.0
    recent_sq: int = 0
    recent_sq_tokens: int = 0
    recent_steps: int = 0  # the steps the recent intervals cover (one each, k a merged one)

    def push(self, dt: float, tokens: int, seq_sq: int = 0, sq_tokens: int = 0,
             steps: int = 1) -> None:  # fmt: skip
        """Slide the recent window by one timed interval of ``dt`` seconds covering ``steps``
        steps (more than one: a merged record's)."""
        if len(self.recent) == self.recent.maxlen:
            old_dt, old_tokens, old_sq, old_sq_tokens, old_steps = self.recent[0]
            self.recent_s -= old_dt
            self.recent_tokens -= old_tokens
            self.recent_sq -= old_sq
            self.recent_sq_tokens -= old_sq_tokens
            self.recent_steps -= old_steps
        self.recent.append((dt, tokens, seq_sq, sq_tokens, steps))
        self.recent_tokens += tokens
        self.recent_sq += seq_sq
        self.recent_sq_tokens += sq_tokens
        self.recent_steps += steps
        self.recent_s += dt
        if self.step // 1024 != (self.step - steps) // 1024:  # passed a multiple of 1024:
            self.recent_s = math.fsum(d for d, *_ in self.recent)  # re-sum, no float drift

    def step_time_s(self) -> float | None:
        """Mean seconds per step over the recent window: its seconds over the steps its
        intervals cover (a merged record's interval is k steps' time, not one step's)."""
        return self.recent_s / self.recent_steps if self.recent_steps else None


@dataclass
class _RankClock:
    """One rank's steps: its count and its last ``WINDOW_STEPS`` timed intervals (s)."""

    steps: int = 0
    last_t: float | None = None  # previous step in this segment (None: none yet)
    # (dt, steps) of its recent timed intervals: one step's, or a merged record's k steps'
    recent: deque = field(default_factory=lambda: deque(maxlen=WINDOW_STEPS))
    mean: float | None = None  # step_time_s() cached until the window moves

    def add(self, dt: float, steps: int = 1) -> None:
        self.recent.append((dt, steps))
        self.mean = None

    def step_time_s(self) -> float | None:
        """Mean seconds per step over the recent timed intervals (their seconds over the
        steps they cover), None before the first timed step."""
        if self.mean is None and self.recent:
            self.mean = math.fsum(d for d, _ in self.recent) / sum(k for _, k in self.recent)
        return self.mean


class Engine:
    """Fold records into the state of one run.

    Args:
        timeline_cap: points kept per chart series (>= 8, see :class:`Timeline`); the timeline
            keeps at most ``MAX_SERIES + OWN_SERIES`` series.
    """

    def __init__(self, timeline_cap: int = DEFAULT_CAP) -> None:
        self.run: dict[str, Any] = {"state": "idle", "segment": 0}
        self.opts: dict[str, Any] = {}  # the log's, as written (read through ``options``)
        self._options: tuple[dict[str, Any], LoggedOptions] = ({}, LoggedOptions())
        # (node, pid) -> the agent's hello fields: pids repeat across a merged log's nodes
        self.agents: dict[tuple[str | None, int], dict[str, Any]] = {}
        self.world = 1  # the largest world size any agent reported
        self.model: dict[str, Any] | None = None  # the job's, combined from rank_models
        self.rank_models: dict[int, dict[str, Any]] = {}  # rank -> its model record
        self.shape: flops.ModelShape | None = None
        self.shape_error: str | None = None  # why the model record gave no shape (reasons.py)
        self.clock = _Clock()  # rank 0's steps; tokens and samples: the job's (self.counts)
        self.counts = RankCounts(MAX_RANKS, WINDOW_STEPS)  # every rank's own counts
        self.clock_rank: int | None = None  # 0, or a node's lowest rank (_clock_rank)
        self.rank_clocks: dict[int, _RankClock] = {}
        self.series: dict[str, dict[str, Any]] = {}
        self.notes: deque[str] = deque(maxlen=MAX_NOTES)
        self.timeline = Timeline(timeline_cap, max_series=MAX_SERIES + OWN_SERIES)
        self._mfu_divisor: tuple[int, peaks.ResolvedPeak | None] | None = None  # _mfu_scale's
        self._peak_of: tuple | None = None  # (device, dtype, declared), its peak: _peak's
        self.active_s = 0.0  # closed segments' duration
        self.segment_t0: float | None = None
        self.last_t: float | None = None
        self.records = 0
        self.hw = HardwareState()  # the sampler's GPU and host readings
        self.charted_gpus: set[int] = set()  # GPUs with an activity series on the timeline
        self.counted: dict[str, Any] | None = None  # rank 0's counted step (flops_counted)
        self.step_clock: str | None = None  # rank 0's: "optimizer" or "backward" (step_clock)
        self.counting_seen: set[str] = set()  # rank 0's tokens_counting values
        self.process: dict[str, Any] | None = None  # tm attach: the watched process's facts
        # time spans (docs/spec.md "Time spans"): rank 0's, inside segments
        self.span_s = dict.fromkeys(SPAN_KINDS, 0.0)  # seconds per kind
        self.spans_seen = False
        self.span_inside_s = 0.0  # span time inside timed step intervals (not compute)
        self.span_pending_s = 0.0  # span time after rank 0's last step, awaiting the next
        self.seg_first_t: float | None = None  # rank 0's first step in the open segment
        # stragglers (docs/spec.md "Stragglers"): rank -> consecutive slow evaluations
        self.slow_evals: dict[int, int] = {}
        self.stragglers: list[int] | None = None  # the interval rule's
        self.ranks = Ranks(MAX_RANKS)  # every rank's arrival, lag and split (core/ranks.py)
        # what was past a bound: counted, never kept (the run log has it)
        self.refused_series: set[int] = set()  # timeline.name_key()s, at most _COUNTED_MAX
        self.first_refused: str | None = None
        self.refused_ranks = 0  # step records of ranks past MAX_RANKS or out of range
        self.bad_counts = 0  # steps, tokens, samples outside [0, 2**53)
        # step records that stand for more than one step (records.py ``agg``: the agent merged
        # steps its full outbound buffer could not take), and the steps they stand for
        self.merged_records = self.merged_steps = 0
        self.drops = Drops()  # what was dropped on the way to the log (core/drops.py)
        self.log_read: dict[str, Any] | None = None  # replay: what the log reader skipped
        self._handlers = {  # record kind -> fold (a dict: apply runs for every record)
            name[4:]: getattr(self, name) for name in dir(self) if name.startswith("_on_")
        }

    @property
    def options(self) -> LoggedOptions:
        """The run's options, read from the log's ``opts`` by ``options.from_record`` (a value
        no flag could give is not given; it never raises), again only when they changed."""
        seen, read = self._options
        if seen != self.opts:
            read = from_record(self.opts)
            self._options = (dict(self.opts), read)
        return read

    @property
    def rank_steps(self) -> dict[int, int]:
        """Optimizer steps seen per rank."""
        return {r: rc.steps for r, rc in self.rank_clocks.items()}

    # -- records in -------------------------------------------------------------------------
    def apply(self, rec: dict[str, Any]) -> None:
        """Fold one validated record into the state (unknown kinds are ignored)."""
        self.records += 1
        t = rec["t"]
        if self.last_t is None or t > self.last_t:
            self.last_t = t
        handler = self._handlers.get(rec["k"])
        if handler is not None:
            handler(rec)
        if rec["k"] not in _SAME_DIVISOR:
            self._mfu_divisor = None  # devices or peak may have changed (_mfu_scale)

    def apply_steps(self, steps, start: int = 0) -> None:
        """Fold rows ``start`` on of a :class:`~trainmeter.core.records.Steps` batch (one
        rank's step records as columns): the state :meth:`apply` of each row's record leaves,
        in order; the common case a batch at a time (core/fold_steps.py), the rest row by row.

        Raises:
            StepsFailed: a row raised, as :meth:`apply` would on its record; the rows before
                it are applied, those after it are not.
        """
        i, n = start, len(steps)
        while i < n:
            try:
                j = fold_steps.fold(self, steps, i)
                if j == i:
                    self.apply(steps.row(i))
                    j = i + 1
            except Exception as exc:  # a bug or a shape validate() let through, in row i
                raise StepsFailed(i, exc) from exc
            i = j

    def note(self, text: str) -> None:
        """Keep a note for the person (the newest ``MAX_NOTES``, each cut to ``MAX_NOTE``); a
        note already kept is not kept twice (every rank of a job says the same things)."""
        text = clip(text, MAX_NOTE)
        if text not in self.notes:
            self.notes.append(text)

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
        self.run.pop("state_text", None)  # a cell runs: the run is no longer between cells
        self.ranks.on_segment(t, self.active_s)  # where each rank's start-up ends (ranks.py)
        self.clock.last_t = None  # the gap between cells is not training time
        self.seg_first_t = None
        self.span_pending_s = 0.0
        for rc in self.rank_clocks.values():
            rc.last_t = None

    def _close_segment(self, t: float) -> None:
        if self.segment_t0 is not None:
            self.active_s += max(0.0, t - self.segment_t0)
            self.segment_t0 = None
            self.ranks.on_segment(None, self.active_s)

    def _on_segment_end(self, rec: dict) -> None:
        self._close_segment(rec["t"])
        self.run["state"] = _END_STATE.get(rec["status"], "finished")
        # a notebook between cells: the cell ended, the run did not (no run_end yet)
        cell = rec["segment"] if 0 <= rec["segment"] < MAX_COUNT else "?"  # a bounded text
        self.run["state_text"] = f"{self.run['state']} (cell {cell}; the run is open)"
        if rec.get("error"):
            self.run["error"] = clip(str(rec["error"]), MAX_ERROR)

    def _on_run_end(self, rec: dict) -> None:
        self._close_segment(rec["t"])
        self.run.update(state=_END_STATE.get(rec["status"], "finished"), ended=rec["t"])
        self.run["exit_code"] = rec.get("exit_code")
        self.run.pop("state_text", None)

    def end_unclosed(self) -> None:
        """The log ended without ``run_end`` (a killed supervisor, a cut log): state ``ended``,
        ``state_text`` "ended without a close (supervisor stopped at HH:MM:SS)", the local
        time of the newest record; the open segment closes there."""
        t = self.last_t
        self._close_segment(t)
        self.run.update(state="ended", state_text=unclosed_text(t))  # no "ended": no run_end

    def _on_agent_hello(self, rec: dict) -> None:
        world = rec["world_size"]
        if 1 <= world <= MAX_RANK + 1:
            self.world = max(self.world, world)
        key = (node_of(rec), rec["pid"])  # two nodes' processes may share a pid
        if key in self.agents or len(self.agents) < MAX_RANKS:
            keep = ("pid", "rank", "world_size", "host", "python", "torch")
            self.agents[key] = {**{k: _scalar(rec.get(k)) for k in keep}, "node": key[0]}

    def _on_model(self, rec: dict) -> None:
        """The model each rank's agent found, kept per rank (at most ``MAX_RANKS``; a rank's
        newer record replaces its older), and the job's model combined from them by rule,
        whatever order the ranks' records come in (core/rank_models.py: one model when the
        ranks agree, the stages' sum when they differ; the rule in ``model.rule``)."""
        rank = rec.get("rank", 0)
        if rank not in self.rank_models and len(self.rank_models) >= MAX_RANKS:
            return
        before = self.rank_models.get(rank)
        self.rank_models[rank] = _bounded_model(rec)
        if rank == 0 and before is not None and _another_model(before, self.rank_models[rank]):
            self.counted = None  # the old model's count: the new one's comes at its own step
            now, was = _model_label(self.rank_models[rank]), _model_label(before)
            self.note(f"model: the training process went on to train another model ({now}; "
                      f"before it, {was}): FLOPs per token and MFU are the new model's from "
                      "then on, and FLOPs spent and the run-average MFU count every token of "
                      "the run at the new model's FLOPs per token")  # fmt: skip
        self.model = rank_models.combine(self.rank_models)
        args = {k: v for k, v in self.model.items() if k in _SHAPE_FIELDS}
        self.shape_error = None
        try:
            self.shape = flops.ModelShape(**args)
        except (TypeError, ValueError) as exc:
            self.shape, self.shape_error = None, clip(str(exc), MAX_NAME)
            self.note(f"model record not usable for FLOPs: {exc}")

    def _on_step(self, rec: dict) -> None:
        rank, t = rec["rank"], rec["t"]
        rc = self.rank_clocks.get(rank)
        if rc is None:
            if not 0 <= rank <= MAX_RANK or len(self.rank_clocks) >= MAX_RANKS:
                self.refused_ranks += 1
                return
            rc = self.rank_clocks[rank] = _RankClock()
        k = rec.get("agg")  # the steps this record stands for: absent, one (no call per step)
        k = 1 if k is None else self._merged(k)
        rc.steps += k
        first, dt = rc.last_t is None, None
        if not first and t > rc.last_t:  # timed: previous step in this segment
            dt = t - rc.last_t  # k steps' time
            rc.add(dt, k)
        rc.last_t = t
        self.ranks.on_step(rank, rec["step"], t, rec.get("arr"), dt, first, self.agents,
                           rec.get("node"), steps=k)  # fmt: skip
        tokens, seq_sq, sq_tokens = self._own_counts(rank, rec, dt, k)  # every rank's own
        if rank != self._clock_rank(rank):
            return
        if len(self.rank_clocks) > 1:
            self._check_stragglers()
        c, step = self.clock, rec["step"]
        if not 0 <= step < MAX_COUNT:  # validated ints: only the range is left to check
            self.bad_counts += 1
            step = c.step + 1
        c.step = step
        if c.last_t is None:
            self.seg_first_t = t
        elif t > c.last_t:
            dt = t - c.last_t
            c.timed_s += dt
            self.span_inside_s += self.span_pending_s  # the spans since the previous step
            self.span_pending_s = 0.0
            c.timed_tokens += tokens
            c.push(dt, tokens, seq_sq, sq_tokens, k)  # rank 0's own: its window's lengths
            rate = self.counts.rate(self.world)  # the job's: every rank's own rate
            if rate is not None:
                scale = self._mfu_scale(rate)
                self.timeline.append("tokens_per_s", c.step, rate, scale or None)
                if scale is False:
                    raise ValueError(f"MFU of tokens/s {rate!r}: an input out of range")
        c.last_t = t
        if self.run["state"] == "idle":
            self.run["state"] = "running"

    def _merged(self, k: Any) -> int:
        """The steps a step record with ``agg`` ``k`` stands for (a merged record: the agent's
        outbound buffer was full, agent/sender.py), counted in ``merged_records`` and
        ``merged_steps``. An ``agg`` outside [1, 2**53) is 1 and counted in ``bad_counts``."""
        if type(k) is not int or not 1 <= k < MAX_COUNT:
            self.bad_counts += 1
            return 1
        if k > 1:
            self.merged_records += 1
            self.merged_steps = min(self.merged_steps + k, MAX_COUNT - 1)
        return k

    def _clock_rank(self, rank: int) -> int:
        """The step clock's rank: 0, or in a node's run without rank 0 (one supervisor per
        node) the lowest rank that stepped, so that node shows its own steps; a lower rank's
        first step takes the clock over (its next interval is untimed)."""
        if self.clock_rank is None or rank < self.clock_rank:
            if self.clock_rank is not None:
                self.clock.last_t = None  # another rank's times: not one clock's intervals
            self.clock_rank = rank
        return self.clock_rank

    def _own_counts(self, rank: int, rec: dict, dt: float | None,
                    steps: int = 1) -> tuple[int, int, int]:  # fmt: skip
        """A rank's step record's own tokens, samples and ``seq_sq`` (a count outside
        [0, 2**53) is 0 and counted in ``bad_counts``) into the job's sums (core/rank_counts.py,
        docs/spec.md "Counts from every rank"), with the ``steps`` it stands for; returns
        (tokens, seq_sq, tokens that sent seq_sq), 0 for what the record lacks."""
        tokens, samples, seq_sq = rec.get("tokens"), rec.get("samples"), rec.get("seq_sq")
        if tokens is None or not 0 <= tokens < MAX_COUNT:
            self.bad_counts += tokens is not None
            tokens = 0
        if samples is None or not 0 <= samples < MAX_COUNT:
            self.bad_counts += samples is not None
            samples = 0
        if seq_sq is not None and not (tokens and 0 <= seq_sq < MAX_COUNT):
            self.bad_counts += not (0 <= seq_sq < MAX_COUNT)
            seq_sq = None
        sq_tokens = tokens if seq_sq is not None else 0
        seq_sq = seq_sq or 0
        c = self.clock
        self.counts.add(rank, rec["t"], dt, tokens, samples, rec.get("node"), steps)
        c.tokens, c.samples = self.counts.job(self.world)
        c.seq_sq += seq_sq  # the job's: the mean length over every rank's sequences
        c.seq_tokens += sq_tokens
        return tokens, seq_sq, sq_tokens

    def _on_span(self, rec: dict) -> None:
        """Spans inside segments: every rank's to its split (core/ranks.py); rank 0's per kind
        here, those that lie inside a timed step interval kept apart, to be taken out of
        compute (docs/spec.md "Time spans")."""
        kind = rec["name"]
        if self.segment_t0 is None or kind not in self.span_s:
            return
        start, dur = rec["t"], min(rec["dur"], MAX_SPAN_S)
        end = start + dur
        if start < self.segment_t0:  # begun before the segment: only its part inside counts
            start, dur = self.segment_t0, max(0.0, end - self.segment_t0)
        self.ranks.on_span(rec["rank"], kind, start, dur)  # every rank's split
        if rec["rank"] != 0:
            return
        self.spans_seen = True
        self.span_s[kind] += dur
        first = self.seg_first_t
        if kind == "warmup" or first is None or start < first:
            return  # before the segment's first step: never inside a timed interval
        last = self.clock.last_t
        if last is not None and end <= last:
            self.span_inside_s += dur  # a later step already closed its interval
        else:
            self.span_pending_s += dur  # closed by the next step (if any, in this segment)

    def _check_stragglers(self) -> None:
        """One evaluation (at each of rank 0's steps): a rank whose mean step time exceeds
        the lower median over ranks by more than ``STRAGGLER_MARGIN`` is slow this time; slow
        ``STRAGGLER_EVALS`` times in a row, it is a straggler until it is not slow once."""
        means = [(r, rc.step_time_s()) for r, rc in self.rank_clocks.items()]
        known = sorted(m for _, m in means if m is not None)
        if len(known) < 2:
            return
        limit = known[(len(known) - 1) // 2] * (1 + STRAGGLER_MARGIN)
        slow = self.slow_evals
        for r, m in means:
            if m is not None and m > limit:
                slow[r] = slow.get(r, 0) + 1
            else:
                slow.pop(r, None)
        self.stragglers = sorted(r for r, n in slow.items() if n >= STRAGGLER_EVALS)

    def _on_series(self, rec: dict) -> None:
        name, value = rec["name"], float(rec["value"])
        if len(name) > MAX_NAME:
            name = clip(name, MAX_NAME)
        prev = self.series.get(name)
        if prev is None and len(self.series) >= self._series_room(rec, name):
            if self.first_refused is None:
                self.first_refused = name
            if len(self.refused_series) < _COUNTED_MAX:
                self.refused_series.add(name_key(name))
            return
        step = rec.get("step")
        if step is not None and not 0 <= step < MAX_COUNT:  # a validated int, out of range
            self.bad_counts += 1
            step = None
        if step is None:
            step = self.clock.step
        ema = metrics.ema(prev["ema"] if prev else None, value, EMA_BETA)
        self.series[name] = {"step": step, "value": value, "ema": ema}
        role = rec.get("role")  # "train_loss" / "val_loss" from the tracker taps' catalog
        if role is None:  # emit() and older logs: the catalog's, once per name
            role = prev.get("role") if prev else catalog.role(name)
        if role in ("train_loss", "val_loss"):
            self.series[name]["role"] = role
        if ours(name):
            self.timeline.clashed += 1
        else:
            self.timeline.append(name, step, value)

    def _series_room(self, rec: dict, name: str) -> int:
        """How many names the series table holds before the new one, ``name``, is refused:
        ``MAX_SERIES``, the last place kept for a train loss until one is in the table (a
        loss emitted after 64 gradient norms is the run's loss all the same; without it the
        summary said none was reported)."""
        if len(self.series) < MAX_SERIES - 1 or _train_loss(rec, name):
            return MAX_SERIES
        kept = any(_train_loss(v, k) for k, v in self.series.items())
        return MAX_SERIES if kept else MAX_SERIES - 1

    def _on_gpu_devices(self, rec: dict) -> None:
        self.hw.on_devices(rec)

    def _on_gpu(self, rec: dict) -> None:
        x = rec["t"] - (self.run.get("started") or rec["t"])  # seconds of the run
        for name, y in self.hw.on_sample(rec):
            if self.timeline.append(name, x, y):  # "gpu<i>/<field>": GPU i has a chart
                index = name[3 : name.index("/")]
                if index.isdecimal() and len(self.charted_gpus) < MAX_DEVICES:
                    self.charted_gpus.add(int(index))
        if isinstance(rec.get("process"), dict):  # tm attach: the fields that changed
            self.process = _process_facts(self.process or {}, rec["process"])

    def _on_flops_counted(self, rec: dict) -> None:
        """Rank 0's step measured by FlopCounterMode (docs/spec.md "Counted FLOPs")."""
        tokens, samples = rec.get("tokens"), rec.get("samples")
        if rec["rank"] != 0:
            return
        if not 0 <= rec["step"] < MAX_COUNT or not all(0 < (n or 1) < MAX_COUNT
                                                       for n in (tokens, samples)):  # fmt: skip
            self.bad_counts += 1
            return
        # "counted" is what older agents wrote for an attention kernel (now "sdpa")
        attention = "sdpa" if rec["attention"] == "counted" else rec["attention"]
        # at most 16 entries (the agent sends no more: agent/flop_formulas.MAX_NOT_COUNTED)
        missed = [clip(x, MAX_NAME) for x in (rec.get("not_counted") or [])[:16]]
        self.counted = {"step": rec["step"], "flops": float(rec["flops"]), "tokens": tokens,
                        "samples": samples, "attention": attention,
                        "not_counted": missed}  # fmt: skip
        if attention == "none counted" and (self.model or {}).get("heads"):
            self.note("counted FLOPs: no attention was counted in that step (no attention "
                      "kernel with a formula in torch's FlopCounterMode, and no batched matmul "
                      "of two activations), so the count misses attention")  # fmt: skip
        if missed:
            self.note(f"counted FLOPs: not counted in that step: {', '.join(missed)}; the "
                      "count misses their work")  # fmt: skip

    def _on_step_clock(self, rec: dict) -> None:
        """What clocks rank 0's steps: the optimizer, or backward() calls (agent/backward.py)."""
        if rec["rank"] == 0:
            self.step_clock = rec["source"]

    def _on_tokens_counting(self, rec: dict) -> None:
        """What rank 0's tokens are (docs/spec.md "Tokens and padding")."""
        if rec["rank"] != 0:
            return
        self.counting_seen.add(rec["counting"])
        if rec.get("reason"):
            self.note(f"--pad-tokens skip: {clip(rec['reason'], MAX_NAME)}; all positions counted")

    def _tokens_counting(self) -> str:
        """``all positions``, ``non-pad``, or ``mixed`` (some forwards each way)."""
        seen = self.counting_seen
        if len(seen) > 1:
            return "mixed"
        if seen:
            return next(iter(seen))
        return "non-pad" if self.options.pad_tokens == "skip" else "all positions"

    def _on_dropped(self, rec: dict) -> None:
        self.drops.apply(rec)

    def _on_note(self, rec: dict) -> None:
        src = rec.get("source")
        self.note(f"{clip(src, MAX_NAME)}: {rec['text']}" if src else rec["text"])

    def _world(self) -> int:
        """Ranks in the job: the largest world size any agent reported (a launcher such as
        torchrun runs an agent too, alone in its world of 1)."""
        return self.world

    def _divisor(self) -> tuple[int, peaks.ResolvedPeak | None]:
        """``(devices, peak)`` MFU divides by, looked up again only after a record that may
        change them (not in ``_SAME_DIVISOR``)."""
        if self._mfu_divisor is None:
            self._mfu_divisor = (self._gpus(), self._peak())
        return self._mfu_divisor

    def readings_move_divisor(self) -> bool:
        """Whether a sampler's ``gpu`` reading may change what MFU divides by (:meth:`_divisor`):
        only where the devices are the sampler's, not the ranks' (fake GPUs of a demonstration,
        ``tm attach``'s run: ``_gpus``, ``_device``); ``fold_steps.fold_run`` folds steps across
        readings only where it does not."""
        return self.hw.fake or self._attached() is not None

    def _mfu_scale(self, rate: float) -> tuple | bool | None:
        """MFU over time: the scale (core/timeline.py) of the tokens/s point ``rate`` that
        makes it the ``mfu/<c>`` point of each convention with FLOPs per token, the snapshot's
        ``mfu`` as it stands at this step (``metrics.mfu`` of the same rate, FLOPs per token at
        ``seq_len_recent``, devices and peak); None without a peak or a model (no point),
        False where ``metrics.mfu`` would raise (``fold_steps.mfu_scale``)."""
        if self._divisor()[1] is None or self.shape is None:
            return None
        c = self.clock
        seq_mean = c.seq_sq / c.seq_tokens if c.seq_tokens else None
        seq_recent = c.recent_sq / c.recent_sq_tokens if c.recent_sq_tokens else seq_mean
        scale = fold_steps.mfu_scale(self, seq_recent)
        if scale is None or not 0 <= rate < math.inf:  # metrics.mfu raises on either
            return False
        return scale or None

    # -- snapshot out -----------------------------------------------------------------------
    def snapshot(self, now: float | None = None) -> dict[str, Any]:
        """The run's state as a JSON-able dict (keys defined in docs/spec.md "Snapshot").

        Args:
            now: wall-clock seconds used for the running segment's elapsed time; defaults to
                the newest record time, so replay is deterministic.
        """
        now = self.last_t if now is None else now
        c = self.clock
        rate = self.counts.rate(self.world)  # the job's, from every rank's own counts
        rate_avg = self.counts.rate_avg(self.world)
        convention = self.options.convention or flops.DEFAULT_CONVENTION
        # FLOPs per token at the token-weighted mean sequence length: of the run (FLOPs spent,
        # the run's MFU) and of the recent window (the MFU now); docs/spec.md "Snapshot"
        seq_mean = c.seq_sq / c.seq_tokens if c.seq_tokens else None
        seq_recent = c.recent_sq / c.recent_sq_tokens if c.recent_sq_tokens else seq_mean
        fpt = flops.all_conventions_at(self.shape, seq_mean) if self.shape else {}
        fpt_now = flops.all_conventions_at(self.shape, seq_recent) if self.shape else {}
        no_tokens = self._no_tokens()  # inputs that are not token ids: no convention applies
        if no_tokens is not None:
            fpt = fpt_now = dict.fromkeys(fpt)
        peak = self._peak()
        gpus = self._gpus()
        if gpus == 0 and peak is not None:
            gpus = 1  # a declared peak on a CPU run: MFU divides by one device
        budget_flops = _one_or_more(self.options.budget_flops)
        budget = self._budget_tokens(budget_flops, fpt.get(convention))
        elapsed = self._elapsed(now)
        moving = self._moving()
        # no ETA once the run (or the cell) has ended: nothing is moving towards the budget
        eta = metrics.eta_s(c.tokens, budget, rate) if moving else None
        model_rate = None
        if rate is not None and fpt_now:
            model_rate = {k: metrics.model_flops_per_s(rate, v) for k, v in fpt_now.items()}
        spent = {k: (v * c.tokens if v is not None else None) for k, v in fpt.items()}
        mfu = _mfu(rate, fpt_now, gpus, peak)
        planned = self._plan(peak, gpus, fpt.get(convention), budget, moving)
        step_times = {str(r): rc.step_time_s() for r, rc in sorted(self.rank_clocks.items())}
        time_split = self._time_split(elapsed)
        hardware = self.hw.snapshot(
            self._dtype(), self._declared_peak(), pids=self._train_pids(), is_open=self._is_open()
        )
        dropped = self.drops.snapshot()
        merged = self._merged_snapshot()
        way = [x for x in ((merged or {}).get("text"), drop_text(dropped)) if x]
        notes = (
            list(self.notes)
            + ([clip("; ".join(way), MAX_NOTE)] if way else [])  # on the way to the log
            + self._gap_notes(peak, fpt, budget_flops, convention)
            + self._loss_notes()
            + self.hw.notes()
        )
        snap = {
            "v": 1,
            "run": dict(self.run),
            "step": c.step,
            "tokens": c.tokens,
            "samples": c.samples,
            "elapsed_s": elapsed,
            "train_time_s": c.timed_s,
            "tokens_per_s": rate,
            "tokens_per_s_avg": rate_avg,
            # docs/spec.md "Samples, FLOPs per sample and HFU [counted]"
            "samples_per_s": self.counts.rate(self.world, samples=True),
            "samples_per_s_avg": self.counts.rate_avg(self.world, samples=True),
            "samples_per_step": self.counts.per_step(self.world),
            "tokens_missing": no_tokens,
            "step_time_s": c.step_time_s(),
            "budget_tokens": budget,
            "progress": metrics.progress(c.tokens, budget),
            "eta_s": eta,
            "model": dict(self.model) if self.model is not None else None,
            "params_without_embeddings": passport.params_without_embeddings(self.model),
            "ranks": {str(r): rc.steps for r, rc in sorted(self.rank_clocks.items())},
            "convention": convention,
            "flops_per_token": fpt,
            "flops_per_token_missing": {
                k: list(flops.missing_fields(self.shape, k)) for k, v in fpt.items() if v is None
            },
            "flops_spent": spent,
            "seq_len_mean": seq_mean,
            "seq_len_recent": seq_recent,
            "flops_per_token_seq_len": seq_mean if seq_mean is not None else self._seq_len(),
            "step_clock": self.step_clock or ("optimizer" if c.step else None),
            "dtype": self._dtype(),
            "peak": _peak_dict(peak),
            "mfu": mfu,
            "mfu_avg": _mfu(rate_avg, fpt, gpus, peak),
            "series": self._series_out(),
            "notes": notes,
            # docs/spec.md "Snapshot keys for the dashboard"
            "gpus": gpus,
            "gpu_hours": gpus * elapsed / 3600 if gpus else None,
            "gpu_hours_to_finish": gpus * eta / 3600 if gpus and eta is not None else None,
            "budget_flops": budget_flops,
            # FLOPs spent over the FLOPs budget, in the run's convention
            "progress_flops": metrics.progress(spent.get(convention), budget_flops),
            "flops_required": _times(fpt, budget),
            "model_flops_per_s": model_rate,
            "model_flops_per_s_per_gpu": _per(model_rate, gpus),
            "flops_per_token_counted": _per_token(self.counted),
            "flops_counted": dict(self.counted) if self.counted is not None else None,
            "flops_per_sample_counted": _per_sample(self.counted),
            "hfu_counted": self._hfu(peak, gpus),
            "conventions_missing": CONVENTIONS_NO_TOKENS if no_tokens is not None else None,
            "tokens_counting": self._tokens_counting(),
            # rank_counts, rank_tokens (docs/spec.md "Counts from every rank")
            **self.counts.snapshot(self._world(), 64),
            "plan": planned,
            "plan_vs_actual": plan.versus(planned, rate, (mfu or {}).get(convention), eta),
            "rank_step_time_s": step_times,
            "rank_over_fastest": over_fastest(step_times),
            # stragglers (either rule), rank_lag_s, straggler_cost_s, ... (core/ranks.py)
            **self.ranks.snapshot(self.stragglers, elapsed),
            "time_split": time_split,
            "time_share": metrics.shares(time_split, SPLIT),
            "energy_j": self.hw.energy_j(),
            "hardware": hardware,
            "gpu_mean": gpu_means(hardware, self._is_open()),
            "process": dict(self.process) if self.process is not None else None,
            "dropped": dropped,
            "steps_merged": merged,
            "log": dict(self.log_read) if self.log_read is not None else None,
        }
        # docs/spec.md "Why a figure is missing": the run's own device, a demonstration's
        # fake GPUs, and the reason of every missing figure, said once for every surface
        snap["device_text"] = self._device_text(gpus)
        row = peaks.find_gpu(self.hw.device_name()) if self.hw.fake else None
        snap["demonstration"] = reasons.demonstration(
            self.hw.backend, self.hw.whole_gpus(), row.label if row else self.hw.device_name()
        )
        snap["reasons"] = reasons.reasons(snap, self._run_facts())
        return snap

    def _is_open(self) -> bool:
        """No end yet: no ``run_end``, and not ended without a close (a figure may still come,
        so a reason may say "yet")."""
        return "ended" not in self.run and self.run["state"] != "ended"

    def _run_facts(self) -> reasons.RunFacts:
        """What ``reasons.reasons`` needs beyond the snapshot's figures."""
        device = self._device() or (self.model or {}).get("device")
        return reasons.RunFacts(
            open=self._is_open(), moving=self._moving(), attached=self._attached(),
            device=device, table_has_device=peaks.find_gpu(device) is not None,
            shape_error=self.shape_error if self.model is not None else None,
            spans=self.spans_seen, step_clock=self.step_clock,
            budget_declared=self.options.budget_tokens is not None
            or _one_or_more(self.options.budget_flops) is not None,
            charted_gpus=frozenset(self.charted_gpus), listed_gpu=self._listed_gpu(),
            clock_rank=self.clock_rank,
        )  # fmt: skip

    def _listed_gpu(self) -> str | None:
        """The first whole GPU a real GPU backend listed (NVML name), else None (a fake
        backend's GPU is ``_device``'s, a demonstration's)."""
        return None if self.hw.fake else self.hw.device_name()

    def _device_text(self, gpus: int) -> str | None:
        """The run's own device as a person names it ("2 × NVIDIA H100 80GB HBM3", "cpu"):
        the model's (the agent's), else a real GPU backend's, else ``--device``; never a fake
        GPU's (the snapshot's ``demonstration`` names those); None when nothing names one."""
        m = self.model or {}
        name, n = m.get("device_name"), gpus
        if not name and m.get("device"):
            return clip(str(m["device"]), MAX_NAME)
        if not name and not self.hw.fake and self.hw.device_name():
            name, n = self.hw.device_name(), self.hw.whole_gpus()
        if not name and self.options.device:
            name = self.options.device
        if not name:
            return None
        name = clip(str(name), MAX_NAME)
        return f"{n} × {name}" if n > 1 else name

    def _merged_snapshot(self) -> dict[str, Any] | None:
        """The snapshot's ``steps_merged``: ``{"steps", "records", "text"}``, the steps that
        arrived merged into fewer step records (records.py ``agg``) and those records; None
        when none did."""
        n, m = self.merged_steps, self.merged_records
        if not m:
            return None
        text = (f"{n:,} steps arrived merged into {m:,} step record{'' if m == 1 else 's'} "
                "(the supervisor was not reading and the agent's buffer was full): their "
                "count, tokens and time are whole, their one-by-one step times are "
                "not")  # fmt: skip
        return {"steps": n, "records": m, "text": text}

    def _time_split(self, elapsed: float) -> dict[str, float] | None:
        """Seconds of the run per bucket (docs/spec.md "Time spans"): the buckets of ``SPLIT``
        add up to ``elapsed``, ``startup`` being rank 0's time before its first step outside
        any span (``ranks.startup_s``); null until rank 0's first span (the warm-up span comes
        with any run's first optimizer step)."""
        if not self.spans_seen:
            return None
        s = self.span_s
        compute = max(0.0, self.clock.timed_s - self.span_inside_s)
        busy = compute + s["data"] + s["checkpoint"] + s["eval"]
        r0 = self.ranks.ranks.get(0)
        startup = startup_s(r0, elapsed, busy) if r0 is not None else 0.0
        return {"compute": compute, "data": s["data"], "checkpoint": s["checkpoint"],
                "eval": s["eval"], "startup": startup,
                "other": max(0.0, elapsed - busy - startup), "warmup": s["warmup"]}  # fmt: skip

    def _seq_len(self) -> int | None:
        """The model record's sequence length (the first training batch's)."""
        return self.shape.seq_len if self.shape is not None else None

    def _budget_tokens(self, budget_flops: float | None, fpt: float | None) -> float | None:
        """The declared token budget; else ``budget_flops / fpt`` (FLOP over FLOP/token under
        the run's convention, docs/spec.md "Snapshot keys for the dashboard")."""
        declared = _one_or_more(self.options.budget_tokens)
        if declared is not None or budget_flops is None or not fpt:
            return declared
        return _one_or_more(budget_flops / fpt)

    def _plan(self, peak, gpus: int, fpt: float | None, budget, moving: bool) -> dict | None:
        """The snapshot's ``plan``: :func:`plan.plan` at the declared or default MFU."""
        if peak is None or fpt is None:
            return None
        declared = _positive(self.options.plan_mfu)
        if declared is not None and declared > 1:
            declared = None  # not a fraction: plan with the default (a note says so)
        p = plan.plan(peak.flops, gpus, fpt, self.clock.tokens, budget if moving else None,
                      mfu=declared)  # fmt: skip
        return p.as_dict() if p is not None else None

    def _moving(self) -> bool:
        return self.run["state"] in ("running", "idle")

    def _elapsed(self, now: float | None) -> float:
        running = 0.0
        if self.segment_t0 is not None and now is not None:
            running = max(0.0, now - self.segment_t0)
        return self.active_s + running

    def _gpus(self) -> int:
        """Devices MFU divides by: the distinct devices the ranks use (core/rank_models.py
        ``devices``: a CUDA device by host and index, a CPU rank one device of its own; docs/
        spec.md "Counts from every rank"). Off CUDA: the ``gpus`` option when given, else 0
        without a peak (no GPU hours for a CPU run); fake GPUs of a demonstration: theirs."""
        m = self.model or {}
        if m.get("device") != "cuda":
            if (self.hw.fake or self._attached() is not None) and self.hw.whole_gpus():
                return self.hw.whole_gpus()  # a demonstration run on fake GPUs
            declared = _positive(self.options.gpus)
            if declared is not None:  # told otherwise
                return int(min(declared, MAX_RANKS))
            if self._peak() is None:
                return 0
        hosts = {a["rank"]: a["host"] for a in self.agents.values()
                 if isinstance(a.get("rank"), int) and isinstance(a.get("host"), str)}  # fmt: skip
        return min(rank_models.devices(self.rank_models, hosts, self._world()), MAX_RANKS)

    def _peak(self) -> peaks.ResolvedPeak | None:
        """``peaks.resolve_peak`` of the run's device, dtype and declared peak, looked up again
        only when one of them changed (a sampler's reading asks again each second)."""
        key = (self._device(), self._dtype(), self._declared_peak())
        if self._peak_of is None or self._peak_of[0] != key:
            self._peak_of = (key, peaks.resolve_peak(*key))
        return self._peak_of[1]

    def _declared_peak(self) -> float | None:
        """``--peak`` (FLOP/s) when it is a finite number >= 1; a log's 0, 5e-324 or "x" is no
        declared peak (MFU would divide by it)."""
        return _one_or_more(self.options.peak_flops)

    def _device(self) -> str | None:
        """The device name the peak is looked up by: ``--device``, else the model's device,
        else (a fake backend's demonstration only) the fake GPU's name."""
        m = self.model or {}
        if self.options.device:
            return self.options.device
        if m.get("device") != "cuda" and self.hw.fake:
            return self.hw.device_name()
        return m.get("device_name")

    def _dtype(self) -> str | None:
        """The run's dtype: ``--dtype``, else what the agent saw (autocast, parameters)."""
        return self.options.dtype or (self.model or {}).get("run_dtype")

    def _attached(self) -> int | None:
        """The pid ``tm attach`` watches (run option ``attached``), else None."""
        return self.options.attached

    def _train_pids(self) -> list:
        """The training processes: the agents' (node, pid) pairs (a merged log's pids repeat
        across nodes, so a pid counts only on its own node's GPUs); an attached run's process
        tree (its pids)."""
        if self._attached() is not None and self.process is not None:
            return list(self.process.get("pids") or [])
        return list(self.agents)

    def agent_pids(self) -> list[int]:
        """The pids of the agents that said hello (the live supervisor's training processes)."""
        return [a["pid"] for a in self.agents.values()]

    def _series_out(self) -> dict[str, dict]:
        """The series as the snapshot shows them: ``backward_loss`` is ``superseded`` (kept,
        not drawn) once another train loss is reported (a tracker's, a framework's, emit's)."""
        out = {k: dict(v) for k, v in self.series.items()}
        if BACKWARD_LOSS in out and self._other_train_loss():
            out[BACKWARD_LOSS]["superseded"] = True
        return out

    def _other_train_loss(self) -> bool:
        """Whether a train loss other than ``backward_loss`` was reported."""
        return any(
            (v.get("role") or catalog.role(k)) == "train_loss"
            for k, v in self.series.items()
            if k != BACKWARD_LOSS
        )

    def _loss_notes(self) -> list[str]:
        """Where the steps and the train loss come from, when it is not the usual place, and
        what to do when there is no loss at all (docs/spec.md "Loss and steps without a
        tracker")."""
        out = []
        if self._attached() is not None or not self.clock.step:
            return out
        if self.step_clock == "backward":
            out.append("steps: no torch.optim optimizer stepped, so each training backward() "
                       "call is a step; no counted FLOPs (they are counted at the 3rd optimizer "
                       "step)")  # fmt: skip
        c = self.clock
        no_tokens = self._no_tokens()
        if no_tokens is not None:
            out.append(f"tokens: none: {no_tokens}; {c.samples} samples counted")
        names = [n for n in self.series if "loss" in n.lower()]
        if BACKWARD_LOSS in names and not self._other_train_loss():
            out.append(f"train loss: {BACKWARD_LOSS} is the value each training backward() "
                       "was called on, summed over the step's micro-batches (no tracker, "
                       "framework or trainmeter.emit reported a loss)")  # fmt: skip
        elif not names and not any("train loss from backward(): not recorded" in n
                                   for n in self.notes):  # fmt: skip
            out.append("loss: none reported (no tracker, framework or trainmeter.emit call, "
                       "and no value backward() was called on could be read); add "
                       "trainmeter.emit(train_loss=loss.item()) after the step")  # fmt: skip
        return out

    def _no_tokens(self) -> str | None:
        """Why the run has no tokens: its steps fed samples and no token ids (an image, audio or
        feature batch; docs/spec.md "Samples, FLOPs per sample and HFU [counted]"); None once a
        token is counted, or before a sample is."""
        c = self.clock
        return NO_TOKENS if c.samples and not c.tokens else None

    def _hfu(self, peak: peaks.ResolvedPeak | None, gpus: int) -> dict[str, Any]:
        """The snapshot's ``hfu_counted``: the counted step's executed FLOPs over the devices'
        dense peak, per token when that step had tokens, else per sample (``metrics.hfu``);
        ``{"value", "avg", "flops_per_s", "per", "why"}``, ``why`` the reason ``value`` is null
        (docs/spec.md "Samples, FLOPs per sample and HFU [counted]")."""
        out: dict[str, Any] = dict.fromkeys(("value", "avg", "flops_per_s", "per", "why"))
        c = self.counted
        ended = "ended" in self.run or self.run["state"] == "ended"  # nothing more will come
        if c is None and self._attached() is not None:  # tm attach: no agent counts a step
            out["why"] = reasons.attach_reason(self._attached(), self._is_open())
            return out
        if c is None:
            out["why"] = HFU_WHY["never counted" if ended else "not counted"]
            return out
        per = "token" if c["tokens"] else "sample" if c["samples"] else None
        if per is None:
            out["why"] = HFU_WHY["no counts"]
            return out
        by = c["flops"] / c[f"{per}s"]  # executed FLOP per token or per sample
        samples = per == "sample"
        now = self.counts.rate(self.world, samples=samples)
        avg = self.counts.rate_avg(self.world, samples=samples)
        out["per"] = per
        out["flops_per_s"] = metrics.model_flops_per_s(now, by)  # executed, all devices
        if peak is None:
            out["why"] = HFU_WHY["no peak"]
            return out
        out["value"] = metrics.hfu(now, by, max(gpus, 1), peak.flops)
        out["avg"] = metrics.hfu(avg, by, max(gpus, 1), peak.flops)
        if out["value"] is None:
            out["why"] = HFU_WHY["never timed" if ended else "no rate"]
        return out

    def _gap_notes(self, peak, fpt: dict, budget_flops: float | None, convention: str) -> list:
        out = []
        attached = self._attached()
        if attached is not None:  # tm attach: the gaps below can never close, say why once
            out.append(f"no agent: tm attach watches process {attached} from outside, so "
                       "there are no steps, tokens, loss, FLOPs or MFU, only its process facts "
                       "and GPU counters; run it under tm (or in a %%trainmeter cell) to see "
                       "them")  # fmt: skip
        # no model: the snapshot's reasons say it where each figure it leaves out would be (the
        # model, FLOPs per token, MFU, the plan), in one wording; a note would say it again.
        # No peak: the MFU figure's own reason, word for word, unless no convention describes
        # the model (then MFU's reason is that, and a note about the peak would contradict it)
        if peak is None and attached is None and self._no_tokens() is None:
            m = self.model or {}
            device = self._device() or m.get("device")
            has = peaks.find_gpu(device) is not None  # the table has a row for it
            why = reasons.peak_why(device, self._dtype(), has, self._is_open(),
                                   self._listed_gpu())  # fmt: skip
            out.append(f"no MFU: {why}")
        if budget_flops is not None:
            if self.options.budget_tokens is not None:
                out.append("budget: tokens and FLOPs both declared; progress and ETA follow tokens")
            elif fpt.get(convention) is None:
                yet = " yet" if self._is_open() else ""  # a run that has ended: none will come
                out.append(f"budget: FLOPs declared but no FLOPs/token under {convention}{yet}, "
                           "so no token budget, progress or ETA")  # fmt: skip
        plan_mfu = self.options.plan_mfu
        if plan_mfu is not None and not (_positive(plan_mfu) and plan_mfu <= 1):
            out.append(f"plan: MFU {plan_mfu!r} is not a fraction in (0, 1]; "
                       f"planned with {plan.DEFAULT_PLAN_MFU}")  # fmt: skip
        n = len(self.refused_series)
        if n:
            more = "+" if n >= _COUNTED_MAX else ""
            out.append(f"series: {n}{more} name(s) not kept, past the table's {MAX_SERIES} "
                       "places (the last waits for a train loss until one comes; the first not "
                       f"kept: {self.first_refused!r}); the run log has them")  # fmt: skip
        if self.timeline.refused_names:
            out.append(f"chart: {self.timeline.refused_names} series past "
                       f"{self.timeline.max_series} not charted")  # fmt: skip
        if self.timeline.clashed:
            out.append(f"chart: {self.timeline.clashed} point(s) of the training code's "
                       "series named as trainmeter's own (tokens_per_s, mfu/<c>, gpu<i>/...) not "
                       "charted; the series table and the run log have them")  # fmt: skip
        if self.refused_ranks:
            out.append(f"ranks: {self.refused_ranks} step record(s) of ranks past the first "
                       f"{MAX_RANKS} or outside 0..{MAX_RANK} not counted")  # fmt: skip
        if self.bad_counts:
            out.append(f"{self.bad_counts} step, token or sample count(s) outside 0..2**53 "
                       "ignored")  # fmt: skip
        if self.agents and not self.rank_clocks and self.run["state"] == "finished":
            out.append("steps: none seen: no optimizer.step() and no backward() ran in the "
                       "training process (a loop that updates its weights from "
                       "torch.autograd.grad or torch.func.grad, or one that only runs the "
                       "model, is not clocked), so no tokens, step times or MFU")  # fmt: skip
        return [clip(n, MAX_NOTE) for n in out]


def unclosed_text(t: float) -> str:
    """``"ended without a close (supervisor stopped at 14:03:27)"``: ``t`` (s since the epoch)
    in local time."""
    import time

    try:
        hms = time.strftime("%H:%M:%S", time.localtime(t))
    except (OverflowError, OSError, ValueError):  # a time beyond what the C library takes
        hms = "an unknown time"
    return f"ended without a close (supervisor stopped at {hms})"


def node_of(rec: dict[str, Any]) -> str | None:
    """A record's ``node``: the node label ``tm merge`` adds to each record of a merged log
    (at most ``MAX_NAME`` characters), else None (a node's own run)."""
    node = rec.get("node")
    return clip(node, MAX_NAME) if isinstance(node, str) else None


def _one_or_more(value: Any) -> float | None:
    """``value`` as a float when it is a finite number >= 1 (a budget of tokens or FLOPs, a
    peak in FLOP/s: below one, a log's 5e-324 would make progress or MFU overflow), else None."""
    x = _positive(value)
    return x if x is not None and x >= 1 else None


def _positive(value: Any) -> float | None:
    """``value`` as a float when it is a finite number > 0, else None."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    return float(value) if ok and math.isfinite(value) and value > 0 else None


def _scalar(value: Any) -> Any:
    """A JSON scalar of bounded size: strings cut to ``MAX_NAME``, ints beyond 2**63 and
    non-scalars dropped (None)."""
    if isinstance(value, str):
        return clip(value, MAX_NAME)
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, int):
        return value if -(2**63) <= value < 2**63 else None
    return None


def _another_model(a: dict, b: dict) -> bool:
    """Whether two model records of one rank describe different models (a second training in
    one process), not the same one described again."""
    return any(a.get(k) != b.get(k) for k in ("name", "params", "layers", "width"))


def _train_loss(rec: dict, name: str) -> bool:
    """Whether a series record (or a series table entry) ``name`` is a train loss: its role,
    the catalog's, or the loss from backward()."""
    return name == BACKWARD_LOSS or (rec.get("role") or catalog.role(name)) == "train_loss"


def _model_label(m: dict) -> str:
    """``Tiny, 107,520 parameters`` (the name where the record has one)."""
    params = f"{m['params']:,} parameters" if isinstance(m.get("params"), int) else "no count"
    return f"{m['name']}, {params}" if m.get("name") else params


def _bounded_model(rec: dict) -> dict[str, Any]:
    """The model record's fields (not ``v``/``k``/``t``/``n``), the documented ones first, at most
    ``MAX_MODEL_FIELDS`` of them, each a bounded scalar under a name of at most ``MAX_KEY``
    characters."""
    out: dict[str, Any] = {k: _scalar(rec[k]) for k in _MODEL_FIELDS if k in rec}
    for k, v in rec.items():
        if len(out) >= MAX_MODEL_FIELDS:
            break
        if k not in ("v", "k", "t", "n") and k not in out:  # n: the log line's number
            out[clip(str(k), MAX_KEY)] = _scalar(v)
    return out


def _process_facts(facts: dict[str, Any], changed: dict[str, Any]) -> dict[str, Any]:
    """``facts`` updated with a ``gpu`` record's ``process`` (the fields that changed), bounded
    like a model record: at most ``MAX_MODEL_FIELDS`` names of at most ``MAX_KEY`` characters,
    scalars cut by ``_scalar``, ``pids`` at most ``MAX_RANKS`` ints, ``missing`` bounded reasons."""
    out = dict(facts)
    for k, v in list(changed.items())[:MAX_MODEL_FIELDS]:
        full = k not in out and len(out) >= MAX_MODEL_FIELDS
        if not isinstance(k, str) or len(k) > MAX_KEY or full:
            continue
        if k == "pids":
            pids = v[:MAX_RANKS] if isinstance(v, list) else []
            out[k] = [p for p in pids if type(p) is int and _scalar(p) is not None]
        elif k == "missing":
            items = list(v.items())[:MAX_MODEL_FIELDS] if isinstance(v, dict) else []
            out[k] = {clip(str(a), MAX_KEY): clip(str(b), MAX_NOTE) for a, b in items}
        else:
            out[k] = _scalar(v)
    return out


def _per_sample(counted: dict | None) -> float | None:
    """Executed FLOPs per sample of the counted step: ``flops / samples`` (FLOP/sample), for
    any model (images, audio, tabular rows, tokens' sequences); None before the count or when
    its samples are not known (docs/spec.md "Samples, FLOPs per sample and HFU [counted]")."""
    if counted is None or not counted.get("samples"):
        return None
    return counted["flops"] / counted["samples"]


def _per_token(counted: dict | None) -> float | None:
    """Executed FLOPs per token of the counted step: ``flops / tokens`` (FLOP/token); None
    before the count or when the step had no tokens (docs/spec.md "Counted FLOPs")."""
    if counted is None or not counted["tokens"]:
        return None
    return counted["flops"] / counted["tokens"]


def _times(fpt: dict, budget: float | None) -> dict[str, float | None] | None:
    """``flops_per_token × budget_tokens`` by convention (FLOP); None without a budget."""
    if budget is None:
        return None
    return {k: (v * budget if v is not None else None) for k, v in fpt.items()}


def _per(by_conv: dict | None, gpus: int) -> dict[str, float | None] | None:
    """A by-convention figure divided by ``gpus``; None when ``gpus`` is 0."""
    if by_conv is None or not gpus:
        return None
    return {k: (v / gpus if v is not None else None) for k, v in by_conv.items()}


def _peak_dict(peak: peaks.ResolvedPeak | None) -> dict[str, Any] | None:
    if peak is None:
        return None
    keys = ("flops", "dtype", "device", "source", "citation", "verified")
    return {k: getattr(peak, k) for k in keys}


def _mfu(rate, fpt: dict, gpus: int, peak) -> dict[str, float | None] | None:
    if peak is None or rate is None or not fpt:
        return None
    gpus = max(gpus, 1)
    out = {k: metrics.mfu(rate, v, gpus, peak.flops) for k, v in fpt.items()}
    # too large to be finite (a rate of steps 1e-300 s apart): no figure, as strict JSON writes it
    return {k: v if v is None or v < math.inf else None for k, v in out.items()}


STALE_S = 30.0  # a live supervisor writes a gpu record every second: older than this, it stopped


def replay(lines, now: float | None = None, full: bool = False) -> Engine:
    """Fold a run log into an :class:`Engine`, never raising on what the log holds.

    Args:
        lines: a path to ``run.jsonl`` or an iterable of its lines (bytes or str), read by
            :class:`trainmeter.core.logread.LogReader` (bad lines skipped and counted by kind
            and reason, repeated lines found by their ``n``, a cut last line counted).
        now: wall-clock seconds, for a log that may still be written (``tm ls``): a run
            without ``run_end`` whose newest record is less than ``STALE_S`` old is running.
            None: the log is whole, so a run without ``run_end`` ended without a close.
        full: fold every line from the first; otherwise a path's replay starts from its last
            valid checkpoint and folds only the lines after it (core/checkpoint.py), the same
            engine as the full fold's (docs/spec.md "Checkpoints" says what only ``full``
            can see).
    Returns:
        The engine; its snapshot's ``log`` says what was skipped, and a note says it too.
    Raises:
        OSError: ``lines`` is a path that cannot be read.
    """
    import sys
    from os import PathLike

    from trainmeter.core.logread import LogReader

    refused: dict = {}
    if not full and isinstance(lines, (str, PathLike)):
        from trainmeter.core import checkpoint

        eng, reader, refused = checkpoint.resume(lines, sys.modules[__name__])
        if eng is not None:
            _fold(eng, reader, now)
            if checkpoint.sound(eng):
                return eng
            key = ("checkpoint", checkpoint.UNSOUND)  # its state, folded on, fails: read all
            refused[key] = refused.get(key, 0) + 1
    eng, reader = Engine(), LogReader(lines)
    for (kind, reason), n in refused.items():  # checkpoints refused on the way here
        reader.count(kind, reason, n)
    _fold(eng, reader, now)
    return eng


def _fold(eng: Engine, reader, now: float | None) -> None:
    """:func:`replay`'s fold of what ``reader`` yields into ``eng``, then the log's counts
    and, for a log without ``run_end``, its end."""
    for rec in reader.batches():  # consecutive step lines as columns (records.Steps)
        if rec.__class__ is not dict:
            start = 0
            while start < len(rec):
                try:
                    eng.apply_steps(rec, start)
                    break
                except StepsFailed as exc:  # as below, for that row
                    reader.count("step", f"apply failed: {type(exc.error).__name__}")
                    start = exc.index + 1
            continue
        try:
            eng.apply(rec)
        except Exception as exc:  # a validated record never should: count it, go on
            reader.count(rec["k"], f"apply failed: {type(exc).__name__}")
    eng.log_read = read_summary(reader)
    if eng.log_read is not None:
        eng.note(eng.log_read["text"])
    unclosed = eng.run["state"] in ("running", "idle") and eng.last_t is not None
    if unclosed and (now is None or now - eng.last_t > STALE_S):
        eng.end_unclosed()


def read_summary(reader, verb: str = "replay") -> dict[str, Any] | None:
    """The snapshot's ``log``: ``{"skipped", "by", "cut", "text"}`` of a
    :class:`~trainmeter.core.logread.LogReader` that has read its log (``text``: "<verb>
    skipped N line(s) (why)"); None when every line read."""
    total = reader.total_skipped()
    if not total:
        return None
    by = reader.by_reason()
    why = ", ".join(f"{n:,} {r}" for r, n in list(by.items())[:3])
    if len(by) > 3:
        why += f", {len(by) - 3} more"
    return {"skipped": total, "by": dict(list(by.items())[:32]), "cut": reader.cut,
            "text": f"{verb} skipped {total:,} line(s) ({why})"}  # fmt: skip
