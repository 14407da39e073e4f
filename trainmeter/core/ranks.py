"""Every rank's time: when it arrives at each step, its lag behind the median rank, the
straggler rule of synchronous data parallel, and where its time goes (docs/spec.md
"Stragglers").

Pure standard library. :class:`Ranks` is fed the engine's step and span records of every rank
(``on_step``, ``on_span``) and gives the snapshot keys (``snapshot``). A step's *arrival* is
the rank's last training ``backward()`` call before its optimizer step (the step record's
``arr``, s since the epoch): under DDP that backward starts the gradient all-reduce, which
every rank leaves together, so a rank that reaches it late makes every other rank wait. The
ranks' records of one step come in at different times (each agent flushes on its own timer):
they are joined by step number, at most ``JOIN_STEPS`` steps open at once, within a group of
ranks that share a clock (one host; all ranks when the log names one host or none).
"""

from __future__ import annotations

import math
from collections import deque
from itertools import islice

from trainmeter.core.metrics import shares
from trainmeter.core.records import SPAN_KINDS

LAG_WINDOW = 20  # synchronous steps in a rank's lag window
LAG_MIN = 5  # steps in the window before the rule looks at it
LAG_ON = 0.10  # slow at one evaluation: its lag is above this share of the job's step time
LAG_OFF = 0.05  # a flagged rank is unflagged once its lag is below this share
LAG_EVALS = 5  # ... flagged after this many consecutive slow evaluations
JOIN_STEPS = 64  # step numbers of a group kept open for the ranks' records
INTERVALS = 20  # a rank's recent step intervals (the job's step time: their lower median)
BUCKETS = ("compute", "data", "checkpoint", "eval")  # a cause is one of these
# a rank's step time, bucket by bucket: its split less "startup" and "other" (time outside
# steps): the buckets of ``rank_time_share``
STEP_BUCKETS = (*BUCKETS, "wait")
# every bucket of a rank's split: they add up to the run's elapsed time
SPLIT_BUCKETS = (*STEP_BUCKETS, "startup", "other")
MAX_DETAIL = 64  # ranks the per-rank snapshot keys carry (the flagged first): a bounded update
MAX_EXCESS_S = 1e6  # a cause's excess per step is said up to this (a bounded text)
_CAUSE = {
    "data": "data loader (+{ms} ms/step data wait over the median rank)",
    "checkpoint": "checkpoint saves (+{ms} ms/step over the median rank)",
    "eval": "evaluation (+{ms} ms/step over the median rank)",
    "compute": "compute or host work outside data, checkpoint and eval (+{ms} ms/step over "
    "the median rank)",
}


class _Rank:
    """One rank's state: step intervals, spans per kind, lag window, flag."""

    __slots__ = ("before_s", "costs", "first_t", "flagged", "group", "inside_s", "lags",
                 "last_t", "over", "pending_s", "pre_s", "recent", "recent_s", "recent_steps",
                 "span_s", "spans_seen", "start_t", "steps", "steps_timed", "timed_s",
                 "wait_s")  # fmt: skip

    def __init__(self, group: str) -> None:
        self.group = group
        self.timed_s = 0.0  # sum of timed step intervals (s)
        self.steps = self.steps_timed = 0  # steps, and those in timed intervals
        # (dt, steps) of its recent timed intervals: one step's, or a merged record's k steps'
        self.recent: deque = deque(maxlen=INTERVALS)
        self.recent_s = 0.0
        self.recent_steps = 0  # the steps the recent intervals cover
        self.span_s = dict.fromkeys(SPAN_KINDS, 0.0)
        self.spans_seen = False
        self.inside_s = 0.0  # span time inside timed step intervals
        self.pending_s = 0.0  # span time after the last step, awaiting the next
        self.first_t: float | None = None  # the segment's first step
        self.last_t: float | None = None
        self.lags: deque = deque(maxlen=LAG_WINDOW)  # lag per synchronous step (s)
        self.costs: deque = deque(maxlen=LAG_WINDOW)  # the job's wait on this rank (s)
        self.wait_s = 0.0  # waited for later ranks, summed over synchronous steps
        self.over = 0  # consecutive slow evaluations
        self.flagged = False
        # start-up (docs/spec.md "Time spans"): the run's first step of this rank, the time
        # inside segments before it, and its data, checkpoint and eval spans before it
        self.start_t: float | None = None
        self.before_s: float | None = None
        self.pre_s = 0.0

    def step_time_s(self) -> float | None:
        """Mean seconds per step over its recent intervals (s over the steps they cover)."""
        return self.recent_s / self.recent_steps if self.recent_steps else None


