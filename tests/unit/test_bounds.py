"""What one subscriber update can carry is bounded whatever training code sends, and the live
engine's memory does not grow with steps (docs/spec.md "Bounds on an update").

An update is what the supervisor's socket pushes (``ingest._Handler._subscribe``):
``{"snapshot": live.snapshot(), "points": live.timeline_since(seq), "full": seq < 0}``, built
here by ``Live.update(seq)`` and measured as the compact JSON ``ingest`` sends.
"""

import json
import math
import sys
from collections import deque

from trainmeter.core import counters, records
from trainmeter.core import engine as E
from trainmeter.core import hardware as H
from trainmeter.core import ranks as R
from trainmeter.core import reasons as Why
from trainmeter.core.flops import CONVENTIONS
from trainmeter.core.timeline import DEFAULT_CAP
from trainmeter.supervisor.live import Live

# -- the bound, derived as in docs/spec.md "Bounds on an update" ----------------------------------
# JSON with ensure_ascii (as ingest sends it): one character is at most 12 bytes (a character
# outside the BMP is two \uXXXX escapes), so a string of n characters is at most 2 + 12 n.


def _str_bytes(n: int) -> int:
    """Bytes of a JSON string of ``n`` characters at most."""
    return 2 + 12 * n


def _ascii_str(n: int) -> int:
    """Bytes of a JSON string of ``n`` printable ASCII characters at most (\" and \\: 2)."""
    return 2 + 2 * n


def _plain_str(n: int) -> int:
    """Bytes of a JSON string of ``n`` characters of printable ASCII without \" and \\ (the
    reasons' own alphabet, ``reasons._ascii``): one byte each."""
    return 2 + n


