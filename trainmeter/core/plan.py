"""Planning: the throughput, time, GPU-hours, energy and cost a run would have at an assumed MFU.

Everything here is a pure function of its inputs. The snapshot's ``plan`` key uses :func:`plan`
and its ``plan_vs_actual`` key :func:`versus` (docs/spec.md "Snapshot keys for the dashboard");
``tm plan`` and Python callers use :func:`plan_run`, which calls the same :func:`plan` once per
FLOPs convention (docs/spec.md "Planning a run (`tm plan`)"). Standard library only.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from trainmeter.core import flops, metrics, peaks

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


def versus(planned: dict | None, tokens_per_s: float | None, mfu: float | None,
           eta_s: float | None) -> dict[str, float | None] | None:  # fmt: skip
    """The run against its plan: the snapshot's ``plan_vs_actual``.

    Inputs: ``planned``, the snapshot's ``plan`` (``Plan.as_dict()``) or None; the run's
    ``tokens_per_s``, ``mfu`` (under the plan's convention) and ``eta_s`` (s), each None when
    not measured.
    Formulas: ``tokens_per_s / planned tokens_per_s`` and ``mfu / planned mfu`` (fractions,
    1.0 = on plan); ``eta_late_s = eta_s - planned eta_s`` (s; above 0: later than planned).
    Returns None without a plan; each figure None when either side is missing (a ratio also
    when the planned figure is not above 0).
    """
    if not isinstance(planned, dict):
        return None

    def number(x):
        ok = isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
        return float(x) if ok else None

    def over(achieved, plan_value):
        a, p = number(achieved), number(plan_value)
        return a / p if a is not None and p is not None and p > 0 else None

    eta, planned_eta = number(eta_s), number(planned.get("eta_s"))
    return {
        "tokens_per_s": over(tokens_per_s, planned.get("tokens_per_s")),
        "mfu": over(mfu, planned.get("mfu")),
        "eta_late_s": eta - planned_eta if eta is not None and planned_eta is not None else None,
    }


JOULES_PER_KWH = 3.6e6
"""Joules in one kilowatt-hour (1000 W x 3600 s), by definition of the kWh."""


class PlanError(ValueError):
    """Inputs a run cannot be planned with; the message is one line naming the problem."""


@dataclass(frozen=True)
class RunPlan:
    """A training run planned before it starts (``tm plan``; docs/spec.md "Planning a run").

    Every ``dict`` attribute is keyed by FLOPs convention in ``flops.CONVENTIONS`` order (``hf``,
    ``megatron``, ``titan``, ``embeddings``); ``convention`` names the default one that a
    printer shows first. A figure is None where its convention has no FLOPs per token.
    Treat the dicts as read-only.

    Attributes:
        params: all unique parameters (count).
        params_without_embeddings: ``params - embedding_params`` (count), Hugging Face's
            ``num_parameters(exclude_embeddings=True)``.
        embedding_params: weights of every embedding table (count).
        tokens: the token budget (tokens).
        convention: the default convention (``flops.DEFAULT_CONVENTION``).
        flops_per_token: training FLOPs per token (FLOP/token), ``flops.flops_per_token``.
        training_flops: ``flops_per_token * tokens`` (FLOP).
        gpu: the device's peaks-table label, or the name as given with a declared peak.
        dtype: the dtype the peak is for (a name in ``peaks.DTYPES``, or as declared).
        peak_flops: dense peak of one device (FLOP/s).
        peak_source: "table" (peaks table) or "declared" (``--peak``).
        gpus: devices (count).
        mfu: the assumed MFU (fraction), read under each convention in turn.
        mfu_source: "default" (``DEFAULT_PLAN_MFU``) or "declared".
        tokens_per_s: ``plan().tokens_per_s``, all devices (tokens/s).
        wall_s: ``plan().eta_s`` for the whole budget (s).
        gpu_hours: ``gpus * wall_s / 3600`` (GPU-hours).
        board_power_w: board power of one device (W, the table's TDP); None when unknown.
        energy_kwh: ``gpus * board_power_w * wall_s / 3.6e6`` (kWh); None without a board power.
        price_per_gpu_hour: the price given (currency per GPU-hour), or None.
        cost: ``price_per_gpu_hour * gpu_hours`` (currency); None without a price.
    """

    params: int
    params_without_embeddings: int
    embedding_params: int
    tokens: int
    convention: str
    flops_per_token: dict[str, float | None]
    training_flops: dict[str, float | None]
    gpu: str
    dtype: str
    peak_flops: float
    peak_source: str
    gpus: int
    mfu: float
    mfu_source: str
    tokens_per_s: dict[str, float | None]
    wall_s: dict[str, float | None]
    gpu_hours: dict[str, float | None]
    board_power_w: float | None
    energy_kwh: dict[str, float | None]
    price_per_gpu_hour: float | None
    cost: dict[str, float | None] | None

    def as_dict(self) -> dict:
        """Every attribute under its own name, as plain JSON-ready data."""
        return asdict(self)


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _resolve_gpu(
    gpu: str | None, dtype: str, peak_flops: float | None
) -> tuple[peaks.ResolvedPeak, float | None]:
    row = peaks.find_gpu(gpu) if gpu else None
    if peak_flops is not None:
        if not _number(peak_flops) or peak_flops <= 0:
            raise PlanError(f"the declared peak must be a finite FLOP/s > 0, got {peak_flops!r}")
        device = row.label if row is not None else (gpu or "declared")
        resolved = peaks.resolve_peak(device, dtype, float(peak_flops))
        return resolved, None if row is None else row.tdp_w
    if not gpu:
        raise PlanError("no GPU: name one (--gpu h100-sxm) or declare its peak (--peak 989.5T)")
    if row is None:
        raise PlanError(
            f"unknown GPU {gpu!r}: not in the peaks table (tm peaks lists it); pass --peak "
            "with its dense FLOP/s"
        )
    name = peaks.normalize_dtype(dtype)
    flops_per_s = row.peak_flops(name) if name else None
    if flops_per_s is None:
        raise PlanError(
            f"{row.label} has no dense {dtype} rate in the peaks table; pass --peak or another "
            "--dtype"
        )
    return peaks.ResolvedPeak(flops_per_s, name, row.label, "table", row.citation,
                              row.verified), row.tdp_w  # fmt: skip


def plan_run(
    shape: flops.ModelShape,
    tokens: int,
    gpu: str | None = None,
    gpus: int = 1,
    *,
    mfu: float | None = None,
    price: float | None = None,
    dtype: str = "bf16",
    peak_flops: float | None = None,
    convention: str = flops.DEFAULT_CONVENTION,
) -> RunPlan:
    """Plan a training run: FLOPs, time, GPU-hours, energy and cost under every convention.

    Inputs: ``shape`` (a ``flops.ModelShape``, e.g. ``presets.preset("llama3-8b").arch.shape()``);
    ``tokens`` (token budget, int > 0); ``gpu`` (a GPU as ``peaks.find_gpu`` takes it:
    "h100-sxm", "H100 SXM", "NVIDIA H100 80GB HBM3"); ``gpus`` (devices, int >= 1); ``mfu``
    (fraction in (0, 1]; None assumes ``DEFAULT_PLAN_MFU``); ``price`` (per GPU-hour, >= 0;
    None for no cost); ``dtype`` (the peak's dtype, default "bf16"); ``peak_flops`` (a declared
    dense peak of one device in FLOP/s, replacing the table's; with it ``gpu`` may be unknown
    or None); ``convention`` (the default one, first when printed).
    Formulas, per convention c: ``training_flops = flops_per_token[c] * tokens`` (FLOP);
    ``tokens_per_s`` and ``wall_s`` from :func:`plan` (``mfu * peak * gpus / flops_per_token``,
    then ``tokens / tokens_per_s``: the MFU definition, PaLM appendix B, solved for time);
    ``gpu_hours = gpus * wall_s / 3600``; ``energy_kwh = gpus * board_power_w * wall_s /
    3.6e6`` at the table's board power (TDP); ``cost = price * gpu_hours``.
    Leaves out: evals, checkpoints, restarts and data stalls (as :func:`plan`); energy of
    CPUs, network and cooling, and GPUs drawing less than their TDP.
    Raises: PlanError (a ValueError) for a token budget <= 0, no GPU and no peak, an unknown
    GPU without ``peak_flops``, a dtype the GPU has no rate for, ``gpus`` < 1, an MFU outside
    (0, 1], a negative or non-finite price; ValueError for an unknown convention.
    """
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens <= 0:
        raise PlanError(f"the token budget must be a whole number of tokens > 0, got {tokens!r}")
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise PlanError(f"the GPU count must be a whole number >= 1, got {gpus!r}")
    if mfu is not None and (not _number(mfu) or not 0 < mfu <= 1):
        raise PlanError(f"the MFU must be a fraction in (0, 1] (0.40 for 40 %), got {mfu!r}")
    if price is not None and (not _number(price) or price < 0):
        raise PlanError(f"the price per GPU-hour must be a finite number >= 0, got {price!r}")
    if convention not in flops.CONVENTIONS:
        flops.flops_per_token(shape, convention)  # raises the listing ValueError
    peak, board_w = _resolve_gpu(gpu, dtype, peak_flops)
    per_token = flops.all_conventions(shape)
    total, rate, wall, hours, energy, cost = {}, {}, {}, {}, {}, {}
    for name, fpt in per_token.items():
        p = plan(peak.flops, gpus, fpt, 0, tokens, mfu)
        total[name] = None if fpt is None else fpt * tokens
        rate[name] = None if p is None else p.tokens_per_s
        wall[name] = None if p is None else p.eta_s
        hours[name] = None if wall[name] is None else gpus * wall[name] / 3600
        energy[name] = (
            None if wall[name] is None or board_w is None
            else gpus * board_w * wall[name] / JOULES_PER_KWH
        )  # fmt: skip
        cost[name] = None if hours[name] is None or price is None else price * hours[name]
    return RunPlan(
        params=shape.params,
        params_without_embeddings=shape.params - shape.embedding_params,
        embedding_params=shape.embedding_params,
        tokens=tokens,
        convention=convention,
        flops_per_token=per_token,
        training_flops=total,
        gpu=peak.device,
        dtype=peak.dtype,
        peak_flops=peak.flops,
        peak_source=peak.source,
        gpus=gpus,
        mfu=DEFAULT_PLAN_MFU if mfu is None else float(mfu),
        mfu_source=DEFAULT_PLAN_SOURCE if mfu is None else "declared",
        tokens_per_s=rate,
        wall_s=wall,
        gpu_hours=hours,
        board_power_w=board_w,
        energy_kwh=energy,
        price_per_gpu_hour=None if price is None else float(price),
        cost=None if price is None else cost,
    )


__all__ = [
    "DEFAULT_PLAN_MFU",
    "JOULES_PER_KWH",
    "Plan",
    "PlanError",
    "RunPlan",
    "plan",
    "plan_run",
    "planned_tokens_per_s",
    "versus",
]
