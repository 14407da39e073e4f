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


def _mfu_points(eng, conv):
    xs, ys = eng.timeline.full()["series"].get(f"mfu/{conv}", [[], []])
    return dict(zip(xs, ys, strict=True))


def test_mfu_over_time_is_the_snapshots_mfu_as_it_stood_at_each_timed_step():
    # hf = 5400 FLOP/token at any length; titan = 5400 + 192 T (the attention term)
    eng = Engine()
    start = {"id": "r", "name": "n", "argv": [], "version": "0", "opts": {"peak_flops": 1e9}}
    _feed(eng, ("run_start", 100.0, start), ("agent_hello", 100.5, {"pid": 1, "rank": 0,
          "world_size": 1}), ("model", 100.6, MODEL))  # fmt: skip
    steps = [  # (t, step, seq_sq) of 40 tokens each: lengths 4, 8, 4, (new peak) 4, 4
        (101.0, 1, 160), (102.0, 2, 320), (104.0, 3, 160), (106.0, 4, 160), (107.0, 5, 160),
    ]  # fmt: skip
    for t, step, sq in steps:
        if step == 3:  # rank 1 joins: 2 devices, and the job's rate counts it as rank 0's
            _feed(eng, ("agent_hello", 103.0, {"pid": 2, "rank": 1, "world_size": 2}),
                  ("model", 103.1, dict(MODEL, rank=1)))  # fmt: skip
        if step == 4:  # a later cell declares another peak: MFU divides by it from here on
            _feed(eng, ("segment_start", 105.0, {"segment": 2, "opts": {"peak_flops": 2e9}}))
        _feed(eng, ("step", t, {"step": step, "rank": 0, "tokens": 40, "seq_sq": sq}))
        mfu = eng.snapshot()["mfu"]
        for conv in ("hf", "titan", "embeddings"):  # the point is the snapshot's figure
            assert _mfu_points(eng, conv).get(step) == (mfu[conv] if step in (2, 3, 5) else None)
    hf, titan = _mfu_points(eng, "hf"), _mfu_points(eng, "titan")
    assert sorted(hf) == [2, 3, 5]  # timed steps only (1 and 4 open a segment)
    # step 2: 40 tokens/s; T = 8: titan 5400 + 1536 = 6936; 1 device of 1e9 FLOP/s
    assert hf[2] == pytest.approx(40 * 5400 / 1e9) and titan[2] == pytest.approx(40 * 6936 / 1e9)
    # step 3: rank 0's 80 tokens over 3 s, twice for 2 ranks on 2 devices; recent T =
    # (320 + 160) / 80 = 6: titan 6552
    assert eng.snapshot()["gpus"] == 2
    assert titan[3] == pytest.approx(2 * 80 / 3 * 6552 / (2 * 1e9))
    # step 5: 120 tokens over 4 s at the new peak of 2e9 (the earlier points keep theirs)
    assert hf[5] == pytest.approx(30 * 5400 / 2e9)
    assert "mfu/megatron" not in eng.timeline.names()  # no ffn: no FLOPs per token, no series


def test_a_series_of_the_training_codes_named_like_an_mfu_series_is_said_not_mixed_in():
    eng = Engine()
    start = {"id": "r", "name": "n", "argv": [], "version": "0", "opts": {"peak_flops": 1e9}}
    _feed(eng, ("run_start", 100.0, start), ("agent_hello", 100.5, {"pid": 1, "rank": 0,
          "world_size": 1}), ("model", 100.6, MODEL),
          ("series", 100.7, {"name": "mfu/hf", "value": 0.5, "step": 0}),
          ("series", 100.8, {"name": "tokens_per_s", "value": 7.0, "step": 0}))  # fmt: skip
    for k in range(1, 4):
        _feed(eng, ("step", 100.0 + k, {"step": k, "rank": 0, "tokens": 40, "seq_sq": 160}))
    _feed(eng, ("series", 104.5, {"name": "gpu0/sm_active", "value": 0.9, "step": 3}))
    # trainmeter's own points only, whichever came first: steps 2 and 3 are timed (40 tokens/s)
    got = eng.timeline.full()["series"]
    assert got["mfu/hf"] == [[2, 3], [40 * 5400 / 1e9] * 2]
    assert got["tokens_per_s"] == [[2, 3], [40.0, 40.0]] and "gpu0/sm_active" not in got
    assert eng.timeline.clashed == 3  # the training code's three points, none charted
    assert (
        "chart: 3 point(s) of the training code's series named as trainmeter's own "
        "(tokens_per_s, mfu/<c>, gpu<i>/...) not charted; the series table and the run log "
        "have them" in eng.snapshot()["notes"]
    )
    assert eng.snapshot()["series"]["mfu/hf"]["value"] == 0.5  # still in the series table


def test_a_known_gpu_before_the_runs_dtype_says_the_dtype_is_missing_not_the_peak():
    eng = _feed(Engine(), ("run_start", 100.0, {"id": "r", "name": "n", "argv": [],
                "version": "0", "opts": {"device": "H100 SXM"}}))  # fmt: skip
    note = next(n for n in eng.snapshot()["notes"] if n.startswith("no MFU"))
    assert "dtype is not known yet" in note and "H100 SXM" in note
    _feed(eng, ("model", 101.0, dict(MODEL, run_dtype="bf16")))  # the dtype: the table's peak
    snap = eng.snapshot()
    assert snap["peak"]["dtype"] == "bf16" and not [n for n in snap["notes"] if "no MFU" in n]
    cpu = _run().snapshot()["notes"]  # a device the table has no row for: no peak, as before
    assert "no MFU: no dense peak is known for cpu; declare one with --peak" in cpu


def test_no_peak_no_mfu_series():
    assert not [n for n in _run().timeline.names() if n.startswith("mfu/")]


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