NUM = 24  # a float's repr is at most 24 bytes ("-2.2250738585072014e-308"); an int < 2**53, 16
NAME = _str_bytes(E.MAX_NAME)  # 2402
# points: 128 series, each a name, `:[[`, `],[`, `]]`, a comma, and cap points of x and y
SERIES = E.MAX_SERIES + E.OWN_SERIES  # 128
POINTS_BOUND = 64 + SERIES * (NAME + 9 + DEFAULT_CAP * 2 * (NUM + 1))
# snapshot, by part
NOTES = (E.MAX_NOTES + 11) * (_str_bytes(E.MAX_NOTE) + 1)  # 20 kept + 8 computed + 3 hardware
SNAP_SERIES = E.MAX_SERIES * (NAME + len(':{"step":,"value":,"ema":},') + 16 + 2 * NUM)
MODEL = E.MAX_MODEL_FIELDS * (_str_bytes(E.MAX_KEY) + 1 + NAME + 1)
# "ranks", and "rank_step_time_s" and "rank_over_fastest" (a number per rank each)
RANKS = E.MAX_RANKS * ((12 + 1 + 16 + 1) + 2 * (12 + 1 + NUM + 1))
RANKS += E.MAX_RANKS * (10 + 1)  # "stragglers": each rule flags at most half; together, all
# the per-rank straggler keys of at most MAX_DETAIL (64) ranks (docs/spec.md "Bounds on an
# update"): three numbers (rank_lag_s, straggler_cost_s, straggler_share), seven buckets of
# rank_time_split and five of rank_time_share (a bucket at most '"checkpoint":' 13 + a number
# + a comma: 38), the rule name and the cause text
DETAIL = 3 * (12 + 1 + NUM + 1) + (12 + 1 + 2 + 7 * 38 + 1) + (12 + 1 + 2 + 5 * 38 + 1) + 28 + 180
RANKS += R.MAX_DETAIL * DETAIL
ERROR = _str_bytes(E.MAX_ERROR) + 10
PEAK = 2 * NAME + 1000  # device and dtype strings from the model record; a table citation
FIXED = 8192  # every other key: ~50 keys, 7 by-convention dicts of 4 numbers, plan, run state
# the figures the dashboard shows as given: gpu_mean (three numbers, and a reason of at most
# hardware.MAX_REASON printable ASCII characters for each), time_share (five buckets),
# plan_vs_actual (three numbers), progress_flops and params_without_embeddings
SHOWN = len('"gpu_mean":{,"missing":{}},') + sum(
    2 * (len(f) + 4) + NUM + 2 + 2 * H.MAX_REASON for f in H.MEAN_FIELDS
)
SHOWN += len('"time_share":{},') + sum(len(b) + 4 + NUM for b in E.SPLIT)
SHOWN += len('"plan_vs_actual":{},') + sum(
    len(k) + 4 + NUM for k in ("tokens_per_s", "mfu", "eta_late_s")
)
SHOWN += len('"progress_flops":,') + NUM + len('"params_without_embeddings":,') + NUM
# samples and HFU [counted] (docs/spec.md "Samples, FLOPs per sample and HFU [counted]"): four
# numbers, the engine's own reasons (constants: no text from training code), hfu_counted (three
# numbers, "sample" and its longest reason) and flops_counted's sample count (an int < 2**53)
SAMPLES = sum(
    len(f'"{k}":,') + NUM
    for k in ("samples_per_s", "samples_per_s_avg", "samples_per_step", "flops_per_sample_counted")
)
SAMPLES += len('"tokens_missing":,') + 2 + len(E.NO_TOKENS)
SAMPLES += len('"conventions_missing":,') + 2 + len(E.CONVENTIONS_NO_TOKENS)
SAMPLES += len('"hfu_counted":{"value":,"avg":,"flops_per_s":,"per":,"why":},') + 3 * NUM
HFU_WHY = [*E.HFU_WHY.values(), Why.attach_reason("9" * 200, True)]  # tm attach: no agent
SAMPLES += len('"sample"') + 2 + max(len(why) for why in HFU_WHY)
SAMPLES += len(',"samples":') + 16
# why each figure is missing (core/reasons.py): at most MAX_KEYS reasons, each of at most
# MAX_REASON characters of printable ASCII without \" and \\ (one byte a character in JSON)
# under a key of at most "model_flops_per_s_per_gpu/embeddings"; the run's own device (a count and
# a model string of at most MAX_NAME characters); a demonstration's backend (the reasons'
# alphabet), GPU count, text (that alphabet but "×") and banner
WHY_KEY = max(len(f"{k}/{c}") for k in Why.PER_CONVENTION for c in CONVENTIONS)
WHY_EACH = 2 + WHY_KEY + 1 + _plain_str(Why.MAX_REASON) + 1  # "key":"reason",
WHY = len('"reasons":{},') + Why.MAX_KEYS * WHY_EACH
WHY += len('"device_text":,') + _str_bytes(E.MAX_NAME + len(f"{E.MAX_RANKS} × "))
DEMO_TEXT = len("demonstration: ") + len(f"{H.MAX_DEVICES} × fake ") + Why.MAX_NAME_IN_REASON
DEMO_BANNER = 120 + Why.MAX_NAME_IN_REASON  # the sentence around the backend's name
WHY += len('"demonstration":{"backend":,"gpus":,"text":,"banner":},') + NUM
WHY += _plain_str(Why.MAX_NAME_IN_REASON) + _str_bytes(DEMO_TEXT) + _plain_str(DEMO_BANNER)
# hardware (the supervisor's sampler, not training code): its strings are printable ASCII
# (core/hardware.py), at most 2 bytes a character in JSON (\" and \\). Per GPU: every key with
# a number, the name, up to 64 throttle names (a 64-bit mask; an unknown bit reads
# "unknown_0x8000000000000000", 26 characters) and the bounded `missing` reasons.


def _ascii_bytes(n: int) -> int:
    return 2 + 2 * n


GPU_FIELDS = (*counters.GPU_KEYS, "train_mem_bytes", "node", "node_index")
REASONS = H.MAX_REASONS * (_ascii_bytes(H.MAX_REASON_KEY) + 1 + _ascii_bytes(H.MAX_REASON) + 1)
GPU = 2 + sum(len(k) + 4 for k in GPU_FIELDS) + len(GPU_FIELDS) * NUM
GPU += _ascii_bytes(H.MAX_DEVICE_NAME) + 64 * (_ascii_bytes(26) + 1) + REASONS
GPU += _ascii_bytes(H.MAX_NODE)  # a merged run's node label (tm merge)
HOST = 2 + len(counters.HOST_KEYS) * (20 + NUM)
HOST += 4 * (_ascii_bytes(20) + _ascii_bytes(H.MAX_REASON))
HARDWARE = H.MAX_DEVICES * (GPU + 1) + HOST + 2048  # units: a fixed table of ~20 short pairs
HARDWARE += _ascii_bytes(H.MAX_BACKEND) + _ascii_bytes(H.MAX_NOTE) + H.MAX_DEVICES * 3 + 64
SNAPSHOT_BOUND = 1024 * 1024
UPDATE_BOUND = SNAPSHOT_BOUND + POINTS_BOUND + 64  # + `{"snapshot":,"points":,"full":false}`


