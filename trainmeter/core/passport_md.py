"""The run passport for people: :func:`markdown` renders a passport (``core/passport.py``
``build``) as a Markdown document, one table of figures, a "Ranks" section for a run of several
ranks, then the notes. Pure: nothing is computed here that the passport does not hold, except
unit changes and number formatting, which follow the dashboard's (``js/format.js``).

Standard library only.
"""

from __future__ import annotations

from typing import Any

from trainmeter.core.passport import J_PER_KWH, finite_number
from trainmeter.core.reasons import split, tagged
from trainmeter.core.units import format_duration, format_si


def markdown(p: dict[str, Any]) -> str:
    """The passport as a Markdown document: a title, one table of figures, then the notes.

    Every FLOPs and MFU figure is followed by its convention's name in brackets (``[titan]``),
    the convention shown first leading; an unknown figure reads "unknown (why)".
    """
    why = p.get("unknown") or {}
    run = p.get("run") or {}
    title = run.get("name") or run.get("id") or "run"

    def fig(key: str, fmt) -> str:
        return _or(p.get(key), why, key, fmt)

    rows = [
        ("run", f"{run.get('name') or '?'} (`{run.get('id') or '?'}`)"),
        ("state", _state(run)),
        ("model", _model_md(p.get("model"), why)),
        ("parameters", _params_md(p.get("model"), why)),
        ("tokens", _tokens_md(p, why)),
        ("samples", _samples_md(p)),
        ("steps", _count(p.get("steps"))),
        ("FLOPs spent", _flops_md(p, "flops_spent", "FLOP", why)),
        ("FLOPs per token", _flops_md(p, "flops_per_token", "FLOP/token", why)),
        ("FLOPs per token, counted", fig("flops_per_token_counted", _counted_md("token"))),
        ("FLOPs per sample, counted", fig("flops_per_sample_counted", _counted_md("sample"))),
        ("MFU", _mfu_md(p, why)),
        ("HFU", _hfu_md(p, why)),
        ("throughput", _throughput_md(p, why)),
        ("GPU-hours", fig("gpu_hours", lambda v: f"{v:.4g} GPU·h")),
        ("energy", fig("energy_j", _energy_md)),
        ("hardware", _hardware_md(p, why)),
        ("dtype", fig("dtype", lambda v: dtype_text(p.get("run_dtype"), v))),
        ("peak", _peak_md(p.get("peak"), why)),
        ("started", fig("started", str)),
        ("ended", fig("ended", str)),
        ("duration", _duration_md(p)),
        ("where the time goes", _split_md(p, why)),
        ("trainmeter", _version_md(p, why)),
    ]  # fmt: skip
    lines = [f"# Run passport: {_cell(title)}", "", "| figure | value |", "|---|---|"]
    lines += [f"| {k} | {_cell(v)} |" for k, v in rows]
    lines += _ranks_md(p.get("ranks"))
    notes = p.get("notes") or []
    if notes:
        lines += ["", "## Notes", ""] + [f"- {_cell(n)}" for n in notes]
    return "\n".join(lines) + "\n"


MAX_RANK_ROWS = 64  # ranks listed one per row in the Markdown (the rest are counted)
_SPLIT_MD = ("compute", "data", "checkpoint", "eval", "wait", "startup", "other")


