"""The run passport: a finished run's model-card summary, built from the engine's snapshot.

:func:`build` turns a snapshot (docs/spec.md "Snapshot") into a plain JSON-able dict and
:func:`flat` lays it out as named scalars for the trackers (``tm export``); its Markdown for
people is ``core/passport_md.py``. All are pure: no clock, no files, no figure computed here
that the snapshot does not hold, except unit changes (J to kWh) and date formatting. The names and
figures follow the dashboard's passport panel (``js/panels/passport.js``): parameters with and
without embeddings, FLOPs spent under the convention shown first with every other convention
beside it, MFU and throughput (tokens/s and samples/s) as run averages, samples per step, the
counted step's executed FLOPs per token and per sample with HFU [counted] beside MFU,
GPU-hours, energy, hardware, dtype, dates.

A figure that is not known is ``None`` (null in JSON) and ``unknown`` names why, keyed by its
dotted path (``"mfu.value": "no dense peak is known for cpu; ..."``); the Markdown prints
"unknown (why)". Nothing is ever filled in by guess (the named-convention invariant: every FLOPs or
MFU figure carries its convention's name).

Standard library only.
"""

from __future__ import annotations

import math
import time
from typing import Any

from trainmeter.core import reasons
from trainmeter.core.flops import CONVENTIONS, DEFAULT_CONVENTION

PASSPORT_VERSION = 1  # the passport's own schema; bumped when a key changes meaning
J_PER_KWH = 3.6e6  # 1 kWh = 1000 W x 3600 s (definition)

WHY_NO_MODEL = "no model seen: the agent reports it at the first training forward pass"
WHY_ATTACHED = "no agent: tm attach watched the process from outside (docs/attach.md)"
WHY_NO_SHAPE = "the model record lacks a shape field this convention needs"  # no field list
WHY_NO_TIMED_STEP = "no timed step: throughput needs two optimizer steps in one segment"
WHY_NO_SAMPLES = "no samples counted: the root model's inputs had no batch axis the agent read"
WHY_NOT_COUNTED = "not measured: one step under torch.utils.flop_counter.FlopCounterMode"
_SUMMARY_KEYS = (  # passport keys that go to a tracker's summary under their own name
    "steps", "tokens", "samples", "samples_per_step", "duration_s", "wall_s", "gpu_hours",
    "energy_j", "energy_kwh", "tokens_per_s_avg", "samples_per_s_avg", "flops_per_token_counted",
    "flops_per_sample_counted",
)  # fmt: skip
_MODEL_KEYS = ("name", "layers", "width", "heads", "vocab", "seq_len", "context")


