"""What the supervisor spends per step, part by part, beside a bare ``json.loads`` of the same
lines (docs/performance.md "The supervisor's cost per step").

    python benchmarks/supervisor.py [--steps 100] [--flushes 300] [--rounds 7] [--compare DIR]

The lines are what an agent sends: one rank (a world of one), a ``steps`` batch of
``--steps`` steps per 0.1 s flush (``t0``, ``dt_us``, ``step``, ``tokens``, ``samples``,
``seq_sq``; a 1 ms step with a little jitter), after the agent's hello and its model record, in
a run with a declared peak, so the engine charts tokens/s and MFU over time (the
``mfu/<convention>`` series) at every timed step as the dashboard shows them. Each part is
timed in process CPU over every line, once per round, and given per step:

- ``json.loads``: the bare parse of each line, the baseline every ratio is to;
- ``decode/validate``: ``records.decode_batch`` (``decode_wire`` in a tree without it);
- ``write``: the log lines of the decoded steps into a ``RunLog`` (``append_steps``, or the
  row-by-row ``encode`` and ``append_lines``);
- ``engine, no chart``: ``Engine.apply_steps`` (or ``apply`` of each record) in a run without
  a peak and with a timeline that keeps nothing: the step clock, the rank's clock, its counts
  and its arrival state;
- ``chart``: the same with the peak and the real timeline, less the above: the tokens/s and
  MFU points and the timeline that keeps and thins them;
- ``ranks: 4, per step record``: the engine alone fed four ranks' batches in turn (the join
  by step number, core/ranks.py), per step record;
- ``supervisor, whole``: ``Live.ingest`` of each decoded line (decode, write, fold, under the
  lock), the path an agent's line takes;
- ``checkpoint, amortized``: one checkpoint of the engine that run left (``checkpoint.line``,
  what ``Live.checkpoint`` writes), over the steps the cadence puts between two of its size
  (``CHECKPOINT_GROWTH`` times its bytes of step lines, at least ``CHECKPOINT_MIN_BYTES``):
  what checkpoints add to each step (0 in a tree without them).

``--compare DIR`` times another checkout's ``trainmeter`` (its folder) in the same rounds: each
round runs one subprocess per tree, the order turned every round; the figures are medians of
the rounds. The machine's load average is printed before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

T0 = 1.7e9
MODEL = {"v": 1, "k": "model", "t": T0 + 1, "params": 124_000_000,
         "embedding_params": 40_000_000, "token_embedding_params": 38_000_000, "layers": 12,
         "width": 768, "heads": 12, "kv_heads": 12, "head_dim": 64, "ffn": 3072,
         "gated_mlp": False, "vocab": 50257, "seq_len": 512, "tied_embeddings": True,
         "name": "GPT2LMHeadModel", "device": "cuda", "device_name": "NVIDIA H100 80GB HBM3",
         "gpus": 1, "dtype": "bfloat16", "run_dtype": "bfloat16", "rank": 0}  # fmt: skip
PARTS = ("json.loads", "decode/validate", "write", "engine, no chart", "chart",
         "ranks: 4, per step record", "supervisor, whole", "checkpoint, amortized")  # fmt: skip


def wire_lines(steps: int, flushes: int, rank: int = 0, seed: int = 0) -> list[bytes]:
    """The steps batches one agent sends, one per 0.1 s flush."""
    rng = random.Random(seed + rank)
    out, t, n = [], T0 + 10.0, 1
    for _ in range(flushes):
        dt = [k * 1000 + rng.randint(0, 40) for k in range(steps)]
        tok = [8 * 512] * steps
        batch = {"v": 1, "k": "steps", "rank": rank, "t0": round(t, 6), "dt_us": dt,
                 "step": list(range(n, n + steps)), "tokens": tok, "samples": [8] * steps,
                 "seq_sq": [x * 512 for x in tok]}  # fmt: skip
        out.append((json.dumps(batch, separators=(",", ":")) + "\n").encode())
        t += steps * 0.001 + 0.0003
        n += steps
    return out


def one_round(steps: int, flushes: int) -> dict[str, float]:
    """Every part once, in this process (whichever ``trainmeter`` it imports): us per step."""
    from trainmeter.core import records
    from trainmeter.core.engine import Engine
    from trainmeter.core.timeline import Timeline
    from trainmeter.supervisor.live import Live
    from trainmeter.supervisor.store import RunLog

    batched = hasattr(records, "decode_batch")
    decode = records.decode_batch if batched else records.decode_wire
    lines = wire_lines(steps, flushes)
    total = steps * flushes
    hello = {"v": 1, "k": "agent_hello", "t": T0 + 0.5, "pid": 1, "rank": 0, "world_size": 1,
             "host": "h", "python": "3.11"}  # fmt: skip
    got: dict[str, float] = {}

    def per_step(fn, n=total) -> float:
        t = time.process_time()
        fn()
        return (time.process_time() - t) / n * 1e6

    got["json.loads"] = per_step(lambda: [json.loads(x) for x in lines])
    got["decode/validate"] = per_step(lambda: [decode(x) for x in lines])
    decoded = [decode(x) for x in lines]
    with tempfile.TemporaryDirectory() as tmp:
        log = RunLog(Path(tmp) / "w")
        if batched:
            got["write"] = per_step(lambda: [log.append_steps(b) for b in decoded])
        else:
            got["write"] = per_step(
                lambda: [log.append_lines([records.encode(r) for r in b]) for b in decoded]
            )
        log.close()

    class Nothing(Timeline):  # keeps no point
        def append(self, name, x, y, scale=None):
            return True

        def extend(self, name, xs, ys, scale=None):
            pass

        def extend_rows(self, names, xs, cols):  # a tree before derived series
            pass

    def engine(peak: bool, keep: bool, batches=decoded, ranks: int = 1) -> Engine:
        eng = Engine()
        if not keep:
            eng.timeline = Nothing()
        opts = {"peak_flops": 989e12} if peak else {}
        eng.apply(records.make("run_start", T0, id="x", name="x", argv=[], version="0",
                               opts=opts))  # fmt: skip
        for r in range(ranks):
            eng.apply({**hello, "pid": 1 + r, "rank": r, "world_size": ranks})
        eng.apply(MODEL)
        return eng

    def fold(eng, batches=decoded):
        if batched:
            return lambda: [eng.apply_steps(b) for b in batches]
        return lambda: [eng.apply(r) for b in batches for r in b]

    bare = per_step(fold(engine(False, False)))
    got["engine, no chart"] = bare
    got["chart"] = per_step(fold(engine(True, True))) - bare
    four = [decode(x) for x in _four_ranks(steps, flushes // 4)]
    got["ranks: 4, per step record"] = per_step(fold(engine(True, True, ranks=4), four),
                                                n=steps * (flushes // 4) * 4)  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        live = Live(root=tmp, clock=lambda: T0)
        live.open_run("bench", ["train.py"], {"peak_flops": 989e12})
        live.ingest([records.validate(hello)])
        live.ingest([records.validate(MODEL)])
        got["supervisor, whole"] = per_step(lambda: [live.ingest(decode(x)) for x in lines])
        got["checkpoint, amortized"] = _checkpoint_cost(live, total)
        live.close_run("ok")
    return got


def _checkpoint_cost(live, steps: int) -> float:
    """us per step that checkpoints of ``live``'s engine add at the supervisor's cadence."""
    try:
        from trainmeter.core import checkpoint
        from trainmeter.supervisor import live as live_mod
    except ImportError:
        return 0.0
    if not hasattr(live_mod, "CHECKPOINT_GROWTH"):
        return 0.0
    per_step = live.log.size() / steps  # bytes of log a step adds
    t = time.process_time()
    line = checkpoint.line(live.engine, T0, 0, live.log.n, live.run_id)
    cost = time.process_time() - t
    gap = max(live_mod.CHECKPOINT_MIN_BYTES, live_mod.CHECKPOINT_GROWTH * len(line))
    return cost / (gap / per_step) * 1e6


def _four_ranks(steps: int, flushes: int) -> list[bytes]:
    per = [wire_lines(steps, flushes, rank=r) for r in range(4)]
    return [per[r][k] for k in range(flushes) for r in range(4)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100, help="steps per flush (0.1 s)")
    ap.add_argument("--flushes", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--compare", metavar="DIR", help="another checkout's folder to time beside")
    ap.add_argument("--one-round", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one_round:
        print(json.dumps(one_round(args.steps, args.flushes)))
        return
    here = str(Path(__file__).resolve().parents[1])
    trees = {"now": here, **({"before": str(Path(args.compare).resolve())} if args.compare
                             else {})}  # fmt: skip
    runs: dict[str, list[dict]] = {k: [] for k in trees}
    load0 = os.getloadavg()[0]
    for r in range(args.rounds):
        order = list(trees) if r % 2 == 0 else list(reversed(trees))
        for name in order:
            env = {**os.environ, "PYTHONPATH": trees[name]}
            cmd = [sys.executable, __file__, "--one-round", "--steps", str(args.steps),
                   "--flushes", str(args.flushes)]  # fmt: skip
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
            runs[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
    load1 = os.getloadavg()[0]
    print(f"{args.rounds} rounds x {args.flushes} flushes of {args.steps} steps (one rank), "
          f"process CPU per step, medians; load average {load0:.1f} -> {load1:.1f}")  # fmt: skip
    med = {k: {p: statistics.median(x[p] for x in v) for p in PARTS} for k, v in runs.items()}
    head = "".join(f"{k:>12} {'ratio':>7}" for k in trees)
    print(f"{'':30}{head}")
    for p in PARTS:
        row = "".join(f"{med[k][p]:9.2f} us {med[k][p] / med[k]['json.loads']:7.2f}"
                      for k in trees)  # fmt: skip
        print(f"{p:30}{row}")
    print("ratio: to the bare json.loads of the same lines in the same round")
    if "before" in med:
        n, b = med["now"]["supervisor, whole"], med["before"]["supervisor, whole"]
        print(f"supervisor, whole: {b:.2f} -> {n:.2f} us per step ({b / n:.1f}x less)")


if __name__ == "__main__":
    main()
