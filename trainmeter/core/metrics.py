"""Run metrics as pure functions: MFU, HFU, model FLOP/s, tokens/s, EMA, ETA, progress, shares.

A missing input (None) gives a missing output (None), so a figure that cannot be computed yet is
shown as "n/a" by whoever displays it; a negative or non-finite input is a programming error
and raises ValueError. Definitions: docs/spec.md "Numbers". Standard library only.
"""

from __future__ import annotations

import math

_INF = math.inf


def check_number(name: str, value: float | None, *, upper: float | None = None) -> None:
    """ValueError unless ``value`` is None or a finite real number in [0, upper]."""
    if value.__class__ is float and 0.0 <= value < _INF and upper is None:
        return  # the usual case first: the engine checks MFU's inputs at every timed step
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be finite and >= 0, got {value!r}")
    if upper is not None and value > upper:
        raise ValueError(f"{name} must be <= {upper}, got {value!r}")


_check = check_number


def model_flops_per_s(tokens_per_s: float | None, flops_per_token: float | None) -> float | None:
    """Model FLOP/s: the FLOP rate the model's math implies at the measured token rate.

    Inputs: ``tokens_per_s`` (tokens/s, all devices together); ``flops_per_token`` (FLOP per
    token under one named convention, see ``trainmeter.core.flops``).
    Formula: ``tokens_per_s * flops_per_token`` (FLOP/s).
    Source: PaLM (Chowdhery et al. 2022, arXiv:2204.02311) appendix B, "model FLOPs".
    Returns None when either input is None. Raises ValueError for a negative or non-finite input.
    Leaves out: recompute, padding and any work the convention does not count (by definition).
    """
    _check("tokens_per_s", tokens_per_s)
    _check("flops_per_token", flops_per_token)
    if tokens_per_s is None or flops_per_token is None:
        return None
    return float(tokens_per_s) * float(flops_per_token)


def mfu(
    tokens_per_s: float | None,
    flops_per_token: float | None,
    gpus: int | None,
    peak_flops: float | None,
) -> float | None:
    """Model FLOPs utilisation, a fraction (0.45 means 45 %).

    Inputs: ``tokens_per_s`` (tokens/s summed over all devices); ``flops_per_token`` (FLOP per
    token under a named convention); ``gpus`` (devices the tokens/s was produced on);
    ``peak_flops`` (dense peak FLOP/s of ONE device for the run's dtype, see
    ``trainmeter.core.peaks.resolve_peak``).
    Formula: ``tokens_per_s * flops_per_token / (gpus * peak_flops)``.
    Source: PaLM (Chowdhery et al. 2022, arXiv:2204.02311) section 4.1 and appendix B.
    Returns None when any input is None, when ``gpus`` is 0 or ``peak_flops`` is 0 (no MFU
    rather than infinity). Can exceed 1 when the convention over-counts or the peak is wrong.
    Raises ValueError for a negative or non-finite input, or a non-integer ``gpus``.
    Leaves out: it is only as right as the convention (always show its name) and the peak
    (dense, not 2:4 sparse).
    """
    if gpus is not None and (isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 0):
        raise ValueError(f"gpus must be an int >= 0, got {gpus!r}")
    _check("peak_flops", peak_flops)
    rate = model_flops_per_s(tokens_per_s, flops_per_token)
    if rate is None or not gpus or not peak_flops:
        return None
    return rate / (gpus * float(peak_flops))


def hfu(
    units_per_s: float | None,
    flops_per_unit: float | None,
    gpus: int | None,
    peak_flops: float | None,
) -> float | None:
    """Hardware FLOPs utilisation from executed FLOPs, a fraction: ``HFU [counted]``.

    Inputs: ``units_per_s`` (tokens/s or samples/s, summed over all devices); ``flops_per_unit``
    (executed FLOP per token or per sample of one step counted by torch's FlopCounterMode:
    every matmul, convolution and attention kernel that ran, recompute included); ``gpus``
    and ``peak_flops`` as :func:`mfu` takes them.
    Formula: ``units_per_s * flops_per_unit / (gpus * peak_flops)``; for one rank fed a fixed
    batch this is the counted step's FLOPs x steps/s / (gpus x peak).
    Source: PaLM (Chowdhery et al. 2022, arXiv:2204.02311) appendix B: hardware FLOPs
    utilisation counts the FLOPs the hardware executes, rematerialisation included.
    Returns None as :func:`mfu` does. Never an MFU: no named convention is in it (the
    named-convention invariant); it sits beside MFU (the counters-beside invariant).
    """
    return mfu(units_per_s, flops_per_unit, gpus, peak_flops)