def test_tokens_are_the_ranks_own_counts_and_unheard_ranks_the_mean_heard_one():
    """docs/spec.md "Counts from every rank": rank 0 is the step clock, tokens are the sum of
    every rank's own; ranks of the world not heard yet are estimated as the mean heard rank."""
    eng = Engine()
    _feed(
        eng,
        ("agent_hello", 1.0, {"pid": 1, "rank": 0, "world_size": 4}),
        ("step", 2.0, {"step": 1, "rank": 0, "tokens": 10}),
        ("step", 3.0, {"step": 2, "rank": 0, "tokens": 10}),
        ("step", 3.1, {"step": 2, "rank": 1, "tokens": 10}),  # not the clock: its own count
    )
    snap = eng.snapshot()
    assert snap["tokens"] == 60  # heard: 20 + 10 = 30 tokens from 2 ranks, x 4 / 2 = 60
    assert snap["rank_counts"]["estimated_ranks"] == 2 and snap["rank_counts"]["rule"] == (
        "sum+estimate")  # fmt: skip
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
    assert "replay skipped 1 line(s) (1 not JSON)" in snap["notes"]
    assert snap["log"] == {"skipped": 1, "by": {"not JSON": 1}, "cut": False,
                           "text": "replay skipped 1 line(s) (1 not JSON)"}  # fmt: skip
    assert snap["run"]["state"] == "ended"  # no run_end: ended without a close


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


# -- dashboard keys (docs/spec.md "Snapshot keys for the dashboard") ------------------
# MODEL under titan: 6 x (1000 - 100) + 12 x L 2 x H 2 x Q 4 x T 4 = 5400 + 768 = 6168 FLOP/token.
# _run(): 120 tokens, recent rate 80 / 3 tokens/s, elapsed 104 - 100 = 4 s.


def test_dashboard_keys_are_always_present_and_null_until_measured():
    snap = _run().snapshot()
    for key in ("flops_per_token_counted", "stragglers", "time_split", "energy_j", "hardware"):
        assert key in snap and snap[key] is None
    # CPU run, no peak: 0 devices, so no GPU-hours, no per-GPU rate and no plan
    assert snap["gpus"] == 0
    assert snap["gpu_hours"] is None and snap["gpu_hours_to_finish"] is None
    assert snap["model_flops_per_s_per_gpu"] is None and snap["plan"] is None
    assert snap["budget_flops"] is None and snap["flops_required"] is None
    assert snap["model_flops_per_s"]["titan"] == pytest.approx(80 / 3 * 6168)  # 164,480 FLOP/s


def test_declared_peak_on_cpu_counts_one_device_for_hours_rates_and_plan():
    snap = _run({"peak_flops": 1e9, "budget_tokens": 1000}).snapshot()
    assert snap["gpus"] == 1
    assert snap["gpu_hours"] == pytest.approx(4 / 3600)  # 1 x 4 s
    assert snap["gpu_hours_to_finish"] == pytest.approx(33 / 3600)  # 1 x ETA 33 s
    assert snap["flops_required"]["titan"] == pytest.approx(6_168_000)  # 6168 x 1000
    assert snap["flops_required"]["hf"] == pytest.approx(5_400_000)  # 5400 x 1000
    assert snap["flops_required"]["megatron"] is None  # no ffn/vocab: no megatron count
    assert snap["model_flops_per_s"]["titan"] == pytest.approx(164_480)  # 80/3 x 6168
    assert snap["model_flops_per_s_per_gpu"]["titan"] == pytest.approx(164_480)  # / 1 device
    # plan at MFU 0.40: 0.4 x 1e9 x 1 / 6168 = 64,850.84 tokens/s;
    # ETA (1000 - 120) x 6168 / 4e8 = 5,427,840 / 4e8 = 0.0135696 s
    plan = snap["plan"]
    assert plan["mfu"] == 0.4 and plan["source"] == "default"
    assert plan["tokens_per_s"] == pytest.approx(4e8 / 6168)
    assert plan["eta_s"] == pytest.approx(0.0135696)


def test_gpus_are_per_process_devices_times_world_size():
    eng = _run()
    gpu = dict(MODEL, device="cuda", device_name="NVIDIA H100 80GB HBM3", run_dtype="bf16", gpus=1)
    _feed(
        eng,
        ("agent_hello", 104.1, {"pid": 2, "rank": 1, "world_size": 4}),
        ("model", 104.5, gpu),
    )
    snap = eng.snapshot()
    assert snap["gpus"] == 4  # 1 device per process x world size 4
    assert snap["gpu_hours"] == pytest.approx(4 * 4.5 / 3600)  # newest record 104.5: 4.5 s
    # only rank 0 of the world of 4 has stepped (80/3 tokens/s of its own): the other 3 are
    # estimated as it, so 4 x 80/3 tokens/s on 4 devices, 80/3 x 6168 FLOP/s per device
    assert snap["model_flops_per_s_per_gpu"]["titan"] == pytest.approx(80 / 3 * 6168)
    # plan: 0.4 x 989.5e12 x 4 / 6168 = 256,679,636.8 tokens/s
    assert snap["plan"]["tokens_per_s"] == pytest.approx(0.4 * 989.5e12 * 4 / 6168)
    assert snap["plan"]["eta_s"] is None  # no budget


def test_a_flops_budget_alone_gives_the_token_budget_under_the_run_convention():
    # 6,168,000 FLOP / 6168 FLOP/token (titan) = 1000 tokens: same progress and ETA as above
    snap = _run({"budget_flops": 6.168e6}).snapshot()
    assert snap["budget_flops"] == 6.168e6
    assert snap["budget_tokens"] == pytest.approx(1000)
    assert snap["progress"] == pytest.approx(0.12)  # 120 / 1000
    assert snap["eta_s"] == pytest.approx(33.0)  # 880 / (80/3)
    assert snap["flops_required"]["titan"] == pytest.approx(6.168e6)
    # under hf (5400 FLOP/token) the same FLOPs are 6,168,000 / 5400 = 1142.2 tokens
    hf = _run({"budget_flops": 6.168e6, "convention": "hf"}).snapshot()
    assert hf["budget_tokens"] == pytest.approx(1142.2222)


def test_a_flops_budget_waits_for_the_model_and_a_token_budget_wins():
    eng = _feed(
        Engine(),
        ("run_start", 1.0, {"id": "r", "name": "n", "argv": [], "version": "0",
                            "opts": {"budget_flops": 1e12}}),
    )  # fmt: skip
    snap = eng.snapshot()
    assert snap["budget_tokens"] is None and snap["progress"] is None
    assert any("budget: FLOPs declared" in n for n in snap["notes"])
    both = _run({"budget_flops": 6.168e6, "budget_tokens": 500}).snapshot()
    assert both["budget_tokens"] == 500 and both["progress"] == pytest.approx(0.24)
    assert both["flops_required"]["titan"] == pytest.approx(6168 * 500)
    assert any("both declared" in n for n in both["notes"])


