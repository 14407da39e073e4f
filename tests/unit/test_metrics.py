"""MFU, model FLOP/s, tokens/s, EMA, ETA and progress, pinned against hand arithmetic."""

from __future__ import annotations

import math

import pytest

from trainmeter.core.metrics import ema, eta_s, mfu, model_flops_per_s, progress, throughput


def test_mfu_is_model_flops_over_gpus_times_dense_peak():
    # 10,000 tokens/s * 6e9 FLOP/token = 6e13 FLOP/s; 2 GPUs * 312e12 = 6.24e14 FLOP/s
    # 6e13 / 6.24e14 = 0.096153846...
    assert mfu(10_000, 6e9, 2, 312e12) == pytest.approx(0.0961538461538, rel=1e-12)


def test_mfu_of_the_reference_model_on_eight_h100s():
    # titan 6,282,473,472 FLOP/token * 100,000 tokens/s = 6.282473472e14 FLOP/s
    # 8 * 989.5e12 = 7.916e15; 6.282473472e14 / 7.916e15 = 0.0793642429...
    assert mfu(100_000, 6_282_473_472, 8, 989.5e12) == pytest.approx(0.07936424295, rel=1e-9)


@pytest.mark.parametrize(
    "args",
    [
        (None, 6e9, 1, 312e12),
        (1000, None, 1, 312e12),
        (1000, 6e9, None, 312e12),
        (1000, 6e9, 1, None),
        (1000, 6e9, 0, 312e12),  # no device
        (1000, 6e9, 1, 0.0),  # no peak: no MFU rather than infinity
    ],
)
def test_mfu_is_none_when_an_input_is_missing(args):
    assert mfu(*args) is None


def test_unknown_gpu_gives_no_mfu():
    # resolve_peak gives None for an unknown card; MFU then stays None.
    assert mfu(10_000, 6e9, 1, None) is None


@pytest.mark.parametrize(
    "args",
    [
        (-1, 6e9, 1, 312e12),
        (1000, -6e9, 1, 312e12),
        (1000, 6e9, -1, 312e12),
        (1000, 6e9, 1, -312e12),
        (math.nan, 6e9, 1, 312e12),
        (1000, 6e9, 1.5, 312e12),
        (1000, 6e9, 1, math.inf),
    ],
)
def test_mfu_rejects_negative_or_non_finite_inputs(args):
    with pytest.raises(ValueError):
        mfu(*args)


def test_model_flops_per_s_is_tokens_per_s_times_flops_per_token():
    # 2,500 tokens/s * 5,829,488,640 FLOP/token = 14,573,721,600,000 FLOP/s
    assert model_flops_per_s(2_500, 5_829_488_640) == 14_573_721_600_000
    assert model_flops_per_s(None, 5e9) is None
    with pytest.raises(ValueError):
        model_flops_per_s(-1, 5e9)


def test_throughput_is_tokens_over_seconds():
    # 4,096 tokens in 0.5 s = 8,192 tokens/s
    assert throughput(4096, 0.5) == 8192


@pytest.mark.parametrize(("tokens", "seconds"), [(4096, 0), (4096, -1.0), (None, 1.0), (1, None)])
def test_throughput_is_none_without_a_positive_window(tokens, seconds):
    assert throughput(tokens, seconds) is None


def test_throughput_rejects_negative_tokens():
    with pytest.raises(ValueError):
        throughput(-5, 1.0)


def test_ema_is_seeded_with_the_first_value():
    assert ema(None, 2.0) == 2.0


def test_ema_keeps_beta_of_the_past():
    # 0.9 * 2.0 + 0.1 * 4.0 = 1.8 + 0.4 = 2.2
    assert ema(2.0, 4.0, 0.9) == pytest.approx(2.2)
    # beta 0.5 over 1, 2, 3: 1 -> 0.5*1 + 0.5*2 = 1.5 -> 0.5*1.5 + 0.5*3 = 2.25
    avg = None
    for value in (1.0, 2.0, 3.0):
        avg = ema(avg, value, 0.5)
    assert avg == 2.25


def test_ema_with_beta_zero_is_the_raw_value():
    assert ema(10.0, 3.0, 0.0) == 3.0


def test_a_diverged_value_shows_then_the_average_reseeds():
    assert math.isnan(ema(2.0, math.nan))
    assert ema(math.nan, 3.0) == 3.0


@pytest.mark.parametrize("beta", [1.0, -0.1, 2, math.nan])
def test_ema_rejects_beta_outside_zero_to_one(beta):
    with pytest.raises(ValueError):
        ema(1.0, 2.0, beta)


def test_eta_is_remaining_tokens_over_rate():
    # (2e10 - 1e9) / 1e5 tokens/s = 1.9e10 / 1e5 = 190,000 s
    assert eta_s(1e9, 2e10, 1e5) == 190_000


def test_eta_is_zero_once_the_budget_is_met():
    assert eta_s(3e10, 2e10, 1e5) == 0.0


@pytest.mark.parametrize(
    "args", [(1e9, 2e10, 0), (None, 2e10, 1e5), (1e9, None, 1e5), (1e9, 2e10, None)]
)
def test_eta_is_none_without_a_budget_or_a_rate(args):
    assert eta_s(*args) is None


def test_progress_is_done_over_budget_and_not_clamped():
    assert progress(5e9, 2e10) == 0.25  # 5e9 / 2e10
    assert progress(2.2e10, 2e10) == pytest.approx(1.1)  # overrun shows as > 1
    assert progress(5e9, 0) is None
    assert progress(None, 2e10) is None
    with pytest.raises(ValueError):
        progress(-1, 10)