def _launch_bytes(snap: dict) -> int:
    """JSON bytes of what the person launched with (not training code): argv, names, paths,
    options. The bound is stated on top of these."""
    run = snap["run"]
    launch = [run.get(k) for k in ("id", "name", "argv", "version", "cwd", "host", "log")]
    return len(json.dumps(launch)) + len(json.dumps(snap.get("convention")))


def _bytes(obj) -> int:
    return len(json.dumps(obj, separators=(",", ":")).encode())


def test_the_stated_bound_is_the_sum_of_its_parts():
    # the figures docs/spec.md states
    assert POINTS_BOUND == 13_108_672
    assert HARDWARE == 303_626  # 16 x (18,645 + 1) + host 1,998 + the rest
    parts = NOTES + SNAP_SERIES + MODEL + RANKS + ERROR + PEAK + FIXED + SHOWN + HARDWARE
    parts += SAMPLES + WHY
    assert DETAIL == 810
    assert RANKS == 119_808 + 64 * 810 and SHOWN == 1_836 and SAMPLES == 777
    assert WHY_EACH == 342 and WHY == 17_595  # a reason: 342 bytes at most (642 with \" and \\)
    # the demonstration's texts at their longest (a backend and a GPU name of any length)
    demo = Why.demonstration("fake:" + "\U0001f600" * 999, H.MAX_DEVICES, "\U0001f600" * 999)
    assert len(demo["text"]) <= DEMO_TEXT and len(demo["banner"]) <= DEMO_BANNER
    assert len(json.dumps(demo["backend"])) <= _plain_str(Why.MAX_NAME_IN_REASON)
    assert len(json.dumps(demo["banner"])) <= _plain_str(DEMO_BANNER)
    assert parts == 1_031_487 and parts <= SNAPSHOT_BOUND
    # room for what comes next (a reason key is 342 bytes): 16 KiB at least
    assert SNAPSHOT_BOUND - parts >= 16 * 1024
    assert UPDATE_BOUND == 14_157_312


def test_a_reason_costs_its_length_and_two_quotes_whatever_names_it_quotes():
    """Ended and open runs, attached or not, with and without a model, whose names (a device,
    a listed GPU, a pid, a shape error) are made of the characters JSON escapes and of ones
    outside ASCII: each reason is printable
    ASCII without \" and \\ (one byte a character), at most MAX_REASON long, and all of them
    together within their part of the bound."""
    odd = '"\\\U0001f600' * 200
    big = {"run": {"state": "ended"}, "flops_per_token": {c: None for c in CONVENTIONS}}
    facts = [Why.RunFacts(open=o, moving=False, device=odd, shape_error=odd, listed_gpu=odd,
                          attached=a) for o in (True, False) for a in (None, odd)]  # fmt: skip
    snaps = [big, {**big, "model": {"device": odd}, "gpus": 0}]
    worst = {}
    for snap in snaps:
        for f in facts:
            for key, why in Why.reasons(snap, f).items():
                assert _bytes(why) == len(why) + 2 and len(why) <= Why.MAX_REASON, why
                assert '"' not in why and "\\" not in why
                worst[key] = max(worst.get(key, ""), why, key=len)
    assert len(worst) <= Why.MAX_KEYS
    assert all(_bytes(k) - 2 <= WHY_KEY for k in worst)
    assert _bytes({"reasons": worst}) <= Why.MAX_KEYS * WHY_EACH + len('{"reasons":{}}')
    # the quoted names keep their place, in the reasons' alphabet
    assert "'/?'/?" in Why.reasons(big, facts[1])["peak"]


class _NullLog:
    """Stands in for the run log so a million steps do not write 100 MB to disk."""

    lost_lines, holding, pending_lines = 0, False, 0  # store.RunLog's: the disk took it all
    written = 0  # bytes written: never a checkpoint due

    def __init__(self, path):
        self.path = path

    def append_lines(self, lines):
        pass

    def append(self, rec):
        pass

    def append_many(self, recs):
        pass

    def close(self):
        pass

    def size(self):  # no checkpoint either (RunLog.size: None when it cannot say)
        return None


def _open_live(tmp_path, now):
    live = Live(root=tmp_path, clock=lambda: now[0])
    live.open_run("bounds", ["train.py"], {"budget_tokens": 10**12, "peak_flops": 1e12})
    real = live.log
    real.close()
    live.log = _NullLog(real.path)
    return live