def test_a_declared_plan_mfu_is_used_and_labelled():
    snap = _run({"peak_flops": 1e9, "plan_mfu": 0.5}).snapshot()
    # 0.5 x 1e9 / 6168 = 81,063.55 tokens/s
    assert snap["plan"]["source"] == "declared"
    assert snap["plan"]["tokens_per_s"] == pytest.approx(5e8 / 6168)
    bad = _run({"peak_flops": 1e9, "plan_mfu": 45}).snapshot()  # a percent, not a fraction
    assert bad["plan"]["mfu"] == 0.4 and bad["plan"]["source"] == "default"
    assert any("plan: MFU 45" in n for n in bad["notes"])


def test_rank_step_time_is_the_mean_of_each_ranks_last_twenty_timed_intervals():
    eng = _run()  # rank 0: intervals 1 s and 2 s
    t = 104.0
    for i in range(25):  # rank 1: 25 steps 0.5 s apart, then 20 steps 0.25 s apart
        t += 0.5
        _feed(eng, ("step", t, {"step": i + 1, "rank": 1, "tokens": 40}))
    snap = eng.snapshot()
    assert snap["rank_step_time_s"] == {"0": pytest.approx(1.5), "1": pytest.approx(0.5)}
    for i in range(10):
        t += 0.25
        _feed(eng, ("step", t, {"step": 26 + i, "rank": 1, "tokens": 40}))
    # last 20 intervals of rank 1: ten of 0.5 s and ten of 0.25 s -> (5 + 2.5) / 20 = 0.375 s
    assert eng.snapshot()["rank_step_time_s"]["1"] == pytest.approx(0.375)
    assert eng.snapshot()["ranks"] == {"0": 3, "1": 35}


def test_rank_step_time_skips_the_first_step_of_each_segment():
    eng = _run()
    _feed(
        eng,
        ("step", 104.5, {"step": 1, "rank": 1}),  # first step of rank 1: untimed
        ("step", 105.0, {"step": 2, "rank": 1}),  # 0.5 s
        ("segment_end", 106.0, {"segment": 1, "status": "ok"}),
        ("segment_start", 500.0, {"segment": 2}),
        ("step", 501.0, {"step": 3, "rank": 1}),  # first of the segment: the gap is untimed
        ("step", 502.5, {"step": 4, "rank": 1}),  # 1.5 s
    )
    # rank 1: (0.5 + 1.5) / 2 = 1.0 s; without the segment rule it would be (0.5+396+1.5)/3
    assert eng.snapshot()["rank_step_time_s"]["1"] == pytest.approx(1.0)
    assert eng.snapshot()["rank_step_time_s"]["0"] == pytest.approx(1.5)  # = step_time_s
    assert eng.snapshot()["step_time_s"] == pytest.approx(1.5)


def test_a_rank_with_one_step_has_no_step_time_yet():
    eng = _feed(_run(), ("step", 104.2, {"step": 1, "rank": 3}))
    assert eng.snapshot()["rank_step_time_s"]["3"] is None


# -- bounds on what training code can make the engine keep (docs/spec.md "Bounds on an update")


def test_series_past_the_name_cap_are_counted_in_one_note_not_kept():
    from trainmeter.core.engine import MAX_SERIES

    eng = _run()
    for i in range(MAX_SERIES + 10):
        _feed(eng, ("series", 105.0, {"name": f"s{i}", "value": 1.0, "step": 3}))
    _feed(eng, ("series", 105.0, {"name": "s70", "value": 1.0, "step": 4}))  # again: one name
    snap = eng.snapshot()
    # the last of the 64 places waits for a train loss: 63 of these names are kept
    assert len(snap["series"]) == MAX_SERIES - 1 and "s62" in snap["series"]
    assert "s63" not in snap["series"]
    notes = [n for n in snap["notes"] if n.startswith("series:")]
    assert notes == [f"series: 11 name(s) not kept, past the table's {MAX_SERIES} places (the "
                     "last waits for a train loss until one comes; the first not kept: 's63'); "
                     "the run log has them"]  # fmt: skip
    assert len(eng.timeline.names()) == MAX_SERIES  # plus tokens_per_s
    # then the loss (emit(**70 grad norms, train_loss=...)): kept, charted, the run's loss
    _feed(eng, ("series", 106.0, {"name": "train_loss", "value": 2.5, "step": 4}))
    snap = eng.snapshot()
    assert snap["series"]["train_loss"]["value"] == 2.5 and len(snap["series"]) == MAX_SERIES
    assert "train_loss" in eng.timeline.names()
    assert not [n for n in snap["notes"] if n.startswith("loss: none")]
    _feed(eng, ("series", 106.0, {"name": "val_loss", "value": 2.5, "step": 4}))  # full now
    assert "val_loss" not in eng.snapshot()["series"]


@pytest.mark.parametrize("loss", ["loss", "backward_loss"])
def test_a_train_loss_first_keeps_all_64_places_for_the_rest(loss):
    from trainmeter.core.engine import MAX_SERIES

    eng = _feed(_run(), ("series", 104.5, {"name": loss, "value": 3.0, "step": 3}))
    for i in range(MAX_SERIES + 10):
        _feed(eng, ("series", 105.0, {"name": f"s{i}", "value": 1.0, "step": 3}))
    series = eng.snapshot()["series"]
    assert len(series) == MAX_SERIES and loss in series and "s62" in series
    assert "s63" not in series


