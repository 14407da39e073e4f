"""Counts from every rank (docs/spec.md "Counts from every rank"): tokens and samples summed
over the ranks' own counts, tokens/s the sum of each rank's own rate, devices the distinct
devices the ranks use, and the job's model combined by rule. Every figure by hand."""

import pytest

from trainmeter.core import records
from trainmeter.core.engine import Engine, replay

MODEL = {  # hf = 6 x (params - embedding_params) = 6 x 900 = 5400 FLOP/token
    "params": 1000, "embedding_params": 100, "token_embedding_params": 100,
    "layers": 2, "width": 8, "heads": 2, "seq_len": 4, "vocab": 50, "device": "cpu",
}  # fmt: skip


def _feed(eng, recs):
    for kind, t, fields in recs:
        eng.apply(records.make(kind, t, **fields))
    return eng


def _start(world, opts=None):
    recs = [("run_start", 0.0, {"id": "r", "name": "n", "argv": [], "version": "0",
                                "opts": {"convention": "hf", **(opts or {})}})]  # fmt: skip
    recs += [("agent_hello", 0.1, {"pid": 10 + r, "rank": r, "world_size": world,
                                   "host": "h"}) for r in range(world)]  # fmt: skip
    return recs


def _steps(rank, times, tokens, samples=1):
    return [("step", t, {"step": i + 1, "rank": rank, "tokens": tokens, "samples": samples})
            for i, t in enumerate(times)]  # fmt: skip


def test_uncoupled_ranks_tokens_are_the_sum_of_their_own_counts_and_rates():
    # rank 0: 4 steps of 40 tokens 1 s apart; rank 1 (local SGD, slower): 2 steps of 30, 2 s
    recs = _start(2) + _steps(0, [1.0, 2.0, 3.0, 4.0], 40) + _steps(1, [1.0, 3.0], 30, 3)
    recs.sort(key=lambda r: r[1])
    snap = _feed(Engine(), recs).snapshot()
    assert snap["tokens"] == 4 * 40 + 2 * 30  # 220; the old rank 0 x world rule: 320
    assert snap["samples"] == 4 * 1 + 2 * 3
    assert snap["step"] == 4  # rank 0 is the step clock
    # rank 0: 3 timed steps, 120 tokens over 3 s = 40/s; rank 1: 1 timed step, 30 over 2 s
    assert snap["tokens_per_s"] == pytest.approx(40 + 15)
    assert snap["tokens_per_s_avg"] == pytest.approx(40 + 15)
    assert snap["rank_tokens"] == {"0": 160, "1": 60}
    assert snap["rank_counts"] == {"rule": "sum", "ranks": 2, "world": 2, "estimated_ranks": 0,
                                   "text": "tokens and samples: the sum of 2 rank(s)' own "
                                   "counts"}  # fmt: skip


def test_synchronous_ranks_give_rank_0s_rate_times_the_world_as_before():
    # 4 ranks in step, 32 tokens a step, 0.5 s apart; rank 3's records come in late (after
    # rank 0's last step): the job's figures are the same as the old rank 0 x 4 rule
    recs = _start(4)
    for r in range(3):
        recs += _steps(r, [1.0, 1.5, 2.0, 2.5], 32)
    recs.sort(key=lambda r: r[1])
    recs += _steps(3, [1.0, 1.5, 2.0, 2.5], 32)
    eng = _feed(Engine(), recs)
    snap = eng.snapshot()
    assert snap["tokens"] == 4 * 4 * 32
    assert snap["tokens_per_s"] == pytest.approx(4 * 32 / 0.5)  # 256 tokens/s
    assert snap["rank_counts"]["estimated_ranks"] == 0


def test_replay_gives_the_live_figures():
    recs = _start(2) + _steps(0, [1.0, 2.0, 3.0], 40) + _steps(1, [1.5, 2.0], 7)
    live = _feed(Engine(), recs).snapshot()
    lines = [records.encode(records.make(k, t, **f)) for k, t, f in recs]
    again = replay(lines).snapshot()
    for key in ("tokens", "samples", "tokens_per_s", "tokens_per_s_avg", "rank_tokens"):
        assert again[key] == live[key], key


@pytest.mark.parametrize("world", [2, 4])
def test_cpu_ranks_with_a_declared_peak_are_one_device_each(world):
    recs = _start(world, {"peak_flops": 1e9})
    recs += [("model", 0.5, {**MODEL, "rank": r}) for r in range(world)]
    for r in range(world):
        recs += _steps(r, [1.0, 2.0, 3.0], 40)
    recs.sort(key=lambda r: r[1])
    snap = _feed(Engine(), recs).snapshot()
    assert snap["gpus"] == world
    # each rank: 80 tokens over 2 timed s = 40 tokens/s; the job 40 x world tokens/s
    assert snap["tokens_per_s"] == pytest.approx(40 * world)
    total = 40 * world * 5400  # model FLOP/s of the job, hf
    assert snap["model_flops_per_s"]["hf"] == pytest.approx(total)
    assert snap["model_flops_per_s_per_gpu"]["hf"] == pytest.approx(total / world)
    assert snap["mfu"]["hf"] == pytest.approx(total / world / 1e9)  # 2.16e-4


