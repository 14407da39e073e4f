"""Bounded chart history: every series keeps at most ``cap`` points however long the run.

When a series grows past ``cap`` points its older half is thinned by min/max buckets
(:func:`thin_pass`): the first ``floor(n/2)`` points are walked in consecutive groups of 4,
and each full group keeps its lowest and its highest point, in their original order. A spike
(a loss blow-up, a throughput drop) therefore survives every thinning, which keeping every
other point would lose half the time. The newer half stays at full resolution. Memory per
series is O(cap); the run log keeps full resolution.

The number of series is bounded too (``max_series``): a name past the limit is refused and
counted, never kept, so one subscriber update stays bounded whatever the training code sends
(docs/spec.md "The chart timeline" and "Bounds on an update").

Each append gets a global sequence number that stays attached to its point through thinning,
so a subscriber can ask for "points since seq" and receive a small delta.

A point may carry a *scale* ``(den, names, factors)``: it then also stands for the point
``y * factors[p] / den`` of each series ``names[p]``, a series *derived* from the one the
point was appended to (its *leader*). A derived series keeps no points of its own: its points
are its leader's that carry it, at the same x and sequence number, so a thinning pass of the
leader thins it too (the engine's ``mfu/<convention>`` series are tokens/s times FLOPs per
token over the peak: four series charted for the cost of one). The scales are held once each
in a table, a point holding an index into it.

``js/state.js`` ``thin()`` implements the same pass on the browser's copy; keep the two equal.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from itertools import groupby, repeat
from operator import itemgetter, mul, truediv

DEFAULT_CAP = 2000  # points per series: ~1 point per pixel of a wide chart, twice over
MIN_CAP = 8  # smallest cap for which one pass always shrinks a full series (see Timeline)
GROUP = 4  # points per min/max bucket: each full bucket keeps 2, so a pass halves the old half
DEFAULT_MAX_SERIES = 128  # names kept: 64 from training code (engine.MAX_SERIES) + 64 of ours


def scaled(ys: list, factor: float, den: float) -> list[float]:
    """The derived points of ``ys`` under a scale's ``factor`` and ``den``: ``y * factor /
    den`` each, in that order of operations (``metrics.mfu``'s: tokens/s x FLOPs per token,
    over devices x peak)."""
    return list(map(truediv, map(mul, ys, repeat(factor)), repeat(den)))


def name_key(name: str) -> int:
    """A refused name's key in a count of distinct names: the same in every process (a
    checkpoint carries the keys to another; Python's ``hash`` of a string is not)."""
    digest = hashlib.blake2b(name.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1  # below 2**63


def _finite(y: object) -> bool:
    return isinstance(y, (int, float)) and not isinstance(y, bool) and math.isfinite(y)


def thin_pass(ys: list) -> list[int]:
    """Indices kept by one min/max-bucket pass over a series of ``n = len(ys)`` points.

    Rule (the same in ``js/state.js`` ``thin()``): the older half, indices ``0 .. n//2 - 1``,
    is cut into consecutive groups of 4 from index 0. From each full group keep the first
    point holding the smallest finite y and the first holding the largest finite y, in their
    original order; non-finite y (NaN, infinity, None) are ignored. When these are the same
    point (every finite y equal) or the group has fewer than 2 finite y, keep the group's first
    and last point. A trailing partial group (under 4 points) of the older half is kept whole,
    and so is the newer half.

    Returns: ascending indices into ``ys``; ``n - 2 * ((n // 2) // 4)`` of them.
    Source: min/max decimation as used for plotting long signals (each bucket's extremes are
    what a line chart of that bucket would draw); bucket size 4 so a pass keeps half of the
    older half.
    """
    keep, full = _old_keep(ys)
    keep.extend(range(full, len(ys)))
    return keep


def _keep_any(ys: list, full: int) -> list[int]:
    """:func:`thin_pass`'s rule over ``ys[:full]``, whatever the values, a point at a time."""
    keep: list[int] = []
    for g in range(0, full, GROUP):
        lo = hi = -1
        low = high = 0.0
        for i in range(g, g + GROUP):
            y = ys[i]
            if y.__class__ is float:  # the usual case, tested without a call
                if y - y != 0.0:  # NaN or infinity
                    continue
            elif not _finite(y):
                continue
            if lo < 0:
                lo = hi = i
                low = high = y
            elif y < low:
                lo, low = i, y
            elif y > high:
                hi, high = i, y
        if lo == hi:  # under 2 finite y (both -1), or every finite y equal
            keep += (g, g + GROUP - 1)
        elif lo < hi:
            keep += (lo, hi)
        else:
            keep += (hi, lo)
    return keep


def _finite_floats(ys: list) -> bool:
    """Whether every y is a float and finite (so is their sum then: no NaN, no infinity)."""
    if set(map(type, ys)) - {float}:
        return False
    total = sum(ys)
    return total - total == 0.0


def _keep_floats(ys: list, full: int) -> list[int]:
    """:func:`thin_pass`'s rule over ``ys[:full]`` when every y there is a finite float, a
    group of 4 at a time: the first lowest and the first highest point, in order (the first
    and the last when every y is equal); the same comparisons, unrolled."""
    keep: list[int] = []
    g = 0
    for a, b, c, d in zip(ys[0:full:4], ys[1:full:4], ys[2:full:4], ys[3:full:4], strict=True):
        # one name a statement (no tuple built and unpacked), the pair added in place
        if b < a:
            lo = 1
            low = b
            hi = 0
            high = a
        elif b > a:
            lo = 0
            low = a
            hi = 1
            high = b
        else:
            lo = hi = 0
            low = high = a
        if c < low:
            lo = 2
            low = c
        elif c > high:
            hi = 2
            high = c
        if d < low:
            lo = 3
        elif d > high:
            hi = 3
        if lo < hi:
            keep += (g + lo, g + hi)
        elif lo > hi:
            keep += (g + hi, g + lo)
        else:  # every y equal: the first and the last
            keep += (g, g + 3)
        g += 4
    return keep


def _old_keep(ys: list) -> tuple[list[int], int]:
    """:func:`thin_pass`'s indices kept among the older half's full groups, and where those
    end (``full``: every point from there on is kept)."""
    half = len(ys) // 2
    full = half - half % GROUP
    if GROUP == 4 and _finite_floats(ys[:full]):  # the usual case, unrolled
        return _keep_floats(ys, full), full
    return _keep_any(ys, full), full


def _thin_series(s: _Series) -> None:
    """One :func:`thin_pass` over a series' points: the older half's full groups replaced in
    place by the points they keep (one gather for the three lists, no copy of the newer
    half)."""
    keep, full = _old_keep(s.ys)
    if keep:  # two or more (each full group keeps 2); none under 8 points
        get = itemgetter(*keep)
        s.xs[:full], s.ys[:full], s.seqs[:full] = get(s.xs), get(s.ys), get(s.seqs)
        if s.sc:
            s.sc[:full] = get(s.sc)


def thin(xs: list, ys: list, cap: int = DEFAULT_CAP) -> tuple[list, list]:
    """Apply :func:`thin_pass` until at most ``cap`` points remain (or a pass removes nothing,
    which happens only below 8 points). Returns new ``(xs, ys)`` lists."""
    while len(xs) > cap:
        keep = thin_pass(ys)
        if len(keep) == len(xs):
            break
        xs, ys = [xs[i] for i in keep], [ys[i] for i in keep]
    return xs, ys


@dataclass
class _Series:
    xs: list[float] = field(default_factory=list)
    ys: list[float] = field(default_factory=list)
    seqs: list[int] = field(default_factory=list)
    # each point's index into Timeline.scales, -1 for none; empty while no point had a scale
    sc: list[int] = field(default_factory=list)
    of: str | None = None  # a derived series: its leader's name (its own lists stay empty)


class Timeline:
    """Named (x, y) series with a per-series point cap and a cap on the number of series.

    Args:
        cap: maximum points per series (>= 8: a series of ``cap + 1 >= 9`` points has an older
            half of at least 4, so one pass removes at least 2 points).
        max_series: maximum distinct names kept, derived series included; an append to a
            further name is refused and counted in :attr:`refused` (points) and
            :attr:`refused_names` (distinct names, counted up to 1000).
    Raises:
        ValueError: cap below 8 or max_series below 1.
    """

    def __init__(self, cap: int = DEFAULT_CAP, max_series: int = DEFAULT_MAX_SERIES) -> None:
        if cap < MIN_CAP:
            raise ValueError(f"cap must be >= {MIN_CAP}, got {cap}")
        if max_series < 1:
            raise ValueError(f"max_series must be >= 1, got {max_series}")
        self.cap = cap
        self.max_series = max_series
        self.seq = 0
        self.refused = 0
        self.clashed = 0  # points not kept: their name is a series of the other kind
        self._refused_names: set[int] = set()  # name_key()s, at most 1000: memory stays bounded
        self._series: dict[str, _Series] = {}
        self.scales: list[tuple] = []  # the points' scales, each once: (den, names, factors)
        self._scale_ix: dict[tuple, int] = {}  # a cache: scale -> its index in scales
        # a cache: (leader, scale index) whose names all follow that leader
        self._led: set[tuple[str, int]] = set()

    @property
    def refused_names(self) -> int:
        """Distinct names refused so far (counting stops at 1000)."""
        return len(self._refused_names)

    def _own(self, name: str, points: int) -> _Series | None:
        """The series ``name`` keeps its own points in, made if there is room; None (the
        ``points`` counted) when it is refused or is a derived series."""
        s = self._series.get(name)
        if s is None:
            if len(self._series) >= self.max_series:
                self._refuse(name, points)
                return None
            s = self._series[name] = _Series()
        elif s.of is not None:
            self.clashed += points
            return None
        return s

    def _refuse(self, name: str, points: int) -> None:
        self.refused += points
        if len(self._refused_names) < 1000:
            self._refused_names.add(name_key(name))

    def _scale(self, leader: str, scale: tuple, points: int) -> int:
        """``scale``'s index in :attr:`scales` (added when new), its names made series derived
        from ``leader`` where there is room (``points`` counted for each that is not)."""
        ix = self._scale_ix.get(scale)
        if ix is None and len(self._scale_ix) != len(self.scales):  # restored: the cache anew
            self._scale_ix = {sc: k for k, sc in enumerate(self.scales)}
            ix = self._scale_ix.get(scale)
        if ix is None:
            if len(self.scales) > 2 * self.cap + 64:  # before a new index is handed out only
                self._compact()
            ix = self._scale_ix[scale] = len(self.scales)
            self.scales.append(scale)
        if (leader, ix) in self._led:
            return ix
        clear = True
        for name in scale[1]:
            s = self._series.get(name)
            if s is None and len(self._series) < self.max_series:
                s = self._series[name] = _Series(of=leader)
            if s is None:
                self._refuse(name, points)
            elif s.of != leader:
                self.clashed += points
            else:
                continue
            clear = False
        if clear:  # refusals are counted per point: only a scale whose names all follow is cached
            self._led.add((leader, ix))
        return ix

    def append(self, name: str, x: float, y: float, scale: tuple | None = None) -> bool:
        """Add one point; thins the older half when the series is over ``cap``.

        ``scale``: ``(den, names, factors)``, the point also stands for ``y * factors[p] / den``
        in each derived series ``names[p]`` (module docstring). Returns False (and keeps
        nothing) when ``name`` is new and ``max_series`` names are already kept, or is a
        derived series.
        """
        s = self._own(name, 1)
        if s is None:
            return False
        self.seq += 1
        s.xs.append(x)
        s.ys.append(y)
        s.seqs.append(self.seq)
        if scale is not None:
            if not s.sc:
                s.sc += [-1] * (len(s.xs) - 1)
            s.sc.append(self._scale(name, scale, 1))
        elif s.sc:
            s.sc.append(-1)
        if len(s.xs) > self.cap:
            _thin_series(s)
        return True

    def extend(self, name: str, xs: list, ys: list, scale: tuple | None = None) -> None:
        """:meth:`append` of each ``(xs[k], ys[k], scale)`` in turn: the same points, sequence
        numbers, thinning and refusals, a list at a time."""
        m = len(xs)
        s = self._own(name, m) if m else None
        if s is None:
            return
        base = self.seq
        self.seq += m
        seqs = range(base + 1, base + m + 1)
        if scale is not None:
            if not s.sc:
                s.sc += [-1] * len(s.xs)
            sc = [self._scale(name, scale, m)] * m
        else:
            sc = [-1] * m if s.sc else None
        i, cap = 0, self.cap
        if len(s.xs) + m <= cap:  # no pass: the usual case
            s.xs += xs
            s.ys += ys
            s.seqs += seqs
            if sc:
                s.sc += sc
            return
        while i < m:
            j = min(m, i + cap + 1 - len(s.xs))  # up to cap + 1 points: one pass then
            s.xs += xs[i:j]
            s.ys += ys[i:j]
            s.seqs += seqs[i:j]
            if sc:
                s.sc += sc[i:j]
            i = j
            if len(s.xs) > cap:
                _thin_series(s)

    def _compact(self) -> None:
        """Drop the scales no point holds any more (lengths that vary give one a step), and
        renumber the points' indices; called only while no index is held elsewhere."""
        held = sorted({k for s in self._series.values() for k in s.sc} - {-1})
        new = {old: k for k, old in enumerate(held)}
        new[-1] = -1
        for s in self._series.values():
            if s.sc:
                s.sc[:] = map(new.__getitem__, s.sc)
        self.scales = [self.scales[k] for k in held]
        self._scale_ix = {sc: k for k, sc in enumerate(self.scales)}
        self._led = {(name, new[k]) for name, k in self._led if k in new}

    def _derived(self, name: str, lead: _Series, lo: int) -> list:
        """``[xs, ys]``: the derived series ``name``'s points among ``lead``'s from index
        ``lo`` on: each point whose scale names it, ``y * factor / den`` (the order of
        operations of ``metrics.mfu``), a run of points with the same scale at a time."""
        sc, xs, ys = lead.sc, lead.xs, lead.ys
        out_x: list = []
        out_y: list = []
        a = lo
        for k, run in groupby(sc[lo:]):
            b = a + sum(1 for _ in run)
            if k >= 0:
                den, names, factors = self.scales[k]
                if name in names:
                    v = factors[names.index(name)]
                    out_x += xs[a:b]
                    out_y += scaled(ys[a:b], v, den)
            a = b
        return [out_x, out_y]

    def _from(self, name: str, s: _Series, lo: int) -> list:
        """``[xs, ys]`` of series ``name`` from its (or, derived, its leader's) point ``lo``."""
        if s.of is None:
            return [s.xs[lo:], s.ys[lo:]]
        return self._derived(name, self._series[s.of], lo)

    def full(self) -> dict:
        """``{"seq": n, "series": {name: [[x...], [y...]]}}``: everything kept."""
        series = {n: self._from(n, s, 0) for n, s in self._series.items()}
        return {"seq": self.seq, "series": series}

    def since(self, seq: int) -> dict:
        """Points appended after ``seq`` (those still kept), in the same shape as :meth:`full`."""
        out = {}
        for name, s in self._series.items():
            own = s if s.of is None else self._series[s.of]
            i = len(own.seqs)
            while i > 0 and own.seqs[i - 1] > seq:
                i -= 1
            if i < len(own.seqs):
                got = self._from(name, s, i)
                if got[0]:
                    out[name] = got
        return {"seq": self.seq, "series": out}

    def names(self) -> list[str]:
        """The series kept, in first-append order (a derived series: its first point's)."""
        return list(self._series)

    def sizes(self) -> dict[str, int]:
        """Points kept per series."""
        return {n: len(self._from(n, s, 0)[0]) if s.of else len(s.xs)
                for n, s in self._series.items()}  # fmt: skip

    def __len__(self) -> int:
        return sum(self.sizes().values())