def test_a_run_whose_process_never_stepped_says_why_there_are_no_steps():
    """torch.autograd.grad and a manual update (no backward(), no optimizer): 0 steps, and a
    note that says what clocks a step; none while the run is open, after a failure, or
    without an agent."""
    start = ("run_start", 100.0, {"id": "r", "name": "n", "argv": [], "version": "0"})
    hello = ("agent_hello", 100.5, {"pid": 1, "rank": 0, "world_size": 1})
    end = ("run_end", 110.0, {"status": "ok", "exit_code": 0})

    def said(*recs):
        notes = _feed(Engine(), *recs).snapshot()["notes"]
        return [n for n in notes if n.startswith("steps: none seen")]

    assert said(start, hello) == []  # open: a step may still come
    crashed = ("run_end", 110.0, {"status": "error", "exit_code": 1})
    assert said(start, hello, crashed) == []  # it failed first: its error says why
    assert said(start, end) == []  # no agent: another note says so
    assert said(start, hello, ("step", 101.0, {"step": 1, "rank": 0}), end) == []
    assert said(start, hello, end) == [
        "steps: none seen: no optimizer.step() and no backward() ran in the training process "
        "(a loop that updates its weights from torch.autograd.grad or torch.func.grad, or one "
        "that only runs the model, is not clocked), so no tokens, step times or MFU"
    ]


def test_long_series_names_are_cut_with_an_ellipsis():
    from trainmeter.core.engine import MAX_NAME

    eng = _feed(_run(), ("series", 105.0, {"name": "x" * 10_000, "value": 1.0}))
    (name,) = eng.snapshot()["series"]
    assert len(name) == MAX_NAME and name == "x" * (MAX_NAME - 1) + "…"
    assert eng.timeline.names() == ["tokens_per_s", name]


def test_notes_model_fields_and_counts_from_training_code_are_bounded():
    from trainmeter.core.engine import MAX_MODEL_FIELDS, MAX_NAME, MAX_NOTE

    eng = _run()
    # 100 unknown fields sent before the documented ones: the documented ones are kept first
    big = {**{f"extra{i}": i for i in range(100)}, **MODEL, "name": "M" * 5000}
    _feed(
        eng,
        ("note", 105.0, {"text": "n" * 100_000, "source": "agent"}),
        ("model", 105.0, big),
        ("step", 106.0, {"step": 2**60, "rank": 0, "tokens": 2**70}),
        ("step", 107.0, {"step": 5, "rank": 2**40}),
    )
    snap = eng.snapshot()
    assert max(len(n) for n in snap["notes"]) <= MAX_NOTE
    # the record's fields bounded, and the engine's rule, rule_text and ranks (rank_models.py)
    assert len(snap["model"]) == MAX_MODEL_FIELDS + 3 and len(snap["model"]["name"]) == MAX_NAME
    assert snap["flops_per_token"]["hf"] == 5400  # the shape fields are still there
    assert "extra37" in snap["model"] and "extra38" not in snap["model"]  # 10 known + 38
    # the bogus step advances the clock by one and its tokens are ignored
    assert snap["step"] == 4 and snap["tokens"] == 120
    assert "1099511627776" not in snap["ranks"]
    assert any("outside 0..2**53" in n for n in snap["notes"])
    assert any(n.startswith("ranks: 1 step record") for n in snap["notes"])


# -- counted FLOPs: which notes a flops_counted record gives (docs/spec.md "Counted FLOPs") ---
def _counted(attention, **over):
    """A rank-0 flops_counted record of step 3: 6000 FLOP over 40 tokens."""
    return ("flops_counted", 105.0, {"step": 3, "rank": 0, "flops": 6000, "tokens": 40,
                                     "attention": attention, "mapped": [], **over})  # fmt: skip


def _counted_notes(eng) -> list[str]:
    return [n for n in eng.snapshot()["notes"] if n.startswith("counted FLOPs")]


def test_no_attention_counted_warns_only_for_a_model_with_heads():
    with_heads = _feed(_run(), _counted("none counted"))  # MODEL has 2 heads
    assert _counted_notes(with_heads) == [
        "counted FLOPs: no attention was counted in that step (no attention kernel with a "
        "formula in torch's FlopCounterMode, and no batched matmul of two activations), so the "
        "count misses attention"
    ]
    no_heads = {k: v for k, v in MODEL.items() if k != "heads"}  # an MLP: nothing to miss
    mlp = _feed(Engine(), ("model", 100.6, no_heads), _counted("none counted"))
    assert _counted_notes(mlp) == []
    assert mlp.snapshot()["flops_counted"]["attention"] == "none counted"


def test_another_model_drops_the_old_counted_flops_and_says_so():
    """A second training in one process (the agent describes the new model): the old
    model's counted FLOPs are not the new one's; the same model described again keeps them."""
    eng = _feed(_run(), _counted("sdpa"))
    _feed(eng, ("model", 105.5, MODEL))  # the same model again (a new notebook cell)
    assert eng.snapshot()["flops_counted"]["flops"] == 6000.0
    assert not [n for n in eng.snapshot()["notes"] if n.startswith("model: ")]
    bigger = {**MODEL, "params": 4000, "width": 16}  # hf: 6 x (4000 - 100) = 23,400 FLOP/token
    _feed(eng, ("model", 106.0, bigger))
    snap = eng.snapshot()
    assert snap["flops_counted"] is None and snap["flops_per_token_counted"] is None
    assert snap["flops_per_token"]["hf"] == 23400
    assert [n for n in snap["notes"] if n.startswith("model: ")] == [
        "model: the training process went on to train another model (4,000 parameters; before "
        "it, 1,000 parameters): FLOPs per token and MFU are the new model's from then on, and "
        "FLOPs spent and the run-average MFU count every token of the run at the new model's "
        "FLOPs per token"
    ]


@pytest.mark.parametrize("attention", ["sdpa", "matmul"])
def test_attention_counted_as_a_kernel_or_as_matmuls_gives_no_note(attention):
    eng = _feed(_run(), _counted(attention))
    assert _counted_notes(eng) == []
    assert eng.snapshot()["flops_counted"]["attention"] == attention


def test_an_old_log_s_counted_attention_reads_as_sdpa_and_warns_nothing():
    eng = _feed(_run(), _counted("counted"))  # what agents before "sdpa" / "matmul" wrote
    # nor did they send the step's samples: null, so no FLOPs per sample (never a guess)
    assert eng.snapshot()["flops_counted"] == {"step": 3, "flops": 6000.0, "tokens": 40,
                                               "samples": None, "attention": "sdpa",
                                               "not_counted": []}  # fmt: skip
    assert eng.snapshot()["flops_per_sample_counted"] is None
    assert _counted_notes(eng) == []


