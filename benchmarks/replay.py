"""Replay of a long run log (from its last checkpoint, and from its first line), ``tm ls`` and
``tm export csv`` of it, beside a bare ``json.loads`` of every line of the same file
(docs/performance.md "Replay").

    python benchmarks/replay.py [--steps 1000000] [--rounds 3] [--compare DIR] [--keep DIR]

The log is what the supervisor writes for a real run: an agent's steps batches (one rank, a
10 ms step, one batch per 0.1 s flush) go through ``records.decode_batch`` and
``Live.ingest``, so the file holds one ``step`` line per step; the sampler's ``gpu`` record
(one GPU, the fields a real reading has) once a second; the loop's ``train_loss`` every 100
steps and a ``val_loss`` every 5,000; a declared peak, so replay charts MFU over time; the
checkpoints ``Live`` writes at its own cadence (the run's clock: 100 steps a second), the
last after ``run_end``. It is written once, by this checkout, and every tree reads the same
file.

Each round times, in process CPU (the machine is shared; its load average is printed):

- ``json.loads``: a bare parse of every line (the file read line by line), the baseline;
- ``read``: ``LogReader.batches()`` alone (the lines read, checked and cut into records and
  step batches; a tree without it: iterating the reader), the part of a full replay before
  the engine;
- ``replay``: ``core.engine.replay`` of the file and its snapshot, what ``tm replay --json``
  and ``tm passport`` do: from the last checkpoint on;
- ``tm ls``: ``commands.ls.ls_row`` of the run (its head and last checkpoint);
- ``full replay``: the same from the first line (``tm replay --full``);
- ``export csv``: ``exports.csv.export`` of the run (``tm export csv``): every series' points,
  the numbers written by orjson where the ``fast`` extra is installed (exports/numtext.py);
- ``export, repr``: the same export without it, every number written by ``repr``.

``--compare DIR`` runs another checkout's ``trainmeter`` (its folder) on the same file in the
same rounds, one subprocess per tree, the order turned each round; figures are medians.
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
STEP_S = 0.01
PARTS = ("json.loads", "read", "replay", "tm ls", "full replay", "export csv", "export, repr")


def write_log(root: Path, steps: int) -> Path:
    """A run of ``steps`` steps written by a real ``Live`` (the supervisor); its folder."""
    sys.path.insert(0, str(Path(__file__).parent))
    from supervisor import MODEL

    from trainmeter.core import records
    from trainmeter.supervisor.live import Live

    now = [T0]
    live = Live(root=root, clock=lambda: now[0])
    live.open_run("bench", ["train.py"], {"peak_flops": 989e12})
    live.ingest([records.make("gpu_devices", T0, backend="nvml", reason=None, devices=[
        {"index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-0", "mem_total_bytes": 85e9,
         "power_limit_w": 700.0, "gpm": True}])])  # fmt: skip
    live.ingest([records.make("agent_hello", T0 + 0.5, pid=1, rank=0, world_size=1, host="h",
                              python="3.11")])  # fmt: skip
    live.ingest([records.validate(MODEL)])
    rng = random.Random(0)
    per_flush = round(0.1 / STEP_S)
    decode = getattr(records, "decode_batch", records.decode_wire)
    t, n, next_gpu, energy = T0 + 10.0, 1, T0 + 10.0, 0.0
    while n <= steps:
        k = min(per_flush, steps - n + 1)
        batch = {"v": 1, "k": "steps", "rank": 0, "t0": round(t, 6),
                 "dt_us": [round(j * STEP_S * 1e6) + rng.randint(0, 300) for j in range(k)],
                 "step": list(range(n, n + k)), "tokens": [8 * 1024] * k, "samples": [8] * k,
                 "seq_sq": [8 * 1024 * 1024] * k}  # fmt: skip
        live.ingest(decode(json.dumps(batch, separators=(",", ":"))))
        for s in range(n, n + k):
            if s % 100 == 0:
                live.ingest([records.make("series", t + (s - n) * STEP_S, name="train_loss",
                                          value=2.0 + rng.random(), step=s, role="train_loss",
                                          source="emit")])  # fmt: skip
            if s % 5000 == 0:
                live.ingest([records.make("series", t + (s - n) * STEP_S, name="val_loss",
                                          value=2.5 + rng.random(), step=s, role="val_loss",
                                          source="emit")])  # fmt: skip
        t += k * STEP_S + 0.0005
        n += k
        while next_gpu < t:
            energy += 650.0 * 1000
            now[0] = next_gpu
            live.ingest([records.make("gpu", next_gpu, host={
                "time_s": next_gpu, "cpu_util": 0.3, "mem_used_bytes": 6.1e10,
                "mem_total_bytes": 2.1e11, "rss_bytes": 9.4e9}, gpus=[{
                "index": 0, "time_s": next_gpu, "gpu_util": 0.98, "sm_active": 0.81 + rng.random()
                / 50, "sm_occupancy": 0.42, "tensor_active": 0.55, "dram_active": 0.33,
                "mem_used_bytes": 7.2e10, "mem_total_bytes": 8.5e10, "power_w": 650.0 +
                rng.random() * 20, "energy_mj": energy, "sm_clock_mhz": 1980.0,
                "mem_clock_mhz": 2619.0, "throttle_mask": 0.0,
                "process_mem_bytes": {"1": 7.0e10}}])])  # fmt: skip
            next_gpu += 1.0
    now[0] = t
    live.close_run("ok", 0)
    return live.log_path.parent


def one_round(folder: Path) -> dict[str, float]:
    """Every part once, in this process (whichever ``trainmeter`` it imports): CPU seconds."""
    from trainmeter.core.engine import replay
    from trainmeter.exports import csv as export_csv
    from trainmeter.exports.run import RunData

    log = folder / "run.jsonl"
    got = {}
    t = time.process_time()
    with open(log, "rb") as f:
        for line in f:
            json.loads(line)
    got["json.loads"] = time.process_time() - t
    from trainmeter.core.logread import LogReader

    reader = LogReader(log)
    t = time.process_time()
    for _ in getattr(reader, "batches", reader.__iter__)():
        pass
    got["read"] = time.process_time() - t
    t = time.process_time()
    replay(log).snapshot()
    got["replay"] = time.process_time() - t
    from trainmeter.commands.ls import ls_row

    t = time.process_time()
    ls_row(folder, now=time.time())
    got["tm ls"] = time.process_time() - t
    t = time.process_time()
    try:
        replay(log, full=True).snapshot()
    except TypeError:  # a tree without checkpoints: its replay is the full one
        replay(log).snapshot()
    got["full replay"] = time.process_time() - t
    for part in ("export csv", "export, repr"):
        if part == "export, repr":  # without the fast extra: every number by repr
            try:
                from trainmeter.exports import numtext
            except ImportError:  # a tree without it: its export is this one
                pass
            else:
                numtext.orjson = None
        with tempfile.TemporaryDirectory() as tmp:
            t = time.process_time()
            export_csv.export(RunData.open(folder), out=str(Path(tmp) / "series.csv"))
            got[part] = time.process_time() - t
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--compare", metavar="DIR", help="another checkout's folder to time beside")
    ap.add_argument("--keep", metavar="DIR", help="write (or reuse) the run under DIR")
    ap.add_argument("--one-round", metavar="FOLDER", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one_round:
        print(json.dumps(one_round(Path(args.one_round))))
        return
    here = str(Path(__file__).resolve().parents[1])
    root = Path(args.keep or tempfile.mkdtemp(prefix="tm-replay-"))
    found = sorted(root.glob("runs/*/run.jsonl"))
    t = time.perf_counter()
    folder = found[-1].parent if found else write_log(root, args.steps)
    made = time.perf_counter() - t
    log = folder / "run.jsonl"
    with open(log, "rb") as f:
        sizes = [len(x) for x in f if x.startswith(b'{"v":1,"k":"checkpoint",')]
    with open(log, "rb") as f:
        lines = sum(1 for _ in f)
    print(f"log: {log} ({log.stat().st_size / 1e6:.0f} MB, {lines:,} lines; "
          f"{'reused' if found else f'written in {made:.0f} s'})")  # fmt: skip
    if sizes:
        print(f"checkpoints: {len(sizes)}, {sum(sizes) / 1e6:.1f} MB in all "
              f"({sum(sizes) / log.stat().st_size:.1%} of the log), the last "
              f"{sizes[-1] / 1e6:.2f} MB")  # fmt: skip
    trees = {"now": here, **({"before": str(Path(args.compare).resolve())} if args.compare
                             else {})}  # fmt: skip
    runs: dict[str, list[dict]] = {k: [] for k in trees}
    load0 = os.getloadavg()[0]
    for r in range(args.rounds):
        for name in list(trees) if r % 2 == 0 else list(reversed(trees)):
            env = {**os.environ, "PYTHONPATH": trees[name]}
            cmd = [sys.executable, __file__, "--one-round", str(folder)]
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
            runs[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
    load1 = os.getloadavg()[0]
    print(f"{args.rounds} rounds, process CPU, medians; load average {load0:.1f} -> {load1:.1f}")
    med = {k: {p: statistics.median(x[p] for x in v) for p in PARTS} for k, v in runs.items()}
    print(f"{'':14}" + "".join(f"{k:>10} {'ratio':>7}" for k in trees))
    for p in PARTS:
        print(f"{p:14}" + "".join(f"{med[k][p]:8.2f} s {med[k][p] / med[k]['json.loads']:7.2f}"
                                  for k in trees))  # fmt: skip
    print("ratio: to the bare json.loads of every line of the same file in the same round")
    if not args.keep:
        print(f"(the run is left in {root}; --keep {root} reuses it)")


if __name__ == "__main__":
    main()
