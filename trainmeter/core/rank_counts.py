"""Tokens and samples from every rank's own step records (docs/spec.md "Counts from every rank").

Rank 0 is the run's step clock (step number, timed intervals), but each rank's step records
carry that rank's own tokens and samples: the job's counts are their sum, so ranks that train
different amounts (local SGD, DiLoCo, an uneven last batch) are counted as they trained. The
job's tokens/s (and samples/s) is the sum of each rank's own rate over its own last ``window``
timed steps: in
a synchronous job every rank's intervals are rank 0's, so the sum is what rank 0's rate times
the world size was; ranks that do not wait for each other are each timed by their own clock,
and a rank's records that reach the supervisor late shift only its own window, not the sum.

Ranks the engine never hears (another node's, under one supervisor per node) are estimated
as the mean heard rank (``job = heard × world / ranks heard``), said in ``rank_counts``.
Pure and deterministic on the records: replay gives the live figures.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

STALE_STEPS = 10  # a rank whose last step is this many of its intervals behind...
STALE_MIN_S = 2.0  # ...(and at least this many seconds) behind the newest rank's: not in the rate


@dataclass
class _Own:
    """One rank's own counts and its recent timed steps."""

    tokens: int = 0
    samples: int = 0
    steps: int = 0  # its steps (a merged record's k)
    last_t: float = 0.0  # its newest step's time
    node: str | None = None  # a merged log's node label (``tm merge``)
    timed_tokens: int = 0  # tokens of its timed steps (a previous step in the same segment)
    timed_samples: int = 0
    timed_s: float = 0.0
    timed: int = 0  # its timed steps
    recent: deque = field(default_factory=deque)  # (dt, tokens, samples) of its recent steps
    recent_tokens: int = 0
    recent_samples: int = 0
    recent_s: float = 0.0

    def rate(self, samples: bool = False) -> float | None:
        """Its tokens/s (``samples``: samples/s) over its recent window; None before a timed
        step, and over a window too short for a finite rate (times 1e-300 s apart)."""
        if self.recent_s <= 0:
            return None
        return _finite((self.recent_samples if samples else self.recent_tokens) / self.recent_s)