def test_work_no_formula_counted_is_said_in_a_note_and_the_snapshot():
    missed = ["aten.addbmm (no FLOP formula)", "aten.mkldnn_rnn_layer (unexpected arguments)"]
    eng = _feed(_run(), _counted("sdpa", not_counted=missed))
    assert _counted_notes(eng) == [
        "counted FLOPs: not counted in that step: aten.addbmm (no FLOP formula), "
        "aten.mkldnn_rnn_layer (unexpected arguments); the count misses their work"
    ]
    assert eng.snapshot()["flops_counted"]["not_counted"] == missed


def test_a_counted_record_with_a_bad_not_counted_list_is_refused():
    with pytest.raises(records.RecordError, match="not_counted"):
        _feed(_run(), _counted("sdpa", not_counted=[3]))


@pytest.mark.parametrize("order", [(0, 1), (1, 0)])
def test_the_ranks_same_model_is_one_model_whatever_order_the_ranks_send_in(order):
    """Every rank describes the same model (data parallel): the job's is the lowest rank's
    record, rule "same", whatever order the records come in (core/rank_models.py)."""
    eng = _run()
    for rank in order:
        _feed(eng, ("model", 105.0, {**MODEL, "rank": rank}))
    model = eng.snapshot()["model"]
    assert (model["rank"], model["rule"], model["ranks"], model["params"]) == (0, "same", 2, 1000)


def test_flops_spent_integrate_the_attention_term_over_each_steps_length():
    # titan = 6 x (1000 - 100) + 12 x L x H x Q x T, Q = width / heads = 4:
    # 5400 + 12 x 2 x 2 x 4 x T = 5400 + 192 T
    eng = _run()  # three steps of 40 tokens with no seq_sq: T is the model's 4
    assert eng.snapshot()["flops_per_token"]["titan"] == 5400 + 192 * 4
    eng = Engine()
    # 40 tokens of length 4 (seq_sq 40 x 4 = 160), then 40 tokens of length 8 (320)
    one = {"step": 1, "rank": 0, "tokens": 40, "samples": 10, "seq_sq": 160}
    two = {"step": 2, "rank": 0, "tokens": 40, "samples": 5, "seq_sq": 320}
    start = {"id": "r", "name": "n", "argv": [], "version": "0"}
    _feed(eng, ("run_start", 100.0, start), ("model", 100.6, MODEL), ("step", 101.0, one),
          ("step", 102.0, two))  # fmt: skip
    snap = eng.snapshot()
    assert snap["seq_len_mean"] == 6.0 == snap["flops_per_token_seq_len"]  # 480 / 80
    # by hand: 40 x (5400 + 192 x 4) + 40 x (5400 + 192 x 8) = 246,720 + 277,440 = 524,160
    assert snap["flops_spent"]["titan"] == pytest.approx(524_160)
    assert snap["seq_len_recent"] == 8.0  # only step 2 is timed


def test_the_loss_from_backward_is_noted_and_superseded_by_a_reported_train_loss():
    eng = _run()
    _feed(eng, ("step_clock", 104.1, {"source": "backward", "rank": 0}),
          ("series", 104.2, {"name": "backward_loss", "value": 2.5, "step": 3,
                             "role": "train_loss"}))  # fmt: skip
    snap = eng.snapshot()
    assert snap["step_clock"] == "backward"
    assert any(n.startswith("steps: no torch.optim optimizer stepped") for n in snap["notes"])
    assert any(n.startswith("train loss: backward_loss is the value") for n in snap["notes"])
    assert "superseded" not in snap["series"]["backward_loss"]
    _feed(eng, ("series", 104.3, {"name": "loss", "value": 2.4, "step": 3}))  # emit's, no role
    snap = eng.snapshot()
    assert snap["series"]["backward_loss"]["superseded"] is True
    assert not any(n.startswith("train loss: backward_loss") for n in snap["notes"])


def test_a_run_with_steps_and_no_loss_says_how_to_report_one():
    notes = _run().snapshot()["notes"]
    assert any("trainmeter.emit(train_loss=loss.item())" in n for n in notes)
    assert _run().snapshot()["step_clock"] == "optimizer"  # an older log: steps, no record


def test_a_run_with_samples_and_no_tokens_says_tokens_do_not_apply():
    eng = _run()
    _feed(eng, ("step", 105.0, {"step": 4, "rank": 0, "tokens": None, "samples": 8}))
    assert not any(n.startswith("tokens: none") for n in eng.snapshot()["notes"])  # tokens seen
    eng = Engine()
    _feed(eng, ("model", 100.6, MODEL),
          ("step", 101.0, {"step": 1, "rank": 0, "tokens": None, "samples": 8}))  # fmt: skip
    (note,) = [n for n in eng.snapshot()["notes"] if n.startswith("tokens: none")]
    assert note.endswith("8 samples counted")


def test_the_same_note_from_every_rank_is_kept_once():
    """A 4-rank job's agents each send the same note: the person reads it once."""
    eng = Engine()
    for rank in range(4):
        eng.apply({"v": 1, "k": "note", "t": 1.0 + rank, "source": "trainmeter", "rank": rank,
                   "text": "step clock: the optimizer was freed"})  # fmt: skip
    eng.apply({"v": 1, "k": "note", "t": 9.0, "source": "trainmeter", "text": "another"})
    assert list(eng.notes) == [
        "trainmeter: step clock: the optimizer was freed", "trainmeter: another"]  # fmt: skip


def test_a_series_without_a_role_gets_the_catalogs_once_per_name():
    """emit() sends no role: the engine gives each series the catalog's (core/catalog.py), so
    the loss chart, which draws by role, draws an emitted train_loss; a tap's role is kept."""
    eng = Engine()
    for i, (name, role) in enumerate([("train_loss", None), ("loss_scale", None),
                                      ("val/loss", None), ("my_loss", "train_loss")]):  # fmt: skip
        rec = {"v": 1, "k": "series", "t": 1.0 + i, "name": name, "value": 1.0, "step": 1}
        eng.apply({**rec, "role": role} if role else rec)
    series = eng.snapshot()["series"]
    assert series["train_loss"]["role"] == "train_loss"
    assert series["val/loss"]["role"] == "val_loss"
    assert "role" not in series["loss_scale"]  # the catalog gives it none
    assert series["my_loss"]["role"] == "train_loss"  # the tap's, though the catalog has none