def _deep_size(root) -> int:
    """Bytes of every object reachable from ``root`` through containers and instance dicts."""
    seen, stack, total = set(), [root], 0
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, type):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        if isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple, set, deque)):
            stack.extend(obj)
        elif hasattr(obj, "__dict__"):
            stack.append(vars(obj))
    return total


# the series a million steps chart: the engine's tokens/s and MFU (the model has no ffn, so no
# megatron FLOPs per token and no mfu/megatron), the loss and the validation loss
CHARTED = {"tokens_per_s", "mfu/hf", "mfu/titan", "mfu/embeddings", "loss", "val_loss"}


def test_a_million_steps_keep_every_update_and_the_engine_bounded(tmp_path):
    now = [1000.0]
    live = _open_live(tmp_path, now)
    model = {"params": 1000, "embedding_params": 100, "token_embedding_params": 100,
             "layers": 2, "width": 8, "heads": 2, "seq_len": 4, "device": "cpu"}  # fmt: skip
    live.ingest([
        records.make("agent_hello", now[0], pid=1, rank=0, world_size=1),
        records.make("model", now[0], **model),
    ])  # fmt: skip
    eng, tl = live.engine, live.engine.timeline
    base = _deep_size(eng)
    follower = latecomer = -1  # timeline seq each subscriber has; -1: nothing yet (full)
    worst, worst_points, sizes = 0, 0, []
    steps, batch, per_batch = 1_000_000, [], 2_500
    for i in range(1, steps + 1):
        t = 1000.0 + 0.1 * i
        batch.append({"v": 1, "k": "step", "t": t, "step": i, "rank": 0, "tokens": 4096,
                      "samples": 4})  # fmt: skip
        batch.append({"v": 1, "k": "series", "t": t, "name": "loss", "value": 4 / math.sqrt(i),
                      "step": i})  # fmt: skip
        if i % 1000 == 0:
            batch.append({"v": 1, "k": "series", "t": t, "name": "val_loss", "value": 3.0,
                          "step": i})  # fmt: skip
        if len(batch) < per_batch and i < steps:
            continue
        now[0] = t
        live.ingest(batch)
        batch = []
        # (a) points per series never above the cap; (c) points in all bounded
        kept = tl.sizes()
        assert max(kept.values()) <= DEFAULT_CAP
        assert sum(kept.values()) <= len(kept) * DEFAULT_CAP <= len(CHARTED) * DEFAULT_CAP
        # a subscriber that keeps up takes an update every 2,500 records
        up = live.update(follower)
        follower = up["points"]["seq"]
        size = _bytes(up)
        worst = max(worst, size)
        assert size <= UPDATE_BOUND + _launch_bytes(up["snapshot"])
        # one that falls far behind: an update every 400,000 steps
        if i % 400_000 < 1250 or i == steps:
            up = live.update(latecomer)
            latecomer = up["points"]["seq"]
            size = _bytes(up)
            worst_points = max(worst_points, _bytes(up["points"]))
            assert size <= UPDATE_BOUND + _launch_bytes(up["snapshot"])
        if i % 100_000 < 1250:
            sizes.append((len(tl), _deep_size(eng)))
    assert live.engine.snapshot()["step"] == steps
    assert tl.sizes().keys() == CHARTED
    assert tl.sizes()["val_loss"] == 1000  # 1000 points, under the cap: all kept
    # an update that keeps up carries only the points since the last one: 2,500 records (1,250
    # steps) give at most 1,250 points of each series (tokens_per_s, its three MFU, the loss)
    # of at most 2 x 25 bytes, beside a snapshot of a few KiB
    assert worst <= 1_250 * 5 * 2 * (NUM + 1) + 16 * 1024
    # a late subscriber's catch-up carries at most the kept points, not a million
    assert worst_points <= len(CHARTED) * (DEFAULT_CAP * 2 * (NUM + 1) + NAME)
    # (c) the engine's memory is its base plus what the kept points cost, whatever the step:
    # a point is an x int, a y float and a seq int (<= 32 + 24 + 32 bytes) and three list
    # slots (8 bytes each, doubled for list over-allocation)
    for points, size in sizes:
        assert size <= base + points * (88 + 48) + 64 * 1024
    # memory at the last sample is no larger than at step 200,000 beyond the val_loss points
    # still arriving (800 more, the only series under its cap)
    assert sizes[-1][1] <= sizes[2][1] + 800 * (88 + 48) + 64 * 1024


