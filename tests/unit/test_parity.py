"""The browser's copies of the core's rules, pinned by a golden file (js/tests/golden/parity.json)
that this test writes from the Python and js/tests/parity.test.js reads back against the JS.

Where the dashboard must compute in the browser (thinning a chart it appends to; smoothing a
series it draws), the rule is the core's: ``core/timeline.py`` ``thin_pass`` and
``core/metrics.py`` ``ema`` with ``engine.EMA_BETA``. MFU over time is not computed in the
browser at all: the file holds the engine's ``mfu/<convention>`` series of runs whose MFU inputs
move (sequence lengths, devices, the peak) and the snapshot's MFU at each of their steps, and the
JS test checks that what the chart draws is exactly that. This test fails when the committed file
is not what the Python gives now (run ``python tests/unit/test_parity.py --write`` and commit
it); the JS test fails when ``js/state.js`` ``thin``/``ema`` or ``js/derive.js`` ``mfuOverTime``
disagree with the file.

Nor does the browser work out any other figure from the snapshot's: the file holds the
snapshot of a run with every such key filled (budget fractions, FLOPs required, time and rank
shares, each rank over the fastest, the plan against the achieved, the GPUs' means, parameters
without embeddings), and the JS test checks that ``js/derive.js`` gives exactly those numbers.
"""

import json
import math
import random
import sys
from pathlib import Path

from trainmeter.core import metrics, records
from trainmeter.core.engine import EMA_BETA, Engine
from trainmeter.core.timeline import thin_pass

GOLDEN = Path(__file__).resolve().parents[2] / "js" / "tests" / "golden" / "parity.json"


def _thin(xs: list, ys: list, cap: int) -> tuple[list, list]:
    """Passes of ``thin_pass`` until at most ``cap`` points are left (or a pass keeps all)."""
    while len(xs) > cap:
        keep = thin_pass(ys)
        if len(keep) == len(xs):
            break
        xs, ys = [xs[i] for i in keep], [ys[i] for i in keep]
    return xs, ys


def _ema(ys: list) -> list:
    out, prev = [], None
    for y in ys:
        prev = metrics.ema(prev, y, EMA_BETA)
        out.append(prev)
    return out


def _series(rng: random.Random, n: int, gaps: bool) -> list:
    ys = []
    for i in range(n):
        r = rng.random()
        if gaps and r < 0.05:
            ys.append(None)  # JSON null: NaN and infinity reach the browser as gaps
        elif r < 0.08:
            ys.append(10.0 * rng.random() + 5.0)  # a spike
        elif r < 0.12 and ys and ys[-1] is not None:
            ys.append(ys[-1])  # a tie
        else:
            ys.append(3.0 * math.exp(-i / max(n, 1)) + 0.1 * rng.random())
    return ys


# a small GPT on CUDA: hf = 6 x (params - embedding_params); megatron lacks ffn (no series)
MODEL = {"params": 1_000_000, "embedding_params": 100_000, "token_embedding_params": 100_000,
         "layers": 4, "width": 64, "heads": 4, "seq_len": 128, "vocab": 500, "device": "cuda",
         "device_index": 0, "device_name": "NVIDIA H100 80GB HBM3", "run_dtype": "bf16",
         "gpus": 1}  # fmt: skip


def _mfu_run(rng: random.Random, steps: int, cap: int) -> dict:
    """A run whose MFU inputs move while it trains: sequence lengths that vary (FLOPs per token
    at the recent mean length), a second rank that joins on rank 0's GPU (two ranks, one
    device), a third on another GPU (two devices), and a later cell that declares a peak
    instead of the H100 table's. Returns the engine's MFU series and the snapshot's MFU at
    every step."""
    eng = Engine(timeline_cap=cap)
    t = 1000.0
    start = {"id": "r", "name": "n", "argv": [], "version": "0"}
    eng.apply(records.make("run_start", t, **start))
    eng.apply(records.make("agent_hello", t, pid=1, rank=0, world_size=1, host="h"))
    eng.apply(records.make("model", t, **MODEL))
    at: dict[str, dict[int, float | None]] = {}
    for step in range(1, steps + 1):
        if step == steps // 3:  # rank 1 on rank 0's GPU: still one device
            eng.apply(records.make("agent_hello", t, pid=2, rank=1, world_size=3, host="h"))
            eng.apply(records.make("model", t, **MODEL, rank=1))
        if step == steps // 2:  # rank 2 on GPU 1: two devices
            eng.apply(records.make("agent_hello", t, pid=3, rank=2, world_size=3, host="h"))
            eng.apply(records.make("model", t, **{**MODEL, "device_index": 1}, rank=2))
        if step == 2 * steps // 3:  # a later cell declares its own peak
            eng.apply(records.make("segment_start", t, segment=2, opts={"peak_flops": 4e14}))
        t += 0.2 + 0.05 * rng.random()
        for rank in reversed(range(eng.world)):  # rank 0, the step clock, last: its record
            length = rng.choice((64, 128, 128, 256))  # makes the point, from what came before
            tokens = 16 * length
            eng.apply(records.make("step", t - 0.001 * rank, step=step, rank=rank,
                                   tokens=tokens, seq_sq=tokens * length))  # fmt: skip
        for conv, value in (eng.snapshot()["mfu"] or {}).items():
            at.setdefault(conv, {})[step] = value
    series = {n: xy for n, xy in eng.timeline.full()["series"].items() if n.startswith("mfu/")}
    for name, (xs, ys) in series.items():  # each point is the snapshot's MFU at its step
        assert ys == [at[name[4:]][x] for x in xs], name
    kept = {c: {str(x): at[c][x] for x in series[f"mfu/{c}"][0]}
            for c in at if f"mfu/{c}" in series}  # fmt: skip
    return {"cap": cap, "series": series, "snapshot_mfu": kept, "conventions": sorted(at)}