# -- merged steps (docs/spec.md "Run log": a step record's `agg`) -------------------------------
def test_a_merged_step_record_counts_its_steps_tokens_and_time_as_that_many_steps():
    """Rank 0's steps 1..3 one by one (1 s apart), then steps 4..12 merged into one record
    at 112 s (9 steps of 1 s: the agent's buffer was full), then step 13 one by one."""
    eng = _run()  # steps 1, 2, 3 at 101, 102, 104 s; 40 tokens and 2 samples each
    _feed(eng,
          ("step", 113.0, {"step": 12, "rank": 0, "tokens": 9 * 40, "samples": 9 * 2,
                           "agg": 9}),
          ("step", 114.0, {"step": 13, "rank": 0, "tokens": 40, "samples": 2}))  # fmt: skip
    snap = eng.snapshot()
    assert snap["step"] == 13 and snap["ranks"] == {"0": 13}  # 3 + 9 + 1 steps
    assert snap["tokens"] == 13 * 40 and snap["samples"] == 13 * 2
    # timed: step 2 (1 s), step 3 (2 s), the merged 9 (113 - 104 = 9 s), step 13 (1 s)
    assert snap["train_time_s"] == pytest.approx(13.0)
    # per step over the window: 13 s over 1 + 1 + 9 + 1 = 12 steps (as 4 steps of one
    # interval each it would read 13 / 4 = 3.25 s)
    assert snap["step_time_s"] == pytest.approx(13 / 12)
    assert snap["rank_step_time_s"] == {"0": pytest.approx(13 / 12)}
    assert eng.ranks.ranks[0].step_time_s() == pytest.approx(13 / 12)
    # tokens/s stay tokens over their intervals: (40 + 40 + 360 + 40) tokens over 13 s
    assert snap["tokens_per_s"] == pytest.approx(480 / 13)
    assert snap["tokens_per_s_avg"] == pytest.approx(480 / 13)
    assert snap["steps_merged"]["steps"] == 9 and snap["steps_merged"]["records"] == 1
    said = snap["steps_merged"]["text"]
    assert said.startswith("9 steps arrived merged into 1 step record ")
    assert any(said in n for n in snap["notes"])
    from trainmeter.core.summary import summary_line

    assert summary_line(snap).endswith(" · 9 steps merged into 1 record (supervisor not reading)")


def test_a_run_with_no_merged_steps_says_nothing_of_them():
    snap = _run().snapshot()
    assert snap["steps_merged"] is None
    assert not [n for n in snap["notes"] if "merged" in n]


def test_a_merged_record_replays_as_it_was_applied():
    eng = _run()
    _feed(eng, ("step", 113.0, {"step": 12, "rank": 0, "tokens": 360, "samples": 18,
                                "agg": 9}))  # fmt: skip
    lines = [records.encode(records.make(k, t, **f)) for k, t, f in (
        ("run_start", 100.0, {"id": "r", "name": "n", "argv": [], "version": "0", "opts": {}}),
        ("agent_hello", 100.5, {"pid": 1, "rank": 0, "world_size": 1}),
        ("model", 100.6, MODEL),
        ("step", 101.0, {"step": 1, "rank": 0, "tokens": 40, "samples": 2}),
        ("step", 102.0, {"step": 2, "rank": 0, "tokens": 40, "samples": 2}),
        ("step", 104.0, {"step": 3, "rank": 0, "tokens": 40, "samples": 2}),
        ("step", 113.0, {"step": 12, "rank": 0, "tokens": 360, "samples": 18, "agg": 9}),
    )]  # fmt: skip
    again = replay(lines).snapshot()
    live = eng.snapshot()
    for key in ("step", "tokens", "step_time_s", "train_time_s", "ranks", "steps_merged"):
        assert again[key] == live[key], key


# -- figures the dashboard shows as given (js/derive.js computes none of them) ---------------
# _run(): 120 tokens, recent rate 80 / 3 tokens/s, steps at 101, 102 and 104 s, elapsed 4 s;
# FLOPs per token hf 5400, titan 6168.


def test_progress_and_flops_required_are_given_whenever_a_budget_is():
    tokens = _run({"budget_tokens": 1000}).snapshot()
    assert tokens["progress"] == pytest.approx(0.12)  # 120 / 1000
    assert tokens["flops_required"]["titan"] == pytest.approx(6_168_000)  # 1000 x 6168
    assert tokens["progress_flops"] is None  # no FLOPs budget
    # a FLOPs budget alone: 6,168,000 FLOP is 1000 tokens under titan; FLOPs spent
    # 120 x 6168 = 740,160 of 6,168,000 = 0.12
    alone = _run({"budget_flops": 6.168e6}).snapshot()
    assert alone["progress"] == pytest.approx(0.12)
    assert alone["progress_flops"] == pytest.approx(0.12)
    assert alone["flops_required"]["hf"] == pytest.approx(5400 * 1000)
    # both: progress follows the 500 tokens (120 / 500), the FLOPs still 740,160 / 6,168,000
    both = _run({"budget_flops": 6.168e6, "budget_tokens": 500}).snapshot()
    assert both["progress"] == pytest.approx(0.24)
    assert both["progress_flops"] == pytest.approx(0.12)
    # in the run's convention: hf spends 120 x 5400 = 648,000 of 6,168,000 = 0.105058...
    hf = _run({"budget_flops": 6.168e6, "convention": "hf"}).snapshot()
    assert hf["progress_flops"] == pytest.approx(648_000 / 6.168e6)
    none = _run().snapshot()
    assert none["progress"] is None and none["progress_flops"] is None
    assert none["flops_required"] is None


def test_params_without_embeddings_are_params_less_the_embedding_tables():
    assert _run().snapshot()["params_without_embeddings"] == 900  # 1000 - 100
    assert Engine().snapshot()["params_without_embeddings"] is None  # no model yet


