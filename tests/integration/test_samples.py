"""Throughput for any model, not only token models (docs/spec.md "Samples, FLOPs per sample and
HFU [counted]"): a CNN on image batches and an MLP on tabular rows under ``tm --peak 1T``
(tests/fixtures/samples_train.py), each figure against the script's own count or a hand count.

Every figure here can fail: the samples and steps are the script's own counts; samples/s is the
script's own samples over its own time stamps (taken right after each ``optimizer.step()``,
where the agent stamps the step; 20 ms of "data loading" a step makes the microseconds between
the two stamps negligible, hence 2 %); FLOPs per sample is worked out by hand below, to 1 %;
HFU [counted] is that hand count x the script's own steps/s over 1 TFLOP/s, to 2 %.
"""

import json

import pytest
from conftest import FIXTURES, run_jobs, run_tm

from trainmeter.core.engine import WINDOW_STEPS, replay
from trainmeter.supervisor.store import run_folders

pytestmark = pytest.mark.slow
SCRIPT = FIXTURES / "samples_train.py"
PEAK = 1e12  # --peak 1T, on one CPU device

# Executed FLOPs per sample of one SGD step, by hand, as torch's FlopCounterMode counts them.
# A product (m x k) @ (k x n) is 2 m k n FLOP, a convolution 2 x its multiply-adds (output
# elements x C_in x k_h x k_w); biases, ReLU, pooling and the loss are not counted. Backward:
# the gradient of the input (the forward's FLOPs again) only when the input needs one, and of
# the weight (again the forward's) always: so a first layer fed data without requires_grad
# costs 1 x its forward in backward, every later layer 2 x (torch's conv_backward_flop and
# addmm's backward skip what autograd does not ask for).
#
# CNN, per 3 x 32 x 32 image:
#   conv1 3 -> 8, 3 x 3, padding 1: 8 x 32 x 32 outputs x 27 = 221,184 MACs: 442,368 FLOP
#   conv2 8 -> 16 on the 16 x 16 pooled map: 16 x 16 x 16 outputs x 72 = 294,912 MACs: 589,824
#   fc 1024 -> 10: 10,240 MACs: 20,480
#   forward 1,052,672; backward 442,368 + 2 x 589,824 + 2 x 20,480 = 1,662,976
CNN_FLOPS_PER_SAMPLE = 1_052_672 + 1_662_976  # 2,715,648
# MLP, per row of 64 features: 64 -> 128 -> 64 -> 1
#   forward 2 x (64 x 128 + 128 x 64 + 64 x 1) = 2 x 16,448 = 32,896
#   backward 2 x 8,192 (the first layer: its weight only) + 2 x 2 x (8,192 + 64) = 49,408
MLP_FLOPS_PER_SAMPLE = 32_896 + 49_408  # 82,304
HAND = {"cnn": CNN_FLOPS_PER_SAMPLE, "mlp": MLP_FLOPS_PER_SAMPLE}
HAND_BATCH = {"cnn": 16, "mlp": 32}  # the fixture's BATCH, written out


def test_the_hand_counts_add_up():
    assert CNN_FLOPS_PER_SAMPLE == 2 * (221_184 + 294_912 + 10_240) + 2 * 221_184 + 4 * (
        294_912 + 10_240
    )
    assert MLP_FLOPS_PER_SAMPLE == 2 * 16_448 + 2 * 8_192 + 4 * (8_192 + 64)


def _job(kind, root):
    work = root / kind
    work.mkdir()
    out = run_tm(["--no-web", "--peak", "1T", SCRIPT, kind], work)
    counts = json.loads(out.stdout.splitlines()[-1].removeprefix("COUNTS "))
    (folder,) = run_folders(work / ".trainmeter")
    snap = replay(folder / "run.jsonl").snapshot()
    passport = json.loads((folder / "passport.json").read_text())
    return {"out": out, "counts": counts, "snap": snap, "passport": passport}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return run_jobs(_job, ["cnn", "mlp"], tmp_path_factory.mktemp("samples"))