def throughput(tokens: float | None, seconds: float | None) -> float | None:
    """Tokens per second over a window.

    Inputs: ``tokens`` processed in the window (all devices); ``seconds`` the window lasted (s).
    Formula: ``tokens / seconds`` (tokens/s).
    Source: definition.
    Returns None when either is None or ``seconds <= 0`` (no window yet).
    Raises ValueError for negative or non-finite ``tokens``, or non-finite ``seconds``.
    Leaves out: which window; callers choose it (recent steps for "now", all timed steps for
    the average; time outside training steps is not in the window).
    """
    _check("tokens", tokens)
    if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, (int, float))):
        raise ValueError(f"seconds must be a number, got {seconds!r}")
    if seconds is not None and not math.isfinite(seconds):
        raise ValueError(f"seconds must be finite, got {seconds!r}")
    if tokens is None or seconds is None or seconds <= 0:
        return None
    return float(tokens) / float(seconds)


def ema(prev: float | None, value: float, beta: float = 0.9) -> float:
    """Exponential moving average, plain (no bias correction), seeded with the first value.

    Inputs: ``prev`` the previous average (None before the first value); ``value`` the new
    observation (any unit: the average has the value's unit); ``beta`` the weight kept on the
    past, 0 <= beta < 1.
    Formula: ``value`` if ``prev`` is None (or not finite), else
    ``beta * prev + (1 - beta) * value``.
    Source: the EWMA statistic ``EWMA_t = lambda * Y_t + (1 - lambda) * EWMA_{t-1}`` of the
    NIST/SEMATECH e-Handbook of Statistical Methods, section 6.3.2.4
    (https://www.itl.nist.gov/div898/handbook/pmc/section3/pmc324.htm), with lambda = 1 - beta
    and EWMA_0 = the first value. Seeding with the first value (instead of 0 plus Adam-style
    debiasing, as TensorBoard's smoothing does) makes the first point equal the raw value.
    Non-finite values: a NaN/inf ``value`` is returned as is (a diverged loss stays visible);
    the next finite value re-seeds the average instead of staying NaN forever.
    Raises: ValueError when ``beta`` is outside [0, 1) or ``value`` is not a number.
    Leaves out: uneven step spacing (one call per observation, whatever its timing).
    """
    if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not 0 <= beta < 1:
        raise ValueError(f"beta must be in [0, 1), got {beta!r}")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"value must be a number, got {value!r}")
    if prev is None or not math.isfinite(prev) or not math.isfinite(value):
        return float(value)
    return beta * prev + (1.0 - beta) * value


def eta_s(
    done_tokens: float | None, budget_tokens: float | None, tokens_per_s: float | None
) -> float | None:
    """Seconds left until the token budget is reached at the current rate.

    Inputs: ``done_tokens`` and ``budget_tokens`` (tokens, all devices); ``tokens_per_s``.
    Formula: ``max(budget_tokens - done_tokens, 0) / tokens_per_s`` (s).
    Source: definition (linear extrapolation of the current rate).
    Returns None when any input is None or ``tokens_per_s`` is 0; 0.0 once the budget is met.
    Raises ValueError for a negative or non-finite input.
    Leaves out: evals, checkpoints and restarts still to come; rate changes.
    """
    _check("done_tokens", done_tokens)
    _check("budget_tokens", budget_tokens)
    _check("tokens_per_s", tokens_per_s)
    if done_tokens is None or budget_tokens is None or not tokens_per_s:
        return None
    return max(float(budget_tokens) - float(done_tokens), 0.0) / float(tokens_per_s)


def progress(done: float | None, budget: float | None) -> float | None:
    """Fraction of the budget done (0.25 means a quarter).

    Inputs: ``done`` and ``budget`` in the same unit (tokens, FLOPs, steps).
    Formula: ``done / budget``; not clamped, so an overrun shows as more than 1.
    Source: definition.
    Returns None when either is None or ``budget`` is 0 (no budget set).
    Raises ValueError for a negative or non-finite input.
    """
    _check("done", done)
    _check("budget", budget)
    if done is None or not budget:
        return None
    return float(done) / float(budget)


def shares(parts: dict | None, keys: tuple[str, ...]) -> dict[str, float | None] | None:
    """Each of ``keys``'s part of the whole, a fraction (time_split's seconds as shares).

    Inputs: ``parts`` {key: amount} in one unit (seconds), or None; ``keys`` the parts that
    make the whole, in order.
    Formula: ``parts[k] / sum(parts[j] for j in keys)`` for each ``k`` of ``keys``; a part that
    is missing, not a finite number or negative has no share (None) and is not in the sum.
    Source: definition.
    Returns None when ``parts`` is None or the sum is not above 0 (nothing measured yet).
    Never raises.
    """
    if not isinstance(parts, dict):
        return None
    known = {}
    for k in keys:
        v = parts.get(k)
        ok = isinstance(v, (int, float)) and not isinstance(v, bool)
        known[k] = float(v) if ok and math.isfinite(v) and v >= 0 else None
    total = math.fsum(v for v in known.values() if v is not None)
    if not total > 0:
        return None
    return {k: (v / total if v is not None else None) for k, v in known.items()}


__all__ = ["ema", "eta_s", "mfu", "model_flops_per_s", "progress", "shares", "throughput"]