def test_plan_vs_actual_is_the_achieved_over_the_planned():
    snap = _run({"peak_flops": 1e9, "budget_tokens": 1000}).snapshot()
    # planned 0.4 x 1e9 / 6168 = 64,850.84 tokens/s; achieved 80/3: 80 x 6168 / (3 x 4e8)
    # = 4.112e-4 of plan; MFU 80/3 x 6168 / 1e9 = 1.6448e-4 over the planned 0.4, the same
    versus = snap["plan_vs_actual"]
    assert versus["tokens_per_s"] == pytest.approx(4.112e-4)
    assert versus["mfu"] == pytest.approx(1.6448e-4 / 0.4)
    # ETA 33 s against the planned 0.0135696 s: 32.9864304 s later
    assert versus["eta_late_s"] == pytest.approx(33 - 0.0135696)
    no_budget = _run({"peak_flops": 1e9}).snapshot()["plan_vs_actual"]
    assert no_budget["eta_late_s"] is None and no_budget["mfu"] == pytest.approx(4.112e-4)
    assert _run().snapshot()["plan_vs_actual"] is None  # no peak: no plan


def test_plan_versus_needs_both_sides():
    from trainmeter.core import plan

    planned = {"mfu": 0.4, "tokens_per_s": 1000.0, "eta_s": 60.0, "source": "default"}
    assert plan.versus(planned, 500.0, 0.3, 90.0) == {
        "tokens_per_s": 0.5, "mfu": pytest.approx(0.75), "eta_late_s": 30.0,
    }  # fmt: skip
    assert plan.versus(planned, None, None, 30.0) == {
        "tokens_per_s": None, "mfu": None, "eta_late_s": -30.0,  # 30 s sooner
    }  # fmt: skip
    zero = {**planned, "tokens_per_s": 0.0, "eta_s": None}
    assert plan.versus(zero, 500.0, 0.3, 90.0)["tokens_per_s"] is None
    assert plan.versus(zero, 500.0, 0.3, 90.0)["eta_late_s"] is None
    assert plan.versus(None, 500.0, 0.3, 90.0) is None


def test_each_rank_over_the_fastest_rank():
    eng = _run()  # rank 0: intervals 1 s and 2 s, 1.5 s a step
    t = 104.0
    for i in range(5):  # rank 1: 0.5 s a step
        t += 0.5
        _feed(eng, ("step", t, {"step": i + 1, "rank": 1, "tokens": 40}))
    _feed(eng, ("step", t, {"step": 1, "rank": 2, "tokens": 40}))  # one step: untimed
    snap = eng.snapshot()
    # rank 0: 1.5 / 0.5 - 1 = 2 (200 % longer); rank 1 the fastest: 0; rank 2 not timed
    assert snap["rank_over_fastest"] == {"0": pytest.approx(2.0), "1": 0.0, "2": None}
    assert Engine().snapshot()["rank_over_fastest"] is None


def test_time_shares_are_each_bucket_over_the_time_they_split():
    eng = _run()
    # a data wait of 0.5 s from 102.5 s, inside the timed interval 102 -> 104 s
    _feed(eng, ("span", 102.5, {"name": "data", "rank": 0, "dur": 0.5}))
    snap = eng.snapshot()
    # compute 3 - 0.5 = 2.5 s, data 0.5 s of elapsed 4 s; the 1 s before the first step (at
    # 101 s) is start-up, and nothing is left for other
    assert snap["time_split"]["compute"] == pytest.approx(2.5)
    assert snap["time_share"] == {
        "compute": pytest.approx(0.625), "data": pytest.approx(0.125), "checkpoint": 0.0,
        "eval": 0.0, "startup": pytest.approx(0.25), "other": 0.0,
    }  # fmt: skip
    # rank 0's own step time, 3 s (its "other" left out): compute 2.5 / 3, data 0.5 / 3
    share = snap["rank_time_share"]["0"]
    assert share == {"compute": pytest.approx(2.5 / 3), "data": pytest.approx(0.5 / 3),
                     "checkpoint": 0.0, "eval": 0.0, "wait": 0.0}  # fmt: skip
    bare = _run().snapshot()
    assert bare["time_share"] is None and bare["rank_time_share"] is None  # no span yet


def test_shares_leave_out_what_is_not_measured():
    from trainmeter.core.metrics import shares

    keys = ("a", "b", "c")
    assert shares({"a": 3, "b": 1, "c": None}, keys) == {"a": 0.75, "b": 0.25, "c": None}
    assert shares({"a": 3, "b": -1, "c": float("nan")}, keys) == {"a": 1.0, "b": None, "c": None}
    assert shares({"a": 0, "b": 0}, keys) is None  # nothing measured: no shares, not 0 %
    assert shares(None, keys) is None


H100 = "NVIDIA H100 80GB HBM3"


def _gpu(index, **sample):
    return {"index": index, **sample}


def _hardware_run(*samples):
    eng = _run({"peak_flops": 1e12})  # a declared peak: observed FLOP/s = tensor_active x 1e12
    device = {"name": H100, "uuid": "GPU-x", "mem_total_bytes": 80 * 2**30, "power_limit_w": 700.0,
              "gpm": True, "gpm_reason": None, "mig": False, "gpu_instance_id": None,
              "lost": None, "missing": {}}  # fmt: skip
    devices = [{**device, "index": i, "gpu_index": i} for i in range(len(samples))]
    _feed(eng, ("gpu_devices", 104.1, {"backend": "nvml", "devices": devices, "reason": None}),
          ("gpu", 104.2, {"gpus": list(samples), "host": None}))  # fmt: skip
    return eng.snapshot()


def test_gpu_means_are_over_the_gpus_that_have_the_field():
    snap = _hardware_run(_gpu(0, gpu_util=0.9, tensor_active=0.5),
                         _gpu(1, gpu_util=0.7, tensor_active=0.3))  # fmt: skip
    mean = snap["gpu_mean"]
    # GPU-Util (0.9 + 0.7) / 2 = 0.8; OFU (0.5 + 0.3) / 2 = 0.4; observed FLOP/s per GPU
    # (0.5e12 + 0.3e12) / 2 = 4e11
    assert mean["gpu_util"] == pytest.approx(0.8)
    assert mean["ofu"] == pytest.approx(0.4)
    assert mean["observed_flops_per_s"] == pytest.approx(4e11)
    assert mean["missing"] == {}
    # a GPU without the counter is left out of the mean, not counted as 0
    one = _hardware_run(_gpu(0, gpu_util=0.9, tensor_active=0.5), _gpu(1, gpu_util=0.7))
    assert one["gpu_mean"]["ofu"] == pytest.approx(0.5)


