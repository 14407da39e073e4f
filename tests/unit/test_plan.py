"""Planned throughput and ETA at an assumed MFU. Every expected number is worked out by hand in
the comment beside it."""

import inspect

import pytest

from trainmeter.core import plan


def test_default_mfu_is_the_cited_forty_percent():
    assert plan.DEFAULT_PLAN_MFU == 0.40
    # the constant's documentation names its source and the figures it sits between
    source = inspect.getsource(plan)
    assert "Chowdhery et al. 2022" in source and "Table 3" in source
    assert "30.2 %" in source and "46.2 %" in source


def test_planned_tokens_per_s_on_eight_a100s():
    # 0.40 x 312e12 FLOP/s x 8 GPUs / 6e9 FLOP/token = 998.4e12 / 6e9 = 166,400 tokens/s
    assert plan.planned_tokens_per_s(0.40, 312e12, 8, 6e9) == pytest.approx(166_400)


def test_planned_tokens_per_s_reference_model_on_one_h100():
    # titan 6,282,473,472 FLOP/token, H100 SXM BF16 989.5e12, MFU 0.5:
    # 494.75e12 / 6,282,473,472 = 78,750.83 tokens/s
    rate = plan.planned_tokens_per_s(0.5, 989.5e12, 1, 6_282_473_472)
    assert rate == pytest.approx(78_750.83, rel=1e-6)


def test_plan_gives_rate_and_eta_for_the_remaining_tokens():
    # rate 166,400 tokens/s (above); remaining 20e9 - 3.36e9 = 16.64e9 tokens;
    # 16.64e9 / 166,400 = 100,000 s
    p = plan.plan(312e12, 8, 6e9, done_tokens=3.36e9, budget_tokens=20e9)
    assert p == plan.Plan(0.40, pytest.approx(166_400), pytest.approx(100_000), "default")
    assert p.as_dict() == {
        "mfu": 0.40,
        "tokens_per_s": pytest.approx(166_400),
        "eta_s": pytest.approx(100_000),
        "source": "default",
    }


def test_a_declared_mfu_is_labelled_declared():
    # 0.25 x 312e12 x 8 / 6e9 = 104,000 tokens/s; 20e9 / 104,000 = 192,307.6923 s
    p = plan.plan(312e12, 8, 6e9, budget_tokens=20e9, mfu=0.25)
    assert p.source == "declared" and p.mfu == 0.25
    assert p.tokens_per_s == pytest.approx(104_000)
    assert p.eta_s == pytest.approx(192_307.6923, rel=1e-9)


def test_eta_is_zero_past_the_budget_and_none_without_one():
    assert plan.plan(312e12, 8, 6e9, done_tokens=30e9, budget_tokens=20e9).eta_s == 0.0
    assert plan.plan(312e12, 8, 6e9).eta_s is None


def test_no_peak_no_flops_per_token_or_no_device_gives_no_plan():
    assert plan.plan(None, 8, 6e9) is None
    assert plan.plan(312e12, 8, None) is None
    assert plan.plan(312e12, 0, 6e9) is None
    assert plan.planned_tokens_per_s(0.4, 312e12, 8, 0) is None


@pytest.mark.parametrize(
    "args",
    [
        (0.0, 312e12, 8, 6e9),  # MFU must be > 0
        (1.5, 312e12, 8, 6e9),  # a fraction, not 150 %
        (40, 312e12, 8, 6e9),  # a percent typed as a fraction
        (0.4, -1.0, 8, 6e9),
        (0.4, float("inf"), 8, 6e9),
        (0.4, 312e12, 2.5, 6e9),
        (0.4, 312e12, True, 6e9),
        (0.4, 312e12, 8, float("nan")),
    ],
)
def test_bad_inputs_are_refused(args):
    with pytest.raises(ValueError):
        plan.planned_tokens_per_s(*args)