def _ranks_md(ranks: Any) -> list[str]:
    """The passport's "Ranks" section: the stragglers in words, then one row per rank."""
    if not isinstance(ranks, dict):
        return []
    by = ranks.get("by_rank") or {}
    flagged = ranks.get("stragglers")
    lines = ["", f"## Ranks ({ranks.get('count')})", ""]
    if flagged is None:
        lines.append("Stragglers: not evaluated (fewer than two ranks with timed steps).")
    elif not flagged:
        lines.append("Stragglers: none.")
    for r in flagged or []:
        lines.append(f"- {_straggler_md(str(r), by.get(str(r)) or {})}")
    head = ["rank", "steps", "step time", "lag", "job waits", *_SPLIT_MD]
    lines += ["", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r, f in list(by.items())[:MAX_RANK_ROWS]:
        split = f.get("time_split") or {}
        cells = [r, _count(f.get("steps")), _secs(f.get("step_time_s")), _secs(f.get("lag_s")),
                 _secs(f.get("job_wait_s")), *(_secs(split.get(b)) for b in _SPLIT_MD)]  # fmt: skip
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    if len(by) > MAX_RANK_ROWS:
        lines.append(f"\n{len(by) - MAX_RANK_ROWS:,} more ranks in the JSON passport.")
    return lines


_RULE_MD = {"lag": "arrival lag", "interval": "step interval",
            "lag+interval": "arrival lag and step interval"}  # fmt: skip


def _straggler_md(rank: str, f: dict) -> str:
    """One straggler in words: 'rank 2 (flagged by arrival lag): the job waits 38.1 ms per step
    on it (12.0% of step time); cause: data loader (...)'."""
    rule = _RULE_MD.get(f.get("rule"), f.get("rule"))
    text = f"rank {rank}" + (f" (flagged by {rule})" if rule else "")
    if finite_number(f.get("job_wait_s")):
        text += f": the job waits {_secs(f['job_wait_s'])} per step on it"
        if finite_number(f.get("job_wait_share")):
            text += f" ({_pct(f['job_wait_share'])} of step time)"
    return text + (f"; cause: {f['cause']}" if f.get("cause") else "")


def _secs(x: Any) -> str:
    """Seconds for a table cell: "38.1 ms" below one second, else :func:`format_duration`."""
    if not finite_number(x):
        return "–"
    return f"{x * 1000:.3g} ms" if abs(x) < 1 else format_duration(x)


def _cell(text: Any) -> str:
    """Text safe inside a Markdown table cell (training code names it: no pipes, one line)."""
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _unknown(why: dict, key: str) -> str:
    """The reason, as the core wrote it when it has a headline ("not measured: ..."), else
    "unknown (why)"."""
    reason = why.get(key, "not recorded")
    return reason if split(reason)[1] else f"unknown ({reason})"


def _tagged(reason: str, convs: str) -> str:
    """A missing figure of one or more conventions: "n/a [titan] (titan needs ...)"."""
    return tagged(reason, convs) if split(reason)[1] else f"unknown [{convs}] ({reason})"


# time_split's buckets and their names on the dashboard (js/derive.js SPLIT): they add up to
# the elapsed time
SPLIT_NAMES = (("compute", "compute"), ("data", "data wait"), ("checkpoint", "checkpoint"),
               ("eval", "eval"), ("startup", "start-up"), ("other", "other"))  # fmt: skip


def _split_md(p: dict, why: dict) -> str:
    """Rank 0's time per bucket, as its share and seconds: "compute 31.4% (5.97 s) · ..."."""
    split, share = p.get("time_split"), p.get("time_share") or {}
    if not isinstance(split, dict):
        return _unknown(why, "time_split")
    parts = []
    for key, name in SPLIT_NAMES:
        v, f = split.get(key), share.get(key)
        if finite_number(v) and finite_number(f):
            parts.append(f"{name} {_pct(f)} ({_secs(v)})")
    return " · ".join(parts) + " of the run's time (rank 0)"


def dtype_text(run_dtype: Any, dtype: Any) -> str:
    """The run's dtype as the agent saw it, and the one its peak is read for when that differs
    (``--dtype``): "fp32 (the peak is read for bf16: --dtype)"."""
    if run_dtype and dtype and run_dtype != dtype:
        return f"{run_dtype} (the peak is read for {dtype}: --dtype)"
    return str(dtype or run_dtype)


def _or(value: Any, why: dict, key: str, fmt) -> str:
    return _unknown(why, key) if value is None else fmt(value)


def _count(n: Any) -> str:
    return f"{n:,}" if isinstance(n, int) and not isinstance(n, bool) else format_si(n)


def _big(n: Any) -> str:
    """A large count exactly and with an SI prefix: "1,037,117,440 (1.04 G)"."""
    return f"{_count(n)} ({format_si(n)})" if finite_number(n) and abs(n) >= 1e6 else _count(n)


def _state(run: dict) -> str:
    code = run.get("exit_code")
    text = run.get("state_text") if isinstance(run.get("state_text"), str) else None
    state = f"{text or run.get('state') or 'unknown'}"
    state += f" (exit code {code})" if code is not None else ""
    skipped = run.get("log_skipped")
    return state + (f"; {skipped}" if isinstance(skipped, str) else "")


def _model_md(m: Any, why: dict) -> str:
    if m is None:
        return _unknown(why, "model")
    parts = [str(m["name"])] if m.get("name") else []
    if m.get("layers") and m.get("width"):
        parts.append(f"{m['layers']} layers × {m['width']}")
    if m.get("heads"):
        parts.append(f"{m['heads']} heads")
    if m.get("vocab"):
        parts.append(f"vocab {_count(m['vocab'])}")
    if m.get("seq_len"):
        parts.append(f"sequence {_count(m['seq_len'])}")
    return " · ".join(parts) or "unnamed"


def _params_md(m: Any, why: dict) -> str:
    if m is None:
        return _unknown(why, "model")
    total = _or(m.get("params"), why, "model.params", _big)
    without = _or(m.get("params_without_embeddings"), why, "model.params_without_embeddings", _big)
    return f"{total}; without embeddings {without}"


def _by_conv(vals: dict, conv: Any, key: str, fmt, why: dict) -> str:
    """Known figures first (the convention shown first leading), then the unknown ones
    grouped by reason: "5.83 GFLOP [hf] · unknown [megatron, titan] (why)"."""
    order = ([conv] if conv in vals else []) + [c for c in vals if c != conv]
    parts, unknown = [], {}
    for c in order:
        if vals[c] is None:
            unknown.setdefault(why.get(f"{key}.{c}", "not recorded"), []).append(c)
        else:
            parts.append(f"{fmt(vals[c])} [{c}]")
    parts += [_tagged(r, ", ".join(cs)) for r, cs in unknown.items()]
    return " · ".join(parts)


def _flops_md(p: dict, key: str, unit: str, why: dict) -> str:
    return _by_conv(p.get(key) or {}, p.get("convention"), key, lambda v: format_si(v, unit), why)


def _pct(f: float) -> str:
    """A fraction as a percentage, as the dashboard prints it (js/format.js ``percent``)."""
    pct = 100 * f
    if pct != 0 and abs(pct) < 0.01:
        return f"{pct:.2g}%"
    return f"{pct:.2f}%" if pct != 0 and abs(pct) < 1 else f"{pct:.1f}%"


def _mfu_md(p: dict, why: dict) -> str:
    mfu = p.get("mfu") or {}
    by = mfu.get("by_convention") or {}
    kinds = {why.get(f"mfu.by_convention.{c}") for c in by}
    if all(v is None for v in by.values()) and len(kinds) <= 1:  # one reason for all: the shown
        return _tagged(why.get("mfu.value", "not recorded"), str(mfu.get("convention")))
    if all(v is None for v in by.values()):  # each convention's own reason
        return _by_conv(by, mfu.get("convention"), "mfu.by_convention", _pct, why)
    row = _by_conv(by, mfu.get("convention"), "mfu.by_convention", _pct, why)
    return row + " · run averages"


def _tokens_md(p: dict, why: dict) -> str:
    """The token count; "none (why)" for a run fed samples and no token id (the engine's
    ``tokens_missing``, which its unknown tokens/s gives: "none (the model's inputs are not
    token ids ...)")."""
    reason = why.get("tokens_per_s_avg")
    if not p.get("tokens") and p.get("samples") and reason:
        head, rest = split(reason)
        return f"none ({rest or head})"
    return _big(p.get("tokens"))


def _samples_md(p: dict) -> str:
    """The sample count and the job's samples per step: "480 (16 per step)"."""
    per = p.get("samples_per_step")
    if not finite_number(per):
        return _big(p.get("samples"))
    return (
        f"{_big(p.get('samples'))} ({int(per) if float(per).is_integer() else format_si(per)}"
        " per step)"
    )


def _throughput_md(p: dict, why: dict) -> str:
    """Tokens/s and samples/s as run means; samples/s first for a run without tokens."""
    tok, smp = p.get("tokens_per_s_avg"), p.get("samples_per_s_avg")
    t = _or(tok, why, "tokens_per_s_avg", lambda v: format_si(v, "tokens/s"))
    s = _or(smp, why, "samples_per_s_avg", lambda v: format_si(v, "samples/s"))
    if tok is None and smp is None:
        return t
    if tok is None:
        return f"{s} (mean over the timed steps, not samples over elapsed time) · tokens/s {t}"
    return f"{t} · {s} (means over the timed steps, not counts over elapsed time)"


def _counted_md(unit: str):
    def fmt(v: float) -> str:
        return f"{format_si(v, f'FLOP/{unit}')} (executed, measured once; beside MFU, not in it)"

    return fmt


def _hfu_md(p: dict, why: dict) -> str:
    """HFU [counted]: executed FLOPs of the counted step over the dense peak, a run average."""
    h = p.get("hfu_counted") or {}
    if h.get("value") is None:
        return _unknown(why, "hfu_counted.value")
    per = h.get("per") or "unit"
    return (f"{_pct(h['value'])} [counted] (executed FLOPs per {per} of the counted step × "
            f"{per}s/s over the devices' dense peak; run average; beside MFU, not in "
            "it)")  # fmt: skip


def _energy_md(j: float) -> str:
    kwh = j / J_PER_KWH
    shown = f"{kwh * 1000:.3g} Wh" if kwh < 1e-3 else f"{kwh:.3g} kWh"
    return f"{shown} ({format_si(j, 'J')}, NVML energy counter)"


def _hardware_md(p: dict, why: dict) -> str:
    """The run's own device with its count ("2 × NVIDIA H100 80GB HBM3", "cpu (0 GPUs
    counted)"), a demonstration's fake GPUs, the counters' backend, a merged run's GPUs by node
    (js/derive.js ``hardwareText`` says the same)."""
    hw = p.get("hardware") or {}
    parts = []
    if hw.get("text"):
        parts.append(f"{hw['text']}{' (0 GPUs counted)' if hw.get('count') == 0 else ''}")
    if hw.get("demonstration"):  # fake GPUs: "demonstration: 2 × fake H100"
        parts.append(f"{hw['demonstration']}, not a measurement")
    if not parts:
        return _unknown(why, "hardware.device")
    if hw.get("backend"):
        parts.append(f"counters: {hw['backend']}")
    text = " · ".join(parts)
    nodes = hw.get("device_nodes")
    if isinstance(nodes, list) and any(isinstance(n, str) for n in nodes):
        per = {}  # a merged run: its GPUs per node, in the order listed
        for n in nodes:
            per[n] = per.get(n, 0) + 1
        text += " · GPUs by node: " + ", ".join(f"{n} {k}" for n, k in per.items())
    return text


def _peak_md(peak: Any, why: dict) -> str:
    if peak is None:
        return _unknown(why, "peak")
    text = f"{format_si(peak.get('flops'), 'FLOP/s')} per device, dense {peak.get('dtype')}"
    if peak.get("source") == "declared":
        return f"{text} (declared with --peak)"
    cite = peak.get("citation")
    return f"{text} (peaks table: {short_citation(cite)})" if cite else text


def short_citation(citation: str) -> str:
    """A citation's document title: the text before its URL, its first "(" or ";" (the full
    citation is in the JSON)."""
    cut = len(citation)
    for mark in (", http", " / http", " (", ";"):
        i = citation.find(mark)
        if i > 0:
            cut = min(cut, i)
    return citation[:cut].strip(" ,/")


def _duration_md(p: dict) -> str:
    text = format_duration(p["duration_s"]) if p.get("duration_s") is not None else "unknown"
    wall, dur = p.get("wall_s"), p.get("duration_s")
    if wall is not None and dur is not None and abs(wall - dur) >= 0.05:
        text += f" training ({format_duration(p['wall_s'])} from start to end)"
    return text


def _version_md(p: dict, why: dict) -> str:
    rec = _or(p.get("trainmeter_version"), why, "trainmeter_version", str)
    w = p.get("written_by")
    return rec + (f" (passport written by {w})" if w and w != p.get("trainmeter_version") else "")


# -- flat figures for the trackers ------------------------------------------------------------
