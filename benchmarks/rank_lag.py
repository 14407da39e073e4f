"""What the arrival lag (docs/spec.md "Stragglers") costs per step, on every rank and in the
supervisor, measured side by side.

    python benchmarks/rank_lag.py [--rounds 300]

1. **The training thread.** The one change there: in a run of two ranks or more, the
   backward wrapper an optimizer-clocked loop keeps (``BackwardTap.lean``) queues
   ``(time.time(), loss)`` instead of ``(0.0, loss)`` (a one-rank run's). The minimal loop of
   ``agent_overhead.py`` (one thread) runs blocks of 100 steps with torch's own ``backward``,
   the wrapper unstamped and the wrapper stamped, in a shuffled order each round; the figure
   is the median paired difference (stamped less unstamped) per step, with a bootstrap 90 %
   interval, at the block median and at each block's 10th-percentile step (which this
   machine's noise moves less). No sender thread runs: the queue is cleared after each block.
2. **The sender thread** (its reader, ``QueueReader.read``): a flush of 1000 steps, each a
   stamped backward and a step stamp, against the same with unstamped backwards (no
   ``arr_us`` column), per step.
3. **The supervisor** (another process): ``decode_wire`` of a 1000-step batch, and
   ``Engine.apply`` of 4 ranks' step records, flushes of 10 steps in turn (joined by step
   number), per step record, with the column against without it.

docs/performance.md quotes the result.
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import statistics
import time

from agent_overhead import _interval, _median_step, _setup

T0 = 1.7e9


def training_thread(rounds: int) -> dict[str, dict[str, list[float]]]:
    """Per variant, each block's median and 10th-percentile step (s), paired by round."""
    from trainmeter.agent.backward import BackwardTap

    torch, model, opt, x = _setup()
    queue: collections.deque = collections.deque()

    class _Agent:
        class sender:
            put_step = queue.append

    tap = BackwardTap(_Agent(), torch)
    tap.start()
    tap.lean(stamp=False)  # a one-rank run's wrapper
    unstamped = torch.autograd.backward
    tap.lean(stamp=True)  # a many-rank run's
    stamped = torch.autograd.backward
    own = stamped.__wrapped__
    variants = {"torch's own": own, "unstamped": unstamped, "stamped": stamped}
    got = {k: {"median": [], "p10": []} for k in variants}
    _median_step(model, opt, x, 300)
    rng = random.Random(0)
    try:
        for _ in range(rounds):
            for name in rng.sample(list(variants), len(variants)):
                torch.autograd.backward = variants[name]
                _median_step(model, opt, x, 3)
                g = got[name]
                g["median"].append(_median_step(model, opt, x, 100, p10=g["p10"]))
                queue.clear()
    finally:
        torch.autograd.backward = stamped
        tap.stop()
    return got


def _items(stamped: bool, n: int = 1000) -> list:
    out = []
    for i in range(n):
        t = T0 + 0.1 * i
        out += [(t - 0.05 if stamped else 0.0, 1.0), t]
    return out


def sender_thread(reps: int = 400) -> tuple[float, float, float, float]:
    """Seconds per step of ``QueueReader.read`` and the batch's encoding: (unstamped,
    stamped, the median paired difference, and its 90 % interval's half width), the two
    interleaved in a shuffled order each round."""
    from trainmeter.agent.sender import QueueReader, _line

    items = {False: _items(False), True: _items(True)}
    spent: dict[bool, list[float]] = {False: [], True: []}
    rng = random.Random(0)
    for _ in range(reps):
        for stamped in rng.sample([False, True], 2):
            reader, q = QueueReader(0), collections.deque(items[stamped])
            t0 = time.perf_counter()
            steps, _, _ = reader.read(q)
            _line(steps)
            spent[stamped].append((time.perf_counter() - t0) / 1000)
    d = [b - a for a, b in zip(spent[False], spent[True], strict=True)]
    lo, hi = _interval(d)
    return (
        statistics.median(spent[False]),
        statistics.median(spent[True]),
        statistics.median(d),
        (hi - lo) / 2,
    )


def supervisor(reps: int = 15) -> tuple[tuple[float, float], tuple[float, float]]:
    """Seconds per step record, without and with the arrival column, of ``decode_wire`` (a
    1000-step batch) and of ``Engine.apply`` (4 ranks, flushes of 10 steps in turn: the
    ranks' steps joined by number)."""
    from trainmeter.core.engine import Engine
    from trainmeter.core.records import decode_wire

    decode, apply = [], []
    for arrivals in (False, True):
        lines = []
        for rank in range(4):
            batch = {"v": 1, "k": "steps", "rank": rank, "t0": T0, "step": list(range(1, 1001)),
                     "dt_us": [100000 * i for i in range(1000)], "tokens": [32] * 1000,
                     "samples": [4] * 1000, "seq_sq": [256] * 1000}  # fmt: skip
            if arrivals:
                batch["arr_us"] = [50000 - 1000 * rank] * 1000
            lines.append(json.dumps(batch))
        t0 = time.perf_counter()
        for _ in range(reps):
            rows = [decode_wire(line) for line in lines]
        decode.append((time.perf_counter() - t0) / (reps * 4000))
        order = [rec for s in range(0, 1000, 10) for r in rows for rec in r[s : s + 10]]
        spent = []
        for _ in range(reps):
            eng = Engine()
            for rank in range(4):
                eng.apply({"v": 1, "k": "agent_hello", "t": T0, "pid": rank, "rank": rank,
                           "world_size": 4, "host": "h"})  # fmt: skip
            t0 = time.perf_counter()
            for rec in order:
                eng.apply(rec)
            spent.append((time.perf_counter() - t0) / 4000)
        apply.append(statistics.median(spent))
    return (decode[0], decode[1]), (apply[0], apply[1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=300)
    args = p.parse_args(argv)
    us = 1e6
    got = training_thread(args.rounds)
    print(f"{args.rounds} rounds x 100 steps, 1 thread, no sender thread")
    base = statistics.median(got["torch's own"]["median"])
    print(f"step with torch's own backward      {base * us:8.2f} us")
    for stat, label in (("median", "block median"), ("p10", "10th percentile")):
        for a, b in (("torch's own", "unstamped"), ("unstamped", "stamped")):
            d = [y - x for x, y in zip(got[a][stat], got[b][stat], strict=True)]
            lo, hi = _interval(d)
            print(f"{label:16s} {b} - {a:12s} {statistics.median(d) * us:6.2f} us "
                  f"(90% interval {lo * us:.2f}..{hi * us:.2f})")  # fmt: skip
    plain, stamped, diff, half = sender_thread()
    print(f"sender thread  read + encode per step      {plain * us:.3f} us, with arrivals "
          f"{stamped * us:.3f} us (paired: {diff * us:+.3f} +- {half * us:.3f})")  # fmt: skip
    (d0, d1), (a0, a1) = supervisor()
    print(f"supervisor     decode_wire per step        {d0 * us:.2f} us, with arrivals "
          f"{d1 * us:.2f} us (+{(d1 - d0) * us:.2f})")  # fmt: skip
    print(f"               Engine.apply per step       {a0 * us:.2f} us, with arrivals "
          f"joined {a1 * us:.2f} us (+{(a1 - a0) * us:.2f}; 4 ranks)")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