def build(snap: dict[str, Any], *, version: str | None = None) -> dict[str, Any]:
    """The passport of the run a snapshot describes.

    Args:
        snap: an :class:`~trainmeter.core.engine.Engine` snapshot (a finished run's, normally:
            a running one gives the figures so far, with no end date).
        version: the trainmeter version writing the passport (``written_by``); the version that
            recorded the run is the snapshot's ``run.version``.
    Returns:
        A JSON-able dict; keys and units in docs/spec.md "Passport and exports". Counts are
        ints, FLOPs in FLOP, FLOPs per token in FLOP/token, energy in J and kWh, durations in s,
        MFU a fraction, throughput in tokens/s, dates ISO 8601 UTC.
    Raises:
        Nothing for a snapshot of the documented shape; a missing key reads as unknown.
    """
    why: dict[str, str] = {}
    run = _dict(snap.get("run"))
    out: dict[str, Any] = {
        "passport": PASSPORT_VERSION,
        "run": {k: run.get(k) for k in ("id", "name", "state", "exit_code")}
        | _unclosed(run, _dict(snap.get("log"))),
        "trainmeter_version": _known(
            run.get("version"), why, "trainmeter_version", "not in the run log's run_start record"
        ),
        "written_by": version,
        "wording": reasons.WORDING,  # the revision of the reasons' words (core/reasons.py)
    }
    out.update(_dates(run, snap.get("elapsed_s"), why))
    out["model"] = _model(snap.get("model"), why)
    out["steps"] = snap.get("step")
    out["tokens"] = snap.get("tokens")
    out["samples"] = snap.get("samples")
    no_tokens = _text(snap.get("tokens_missing"))  # the core's reason: inputs not token ids
    no_samples = WHY_NO_SAMPLES if not snap.get("samples") else WHY_NO_TIMED_STEP
    out["samples_per_step"] = _known(
        snap.get("samples_per_step"), why, "samples_per_step", WHY_NO_SAMPLES
    )
    out.update(_flops(snap, why))
    out.update(_hardware(snap, why))
    out["mfu"] = _mfu(snap, out["convention"], why)
    out["hfu_counted"] = _hfu(snap, why)
    out["tokens_per_s_avg"] = _known(
        snap.get("tokens_per_s_avg"), why, "tokens_per_s_avg", no_tokens or WHY_NO_TIMED_STEP
    )
    out["samples_per_s_avg"] = _known(
        snap.get("samples_per_s_avg"), why, "samples_per_s_avg", no_samples
    )
    out["ranks"] = _ranks(snap)
    out["time_split"] = _known(_dict(snap.get("time_split")) or None, why, "time_split",
                               "not in the snapshot")  # fmt: skip
    out["time_share"] = _dict(snap.get("time_share")) or None
    if isinstance(snap.get("process"), dict):  # tm attach: no agent was ever inside
        agent = (WHY_NO_MODEL, WHY_NO_TIMED_STEP, WHY_NO_SAMPLES)
        facts = reasons.facts_of(snap)  # the core's words (core/reasons.py)
        attached = reasons.attach_reason(facts.attached, facts.open)
        why = {k: attached if v in agent or k == "hfu_counted.value" else v
               for k, v in why.items()}  # fmt: skip
    said = snap.get("reasons")  # the core's; a snapshot without them gets them worked out
    said = said if isinstance(said, dict) else reasons.reasons(snap, reasons.facts_of(snap))
    out["unknown"] = _core_reasons(why, said, out["convention"])
    out["notes"] = [str(n) for n in snap.get("notes") or []]
    return out


def _reason_key(key: str, conv: str) -> str | None:
    """The snapshot's ``reasons`` key (core/reasons.py) for a passport ``unknown`` key."""
    head, _, c = key.rpartition(".")
    if head in ("flops_per_token", "flops_spent"):
        return f"{head}/{c}"
    if head == "mfu.by_convention":
        return f"mfu_avg/{c}"
    if key == "mfu.value":
        return f"mfu_avg/{conv}"
    return _REASON_OF.get(key)


_REASON_OF = {"model": "model", "dtype": "dtype", "peak": "peak", "hardware.device": "device",
              "gpu_hours": "gpu_hours", "energy_j": "energy_j", "energy_kwh": "energy_j",
              "tokens_per_s_avg": "tokens_per_s_avg", "samples_per_s_avg": "samples_per_s_avg",
              "time_split": "time_split",
              "flops_per_token_counted": "flops_per_token_counted", "ended": "ended",
              "wall_s": "ended"}  # fmt: skip


def _core_reasons(why: dict[str, str], said: dict[str, Any], conv: str) -> dict[str, str]:
    """``why`` with each reason the core gave for the same figure (the snapshot's
    ``reasons``, which every surface shows as written) in place of the passport's own."""
    out = {}
    for key, reason in why.items():
        core = said.get(_reason_key(key, conv) or "")
        out[key] = core if isinstance(core, str) and core else reason
    return out


