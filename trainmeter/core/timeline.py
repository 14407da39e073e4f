"""Bounded chart history: every series keeps at most ``cap`` points however long the run.

When a series reaches ``cap`` points its older half is thinned by keeping every other point,
so recent history stays at full resolution and old history at a coarser one. Memory per series
is O(cap); the run log keeps full resolution. Each append gets a global sequence number so a
subscriber can ask for "points since seq" and receive a small delta.
"""

from __future__ import annotations

from dataclasses import dataclass, field

DEFAULT_CAP = 2000


@dataclass
class _Series:
    xs: list[float] = field(default_factory=list)
    ys: list[float] = field(default_factory=list)
    seqs: list[int] = field(default_factory=list)


class Timeline:
    """Named (x, y) series with a per-series point cap.

    Args:
        cap: maximum points per series (>= 4).
    Raises:
        ValueError: cap below 4.
    """

    def __init__(self, cap: int = DEFAULT_CAP) -> None:
        if cap < 4:
            raise ValueError(f"cap must be >= 4, got {cap}")
        self.cap = cap
        self.seq = 0
        self._series: dict[str, _Series] = {}

    def append(self, name: str, x: float, y: float) -> None:
        """Add one point; thins the older half when the series is full."""
        s = self._series.setdefault(name, _Series())
        self.seq += 1
        s.xs.append(x)
        s.ys.append(y)
        s.seqs.append(self.seq)
        if len(s.xs) > self.cap:
            half = len(s.xs) // 2
            for lst in (s.xs, s.ys, s.seqs):
                lst[:half] = lst[:half:2]

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

    def __len__(self) -> int:
        return sum(len(s.xs) for s in self._series.values())