def test_a_gpu_mean_no_gpu_has_says_the_gpus_reason():
    why = "needs Hopper or newer (NVML GPM)"
    snap = _hardware_run(_gpu(0, gpu_util=0.6, missing={"tensor_active": why}))
    mean = snap["gpu_mean"]
    assert mean["gpu_util"] == pytest.approx(0.6)
    assert mean["ofu"] is None and mean["missing"]["ofu"] == why
    assert mean["missing"]["observed_flops_per_s"] == why
    bare = Engine().snapshot()["gpu_mean"]  # no sampler: every mean missing, with a reason
    assert bare["ofu"] is None and "needs GPU counters" in bare["missing"]["ofu"]
    assert bare["gpu_util"] is None and bare["missing"]["gpu_util"].startswith("not measured")


# -- samples, FLOPs per sample and HFU [counted] (docs/spec.md, the section of that name) ------
# a CNN: no layers, heads or vocab; hf alone would say 6 x 11642 FLOP a token
CNN = {"params": 11642, "embedding_params": 0, "token_embedding_params": 0, "device": "cpu",
       "name": "Net"}  # fmt: skip


def _images(opts=None, counted=True):
    """A CNN fed 16 images a step at 100, 100.5, 101, 102 s (steps 2-4 timed: 48 images over
    2 s = 24/s; step times 0.5, 0.5, 1 s); step 3 counted: 43,450,368 FLOP over 16 images."""
    start = {"id": "r", "name": "n", "argv": [], "version": "0", "opts": opts or {}}
    recs = [("run_start", 99.0, start), ("agent_hello", 99.1, {"pid": 1, "rank": 0,
             "world_size": 1}), ("model", 99.2, CNN)]  # fmt: skip
    for i, t in enumerate((100.0, 100.5, 101.0, 102.0), 1):
        recs.append(("step", t, {"step": i, "rank": 0, "tokens": None, "samples": 16}))
        if counted and i == 3:
            recs.append(("flops_counted", t, {"step": 3, "rank": 0, "flops": 43_450_368,
                                              "tokens": None, "samples": 16,
                                              "attention": "none counted"}))  # fmt: skip
    return _feed(Engine(), *recs)


def test_an_image_model_gives_samples_first_and_no_convention_not_zeros():
    snap = _images({"peak_flops": 1e12}).snapshot()
    assert snap["samples"] == 64 and snap["samples_per_step"] == 16
    assert snap["samples_per_s"] == pytest.approx(48 / 2)
    assert snap["tokens"] == 0 and snap["tokens_per_s"] is None  # none, not 0 tokens/s
    assert snap["tokens_missing"].startswith("the model's inputs are not token ids")
    # hf would be 6 x 11642 = 69,852 FLOP/token: no token, so no convention applies
    assert set(snap["flops_per_token"]) == {"hf", "megatron", "titan", "embeddings"}
    assert all(v is None for v in snap["flops_per_token"].values())
    assert all(v is None for v in snap["flops_spent"].values())
    assert snap["mfu"] is None and snap["mfu_avg"] is None and snap["plan"] is None
    assert snap["conventions_missing"].startswith("no named convention describes this model: ")
    assert any(n.startswith("tokens: none: the model's inputs") for n in snap["notes"])


def test_hfu_counted_is_the_counted_steps_flops_per_sample_times_samples_per_s_over_the_peak():
    snap = _images({"peak_flops": 1e12}).snapshot()
    assert snap["flops_counted"]["samples"] == 16
    assert snap["flops_per_sample_counted"] == 43_450_368 / 16  # 2,715,648 FLOP/sample
    assert snap["flops_per_token_counted"] is None
    hfu = snap["hfu_counted"]
    # recent = run: 24 images/s x 2,715,648 FLOP = 65,175,552 FLOP/s over 1 x 1e12 FLOP/s
    assert hfu["per"] == "sample" and hfu["why"] is None
    assert hfu["flops_per_s"] == pytest.approx(65_175_552)
    assert hfu["value"] == pytest.approx(6.5175552e-5) and hfu["avg"] == hfu["value"]
    # the counted step's FLOPs x steps/s: the mean step time of steps 2-4 is 2/3 s
    assert hfu["value"] == pytest.approx(43_450_368 / (2 / 3) / 1e12)


def test_hfu_counted_says_why_it_is_missing():
    assert _images(counted=False).snapshot()["hfu_counted"] == {
        "value": None, "avg": None, "flops_per_s": None, "per": None,
        "why": "not measured yet: one step's executed FLOPs are counted at the 3rd optimizer step",
    }  # fmt: skip
    no_peak = _images().snapshot()["hfu_counted"]
    assert no_peak["value"] is None and no_peak["why"].startswith("no HFU: no dense peak")
    assert no_peak["flops_per_s"] == pytest.approx(65_175_552)  # executed FLOP/s still known
    # a run that has ended never says "yet": nothing more will come
    ended = _feed(_images(counted=False), ("run_end", 103.0, {"status": "ok", "exit_code": 0}))
    assert ended.snapshot()["hfu_counted"]["why"].startswith("not measured: no step's executed")


def test_a_token_models_hfu_counted_is_per_token_beside_its_mfu():
    eng = _feed(_run({"peak_flops": 1e9}), _counted("sdpa", samples=2))  # 6000 FLOP, 40 tokens
    snap = eng.snapshot()
    # 150 FLOP/token x 80/3 tokens/s = 4000 FLOP/s over 1e9: 4e-6, beside MFU[hf] 1.44e-4
    assert snap["hfu_counted"]["per"] == "token"
    assert snap["hfu_counted"]["value"] == pytest.approx(4e-6)
    assert snap["mfu"]["hf"] == pytest.approx(1.44e-4)
    assert snap["flops_per_sample_counted"] == 3000.0  # 6000 FLOP / 2 sequences
    assert snap["tokens_missing"] is None and snap["conventions_missing"] is None