class _Group:
    """Ranks sharing one clock: their steps joined by number."""

    __slots__ = ("members", "need", "open", "sync")

    def __init__(self, need: int) -> None:
        self.members: set[int] = set()  # ranks that sent an arrival
        self.need = need  # records that close a step: the ranks its hellos name, or more
        self.open: dict[int, dict[int, tuple[float, float]]] = {}  # step -> rank -> (arr, t)
        self.sync: deque = deque(maxlen=LAG_WINDOW)  # joined steps: synchronous or not


class Ranks:
    """Per-rank arrival, lag, straggler flags and time split (module docstring).

    Args:
        max_ranks: ranks kept at most (the engine's ``MAX_RANKS``); later ranks are ignored.
    """

    def __init__(self, max_ranks: int = 1024) -> None:
        self.max_ranks = max_ranks
        self.ranks: dict[int, _Rank] = {}
        self.groups: dict[str, _Group] = {}
        self._agents_seen = -1  # len(agents) when the groups were last decided
        self._groups_of: dict[int, str] = {}  # rank -> group, from the agents' hellos
        self._expected: dict[str, int] = {}  # group -> ranks its hellos name
        self._segment: tuple[float | None, float] = (None, 0.0)  # (open one's start, closed s)

    def on_segment(self, t0: float | None, closed_s: float) -> None:
        """A segment opened at ``t0`` (None: the open one closed), after ``closed_s`` seconds
        in closed segments: where each rank's start-up ends is the time inside segments before
        its first step (docs/spec.md "Time spans")."""
        self._segment = (t0, closed_s)

    # -- records in ---------------------------------------------------------------------------
    def on_step(self, rank: int, step: int, t: float, arr, dt: float | None, first: bool,
                agents: dict, node=None, steps: int = 1) -> None:  # fmt: skip
        """One step record of ``rank``: ``step`` its number, ``t`` its time, ``arr`` its
        arrival (s since the epoch, or None), ``dt`` its timed interval (s, None when untimed),
        ``first`` the segment's first step of this rank; ``agents`` the engine's agents (pid ->
        hello fields: their ``host`` groups the ranks); ``node`` the record's node (``tm
        merge`` labels every record with it), which groups them instead; ``steps`` the steps
        the record stands for (a merged record's ``agg``: ``dt`` is their time together)."""
        r = self._rank(rank, agents, node)
        if r is None:
            return
        r.steps += steps
        if first:
            r.first_t, r.pending_s = t, 0.0  # spans before it are never inside an interval
            if r.start_t is None:  # the run's first step of this rank: its start-up ends
                t0, closed = self._segment
                r.start_t, r.before_s = t, closed + (max(0.0, t - t0) if t0 is not None else 0.0)
        if dt is not None:
            if len(r.recent) == r.recent.maxlen:
                old_dt, old_steps = r.recent[0]
                r.recent_s -= old_dt
                r.recent_steps -= old_steps
            r.recent.append((dt, steps))
            r.recent_s += dt
            r.recent_steps += steps
            r.timed_s += dt
            r.steps_timed += steps
            r.inside_s += r.pending_s
            r.pending_s = 0.0
            if r.steps_timed // 1024 != (r.steps_timed - steps) // 1024:  # now and then:
                r.recent_s = math.fsum(d for d, _ in r.recent)  # re-sum, no float drift
        r.last_t = t
        if type(arr) is float and math.isfinite(arr):
            self._join(rank, r, step, arr, t)

    def on_span(self, rank: int, kind: str, start: float, dur: float) -> None:
        """One span of ``rank`` inside a segment (already clipped to it by the engine): summed
        per kind, and kept apart when it lies inside a timed step interval (the same rule as
        rank 0's ``time_split``, docs/spec.md "Time spans")."""
        r = self.ranks.get(rank)
        if r is None and len(self.ranks) < self.max_ranks and kind in SPAN_KINDS:
            r = self.ranks[rank] = _Rank(self._groups_of.get(rank, ""))  # before its 1st step
        if r is None or kind not in r.span_s:
            return
        r.spans_seen = True
        r.span_s[kind] += dur
        if kind == "warmup" or r.first_t is None or start < r.first_t:
            if kind != "warmup" and (r.start_t is None or start < r.start_t):
                r.pre_s += dur  # before the run's first step: not start-up (its own bucket)
            return
        if r.last_t is not None and start + dur <= r.last_t:
            r.inside_s += dur
        else:
            r.pending_s += dur

    # -- the join and the rule ----------------------------------------------------------------
    def _rank(self, rank: int, agents: dict, node=None) -> _Rank | None:
        if len(agents) != self._agents_seen:
            self._regroup(agents)
        r = self.ranks.get(rank)
        if r is None and len(self.ranks) < self.max_ranks:
            r = self.ranks[rank] = _Rank(self._groups_of.get(rank, ""))
        if r is not None and node is not None and r.group != f"node {node}":
            old = self.groups.get(r.group)
            if old is not None:  # its steps there close without it
                old.members.discard(rank)
                old.need = len(old.members)
            r.group = self._groups_of[rank] = f"node {node}"  # a merged log's: one clock
        return r

    def _regroup(self, agents: dict) -> None:
        """An agent connected: decide each rank's group again (a moved rank's joins restart)."""
        self._agents_seen = len(agents)
        self._groups_of = groups_of(agents)
        self._expected = {}
        for group in self._groups_of.values():
            self._expected[group] = self._expected.get(group, 0) + 1
        for rank, r in self.ranks.items():
            group = self._groups_of.get(rank, "")
            if group != r.group:
                r.group = group
                self.groups.clear()

    def _join(self, rank: int, r: _Rank, step: int, arr: float, t: float) -> None:
        g = self.groups.get(r.group)
        if g is None:
            g = self.groups[r.group] = _Group(self._expected.get(r.group, 0))
        if rank not in g.members:
            g.members.add(rank)
            g.need = max(g.need, len(g.members))
        row = g.open.setdefault(step, {})
        row[rank] = (arr, t)
        if len(row) >= g.need:
            del g.open[step]
            self._evaluate(g, row)
        while g.open and (len(g.open) > JOIN_STEPS or next(iter(g.open)) < step - JOIN_STEPS):
            stale = g.open.pop(next(iter(g.open)))  # a rank never sent it: it stopped
            g.members, g.need = set(stale), len(stale)  # later steps close without it
            self._evaluate(g, stale)
            for n in [n for n, row in g.open.items() if len(row) >= g.need]:
                self._evaluate(g, g.open.pop(n))

    def _evaluate(self, g: _Group, row: dict[int, tuple[float, float]]) -> None:
        """One joined step: each rank's lag behind the lower median arrival, its wait for the
        last one, and the job's wait charged to the last; then the rule, once per rank."""
        if len(row) < 2:
            return
        arrivals = sorted(a for a, _ in row.values())
        last = arrivals[-1]
        synchronous = min(t for _, t in row.values()) >= last  # nobody left before the last came
        g.sync.append(synchronous)
        if not synchronous:
            return
        median = lower_median(arrivals)
        latest = max(row, key=lambda k: (row[k][0], -k))
        job = self._job_step_time(g)
        for rank, (arr, _) in row.items():
            r = self.ranks[rank]
            r.lags.append(arr - median)
            r.costs.append(last - median if rank == latest else 0.0)
            r.wait_s += last - arr
            self._rule(r, job)

    def _rule(self, r: _Rank, job: float | None) -> None:
        """Slow at this evaluation when the trimmed mean lag exceeds ``LAG_ON`` of the job's
        step time; flagged after ``LAG_EVALS`` in a row, unflagged below ``LAG_OFF``."""
        if job is None or job <= 0 or len(r.lags) < LAG_MIN:
            return
        share = trimmed_mean(r.lags) / job
        if r.flagged:
            if share < LAG_OFF:
                r.flagged, r.over = False, 0
            return
        r.over = r.over + 1 if share > LAG_ON else 0
        r.flagged = r.over >= LAG_EVALS

    def _job_step_time(self, g: _Group) -> float | None:
        """The lower median over the group's ranks of their mean recent step interval (s)."""
        times = sorted(x for x in (self.ranks[k].step_time_s() for k in g.members) if x)
        return lower_median(times) if times else None

    def _coupled(self, group: str) -> bool:
        """Most of the group's recent joined steps were synchronous (its lags mean a wait)."""
        g = self.groups.get(group)
        return g is not None and 2 * sum(g.sync) > len(g.sync)

    # -- snapshot out ---------------------------------------------------------------------------
    def snapshot(self, interval_flagged: list[int] | None, elapsed: float) -> dict:
        """The snapshot keys (docs/spec.md "Stragglers"). ``stragglers`` is every rank either
        rule flags, sorted (null while neither can tell: fewer than two ranks with a step
        time or a lag). The others are keyed by rank as a string, for at most
        ``MAX_DETAIL`` ranks (the flagged ones first, then by rank number):

        - ``rank_lag_s``: mean lag behind the lower median arrival over the last
          ``LAG_WINDOW`` synchronous steps (s), null for a rank with none or whose group is
          not synchronous; null when no rank has one;
        - ``straggler_cost_s`` / ``straggler_share``: the job's mean wait per step on that
          rank (s/step; its share of the job's step time), same window and nulls;
        - ``straggler_rule``: {rank: ``lag`` | ``interval`` | ``lag+interval``}, flagged only;
        - ``straggler_cause``: {rank: text}, flagged only (:meth:`cause`);
        - ``rank_time_split``: {rank: {compute, data, checkpoint, eval, wait, other} (s)},
          null for a rank with no span yet; null when no rank has one;
        - ``rank_time_share``: {rank: {compute, data, checkpoint, eval, wait}}: each bucket of
          ``rank_time_split`` over those five together (``metrics.shares``; its ``other``
          left out), same nulls.
        """
        by_lag = {k for k, r in self.ranks.items() if r.flagged and self._coupled(r.group)}
        by_interval = set(interval_flagged or ())
        flagged = sorted(by_lag | by_interval)
        rest = (k for k in sorted(self.ranks) if k not in by_lag and k not in by_interval)
        shown = [*flagged[:MAX_DETAIL], *islice(rest, max(0, MAX_DETAIL - len(flagged)))]
        shown.sort()
        lag, cost, share, split = {}, {}, {}, {}
        for rank in shown:
            r = self.ranks.get(rank)  # None: flagged by intervals only, never seen here
            ok = r is not None and bool(r.lags) and self._coupled(r.group)
            lag[str(rank)] = sum(r.lags) / len(r.lags) if ok else None
            c = cost[str(rank)] = sum(r.costs) / len(r.costs) if ok else None
            job = self._job_step_time(self.groups[r.group]) if ok else None
            share[str(rank)] = c / job if c is not None and job else None
            split[str(rank)] = self.split(r, elapsed) if r is not None else None
        known = interval_flagged is not None or any(v is not None for v in lag.values())
        median = self._median_per_step()
        named = [k for k in shown if k in by_lag or k in by_interval]
        return {
            "rank_lag_s": _or_none(lag),
            "straggler_cost_s": _or_none(cost),
            "straggler_share": _or_none(share),
            "stragglers": flagged if known else None,
            "straggler_rule": {str(k): _rule_name(k in by_lag, k in by_interval) for k in named},
            "straggler_cause": {str(k): self.cause(k, median) for k in named},
            "rank_time_split": _or_none(split),
            "rank_time_share": _or_none({k: shares(v, STEP_BUCKETS) for k, v in split.items()}),
        }

    def _median_per_step(self) -> dict[str, float] | None:
        """Per bucket, the lower median over ranks of their seconds per step (None with
        fewer than two ranks that have spans and a timed step)."""
        rows = [p for r in self.ranks.values() if (p := self.per_step(r)) is not None]
        if len(rows) < 2:
            return None
        return {b: lower_median(sorted(p[b] for p in rows)) for b in BUCKETS}

    def split(self, r: _Rank, elapsed: float) -> dict[str, float] | None:
        """Seconds of the rank per bucket (``SPLIT_BUCKETS``): spans per kind; ``wait`` for
        later ranks at synchronous steps; ``compute`` its timed step intervals less the spans
        inside them and the wait; ``startup`` (:func:`startup_s`); ``other`` the rest of
        ``elapsed`` (at least 0). None before its first span."""
        if not r.spans_seen:
            return None
        s = r.span_s
        wait = min(r.wait_s, max(0.0, r.timed_s - r.inside_s))
        compute = max(0.0, r.timed_s - r.inside_s - wait)
        busy = compute + wait + s["data"] + s["checkpoint"] + s["eval"]
        startup = startup_s(r, elapsed, busy)
        return {"compute": compute, "data": s["data"], "checkpoint": s["checkpoint"],
                "eval": s["eval"], "wait": wait, "startup": startup,
                "other": max(0.0, elapsed - busy - startup)}  # fmt: skip

    def per_step(self, r: _Rank) -> dict[str, float] | None:
        """The rank's seconds per step in each of ``BUCKETS``: ``compute`` per timed step,
        the spans per step (the first step's data wait is a span too); None before a span or
        a timed step."""
        split = self.split(r, 0.0)
        if split is None or not r.steps_timed:
            return None
        return {b: split[b] / (r.steps_timed if b == "compute" else r.steps) for b in BUCKETS}

    def cause(self, rank: int, median: dict[str, float] | None) -> str:
        """Why ``rank`` is slow, in words: the bucket in which its time per step exceeds
        ``median`` (:meth:`_median_per_step`) the most (``"rank 2: data loader (+38 ms/step
        data wait over the median rank)"``); what is missing when no bucket can say."""
        mine = self.per_step(self.ranks[rank]) if rank in self.ranks else None
        if mine is None or median is None:
            return f"rank {rank}: cause unknown (no time spans from enough ranks)"
        excess = {b: mine[b] - median[b] for b in BUCKETS}
        bucket = max(BUCKETS, key=lambda b: excess[b])
        if excess[bucket] <= 0:
            return f"rank {rank}: cause unknown (no bucket of its time is above the median rank)"
        ms = f"{min(excess[bucket], MAX_EXCESS_S) * 1e3:.0f}"
        return f"rank {rank}: " + _CAUSE[bucket].format(ms=ms)


