"""The engine: records in, snapshot out. Every figure below is computed by hand in comments."""

import pytest

from trainmeter.core import records
from trainmeter.core.engine import Engine, replay


def _feed(eng, *recs):
    for kind, t, fields in recs:
        eng.apply(records.make(kind, t, **fields))
    return eng


MODEL = {  # hf = 6 x (params - embedding_params) = 6 x 900 = 5400 FLOP/token
    "params": 1000, "embedding_params": 100, "token_embedding_params": 100,
    "layers": 2, "width": 8, "heads": 2, "seq_len": 4, "vocab": 50, "device": "cpu",
}  # fmt: skip


def _run(opts=None):
    eng = Engine()
    return _feed(
        eng,
        (
            "run_start",
            100.0,
            {"id": "r", "name": "n", "argv": [], "version": "0", "opts": opts or {}},
        ),
        ("agent_hello", 100.5, {"pid": 1, "rank": 0, "world_size": 1}),
        ("model", 100.6, MODEL),
        ("step", 101.0, {"step": 1, "rank": 0, "tokens": 40, "samples": 2}),
        ("step", 102.0, {"step": 2, "rank": 0, "tokens": 40, "samples": 2}),
        ("step", 104.0, {"step": 3, "rank": 0, "tokens": 40, "samples": 2}),
    )


def test_throughput_counts_steps_after_the_first_over_their_time():
    snap = _run().snapshot()
    # step 1 has no previous step: untimed. Steps 2, 3: 80 tokens over 1 + 2 = 3 s.
    assert snap["tokens"] == 120
    assert snap["tokens_per_s_avg"] == pytest.approx(80 / 3)
    assert snap["tokens_per_s"] == pytest.approx(80 / 3)
    assert snap["step_time_s"] == pytest.approx(1.5)  # (1 + 2) / 2
    assert snap["step"] == 3 and snap["samples"] == 6


def test_budget_gives_progress_and_eta():
    eng = _run({"budget_tokens": 1000})
    snap = eng.snapshot()
    assert snap["progress"] == pytest.approx(0.12)  # 120 / 1000
    assert snap["eta_s"] == pytest.approx(33.0)  # (1000 - 120) / (80 / 3)
    _feed(eng, ("run_end", 105.0, {"status": "ok", "exit_code": 0}))
    assert eng.snapshot()["eta_s"] is None  # ended short of the budget: no ETA


def test_declared_peak_gives_mfu_under_every_convention_labelled_declared():
    snap = _run({"peak_flops": 1e9}).snapshot()
    assert snap["peak"]["source"] == "declared"
    assert snap["flops_per_token"]["hf"] == 5400
    # MFU[hf] = (80/3 tokens/s x 5400 FLOP/token) / (1 device x 1e9 FLOP/s) = 1.44e-4
    assert snap["mfu"]["hf"] == pytest.approx(1.44e-4)
    assert snap["flops_spent"]["hf"] == 120 * 5400


def test_unknown_device_gives_no_mfu_and_says_why():
    snap = _run().snapshot()
    assert snap["mfu"] is None and snap["peak"] is None
    assert any("no MFU" in n and "--peak" in n for n in snap["notes"])


def test_the_gap_between_notebook_cells_is_not_training_time():
    eng = _run()
    _feed(
        eng,
        ("segment_end", 105.0, {"segment": 1, "status": "ok"}),
        ("segment_start", 200.0, {"segment": 2}),
        ("step", 201.0, {"step": 4, "rank": 0, "tokens": 40}),  # first of its segment: untimed
        ("step", 202.0, {"step": 5, "rank": 0, "tokens": 40}),
    )
    snap = eng.snapshot()
    assert snap["tokens_per_s_avg"] == pytest.approx(120 / 4)  # 80/3 s before, 40/1 s after
    assert snap["elapsed_s"] == pytest.approx(5 + 2)  # 100..105 and 200..202 (newest record)
    assert snap["run"]["state"] == "running"


def test_segment_and_run_end_states():
    eng = _feed(_run(), ("segment_end", 105.0, {"segment": 1, "status": "interrupted"}))
    assert eng.snapshot()["run"]["state"] == "interrupted"
    _feed(eng, ("run_end", 106.0, {"status": "error", "exit_code": 3}))
    snap = eng.snapshot()
    assert snap["run"]["state"] == "failed" and snap["run"]["exit_code"] == 3


def test_series_keep_last_value_and_ema_and_go_to_the_timeline():
    eng = _feed(
        _run(),
        ("series", 104.1, {"name": "train_loss", "value": 4.0, "step": 3}),
        ("series", 104.2, {"name": "train_loss", "value": 2.0}),
    )
    s = eng.snapshot()["series"]["train_loss"]
    assert s["value"] == 2.0 and s["step"] == 3  # no step given: the clock's step
    assert s["ema"] == pytest.approx(0.9 * 4.0 + 0.1 * 2.0)  # EMA seeded with the first value
    assert eng.timeline.full()["series"]["train_loss"] == [[3, 3], [4.0, 2.0]]


def test_world_size_scales_tokens_from_rank_zero():
    eng = Engine()
    _feed(
        eng,
        ("agent_hello", 1.0, {"pid": 1, "rank": 0, "world_size": 4}),
        ("step", 2.0, {"step": 1, "rank": 0, "tokens": 10}),
        ("step", 3.0, {"step": 2, "rank": 0, "tokens": 10}),
        ("step", 3.1, {"step": 2, "rank": 1, "tokens": 10}),  # not the clock: counted per rank
    )
    snap = eng.snapshot()
    assert snap["tokens"] == 80  # 2 steps x 10 tokens x 4 ranks
    assert snap["step"] == 2
    assert snap["ranks"] == {"0": 2, "1": 1}


def test_replay_skips_malformed_lines_and_says_how_many():
    lines = [
        records.encode(records.make("run_start", 1.0, id="r", name="n", argv=[], version="0")),
        b"{broken\n",
        records.encode(records.make("step", 2.0, step=1, rank=0, tokens=5)),
        b"",
    ]
    snap = replay(lines).snapshot()
    assert snap["step"] == 1
    assert "replay skipped 1 malformed line(s)" in snap["notes"]


def test_a_known_gpu_gives_mfu_from_its_dense_bf16_row_and_says_if_verified():
    from trainmeter.core import peaks

    eng = _run()
    gpu = dict(MODEL, device="cuda", device_name="NVIDIA H100 80GB HBM3", run_dtype="bf16", gpus=1)
    _feed(eng, ("model", 104.5, gpu))
    snap = eng.snapshot()
    row = peaks.match_device("NVIDIA H100 80GB HBM3")
    assert snap["peak"]["flops"] == 989.5e12  # H100 SXM dense BF16 (sparse 1979 / 2)
    assert snap["peak"]["source"] == "table" and snap["peak"]["verified"] is row.verified
    # MFU[hf] = (80/3 tokens/s x 5400 FLOP/token) / (1 GPU x 989.5e12 FLOP/s)
    assert snap["mfu"]["hf"] == pytest.approx(80 / 3 * 5400 / 989.5e12)


def test_a_look_alike_gpu_name_gives_no_mfu():
    eng = _run()
    gpu = dict(MODEL, device="cuda", device_name="NVIDIA A10G", run_dtype="bf16", gpus=1)
    _feed(eng, ("model", 104.5, gpu))
    assert eng.snapshot()["mfu"] is None