def _ranks(snap: dict) -> dict[str, Any] | None:
    """Per rank (runs of two or more ranks; None otherwise): ``count``, ``stragglers`` and
    ``by_rank`` {rank: ``steps``, ``step_time_s``, ``lag_s`` (arrival behind the median rank),
    ``job_wait_s`` (what the job waits per step on it) and ``job_wait_share`` (of the step
    time), ``time_split`` (s per bucket), and for a straggler ``rule`` and ``cause``}, each
    the snapshot's own figure (docs/spec.md "Stragglers"), null where it has none."""
    steps = _dict(snap.get("ranks"))
    if len(steps) < 2:
        return None
    keys = (("step_time_s", "rank_step_time_s"), ("lag_s", "rank_lag_s"),
            ("job_wait_s", "straggler_cost_s"), ("job_wait_share", "straggler_share"),
            ("time_split", "rank_time_split"), ("rule", "straggler_rule"),
            ("cause", "straggler_cause"))  # fmt: skip
    by = {k: _dict(snap.get(src)) for k, src in keys}
    stragglers = snap.get("stragglers")
    return {
        "count": len(steps),
        "stragglers": list(stragglers) if isinstance(stragglers, list) else None,
        "by_rank": {
            r: {"steps": n, **{k: by[k].get(r) for k, _ in keys}} for r, n in steps.items()
        },
    }


def _dict(x: Any) -> dict[str, Any]:
    return x if isinstance(x, dict) else {}


def _text(x: Any) -> str | None:
    """``x`` when it is a non-empty string (a reason the core gave), else None."""
    return x if isinstance(x, str) and x else None


