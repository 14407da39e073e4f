"""``tm plan``: the FLOPs, time, GPU-hours, energy and cost of a training run, before renting GPUs.

Thin: parse the flags, read the model (preset, ``config.json`` or explicit sizes), call
:func:`trainmeter.core.plan.plan_run`, print. Nothing is written anywhere: the price in
particular lives only in this process. Definitions: docs/spec.md "Planning a run (`tm plan`)".
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import math
import sys
from pathlib import Path

from trainmeter.commands.args import Parser, dtype_arg
from trainmeter.core import flops, peaks, plan, presets
from trainmeter.core.units import format_duration, format_si, parse_count, parse_flops, quoted

_SHAPE_FLAGS = ("layers", "width", "heads", "kv_heads", "ffn", "vocab", "context")
_NEEDED_WITHOUT_MODEL = ("layers", "width", "heads", "vocab", "context")


class PlanUsageError(Exception):
    """A problem with what was typed; the message is the one line ``tm plan`` prints."""


def _tokens(text: str) -> int:
    try:
        value = parse_count(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"the token budget must be > 0, got {quoted(text)}")
    return value


MAX_SIZE = 10**12  # a model dimension or GPU count beyond this is a typo (no model is near it)
MAX_PRICE = 1e6  # per GPU-hour: beyond any list price by far, and finite


def _whole(text: str) -> int:
    """A size typed as a plain whole number (no K/M suffix: "8k" context is ambiguous), at
    most :data:`MAX_SIZE`."""
    try:
        value = int(text.replace("_", ""))
    except ValueError:  # also past int's 4300-digit limit
        value = 0
    if not 0 < value <= MAX_SIZE:
        raise argparse.ArgumentTypeError(f"{quoted(text)} is not a whole number from 1 to 1e12")
    return value


def _mfu(text: str) -> float:
    t = text.strip()
    percent = t.endswith("%")
    try:
        value = float(t.rstrip("%")) / (100 if percent else 1)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{quoted(text)} is not a fraction (0.40) or a percent (40%)"
        ) from None
    if not math.isfinite(value) or not 0 < value <= 1:
        hint = f"; did you mean {value / 100:g} ({text}%)?" if 1 < value <= 100 else ""
        raise argparse.ArgumentTypeError(f"{quoted(text)} is not an MFU in (0, 1]{hint}")
    return value


def _price(text: str) -> float:
    try:
        value = float(text.strip().lstrip("$"))
    except ValueError:
        value = -1.0
    if not math.isfinite(value) or not 0 <= value <= MAX_PRICE:
        raise argparse.ArgumentTypeError(f"{quoted(text)} is not a price per GPU-hour from 0 "
                                         "to 1e6 (2.49)")  # fmt: skip
    return value + 0.0  # -0 is 0: "$-0" is no price


def _peak(text: str) -> float:
    try:
        return parse_flops(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _whole_count(text: str) -> int:
    try:
        return _whole(text)
    except argparse.ArgumentTypeError:
        why = f"{quoted(text)} is not a GPU count from 1 to 1e12"
        raise argparse.ArgumentTypeError(why) from None


def parser() -> argparse.ArgumentParser:
    """The ``tm plan`` argument parser (flags documented in docs/spec.md)."""
    names = ", ".join(p.name for p in presets.presets())
    p = Parser(prog="tm plan", prefix="tm plan",
                description="Plan a training run before renting GPUs: parameters, FLOPs per "
                "token under every convention, training FLOPs, wall time, GPU-hours, energy "
                "and (with --price) cost. Writes nothing.")  # fmt: skip
    p.add_argument("model", nargs="?", metavar="MODEL",
                   help=f"a preset ({names}), a Hugging Face config.json (or its folder), or "
                        "nothing with --layers/--width/--heads/--vocab/--context")  # fmt: skip
    p.add_argument("--tokens", type=_tokens, metavar="N", help="token budget (20B, 2e10)")
    p.add_argument("--gpu", metavar="NAME",
                   help="GPU from the peaks table: a short name (h100-sxm, a100-80gb, h200, "
                        "b200, mi300x, ...), its row label or its NVML name (tm peaks lists "
                        "them)")  # fmt: skip
    p.add_argument("--gpus", type=_whole_count, default=1, metavar="N",
                   help="how many GPUs (default 1)")  # fmt: skip
    p.add_argument(
        "--mfu",
        type=_mfu,
        metavar="F",
        help=f"assumed MFU, a fraction (default {plan.DEFAULT_PLAN_MFU:.2f})",
    )
    p.add_argument(
        "--price",
        type=_price,
        metavar="P",
        help="price per GPU-hour; shows cost (printed only, never written)",
    )
    p.add_argument(
        "--peak",
        type=_peak,
        metavar="FLOP/s",
        help="dense peak per GPU, replacing the table's (989.5T)",
    )
    p.add_argument(
        "--dtype",
        type=dtype_arg,
        default="bf16",
        help="the dtype the peak is for: bf16 (default), fp16, tf32, fp8, fp32",
    )
    p.add_argument("--convention", choices=flops.CONVENTIONS, default=flops.DEFAULT_CONVENTION,
                   help="FLOPs convention shown first (all are computed)")  # fmt: skip
    p.add_argument("--json", action="store_true", help="print JSON")
    g = p.add_argument_group("model shape (explicit, or replacing the MODEL's)")
    g.add_argument("--layers", type=_whole, metavar="N", help="transformer blocks")
    g.add_argument("--width", type=_whole, metavar="N", help="d_model")
    g.add_argument("--heads", type=_whole, metavar="N", help="query heads")
    g.add_argument("--kv-heads", type=_whole, metavar="N", help="key/value heads (GQA)")
    g.add_argument("--ffn", type=_whole, metavar="N", help="MLP hidden size (default 4 x width)")
    g.add_argument("--vocab", type=_whole, metavar="N", help="vocabulary size")
    g.add_argument("--context", type=_whole, metavar="N",
                   help="tokens per training sequence (replaces the config's)")  # fmt: skip
    g.add_argument("--gated-mlp", action=argparse.BooleanOptionalAction, default=None,
                   help="a 3-matrix (SwiGLU) MLP, or not")  # fmt: skip
    g.add_argument("--tied-embeddings", action=argparse.BooleanOptionalAction, default=None,
                   help="the output head reuses the token table, or not")  # fmt: skip
    return p


def _value_flags(p: argparse.ArgumentParser) -> set[str]:
    return {o for a in p._actions if a.nargs is None for o in a.option_strings}


def _join_negative_values(argv: list[str], p: argparse.ArgumentParser) -> list[str]:
    """``--tokens -5B`` as ``--tokens=-5B``, so a negative value reaches its check."""
    flags, out, i = _value_flags(p), [], 0
    while i < len(argv):
        a = argv[i]
        nxt = argv[i + 1] if i + 1 < len(argv) else None
        if a in flags and nxt and nxt.startswith("-") and not nxt.startswith("--") and nxt != "-h":
            out.append(f"{a}={nxt}")
            i += 2
            continue
        out.append(a)
        i += 1
    return out


def architecture(args: argparse.Namespace) -> tuple[dict, presets.Architecture]:
    """The model to plan: ``({"name", "source", "title", "overrides"}, Architecture)``.

    MODEL is a preset name (``presets.preset``; a preset wins over a folder of the same name),
    else a path to a ``config.json`` or a folder holding one. Without MODEL the shape flags
    describe the model (layers, width, heads, vocab and context needed; ffn 4 x width, kv heads
    = heads, plain MLP, untied, no biases, RMSNorm, no position table: the reference model's
    layout). Shape flags given with a MODEL replace its values. Raises PlanUsageError (one
    line) or presets.ConfigError.
    """
    given = {k: getattr(args, k) for k in _SHAPE_FLAGS if getattr(args, k) is not None}
    flags = {k: v for k in ("gated_mlp", "tied_embeddings")
             if (v := getattr(args, k)) is not None}  # fmt: skip
    overrides = {**given, **flags}
    if args.model is None:
        missing = [f"--{k.replace('_', '-')}" for k in _NEEDED_WITHOUT_MODEL if k not in given]
        if missing:
            names = ", ".join(p.name for p in presets.presets())
            raise PlanUsageError(
                f"no model: give a preset ({names}), a config.json, or the shape flags "
                f"(missing {', '.join(missing)})"
            )
        arch = presets.Architecture(**{"ffn": 4 * given["width"], **overrides})
        return {"name": "flags", "source": "flags", "title": None, "overrides": []}, arch
    found = presets.preset(args.model)
    if found is not None:
        info = {"name": found.name, "source": "preset", "title": found.title}
        arch = found.arch
    elif _looks_like_a_file(args.model):
        info = {"name": args.model, "source": "config", "title": None}
        arch = presets.read_hf_config(args.model, context=args.context)
    else:
        names = [p.name for p in presets.presets()] + [a for p in presets.presets()
                                                       for a in p.aliases]  # fmt: skip
        close = difflib.get_close_matches(args.model.lower(), names, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise PlanUsageError(
            f"unknown model {quoted(args.model)}: not a preset "
            f"({', '.join(p.name for p in presets.presets())}) nor a config.json file{hint}"
        )
    info["overrides"] = sorted(overrides)
    return info, dataclasses.replace(arch, **overrides) if overrides else arch


def _looks_like_a_file(model: str) -> bool:
    try:
        exists = Path(model).exists()
    except (OSError, ValueError):  # a name too long, or with a NUL: no such file
        exists = False
    return exists or model.endswith(".json") or "/" in model


def run(argv: list[str]) -> tuple[argparse.Namespace, dict, plan.RunPlan]:
    """Parse ``argv`` and plan: ``(args, model, RunPlan)``.

    ``model`` is :func:`architecture`'s info merged with ``Architecture.as_dict()``.
    Raises PlanUsageError, presets.ConfigError or plan.PlanError (one line each); SystemExit(2)
    from the parser for a bad flag or value.
    """
    p = parser()
    args, extra = p.parse_known_args(_join_negative_values(argv, p))
    if extra:
        p.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.tokens is None:
        raise PlanUsageError("no token budget: give --tokens (20B, 2e10)")
    info, arch = architecture(args)
    try:
        peaks.check_gpu(args.gpu, args.peak)
    except peaks.UnknownGPUError as exc:
        raise PlanUsageError(str(exc)) from None
    result = plan.plan_run(arch.shape(), args.tokens, args.gpu, args.gpus, mfu=args.mfu,
                           price=args.price, dtype=args.dtype, peak_flops=args.peak,
                           convention=args.convention)  # fmt: skip
    return args, {**info, **arch.as_dict()}, result


def as_json(model: dict, result: plan.RunPlan) -> dict:
    """The ``--json`` object: ``{"model": {...}, **RunPlan.as_dict()}`` (docs/spec.md)."""
    return {"model": model, **result.as_dict()}


def _order(result: plan.RunPlan) -> list[str]:
    return [result.convention, *(c for c in flops.CONVENTIONS if c != result.convention)]


def _hours(x: float | None) -> str:
    if x is None:
        return "n/a"
    return f"{x:,.0f}" if x >= 100 else f"{x:,.1f}"


def _count(x: int) -> str:
    """A count with 3 significant digits and K/M/B/T (B for 1e9, as counts are typed)."""
    return format_si(x).replace(" k", " K").replace(" G", " B")


def _sci(x: float | None) -> str:
    if x is None:
        return "n/a"
    mantissa, exponent = f"{x:.3e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def _shape_line(m: dict) -> str:
    kv = m["kv_heads"]
    heads = f"{m['heads']} heads" + (f" ({kv} KV)" if kv != m["heads"] else "")
    mlp = "gated MLP" if m["gated_mlp"] else "MLP"
    tied = "tied" if m["tied_embeddings"] else "untied"
    return (f"{m['layers']} layers, width {m['width']}, {heads} of {m['head_dim']}, {mlp} "
            f"{m['ffn']}, vocab {m['vocab']}, context {m['context']}, {tied} "
            "embeddings")  # fmt: skip


def lines(model: dict, r: plan.RunPlan) -> list[str]:
    """The text report: the run, then one row per convention (the default first)."""
    if model["source"] == "preset":
        what = f"{model['name']} (preset: {model['title']})"
    elif model["source"] == "config":
        what = f"{model['name']} (config.json)"
    else:
        what = "explicit shape (flags)"
    if model["overrides"]:
        what += f", with {', '.join('--' + k.replace('_', '-') for k in model['overrides'])}"
    emb = r.embedding_params
    peak = f"{r.peak_flops / 1e12:g} TFLOP/s"
    source = "peaks table" if r.peak_source == "table" else "declared with --peak"
    power = f"{r.board_power_w:g} W board power each" if r.board_power_w else "board power unknown"
    why = ("default: PaLM Table 3, docs/spec.md" if r.mfu_source == "default"
           else "declared with --mfu")  # fmt: skip
    out = [
        f"tm plan: {what}",
        f"  model       {_shape_line(model)}",
        f"  parameters  {r.params:,} total ({_count(r.params)}), "
        f"{r.params_without_embeddings:,} without embeddings "
        f"({_count(r.params_without_embeddings)}; embeddings {emb:,})",
        f"  budget      {r.tokens:,} tokens ({_count(r.tokens)})",
        f"  hardware    {r.gpus} x {r.gpu}, dense {r.dtype} peak {peak} each ({source}), {power}",
        f"  MFU         {r.mfu:.2f} assumed ({why})",
        "",
    ]
    head = ["convention", "FLOP/token", "training FLOP", "tokens/s", "wall time", "GPU-hours",
            "energy kWh"]  # fmt: skip
    if r.cost is not None:
        head.append("cost $")
    rows = []
    for c in _order(r):
        cells = [
            c + (" (default)" if c == r.convention else ""),
            format_si(r.flops_per_token[c], "", 4),
            _sci(r.training_flops[c]),
            format_si(r.tokens_per_s[c], "", 4),
            format_duration(r.wall_s[c]),
            _hours(r.gpu_hours[c]),
            _hours(r.energy_kwh[c]),
        ]
        if r.cost is not None:
            cells.append("n/a" if r.cost[c] is None else f"{r.cost[c]:,.2f}")
        rows.append(cells)
    widths = [max(len(row[i]) for row in [head, *rows]) for i in range(len(head))]
    for row in [head, *rows]:
        text = [row[0].ljust(widths[0])] + [
            v.rjust(w) for v, w in zip(row[1:], widths[1:], strict=True)
        ]
        out.append("  " + "  ".join(text).rstrip())
    out += [
        "",
        f"  Each row assumes MFU {r.mfu:.2f} counted in that row's FLOPs convention; "
        f"{r.convention} is the default (docs/spec.md).",
        "  Wall time leaves out evals, checkpoints, restarts and data stalls; energy is the "
        "GPUs at board power only.",
    ]
    if r.cost is not None:
        out.append(f"  cost = ${r.price_per_gpu_hour:g} per GPU-hour x GPU-hours (printed here, "
                   "never stored).")  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    """``tm plan ...``: print the plan (text or ``--json``); 0, or 2 with one line on error."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args, model, result = run(argv)
    except (PlanUsageError, ValueError) as exc:
        print(f"tm plan: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(as_json(model, result), indent=2))
    else:
        print("\n".join(lines(model, result)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
