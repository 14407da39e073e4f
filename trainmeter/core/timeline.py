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

``js/state.js`` ``thin()`` implements the same pass on the browser's copy; keep the two equal.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from operator import itemgetter

DEFAULT_CAP = 2000  # points per series: ~1 point per pixel of a wide chart, twice over
MIN_CAP = 8  # smallest cap for which one pass always shrinks a full series (see Timeline)
GROUP = 4  # points per min/max bucket: each full bucket keeps 2, so a pass halves the old half
DEFAULT_MAX_SERIES = 128  # names kept: 64 from training code (engine.MAX_SERIES) + 64 of ours


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


class Timeline:
    """Named (x, y) series with a per-series point cap and a cap on the number of series.

    Args:
        cap: maximum points per series (>= 8: a series of ``cap + 1 >= 9`` points has an older
            half of at least 4, so one pass removes at least 2 points).
        max_series: maximum distinct names kept; an append to a further name is refused and
            counted in :attr:`refused` (points) and :attr:`refused_names` (distinct names,
            counted up to 1000).
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
        self._refused_names: set[int] = set()  # name_key()s, at most 1000: memory stays bounded
        self._series: dict[str, _Series] = {}

    @property
    def refused_names(self) -> int:
        """Distinct names refused so far (counting stops at 1000)."""
        return len(self._refused_names)

    def append(self, name: str, x: float, y: float) -> bool:
        """Add one point; thins the older half when the series is over ``cap``.

        Returns False (and keeps nothing) when ``name`` is new and ``max_series`` names are
        already kept.
        """
        s = self._series.get(name)
        if s is None:
            if len(self._series) >= self.max_series:
                self.refused += 1
                if len(self._refused_names) < 1000:
                    self._refused_names.add(name_key(name))
                return False
            s = self._series[name] = _Series()
        self.seq += 1
        s.xs.append(x)
        s.ys.append(y)
        s.seqs.append(self.seq)
        if len(s.xs) > self.cap:
            _thin_series(s)
        return True

    def extend_rows(self, names: list[str], xs: list, cols: list[list]) -> None:
        """:meth:`append` row by row: for each ``k``, ``(xs[k], cols[p][k])`` to ``names[p]``
        in the order of ``names``; the same points, sequence numbers, thinning and refusals,
        a list at a time."""
        m = len(xs)
        if not m:
            return
        kept = []
        for name, col in zip(names, cols, strict=True):
            s = self._series.get(name)
            if s is None:
                if len(self._series) >= self.max_series:
                    self.refused += m
                    if len(self._refused_names) < 1000:
                        self._refused_names.add(name_key(name))
                    continue
                s = self._series[name] = _Series()
            kept.append((s, col))
        w, base = len(kept), self.seq
        for p, (s, col) in enumerate(kept):  # row k's point of the p-th kept name: seq below
            self._extend(s, xs, col, range(base + p + 1, base + w * m + 1, w))
        self.seq = base + w * m

    def _extend(self, s: _Series, xs: list, ys: list, seqs: range) -> None:
        """Append the points, thinning whenever the series passes ``cap`` (as :meth:`append`)."""
        i, m, cap = 0, len(xs), self.cap
        if len(s.xs) + m <= cap:  # no pass: the usual case
            s.xs += xs
            s.ys += ys
            s.seqs += seqs
            return
        while i < m:
            j = min(m, i + cap + 1 - len(s.xs))  # up to cap + 1 points: one pass then
            s.xs += xs[i:j]
            s.ys += ys[i:j]
            s.seqs += seqs[i:j]
            i = j
            if len(s.xs) > cap:
                _thin_series(s)

    def full(self) -> dict:
        """``{"seq": n, "series": {name: [[x...], [y...]]}}``: everything kept."""
        return {"seq": self.seq, "series": {n: [s.xs[:], s.ys[:]] for n, s in self._series.items()}}

    def since(self, seq: int) -> dict:
        """Points appended after ``seq`` (those still kept), in the same shape as :meth:`full`."""
        out = {}
        for name, s in self._series.items():
            i = len(s.seqs)
            while i > 0 and s.seqs[i - 1] > seq:
                i -= 1
            if i < len(s.seqs):
                out[name] = [s.xs[i:], s.ys[i:]]
        return {"seq": self.seq, "series": out}

    def names(self) -> list[str]:
        """The series kept, in first-append order."""
        return list(self._series)

    def sizes(self) -> dict[str, int]:
        """Points kept per series."""
        return {n: len(s.xs) for n, s in self._series.items()}

    def __len__(self) -> int:
        return sum(len(s.xs) for s in self._series.values())