def finite_number(x: Any) -> bool:
    """A finite int or float (not a bool)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _known(value: Any, why: dict[str, str], key: str, reason: str) -> Any:
    """``value``, noting ``reason`` under ``key`` when it is None."""
    if value is None:
        why[key] = reason
    return value


def iso_utc(t: float | None) -> str | None:
    """Seconds since the Unix epoch as ISO 8601 in UTC, to the second: ``2023-11-14T22:13:20Z``
    (None for None). Source: ISO 8601-1:2019, the ``Z`` designator for UTC."""
    if not finite_number(t):
        return None
    try:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))
    except (OverflowError, OSError, ValueError):  # a time beyond what the C library takes
        return None


def _dates(run: dict, elapsed: Any, why: dict[str, str]) -> dict[str, Any]:
    """``started``/``ended`` (ISO UTC), ``duration_s`` (time inside segments, what GPU-hours
    counts) and ``wall_s`` (end less start, the gaps between notebook cells included)."""
    start, end = run.get("started"), run.get("ended")
    if not finite_number(start):
        why["started"] = "no run_start record in the log"
    if not finite_number(end):
        why["ended"] = (
            "no run_end record in the log: the run is still open, or its supervisor "
            "was killed before it could close the log"
        )
    # a log whose run_end is older than its run_start (hand-edited, clocks moved): no negative
    wall = max(0.0, end - start) if finite_number(start) and finite_number(end) else None
    if wall is None:
        why["wall_s"] = why.get("ended") or why["started"]
    return {
        "started": iso_utc(start),
        "ended": iso_utc(end),
        "duration_s": elapsed if finite_number(elapsed) else None,
        "wall_s": wall,
    }


def _model(m: Any, why: dict[str, str]) -> dict[str, Any] | None:
    """Name, shape and parameter counts (``params_without_embeddings``: the function of that
    name)."""
    if not isinstance(m, dict):
        why["model"] = WHY_NO_MODEL
        return None
    params, emb = m.get("params"), m.get("embedding_params")
    without = params_without_embeddings(m)
    out = {
        "name": m.get("name"),
        "params": params,
        "params_without_embeddings": without,
        "embedding_params": emb,
    }
    out.update({k: m.get(k) for k in _MODEL_KEYS[1:]})
    for k in ("params", "params_without_embeddings", "embedding_params"):
        if out[k] is None:
            why[f"model.{k}"] = "not in the agent's model record"
    return out


def params_without_embeddings(model: Any) -> int | float | None:
    """``params - embedding_params`` of a model record (count): what ``transformers``'
    ``num_parameters(exclude_embeddings=True)`` gives (docs/spec.md "FLOPs per token"); the
    snapshot's ``params_without_embeddings`` and the passport's. None when either count is not
    a finite number (or ``model`` is not a record)."""
    if not isinstance(model, dict):
        return None
    params, emb = model.get("params"), model.get("embedding_params")
    return params - emb if finite_number(params) and finite_number(emb) else None


def why_missing(convention: str, fields: list[str] | tuple[str, ...]) -> str:
    """Why ``convention`` has no figure: ``"megatron needs ffn, vocab, which the model record
    lacks"``. ``fields`` come from :func:`trainmeter.core.flops.missing_fields` (the snapshot's
    ``flops_per_token_missing``); the dashboard builds the same words (js/derive.js
    ``fptMissingWhy``)."""
    return f"{convention} needs {', '.join(fields)}, which the model record lacks"


def _fpt_why(snap: dict, convention: str) -> str:
    """The reason a convention's FLOPs per token is unknown: no convention describes the
    model (``conventions_missing``: its inputs are not token ids), else the missing fields."""
    none_apply = _text(snap.get("conventions_missing"))
    if none_apply:
        return none_apply
    if not _dict(snap.get("flops_per_token")):
        return WHY_NO_MODEL
    fields = _dict(snap.get("flops_per_token_missing")).get(convention)
    if isinstance(fields, list) and fields and all(isinstance(f, str) for f in fields):
        return why_missing(convention, fields)
    return WHY_NO_SHAPE


def _flops(snap: dict, why: dict[str, str]) -> dict[str, Any]:
    """FLOPs per token and FLOPs spent (tokens x FLOPs per token) under every convention, by
    name, as the snapshot has them; the counted figure beside them, never in their place."""
    conv = snap.get("convention") or DEFAULT_CONVENTION
    fpt, spent = _dict(snap.get("flops_per_token")), _dict(snap.get("flops_spent"))
    names = [c for c in CONVENTIONS if c in fpt] + sorted(c for c in fpt if c not in CONVENTIONS)
    if not names:
        names = list(CONVENTIONS)
    out = {"convention": conv, "flops_per_token": {}, "flops_spent": {}}
    for c in names:
        reason = _fpt_why(snap, c)
        out["flops_per_token"][c] = _known(fpt.get(c), why, f"flops_per_token.{c}", reason)
        out["flops_spent"][c] = _known(spent.get(c), why, f"flops_spent.{c}", reason)
    out["flops_per_token_counted"] = _known(
        snap.get("flops_per_token_counted"),
        why,
        "flops_per_token_counted",
        _text(snap.get("tokens_missing")) or WHY_NOT_COUNTED,
    )
    out["flops_per_sample_counted"] = _known(
        snap.get("flops_per_sample_counted"), why, "flops_per_sample_counted", WHY_NOT_COUNTED
    )
    return out


def _device_name(snap: dict) -> str | None:
    """The device as a person names it: the model's NVML name, the sampler's first GPU, the
    peak's device, the model's device; a declared peak's "unknown" device is skipped, and so
    are a demonstration's fake GPUs (the run trained on the model's own device)."""
    m, peak = _dict(snap.get("model")), _dict(snap.get("peak"))
    gpus = [g for g in _dict(snap.get("hardware")).get("gpus") or [] if isinstance(g, dict)]
    if snap.get("demonstration"):
        gpus, peak = [], {}
    named = [
        m.get("device_name"),
        gpus[0].get("name") if gpus else None,
        peak.get("device"),
        m.get("device"),
    ]
    return next((n for n in named if isinstance(n, str) and n and n != "unknown"), None)


def _hardware(snap: dict, why: dict[str, str]) -> dict[str, Any]:
    """Hardware (device name, count, the sampler's devices), GPU-hours, energy, dtype, peak."""
    hw = _dict(snap.get("hardware"))
    gpus = snap.get("gpus")
    sampled = [g for g in hw.get("gpus") or [] if isinstance(g, dict)]
    devices = [str(g.get("name")) for g in sampled]
    # a merged run's GPUs each name their node (tm merge); a node's own run: null
    nodes = [g.get("node") if isinstance(g.get("node"), str) else None for g in sampled]
    unnamed = "the agent and the GPU sampler named no device"
    demo = _dict(snap.get("demonstration"))
    device = _known(_device_name(snap), why, "hardware.device", unnamed)
    # the run's own device with its count, as the engine says it (``device_text``; never a fake
    # GPU's): what the dashboard's header and passport show
    text = snap.get("device_text")
    if text is None and device and "device_text" not in snap:  # a snapshot written by hand
        text = f"{gpus} × {device}" if isinstance(gpus, int) and gpus > 1 else device
    no_gpus = (
        "no GPUs counted: the run trained on "
        f"{device or 'no known device'} and no peak was declared"
    )  # the core's reason replaces it (_core_reasons)
    gpu_hours = _known(
        snap.get("gpu_hours"),
        why,
        "gpu_hours",
        no_gpus if not gpus else "the run has no elapsed time",
    )
    energy = snap.get("energy_j")
    if energy is None:
        source = hw.get("reason") or (
            "no GPU sampler reading in the log" if not hw else "no GPU reported its energy counter"
        )
        why["energy_j"] = why["energy_kwh"] = (
            f"not measured: it comes from the GPUs' NVML energy counter; {source}"
        )
    dtype = snap.get("dtype") or _dict(snap.get("model")).get("run_dtype")
    run_dtype = _dict(snap.get("model")).get("run_dtype") or dtype  # the agent's own
    peak = snap.get("peak")
    if peak is None:
        why["peak"] = _peak_why(snap, device)
    return {
        "gpus": gpus,
        "gpu_hours": gpu_hours,
        "energy_j": energy,
        "energy_kwh": energy / J_PER_KWH if finite_number(energy) else None,
        "hardware": {
            "device": device,
            "count": gpus,
            "devices": devices,
            "device_nodes": nodes if any(n is not None for n in nodes) else None,
            "backend": hw.get("backend"),
            "text": text,
            "demonstration": demo.get("text"),  # fake GPUs: "demonstration: 2 × fake H100"
        },
        "dtype": _known(dtype, why, "dtype", "not seen by the agent; declare it with --dtype"),
        "run_dtype": run_dtype,
        "peak": {k: peak.get(k) for k in ("flops", "dtype", "device", "source", "citation")}
        if isinstance(peak, dict)
        else None,
    }


def _peak_why(snap: dict, device: str | None) -> str:
    """The engine's own "no MFU" note, else the same sentence built here."""
    for n in snap.get("notes") or []:
        if isinstance(n, str) and n.startswith("no MFU: "):
            return n[len("no MFU: ") :]
    return f"no dense peak is known for {device or 'unknown'}; declare one with --peak"


def _mfu(snap: dict, conv: str, why: dict[str, str]) -> dict[str, Any]:
    """MFU over the whole run (``mfu_avg``: at ``tokens_per_s_avg``) under the convention shown
    first, and under each convention by name."""
    by = _dict(snap.get("mfu_avg"))
    names = list(_dict(snap.get("flops_per_token"))) or list(CONVENTIONS)
    if _text(snap.get("conventions_missing")):
        reason = snap["conventions_missing"]
    elif snap.get("peak") is None:
        reason = _peak_why(snap, _device_name(snap))
    elif snap.get("tokens_per_s_avg") is None:
        reason = WHY_NO_TIMED_STEP
    else:
        reason = None
    out_by = {}
    for c in names:
        r = reason or f"no FLOPs per token under {c}: {_fpt_why(snap, c)}"
        out_by[c] = _known(by.get(c), why, f"mfu.by_convention.{c}", r)
    value = out_by.get(conv, by.get(conv))
    if value is None:
        why["mfu.value"] = reason or f"no FLOPs per token under {conv}: {_fpt_why(snap, conv)}"
    return {"convention": conv, "value": value, "average": "run", "by_convention": out_by}


def _hfu(snap: dict, why: dict[str, str]) -> dict[str, Any]:
    """HFU [counted] over the whole run (``hfu_counted.avg``: the counted step's executed FLOPs
    per token or per sample at the run's mean rate, over the devices' dense peak), never an
    MFU; ``per`` says which. Unknown: the engine's reason (``hfu_counted.why``)."""
    h = _dict(snap.get("hfu_counted"))
    value = h.get("avg")
    if value is None:
        why["hfu_counted.value"] = _text(h.get("why")) or WHY_NOT_COUNTED
    return {"label": "HFU [counted]", "value": value, "average": "run", "per": h.get("per")}


# -- Markdown -------------------------------------------------------------------------------
def _unclosed(run: dict, log: dict) -> dict[str, str]:
    """What a replay could not know, when it says so: ``state_text`` ("ended without a close
    (supervisor stopped at 14:03:27)") and ``log_skipped`` ("replay skipped 3 line(s) (...)")."""
    out = {}
    if isinstance(run.get("state_text"), str):
        out["state_text"] = run["state_text"]
    if isinstance(log.get("text"), str):
        out["log_skipped"] = log["text"]
    return out


def flat(p: dict[str, Any]) -> tuple[dict[str, Any], dict[str, float]]:
    """The passport as ``(config, summary)`` for a tracker (``tm export``).

    ``config``: the run's descriptive facts (strings, counts, the convention shown first and
    every convention's name). ``summary``: every number, under a name that carries its
    convention where it has one (``flops_spent/hf``, ``flops_per_token/megatron``,
    ``mfu_avg/titan``) and its unit where the bare name would not say it (``energy_kwh``).
    Unknown figures are left out of both (the passport's ``unknown`` says why).
    """
    run, model, hw = p.get("run") or {}, p.get("model") or {}, p.get("hardware") or {}
    peak = p.get("peak") or {}
    config = {
        "run_id": run.get("id"),
        "run_name": run.get("name"),
        "state": run.get("state"),
        "exit_code": run.get("exit_code"),
        "started": p.get("started"),
        "ended": p.get("ended"),
        "trainmeter_version": p.get("trainmeter_version"),
        "convention": p.get("convention"),
        "conventions": ",".join(p.get("flops_per_token") or {}),
        "mfu_average": "run",
        "model": model.get("name"),
        "device": hw.get("device"),
        "gpus": p.get("gpus"),
        "backend": hw.get("backend"),
        "dtype": p.get("dtype"),
        "peak_source": peak.get("source"),
        "peak_citation": peak.get("citation"),
        "hfu_counted_per": (p.get("hfu_counted") or {}).get("per"),
    }
    summary: dict[str, Any] = {
        "params": model.get("params"),
        "params_without_embeddings": model.get("params_without_embeddings"),
        "peak_flops_per_s": peak.get("flops"),
        **{k: p.get(k) for k in _SUMMARY_KEYS},
    }
    for key in ("flops_per_token", "flops_spent"):
        summary.update({f"{key}/{c}": v for c, v in (p.get(key) or {}).items()})
    by = (p.get("mfu") or {}).get("by_convention") or {}
    summary.update({f"mfu_avg/{c}": v for c, v in by.items()})
    summary["hfu_counted_avg"] = (p.get("hfu_counted") or {}).get("value")  # executed FLOPs
    ranks = p.get("ranks") or {}
    if isinstance(ranks.get("stragglers"), list):
        summary["stragglers"] = len(ranks["stragglers"])
        for r in ranks["stragglers"]:
            f = (ranks.get("by_rank") or {}).get(str(r)) or {}
            summary[f"straggler_job_wait_s/rank{r}"] = f.get("job_wait_s")
    return (
        {k: v for k, v in config.items() if v is not None},
        {k: v for k, v in summary.items() if finite_number(v)},
    )