def _script_rates(counts):
    """(samples/s over the last WINDOW_STEPS intervals, over all timed intervals, steps/s over
    the last WINDOW_STEPS) from the script's own time stamps: the first step is untimed."""
    t, b = counts["times"], counts["batch"]
    recent = t[-1] - t[-1 - WINDOW_STEPS]
    return b * WINDOW_STEPS / recent, b * (len(t) - 1) / (t[-1] - t[0]), WINDOW_STEPS / recent


@pytest.mark.parametrize("kind", ["cnn", "mlp"])
def test_samples_and_samples_per_s_are_the_scripts_own(runs, kind):
    snap, counts = runs[kind]["snap"], runs[kind]["counts"]
    assert snap["step"] == counts["steps"] == 30
    assert snap["samples"] == counts["samples"] == 30 * counts["batch"]
    assert snap["samples_per_step"] == counts["batch"]
    recent, avg, _ = _script_rates(counts)
    assert snap["samples_per_s"] == pytest.approx(recent, rel=0.02)
    assert snap["samples_per_s_avg"] == pytest.approx(avg, rel=0.02)
    # no token ids: no tokens/s (not 0), and the reason, everywhere
    assert snap["tokens"] == 0 and snap["tokens_per_s"] is None and snap["mfu"] is None
    assert snap["tokens_missing"].startswith("the model's inputs are not token ids")
    assert all(v is None for v in snap["flops_per_token"].values())
    assert snap["conventions_missing"].startswith("no named convention describes this model")


@pytest.mark.parametrize("kind", ["cnn", "mlp"])
def test_flops_per_sample_equal_a_hand_count_of_the_convolutions_and_matmuls(runs, kind):
    snap = runs[kind]["snap"]
    counted = snap["flops_counted"]
    assert counted["step"] == 3 and counted["samples"] == runs[kind]["counts"]["batch"]
    assert counted["tokens"] is None and snap["flops_per_token_counted"] is None
    assert snap["flops_per_sample_counted"] == pytest.approx(HAND[kind], rel=0.01)


@pytest.mark.parametrize("kind", ["cnn", "mlp"])
def test_hfu_counted_against_a_declared_peak_is_pinned_by_hand(runs, kind):
    snap, counts = runs[kind]["snap"], runs[kind]["counts"]
    hfu = snap["hfu_counted"]
    assert hfu["per"] == "sample" and hfu["why"] is None
    # the counted step's FLOPs (hand count x batch) x the script's own steps/s / (1 x 1e12)
    _, _, steps_per_s = _script_rates(counts)
    by_hand = HAND[kind] * counts["batch"] * steps_per_s / PEAK
    assert hfu["value"] == pytest.approx(by_hand, rel=0.02)
    assert hfu["value"] == pytest.approx(
        snap["flops_per_sample_counted"] * snap["samples_per_s"] / PEAK, rel=1e-9
    )
    assert snap["gpus"] == 1 and snap["peak"]["flops"] == PEAK


@pytest.mark.parametrize("kind", ["cnn", "mlp"])
def test_the_summary_line_and_the_passport_give_samples_first_and_hfu_counted(runs, kind):
    line = runs[kind]["out"].stderr.splitlines()[-1]
    assert line.startswith(f"trainmeter: finished · 30 steps · {30 * HAND_BATCH[kind]} samples · ")
    assert f"samples/s ({HAND_BATCH[kind]}/step) · no tokens: the model's inputs are not" in line
    assert "[counted] · HFU " in line and "% [counted] · " in line and "MFU" not in line
    p = runs[kind]["passport"]
    assert p["samples"] == 30 * HAND_BATCH[kind] and p["samples_per_step"] == HAND_BATCH[kind]
    assert p["flops_per_sample_counted"] == pytest.approx(HAND[kind], rel=0.01)
    assert p["hfu_counted"]["label"] == "HFU [counted]" and p["hfu_counted"]["per"] == "sample"
    assert p["hfu_counted"]["value"] == pytest.approx(runs[kind]["snap"]["hfu_counted"]["avg"])
    assert "not token ids" in p["unknown"]["tokens_per_s_avg"]
    assert "no named convention describes this model" in p["unknown"]["mfu.value"]
