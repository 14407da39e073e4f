"""What one Python frame on the forward path costs inside a real forward, side by side.

    python benchmarks/wrapper_floor.py [--rounds 150]

The agent counts tokens from a thin wrapper on the root model's class ``forward``
(docs/architecture.md, "Decisions"). This times, in one process, the benchmark loop's model
forward with the class's own ``forward``, with a pass-through wrapper (no work), the same under
``functools.wraps``, and one that keeps the input as the agent does, in a shuffled order each
round, and prints the median paired difference against the plain forward. A second plain
variant shows the noise floor. docs/performance.md quotes the result.
"""

from __future__ import annotations

import argparse
import functools
import random
import statistics
import time


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=150)
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(64, 16), torch.nn.Linear(16, 16))
    x = torch.randint(0, 64, (4, 8))
    cls = type(model)
    orig = cls.forward
    kept: list = []

    def passthru(module, *a, **k):
        return orig(module, *a, **k)

    @functools.wraps(orig)
    def wraps(module, *a, **k):
        return orig(module, *a, **k)

    def keep(module, *a, **k):
        kept.append(a[0])
        if len(kept) > 64:
            kept.clear()
        return orig(module, *a, **k)

    variants = {"plain": orig, "plain again": orig, "pass-through": passthru,
                "functools.wraps": wraps, "keeps the input": keep}  # fmt: skip
    times: dict[str, list[float]] = {n: [] for n in variants}
    rng = random.Random(0)
    try:
        for _ in range(args.rounds):
            order = list(variants.items())
            rng.shuffle(order)
            for name, forward in order:
                cls.forward = forward
                t0 = time.perf_counter()
                for _ in range(300):
                    model(x)
                times[name].append((time.perf_counter() - t0) / 300)
    finally:
        cls.forward = orig
    base = times["plain"]
    for name, ts in times.items():
        added = statistics.median(b - a for a, b in zip(base, ts, strict=True))
        print(f"{name:16s} {statistics.median(ts) * 1e6:8.2f} us per forward   "
              f"added {added * 1e6:6.2f} us")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