def over_fastest(step_times: dict[str, float | None]) -> dict[str, float | None] | None:
    """Each rank's step time over the fastest rank's, less one: how much longer its steps are,
    as a fraction of the fastest's (0 for the fastest; 0.2: 20 % longer).

    Inputs: ``step_times`` {rank: mean step time (s), or None before its first timed step}
    (the snapshot's ``rank_step_time_s``).
    Formula: ``step_times[r] / min(step_times) - 1`` over the ranks with a step time above 0.
    Returns {rank: fraction or None (no step time)}, or None when no rank has a step time.
    """
    known = [t for t in step_times.values() if t is not None and t > 0]
    if not known:
        return None
    fastest = min(known)
    return {
        r: (t / fastest - 1 if t is not None and t > 0 else None) for r, t in step_times.items()
    }


def _or_none(by_rank: dict) -> dict | None:
    """``by_rank``, or None when it holds no figure."""
    return by_rank if any(v is not None for v in by_rank.values()) else None


def startup_s(r: _Rank, elapsed: float, busy: float) -> float:
    """A rank's start-up (s): the time inside segments before its first step (all of
    ``elapsed`` before one), less its data, checkpoint and eval spans before that step and its
    warm-up span (first training forward to first step, counted in ``other``): the imports,
    data and model build before the first training forward. At most ``elapsed - busy``, so
    the buckets add up to ``elapsed``; at least 0."""
    before = elapsed if r.before_s is None else min(r.before_s, elapsed)
    own = before - r.pre_s - r.span_s["warmup"]
    return max(0.0, min(own, elapsed - busy))


