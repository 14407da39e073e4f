"""Planning: the throughput and time a run would have at an assumed MFU.

The start of the planning module (a later issue builds ``tm plan`` on it). Everything here is a
pure function of its inputs; the snapshot's ``plan`` key uses :func:`plan` (docs/spec.md
"Snapshot keys for the dashboard (issue 3)"). Standard library only.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from trainmeter.core import metrics

DEFAULT_PLAN_MFU = 0.40
"""The MFU a plan assumes unless one is declared (a fraction).

Source: PaLM (Chowdhery et al. 2022, arXiv:2204.02311) Table 3, model FLOPs utilisation of
large dense training runs: GPT-3 175B 21.3 % (V100), Gopher 280B 32.5 % (TPU v3),
Megatron-Turing NLG 530B 30.2 % (A100), PaLM 540B 46.2 % (TPU v4). 0.40 is a round figure
between the GPU runs of that table (about 30 %) and PaLM's 46.2 %, i.e. a well-tuned run on a
current stack; it is an assumption to plan with, not a prediction, and a declared MFU replaces
it.
"""
DEFAULT_PLAN_SOURCE = "default"  # plan built on DEFAULT_PLAN_MFU; "declared" when the user gave one


@dataclass(frozen=True)
class Plan:
    """A planned throughput.

    Attributes:
        mfu: the assumed MFU (fraction).
        tokens_per_s: planned throughput, all devices (tokens/s).
        eta_s: planned time for the remaining tokens (s); None without a budget.
        source: ``"default"`` (``DEFAULT_PLAN_MFU``) or ``"declared"``.
    """

    mfu: float
    tokens_per_s: float
    eta_s: float | None
    source: str

    def as_dict(self) -> dict:
        """``{"mfu", "tokens_per_s", "eta_s", "source"}`` (the snapshot's ``plan`` key)."""
        return asdict(self)


def planned_tokens_per_s(
    mfu: float, peak_flops: float | None, gpus: int, flops_per_token: float | None
) -> float | None:
    """Tokens/s a run would reach at an assumed MFU.

    Inputs: ``mfu`` (fraction, 0 < mfu <= 1); ``peak_flops`` (dense peak FLOP/s of one device,
    see ``peaks.resolve_peak``); ``gpus`` (devices, int); ``flops_per_token`` (FLOP/token under
    one named convention).
    Formula: ``mfu * peak_flops * gpus / flops_per_token`` (tokens/s): the MFU definition
    (``metrics.mfu``, PaLM appendix B) solved for tokens/s.
    Returns None when ``peak_flops`` or ``flops_per_token`` is None or 0, or ``gpus`` is 0.
    Raises ValueError for an mfu outside (0, 1], a negative or non-finite input, or a
    non-integer ``gpus``.
    """
    if isinstance(mfu, bool) or not isinstance(mfu, (int, float)) or not 0 < mfu <= 1:
        raise ValueError(f"mfu must be a fraction in (0, 1], got {mfu!r}")
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 0:
        raise ValueError(f"gpus must be an int >= 0, got {gpus!r}")
    for name, value in (("peak_flops", peak_flops), ("flops_per_token", flops_per_token)):
        if value is not None and (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or value < 0
        ):
            raise ValueError(f"{name} must be finite and >= 0, got {value!r}")
    if not peak_flops or not flops_per_token or not gpus:
        return None
    return float(mfu) * float(peak_flops) * gpus / float(flops_per_token)


def plan(
    peak_flops: float | None,
    gpus: int,
    flops_per_token: float | None,
    done_tokens: float = 0,
    budget_tokens: float | None = None,
    mfu: float | None = None,
) -> Plan | None:
    """The planned throughput and the planned time to the budget.

    Inputs: as :func:`planned_tokens_per_s`, plus ``done_tokens`` (tokens trained so far),
    ``budget_tokens`` (the target, tokens; None for none) and ``mfu`` (None: assume
    :data:`DEFAULT_PLAN_MFU`, ``source="default"``; else ``source="declared"``).
    Formulas: ``tokens_per_s`` as :func:`planned_tokens_per_s`;
    ``eta_s = max(budget_tokens - done_tokens, 0) / tokens_per_s`` (s), ``metrics.eta_s``.
    Returns None without a peak, FLOPs/token or devices. Raises ValueError as
    :func:`planned_tokens_per_s` and ``metrics.eta_s``.
    Leaves out: evals, checkpoints, restarts; an MFU measured on this run (that is the actual,
    shown beside the plan).
    """
    source = DEFAULT_PLAN_SOURCE if mfu is None else "declared"
    mfu = DEFAULT_PLAN_MFU if mfu is None else mfu
    rate = planned_tokens_per_s(mfu, peak_flops, gpus, flops_per_token)
    if rate is None:
        return None
    return Plan(float(mfu), rate, metrics.eta_s(done_tokens, budget_tokens, rate), source)


__all__ = ["DEFAULT_PLAN_MFU", "Plan", "plan", "planned_tokens_per_s"]