class RankCounts:
    """The job's tokens, samples and tokens/s from every rank's own counts.

    Args:
        max_ranks: ranks kept (the engine refuses step records past it before they come here).
        window: timed steps in each rank's recent window (the engine's ``WINDOW_STEPS``).
    """

    def __init__(self, max_ranks: int, window: int) -> None:
        self.max_ranks, self.window = max_ranks, window
        self.own: dict[int, _Own] = {}
        self.tokens = 0  # sums over the heard ranks (exact ints)
        self.samples = 0
        self.newest_t: float | None = None

    def add(self, rank: int, t: float, dt: float | None, tokens: int, samples: int,
            node: str | None = None, steps: int = 1) -> None:  # fmt: skip
        """One step record of ``rank`` at ``t`` (s), ``dt`` its timed interval (s) or None,
        with its own ``tokens`` and ``samples`` (validated counts >= 0), ``node`` (a merged
        log's node label, else None) and ``steps`` (the steps it stands for: a merged
        record's ``agg``)."""
        own = self.own.get(rank)
        if own is None:
            if len(self.own) >= self.max_ranks:
                return
            own = self.own[rank] = _Own()
        own.tokens += tokens
        own.samples += samples
        own.steps += steps
        self.tokens += tokens
        self.samples += samples
        own.last_t = t
        if isinstance(node, str):
            own.node = node[:200]
        if self.newest_t is None or t > self.newest_t:
            self.newest_t = t
        if dt is None:
            return
        own.timed_tokens += tokens
        own.timed_samples += samples
        own.timed_s += dt
        own.timed += 1
        if len(own.recent) == self.window:
            old_dt, old_tokens, old_samples = own.recent.popleft()
            own.recent_s -= old_dt
            own.recent_tokens -= old_tokens
            own.recent_samples -= old_samples
        own.recent.append((dt, tokens, samples))
        own.recent_tokens += tokens
        own.recent_samples += samples
        own.recent_s += dt
        if own.timed % 1024 == 0:  # now and then: no float drift over a long run
            own.recent_s = math.fsum(d for d, _, _ in own.recent)

    def _scale(self, world: int) -> float:
        """``world / ranks heard`` when fewer ranks were heard than the world has, else 1."""
        heard = len(self.own)
        return world / heard if 0 < heard < world else 1.0

    def job(self, world: int) -> tuple[int, int]:
        """The job's (tokens, samples): the heard ranks' sums, scaled to ``world`` when some
        ranks were not heard (rounded down)."""
        heard = len(self.own)
        if not 0 < heard < world:
            return self.tokens, self.samples
        return self.tokens * world // heard, self.samples * world // heard

    def rate(self, world: int, samples: bool = False) -> float | None:
        """Tokens/s of the job (``samples``: samples/s): the sum over the current ranks of
        each one's own recent rate (a rank ``STALE_STEPS`` intervals, and ``STALE_MIN_S``,
        behind the newest rank has stopped and is left out), scaled like :meth:`job`; None
        before any rate, and while no rank has counted a token (a sample): a model whose
        inputs are not token ids has no tokens/s, not 0 tokens/s."""
        if not (self.samples if samples else self.tokens):
            return None
        rates = []
        for own in self.own.values():
            r = own.rate(samples)
            if r is None:
                continue
            mean = own.recent_s / len(own.recent)
            if self.newest_t - own.last_t <= max(STALE_STEPS * mean, STALE_MIN_S):
                rates.append(r)
        return _finite(math.fsum(rates) * self._scale(world)) if rates else None

    def rate_avg(self, world: int, samples: bool = False) -> float | None:
        """Tokens/s over the whole run (``samples``: samples/s): the sum over ranks of each
        one's timed tokens (samples) over its timed seconds, scaled like :meth:`job`; None
        before any timed step, and while no rank has counted a token (a sample)."""
        if not (self.samples if samples else self.tokens):
            return None
        rates = [(o.timed_samples if samples else o.timed_tokens) / o.timed_s
                 for o in self.own.values() if o.timed_s > 0]  # fmt: skip
        if not rates or math.inf in rates:  # seconds too few for a finite rate: none
            return None
        return _finite(math.fsum(rates) * self._scale(world))

    def per_step(self, world: int) -> float | None:
        """Samples per step of the job: the sum over ranks of each one's own samples over its
        own steps (the whole run: 16 for one rank fed batches of 16, 32 for two), scaled like
        :meth:`job`; None before a step, and while no rank has counted a sample."""
        if not self.samples:
            return None
        per = [o.samples / o.steps for o in self.own.values() if o.steps]
        return math.fsum(per) * self._scale(world) if per else None

    def snapshot(self, world: int, detail: int) -> dict:
        """The snapshot's ``rank_counts`` (how the job's counts were made), ``rank_tokens``
        ({rank: its own tokens}, the lowest ``detail`` ranks; null with one rank) and
        ``rank_nodes`` ({rank: node label}, the same ranks; null when no record names one)."""
        heard = len(self.own)
        estimated = max(0, world - heard) if heard else 0
        rule = "sum" if not estimated else "sum+estimate"
        text = f"tokens and samples: the sum of {heard} rank(s)' own counts"
        if estimated:
            text += (f"; {estimated} rank(s) of the world of {world} not heard here (another "
                     "node's) are estimated as the mean heard rank")  # fmt: skip
        per_rank = nodes = None
        shown = sorted(self.own)[:detail]
        if heard > 1:
            per_rank = {str(r): self.own[r].tokens for r in shown}
        if any(self.own[r].node is not None for r in shown):
            nodes = {str(r): self.own[r].node for r in shown}
        return {
            "rank_counts": {
                "rule": rule,
                "ranks": heard,
                "world": world,
                "estimated_ranks": estimated,
                "text": text,
            },
            "rank_tokens": per_rank,
            "rank_nodes": nodes,
        }


def _finite(x: float) -> float | None:
    """A rate that overflowed (a sum of huge ones) is no rate."""
    return x if x < math.inf else None