# the snapshot keys js/derive.js shows as given (js/tests/parity.test.js), and what it reads
# beside them
SHOWN = ("convention", "tokens", "budget_tokens", "budget_flops", "progress", "progress_flops",
         "flops_spent", "flops_required", "model", "params_without_embeddings", "plan",
         "plan_vs_actual", "rank_step_time_s", "rank_over_fastest", "ranks", "time_split",
         "time_share", "rank_time_split", "rank_time_share", "gpu_mean", "gpus")  # fmt: skip


def _shown_run() -> dict:
    """A two-rank run on two fake H100s with both budgets, a declared plan MFU, rank 1 slower
    and each rank's data waits, and the sampler's readings of two GPUs (tensor activity on one):
    the snapshot's keys of ``SHOWN``."""
    eng = Engine()
    opts = {"budget_tokens": 100_000, "budget_flops": 5e11, "plan_mfu": 0.3}
    eng.apply(records.make("run_start", 1000.0, id="r", name="n", argv=[], version="0",
                           opts=opts))  # fmt: skip
    for rank in (0, 1):
        eng.apply(records.make("agent_hello", 1000.0, pid=rank + 1, rank=rank, world_size=2,
                               host="h"))  # fmt: skip
        eng.apply(records.make("model", 1000.0, **{**MODEL, "device_index": rank}, rank=rank))
    device = {"name": MODEL["device_name"], "uuid": "GPU-x", "mem_total_bytes": 80 * 2**30,
              "power_limit_w": 700.0, "gpm": True, "gpm_reason": None, "mig": False,
              "gpu_instance_id": None, "lost": None, "missing": {}}  # fmt: skip
    devices = [{**device, "index": i, "gpu_index": i} for i in (0, 1)]
    eng.apply(records.make("gpu_devices", 1000.0, backend="nvml", devices=devices, reason=None))
    for step in range(1, 13):
        for rank, dt in ((1, 0.27), (0, 0.2)):
            t = 1000.0 + step * dt
            eng.apply(records.make("span", t - 0.05, name="data", rank=rank, dur=0.01 * (rank + 1)))
            eng.apply(records.make("step", t, step=step, rank=rank, tokens=2048))
    gpus = [
        {"index": 0, "gpu_util": 0.93, "tensor_active": 0.41},
        {"index": 1, "gpu_util": 0.88, "missing": {"tensor_active": "not reported"}},
    ]
    eng.apply(records.make("gpu", 1003.3, gpus=gpus, host=None))
    snap = eng.snapshot()
    return {k: snap[k] for k in SHOWN}


def golden() -> dict:
    rng = random.Random(20261202)
    thin = []
    for n, cap, gaps in ((9, 8, False), (100, 8, True), (300, 200, True), (1000, 64, True),
                         (900, 200, False), (7, 8, False)):  # fmt: skip
        xs = list(range(1, n + 1))
        ys = _series(rng, n, gaps)
        tx, ty = _thin(xs, ys, cap)
        thin.append({"cap": cap, "xs": xs, "ys": ys, "out_xs": tx, "out_ys": ty})
    ema = []
    for n in (1, 2, 50, 600):
        ys = _series(rng, n, gaps=False)
        ema.append({"ys": ys, "out": _ema(ys)})
    mfu = [_mfu_run(rng, 60, 2000), _mfu_run(rng, 300, 64)]  # whole, and thinned by the engine
    return {"beta": EMA_BETA, "thin": thin, "ema": ema, "mfu": mfu, "shown": _shown_run()}


def test_the_golden_file_is_what_the_python_gives_now():
    assert GOLDEN.exists(), "write it: python tests/unit/test_parity.py --write"
    assert json.loads(GOLDEN.read_text()) == golden(), (
        "the core's rule changed: python tests/unit/test_parity.py --write, then npm test"
    )


def test_the_cases_exercise_what_can_differ():
    g = golden()
    assert any(None in c["ys"] for c in g["thin"])  # gaps
    assert any(len(c["out_xs"]) < len(c["xs"]) // 2 for c in g["thin"])  # several passes
    assert any(len(c["out_xs"]) == len(c["xs"]) for c in g["thin"])  # under the cap: untouched
    whole, thinned = g["mfu"]
    assert len(whole["series"]["mfu/hf"][0]) == 60 - 2  # every timed step (1 and 40 open cells)
    assert len(thinned["series"]["mfu/hf"][0]) < 300 - 2  # the engine thinned it
    shown = g["shown"]
    assert all(shown[k] is not None for k in SHOWN), [k for k in SHOWN if shown[k] is None]
    assert shown["rank_over_fastest"]["1"] > 0 and shown["rank_over_fastest"]["0"] == 0
    assert all(shown["rank_time_share"][r] for r in ("0", "1"))
    assert shown["gpu_mean"]["ofu"] is not None and shown["gpu_mean"]["gpu_util"] is not None
    assert None not in shown["plan_vs_actual"].values()
    for case in g["mfu"]:
        assert "mfu/megatron" not in case["series"]  # no FLOPs per token: no series
        for name, (_, ys) in case["series"].items():
            assert len(set(ys)) > 10, name  # the inputs moved: not one factor times tokens/s


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    GOLDEN.write_text(json.dumps(golden(), separators=(",", ":")) + "\n")
    print(f"wrote {GOLDEN}")
