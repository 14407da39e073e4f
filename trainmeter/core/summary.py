"""The one-line summary printed when a ``tm`` run or a ``%%trainmeter`` cell ends.

Pure formatting of a snapshot (see :mod:`trainmeter.core.engine`); every FLOPs or MFU figure
carries its convention's name (the named-convention invariant).
"""

from __future__ import annotations

from typing import Any

from trainmeter.core.drops import drop_text
from trainmeter.core.reasons import labelled, tagged
from trainmeter.core.units import format_duration, format_si


def summary_line(snap: dict[str, Any]) -> str:
    """``trainmeter: finished · 40 steps · 163.8 k tokens · ...`` from a snapshot dict; a run
    whose inputs are not token ids (``tokens_missing``) gives its samples first, says why it
    has no tokens; HFU [counted] (executed FLOPs) follows MFU, or stands alone without one."""
    run = snap.get("run") or {}
    conv = snap.get("convention") or "?"
    fpt = (snap.get("flops_per_token") or {}).get(conv)
    state = state_text(run)
    if run.get("exit_code"):
        state += f" (exit {run['exit_code']})"
    process = snap.get("process")
    if isinstance(process, dict) and not snap.get("model") and not snap.get("step"):
        # tm attach: no agent inside, so steps, tokens and FLOPs are unknown, not zero
        parts = [f"trainmeter: {state}", f"watched process {process.get('pid', '?')} from "
                 "outside (no agent: no steps, tokens or FLOPs)"]  # fmt: skip
        return " · ".join([*parts, *_tail(snap, run)])
    parts = [f"trainmeter: {state}", f"{snap.get('step', 0)} steps"]
    no_tokens = snap.get("tokens_missing")
    if isinstance(no_tokens, str) and no_tokens:  # images, audio, tabular rows: samples first
        counted = snap.get("flops_per_sample_counted")
        parts += [format_si(snap.get("samples"), "samples"), samples_text(snap),
                  f"no tokens: {no_tokens}"]  # fmt: skip
        if counted is not None:
            parts.append(f"{format_si(counted, 'FLOP/sample')} [counted]")
    else:
        parts += [
            f"{format_si(snap.get('tokens'), 'tokens')}",
            *rates_text(snap),
            fpt_text(snap, conv, fpt),
        ]
    mfu = (snap.get("mfu_avg") or {}).get(conv)
    hfu = (snap.get("hfu_counted") or {}).get("avg")
    if mfu is not None:
        parts.append(f"MFU {percent_text(mfu)} [{conv}]")
    if isinstance(hfu, (int, float)):  # executed FLOPs: beside MFU, never called MFU
        parts.append(f"HFU {percent_text(hfu)} [counted]")
    demo = snap.get("demonstration")
    if isinstance(demo, dict) and demo.get("text"):  # fake GPUs: "demonstration: 2 × fake H100"
        parts.append(str(demo["text"]))
    return " · ".join([*parts, *_tail(snap, run)])


def fpt_text(snap: dict[str, Any], conv: str, fpt: Any) -> str:
    """FLOPs per token under ``conv``: "5.83 MFLOP/token [titan]", or the core's reason for
    its absence as the passport writes it: "n/a [titan] (titan needs layers, heads, ...)"."""
    why = (snap.get("reasons") or {}).get(f"flops_per_token/{conv}")
    if fpt is None and isinstance(why, str) and why:
        return tagged(why, conv)
    return f"{format_si(fpt, 'FLOP/token')} [{conv}]"


def rates_text(snap: dict[str, Any]) -> list[str]:
    """The run's mean tokens/s and samples/s, or the core's reason for each that is missing in
    its short form ("tokens/s: not measured (the run had no two steps in one segment, so no
    step was timed)"), said once for both when it is the same; the passport's throughput row
    says the same reason."""
    why = snap.get("reasons") if isinstance(snap.get("reasons"), dict) else {}
    tokens, samples = why.get("tokens_per_s_avg"), why.get("samples_per_s_avg")
    if snap.get("tokens_per_s_avg") is None and isinstance(tokens, str) and tokens:
        if snap.get("samples_per_s_avg") is None and samples == tokens:
            per = _per_step(snap)
            return [
                labelled("tokens/s and samples/s", tokens),
                *([f"{per} samples/step"] if per else []),
            ]
        return [labelled("tokens/s", tokens), samples_text(snap)]
    return [format_si(snap.get("tokens_per_s_avg"), "tokens/s"), samples_text(snap)]


def percent_text(fraction: float) -> str:
    """``"41.2%"``; a tiny nonzero fraction with two significant digits, never ``"0.0%"``."""
    pct = 100 * fraction
    return f"{pct:.2g}%" if 0 < abs(pct) < 0.1 else f"{pct:.1f}%"


def samples_text(snap: dict[str, Any]) -> str:
    """``"3.28 k samples/s (16/step)"``: the run's mean samples/s (``samples_per_s_avg``) and
    the job's samples per step (``samples_per_step``), as the snapshot has them; without a
    mean, the core's reason in its short form ("samples/s: not measured (...)")."""
    per = _per_step(snap)
    why = (snap.get("reasons") or {}).get("samples_per_s_avg")
    if snap.get("samples_per_s_avg") is None and isinstance(why, str) and why:
        return labelled("samples/s", why) + (f" · {per} samples/step" if per else "")
    step = f" ({per}/step)" if per else ""
    return f"{format_si(snap.get('samples_per_s_avg'), 'samples/s')}{step}"


def _per_step(snap: dict[str, Any]) -> str:
    """The job's samples per step (``samples_per_step``): "16", "2.5"; "" when unknown."""
    per = snap.get("samples_per_step")
    if not isinstance(per, (int, float)) or isinstance(per, bool):
        return ""
    return str(int(per)) if float(per).is_integer() else format_si(per)


def state_text(run: dict[str, Any]) -> str:
    """The run's state in words: ``state_text`` when the engine gave one ("ended without a
    close (supervisor stopped at 14:03:27)"), else ``state`` ("finished", "running", ...)."""
    text = run.get("state_text")
    return text if isinstance(text, str) and text else str(run.get("state") or "idle")


def _tail(snap: dict[str, Any], run: dict[str, Any]) -> list[str]:
    """The elapsed time and, when known, the log's path."""
    log = [f"log {run['log']}"] if run.get("log") else []
    said = [merged_text(snap.get("steps_merged")), drop_text(snap.get("dropped")),
            (snap.get("log") or {}).get("text")]  # fmt: skip
    return [format_duration(snap.get("elapsed_s")), *(s for s in said if s), *log]


def merged_text(merged: Any) -> str | None:
    """``"1,200 steps merged into 3 records (supervisor not reading)"`` from a snapshot's
    ``steps_merged`` (steps the agent merged while its outbound buffer was full: counted
    whole, docs/reliability.md "The training process"), or None when none were."""
    if not isinstance(merged, dict) or not merged.get("records"):
        return None
    m = merged["records"]
    return (
        f"{merged.get('steps', 0):,} steps merged into {m:,} record{'' if m == 1 else 's'} "
        "(supervisor not reading)"
    )
