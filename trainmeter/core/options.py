"""A run's options: what the person launched it with (``tm`` flags, ``%%trainmeter`` flags), in
one frozen record, parsed from the typed text by one function for both surfaces.

:func:`run_options` turns the flags' text into :class:`RunOptions` (every value checked, each
error one line naming its flag); :meth:`RunOptions.record` is the ``opts`` object of the run
log's ``run_start`` and ``segment_start`` records (docs/spec.md "Run log"). Physics only: a price
is never an option (the physics-not-prices invariant). The engine reads a log's ``opts`` back
through one function, :func:`from_record`, which never raises (a log always replays).

Pure standard library.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from trainmeter.core import flops, peaks
from trainmeter.core.units import (
    MAX_FLOPS_BUDGET,
    MAX_PEAK,
    flag_value,
    parse_flops,
    parse_flops_budget,
    parse_token_budget,
    quoted,
)

PAD_MODES = ("count", "skip")


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """The options of one run (or one notebook segment); None where the person gave none.

    Raises:
        ValueError from ``__post_init__`` for a value out of its range or of the wrong type.
    """

    budget_tokens: int | None = None
    """Token budget for progress and ETA (tokens, > 0, at most ``units.MAX_COUNT``)."""
    budget_flops: float | None = None
    """Training FLOPs budget for progress and ETA (FLOP, finite, up to ``MAX_FLOPS_BUDGET``)."""
    convention: str | None = None
    """The FLOPs convention shown first (one of ``flops.CONVENTIONS``); None: the default."""
    peak_flops: float | None = None
    """Declared dense peak per device (FLOP/s, finite, >= 1, at most ``MAX_PEAK``)."""
    device: str | None = None
    """GPU named for the peak lookup (an NVML name, row label or short name of core/peaks.py);
    a name the table does not know only beside a declared ``peak_flops``."""
    dtype: str | None = None
    """The run's dtype for the peak (one of ``peaks.DTYPES``); None: what the agent sees."""
    pad_tokens: str | None = None
    """Tokens per step: ``count`` every position or ``skip`` padding (``PAD_MODES``); None in a
    notebook segment, which has no such flag (``count``)."""

    def __post_init__(self) -> None:
        bt, bf, peak = self.budget_tokens, self.budget_flops, self.peak_flops
        if bt is not None and (isinstance(bt, bool) or not isinstance(bt, int) or bt <= 0):
            raise ValueError(f"budget_tokens must be a count > 0, got {bt!r}")
        if bf is not None and not _finite_in(bf, 0.0, MAX_FLOPS_BUDGET):
            raise ValueError(f"budget_flops must be FLOPs in (0, {MAX_FLOPS_BUDGET:g}], got {bf!r}")
        if peak is not None and not _finite_in(peak, 1.0, MAX_PEAK):
            raise ValueError(f"peak_flops must be FLOP/s in [1, {MAX_PEAK:g}], got {peak!r}")
        if self.convention is not None and self.convention not in flops.CONVENTIONS:
            raise ValueError(f"convention must be one of {', '.join(flops.CONVENTIONS)}")
        if self.dtype is not None and self.dtype not in peaks.DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(peaks.DTYPES)}")
        if self.pad_tokens is not None and self.pad_tokens not in PAD_MODES:
            raise ValueError(f"pad_tokens must be one of {', '.join(PAD_MODES)}")

    def record(self) -> dict:
        """The run log's ``opts`` object: every field by name (None where not given)."""
        return asdict(self)


@dataclass(frozen=True, kw_only=True)
class LoggedOptions(RunOptions):
    """A run log's ``opts`` as the engine reads them (:func:`from_record`): the launch options,
    and those only a log carries (no flag of ``tm`` or ``%%trainmeter`` gives them)."""

    attached: int | None = None
    """The pid ``tm attach`` watches (its runs only)."""
    gpus: float | None = None
    """Devices MFU divides by off CUDA, a number as logged (the engine uses it when > 0)."""
    plan_mfu: float | None = None
    """The MFU the plan assumes, a number as logged (the engine plans with the default, and
    says so, when it is not a fraction in (0, 1])."""


def from_record(opts: Any) -> LoggedOptions:
    """The options of a run log's ``opts`` object (``run_start``'s, updated by each
    ``segment_start``'s): each launch option that passes its own check in :class:`RunOptions`
    (a count written as a whole float, ``2e10``, read as the int), and the log-only options that
    are numbers (``attached``: a whole number). A value no flag could give (an old or hand-made
    log's) is read as not given; keys of no option (``prometheus``) are left out.

    Never raises: whatever ``opts`` holds, even not a mapping, the log replays.
    """
    opts = opts if isinstance(opts, Mapping) else {}
    kept: dict[str, Any] = {}
    for f in fields(RunOptions):
        value = opts.get(f.name)
        if f.name == "budget_tokens" and isinstance(value, float) and value.is_integer():
            value = int(value)
        try:
            RunOptions(**{f.name: value})  # this one field's check
        except (TypeError, ValueError):
            continue
        kept[f.name] = value
    for name in ("gpus", "plan_mfu", "attached"):
        value = opts.get(name)
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if number and (name != "attached" or isinstance(value, int)):
            kept[name] = value
    return LoggedOptions(**kept)


def _finite_in(x: object, low: float, high: float) -> bool:
    ok = isinstance(x, (int, float)) and not isinstance(x, bool)
    return ok and math.isfinite(x) and low <= x <= high and (x > 0 if low == 0 else True)


def run_options(*, budget_tokens: str | None = None, budget_flops: str | None = None,
                convention: str | None = None, peak: str | None = None,
                device: str | None = None, dtype: str | None = None,
                pad_tokens: str | None = None) -> RunOptions:  # fmt: skip
    """:class:`RunOptions` from the flags' text as typed (``tm`` and ``%%trainmeter`` alike;
    None: the flag was not given; an empty value is refused, not taken as none).

    Raises:
        ValueError: one line naming the flag and what it takes ("--peak: ...").
    """

    def given(flag, parse, text):
        return None if text is None else flag_value(flag, parse, text)

    peak_flops = given("--peak", parse_flops, peak)
    return RunOptions(
        budget_tokens=given("--budget-tokens", parse_token_budget, budget_tokens),
        budget_flops=given("--budget-flops", parse_flops_budget, budget_flops),
        convention=convention,
        peak_flops=peak_flops,
        device=device_name(device, peak_flops),
        dtype=None if dtype is None else parse_dtype(dtype),
        pad_tokens=pad_tokens,
    )


def device_name(name: str | None, peak_flops: float | None) -> str | None:
    """``--device`` as typed, after ``peaks.check_gpu``: a name the table does not know is
    refused unless ``peak_flops`` (FLOP/s, a declared peak) labels it.

    Raises: ValueError "--device: unknown GPU ... (did you mean ...?)" naming close names.
    """
    if name is not None and not name.strip():
        raise ValueError("--device: give a GPU name (tm peaks lists them)")
    try:
        peaks.check_gpu(name, peak_flops)
    except peaks.UnknownGPUError as exc:
        raise ValueError(f"--device: {exc}") from None
    return name


def parse_dtype(text: str) -> str:
    """A dtype name or alias (``bf16``, ``bfloat16``, ``torch.float16`` ...) -> one of
    ``peaks.DTYPES``.

    Raises: ValueError naming the forms.
    """
    dtype = peaks.normalize_dtype(text)
    if dtype is None:
        raise ValueError(f"unknown dtype {quoted(text)}: use one of {', '.join(peaks.DTYPES)}")
    return dtype