def _worst_hardware() -> list[dict]:
    """Sampler records past every hardware bound: more GPUs than kept, long names and a long
    reason (non-ASCII too) for every field, a full 64-bit throttle mask and an over-wide one."""
    wide = "\U0001f600"
    why = {k: wide * 5_000 for k in (*counters.GPU_KEYS, "train_mem_bytes", "x" * 100)}
    devices = [{"index": i, "name": wide * 1000, "mig": False, "missing": why,
                "node": wide * 1000, "node_index": 2**70} for i in range(20)]  # fmt: skip
    samples = [{"index": i, "throttle_mask": 2**64 - 1, "missing": why} for i in range(20)]
    samples[0]["throttle_mask"] = 2**200  # wider than NVML's mask: not read as 200 names
    samples[1]["mem_used_bytes"] = wide * 100_000  # not a number: named in a reason, cut
    host = {"missing": {k: wide * 5_000 for k in counters.HOST_KEYS}}
    # plain dicts, not records.make: validate() now refuses a string mem_used_bytes,
    # and the engine's own bounds are what this test measures
    return [
        {"v": 1, "k": "gpu_devices", "t": 1.0, "backend": wide * 1000, "devices": devices,
         "reason": wide * 100_000},
        {"v": 1, "k": "gpu", "t": 1.0, "gpus": samples, "host": host},
    ]  # fmt: skip


def test_what_training_code_can_send_at_worst_stays_under_the_snapshot_bound(tmp_path):
    """Every field training code controls, filled past its bound with the most expensive
    characters to escape (outside the BMP: 12 bytes each in ASCII JSON)."""
    now = [1.0]
    live = _open_live(tmp_path, now)
    wide = "\U0001f600"
    recs = [records.make("agent_hello", 1.0, pid=1, rank=0, world_size=8)]
    recs.append(records.make("step", 0.5, step=2**60, rank=0, tokens=2**70))  # counts ignored
    model = {str(i) + wide * 100: wide * 10_000 for i in range(100)}
    model.update(params=1000, embedding_params=100, token_embedding_params=100,
                 device="cuda", device_name=wide * 1000, run_dtype=wide * 1000, gpus=1)  # fmt: skip
    recs.append(records.make("model", 1.0, **model))
    tiny = -2.2250738585072014e-308  # the longest float repr: 24 bytes
    for i in range(200):  # the first a train loss: then all 64 places take names
        name = str(i) + wide * 1000  # distinct in the first 200 characters
        role = {"role": "train_loss"} if i == 0 else {}
        recs.append(records.make("series", 1.0, name=name, value=tiny, step=2**53 - 1, **role))
    for i in range(100):  # distinct: the engine keeps a repeated note once
        recs.append(records.make("note", 1.0, text=str(i) + wide * 99_990, source=wide * 1000))
    for rank in range(2000):
        recs.append(records.make("step", 1.0, step=2**53 - 1, rank=2**31 - 1 - rank, tokens=5))
        recs.append(records.make("step", 2.0, step=2**53 - 1, rank=2**31 - 1 - rank, tokens=5))
    recs += _worst_hardware()
    live.ingest(recs)
    live.segment_start("cell", {}, new=False)
    live.segment_end("error", wide * 100_000)
    snap = live.snapshot()
    size = _bytes(snap)
    assert size <= SNAPSHOT_BOUND + _launch_bytes(snap)
    assert size >= 0.5 * SNAPSHOT_BOUND  # and the bound is not loose by more than 2x
    assert len(snap["series"]) == E.MAX_SERIES and len(snap["ranks"]) == E.MAX_RANKS
    assert len(snap["hardware"]["gpus"]) == H.MAX_DEVICES
    # the clock moved by one; tokens: rank 0's ignored, the 1023 other kept ranks' own, 2 x 5
    assert snap["step"] == 1 and snap["tokens"] == 1023 * 2 * 5
    # its reasons: each one byte a character, all of them within their part of the bound
    assert all(
        _bytes(v) == len(v) + 2 <= _plain_str(Why.MAX_REASON) for v in snap["reasons"].values()
    )
    assert _bytes({"reasons": snap["reasons"]}) <= Why.MAX_KEYS * WHY_EACH + len('{"reasons":{}}')
    # and a first (full) update, with every kept series, stays under the update bound
    assert _bytes(live.update(-1)) <= UPDATE_BOUND + _launch_bytes(snap)