def _rule_name(by_lag: bool, by_interval: bool) -> str:
    return "lag+interval" if by_lag and by_interval else "lag" if by_lag else "interval"


def lower_median(xs: list[float]) -> float:
    """The ⌈n/2⌉-th smallest of the sorted, non-empty ``xs`` (with two, the smaller)."""
    return xs[(len(xs) - 1) // 2]


def trimmed_mean(xs) -> float:
    """The mean of ``xs`` without its largest value (one long step does not flag a rank);
    the plain mean of fewer than three values."""
    n = len(xs)
    if n < 3:
        return sum(xs) / n
    return (sum(xs) - max(xs)) / (n - 1)


def groups_of(agents: dict) -> dict[int, str]:
    """Each rank's clock group, from the agents' hellos (pid -> hello fields): its host when
    they name more than one host (a merged multi-node log), else ``""`` (one node, one clock).
    Only ranks of a world of two or more (a launcher's own agent, torchrun's, is alone in its
    world of 1)."""
    named = [a for a in agents.values() if type(a.get("rank")) is int
             and type(a.get("world_size")) is int and a["world_size"] > 1]  # fmt: skip
    hosts = {a.get("host") for a in named if a.get("host")}
    one = len(hosts) < 2
    return {a["rank"]: "" if one else str(a.get("host") or "") for a in named}