def test_a_cpu_run_without_a_peak_has_no_devices_for_gpu_hours():
    recs = _start(2) + [("model", 0.5, {**MODEL, "rank": r}) for r in range(2)]
    snap = _feed(Engine(), recs).snapshot()
    assert snap["gpus"] == 0 and snap["gpu_hours"] is None


def test_cuda_devices_are_counted_once_by_host_and_index():
    cuda = {**MODEL, "device": "cuda", "gpus": 1, "device_name": "NVIDIA H100 80GB HBM3",
            "run_dtype": "bf16"}  # fmt: skip
    # ranks 0 and 1 share cuda:0 of host h; rank 2 has cuda:1; rank 3 described nothing yet
    recs = _start(4) + [("model", 0.5, {**cuda, "rank": r, "device_index": i})
                        for r, i in ((0, 0), (1, 0), (2, 1))]  # fmt: skip
    assert _feed(Engine(), recs).snapshot()["gpus"] == 3  # cuda:0, cuda:1, rank 3's one


def test_ranks_with_different_models_are_stages_summed_and_the_rule_is_shown():
    stage0 = {**MODEL, "name": "Stage0", "params": 600, "layers": 1}  # the embedding's stage
    stage1 = {**MODEL, "name": "Stage1", "params": 400, "layers": 1, "embedding_params": 0,
              "token_embedding_params": 0}  # fmt: skip
    recs = [
        *_start(2),
        ("model", 0.5, {**stage1, "rank": 1}),
        ("model", 0.6, {**stage0, "rank": 0}),
    ]
    snap = _feed(Engine(), recs).snapshot()
    model = snap["model"]
    assert model["rule"] == "stages" and (model["stages"], model["replicas"]) == (2, 1)
    assert (model["params"], model["embedding_params"], model["layers"]) == (1000, 100, 2)
    assert model["name"] == "Stage0+Stage1"
    assert "2 pipeline stages x 1 data-parallel replica" in model["rule_text"]
    assert snap["flops_per_token"]["hf"] == 6 * (1000 - 100)  # the whole pipeline's: 5400


def test_stages_replicated_by_data_parallel_count_each_stage_once():
    a, b = {**MODEL, "name": "A", "params": 600}, {**MODEL, "name": "B", "params": 400}
    recs = _start(4) + [("model", 0.5, {**m, "rank": r}) for r, m in enumerate([a, a, b, b])]
    model = _feed(Engine(), recs).snapshot()["model"]
    # groups of 2: degree 2; (600 x 2 + 400 x 2) / 2 = 1000 parameters, layers (2x2+2x2)/2 = 4
    assert (model["params"], model["layers"], model["stages"], model["replicas"]) == (
        1000, 4, 2, 2)  # fmt: skip


# -- samples/s and samples per step (docs/spec.md "Samples, FLOPs per sample and HFU [counted]")
def test_samples_per_s_is_every_ranks_own_rate_summed_like_tokens_per_s():
    # the uncoupled ranks above: rank 0 4 steps of 1 sample 1 s apart, rank 1 2 steps of 3, 2 s
    recs = _start(2) + _steps(0, [1.0, 2.0, 3.0, 4.0], 40) + _steps(1, [1.0, 3.0], 30, 3)
    recs.sort(key=lambda r: r[1])
    snap = _feed(Engine(), recs).snapshot()
    # rank 0: 3 timed samples over 3 s = 1/s; rank 1: 3 samples over its 2 s interval = 1.5/s
    assert snap["samples_per_s"] == pytest.approx(1 + 1.5)
    assert snap["samples_per_s_avg"] == pytest.approx(1 + 1.5)
    # rank 0: 4 samples over 4 steps = 1; rank 1: 6 over 2 = 3; the job 4 a step
    assert snap["samples_per_step"] == pytest.approx(1 + 3)


def test_an_image_model_has_samples_per_s_and_no_tokens_per_s_not_zero():
    # one rank, batches of 16 images (no token ids), steps at 1, 1.5, 2.5 s: steps 2 and 3
    # timed, 32 samples over 1.5 s
    recs = _start(1) + _steps(0, [1.0, 1.5, 2.5], None, 16)
    snap = _feed(Engine(), recs).snapshot()
    assert snap["samples"] == 48 and snap["samples_per_step"] == 16
    assert snap["samples_per_s"] == pytest.approx(32 / 1.5)
    assert snap["tokens"] == 0 and snap["tokens_per_s"] is None
    assert snap["tokens_per_s_avg"] is None


def test_samples_per_step_counts_the_steps_a_merged_record_stands_for():
    # 3 steps of 8 samples, then one record merging 4 steps (agg 4: 32 samples): 56 over 7
    recs = _start(1) + _steps(0, [1.0, 2.0, 3.0], 0, 8)
    recs.append(("step", 7.0, {"step": 7, "rank": 0, "tokens": 0, "samples": 32, "agg": 4}))
    snap = _feed(Engine(), recs).snapshot()
    assert snap["samples_per_step"] == 8  # (3 x 8 + 32) / (3 + 4)
    # timed: 8 + 8 over 2 s, then 32 over the merged record's 4 s: 48 samples over 6 s
    assert snap["samples_per_s_avg"] == pytest.approx(48 / 6)
