"""Why a figure is missing, decided once: the snapshot's ``reasons``.

Every surface (the page and the widget, ``tm passport``, the summary line) shows a figure the
snapshot does not hold with the reason written here, as written: none of them picks its own
words. A reason is ``"<headline>: <why>"``: the headline says what the figure is instead of a
number ("n/a", "not measured", "no MFU", "no GPUs", "no ETA", "no agent"), the rest says why
("titan needs layers, heads, which the model record lacks"). The dashboard shows the headline
large and the rest small; the passport and the summary line write ``headline [convention]
(why)`` for a figure of one convention (:func:`tagged`).

Each reason follows from the run's state (:class:`RunFacts`), never from a default: a run that
is still open (no ``run_end`` yet: running, or a notebook between cells) may say "yet", a
finished one never does, since nothing will come.

``WORDING`` numbers these words: a change of what a reason says bumps it, so that ``tm passport``
rebuilds a stored passport written in older words (``supervisor/passport_files.py``).
``tests/unit/test_wording.py`` pins a fingerprint of this module's strings beside it, and fails,
saying what to bump, when the words change and it does not.

Pure and standard library only (``trainmeter/core`` is).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainmeter.core.flops import CONVENTIONS

NOT_YET = "not measured yet"
NOT = "not measured"
NA = "n/a"
MAX_REASON = 300  # characters of one reason, plain ASCII (a bounded snapshot: _ascii)
MAX_NAME_IN_REASON = 64  # characters of a device or convention name quoted in a reason
PER_CONVENTION = ("flops_per_token", "flops_spent", "mfu", "mfu_avg", "model_flops_per_s_per_gpu")
"""Keys whose reasons are per convention: ``reasons["mfu/titan"]``."""
SINGLE = ("model", "dtype", "peak", "device", "flops_per_token_counted", "tokens_per_s",
          "tokens_per_s_avg", "samples_per_s", "samples_per_s_avg", "step_time_s", "eta_s",
          "gpu_hours", "energy_j", "hardware", "gpu_activity", "time_split", "plan", "loss",
          "series", "ended")  # fmt: skip
"""The other keys ``reasons`` may hold (``ended``: the run's end, ``run.ended``; ``device``:
``device_text``; ``loss``: no series with a loss role, the loss chart; ``series``: no series
at all; ``gpu_activity``: a GPU of ``hardware`` with no activity over time, its chart)."""
WORDING = 6
"""The revision of the words below: bumped when what a reason says changes (a passport stores
it, and ``tm passport`` rebuilds one written under another); tests/unit/test_wording.py fails
when the strings of this module change and it is not bumped."""
MAX_KEYS = len(SINGLE) + len(PER_CONVENTION) * len(CONVENTIONS)
WHEN_MODEL = "the agent describes it at the first training step"
WHEN_DTYPE = "the agent reads it at the first training forward pass"


@dataclass(frozen=True)
class RunFacts:
    """What the reasons depend on beyond the snapshot's own figures.

    Attributes:
        open: the run has no end yet (no ``run_end``, not ended without a close): a figure
            may still come, so its reason may say "yet".
        moving: running or idle (a notebook between cells is open but not moving).
        attached: the pid ``tm attach`` watches (no agent inside), else None.
        device: the device the peak is looked up by (``--device``, the model's, a fake GPU's).
        table_has_device: the peaks table has a row for ``device``.
        shape_error: why the model record gave no shape for FLOPs, else None.
        spans: rank 0 has sent a time span.
        step_clock: ``optimizer`` or ``backward`` (what clocks the steps), or None.
        budget_declared: a token or FLOPs budget was declared.
        charted_gpus: the indexes of the GPUs with an activity series on the timeline (the
            hardware chart), or None when not known (a snapshot without its timeline).
        clock_rank: the rank whose steps clock the run (0; in one node's own run without rank
            0, that node's lowest rank), None before a step.
        listed_gpu: the NVML name of the first whole GPU a real GPU backend's sampler listed
            (``gpu_devices``), else None: with no ``device`` (no model, no ``--device``), the
            GPU the run may have trained on, which its reasons name rather than say no
            device was seen.
    """

    open: bool = True
    moving: bool = True
    attached: int | None = None
    device: str | None = None
    table_has_device: bool = False
    shape_error: str | None = None
    spans: bool = False
    step_clock: str | None = None
    budget_declared: bool = False
    charted_gpus: frozenset | None = None
    listed_gpu: str | None = None
    clock_rank: int | None = None


def facts_of(snap: dict[str, Any]) -> RunFacts:
    """The facts a snapshot itself tells (the engine knows more: ``Engine._run_facts``), for
    a snapshot that came without ``reasons`` (one written by hand, or by an older version)."""
    run = snap.get("run") if isinstance(snap.get("run"), dict) else {}
    state = run.get("state")
    process = snap.get("process")
    model = snap.get("model") if isinstance(snap.get("model"), dict) else {}
    hw = snap.get("hardware") if isinstance(snap.get("hardware"), dict) else {}
    listed = [g.get("name") for g in hw.get("gpus") or [] if isinstance(g, dict) and g.get("name")]
    real = not str(hw.get("backend") or "").startswith("fake")
    return RunFacts(
        open=run.get("ended") is None and state != "ended",
        moving=state in ("running", "idle", None),
        attached=process.get("pid", "?") if isinstance(process, dict) else None,
        device=model.get("device_name") or model.get("device"),
        spans=snap.get("time_split") is not None,
        step_clock=snap.get("step_clock"),
        budget_declared=snap.get("budget_tokens") is not None
        or snap.get("budget_flops") is not None,
        listed_gpu=listed[0] if listed and real else None,
    )


def split(reason: str) -> tuple[str, str]:
    """``("n/a", "titan needs ...")`` from ``"n/a: titan needs ..."``; ``(reason, "")`` when it
    has no ``": "`` (js/derive.js ``splitReason`` splits the same way)."""
    head, sep, rest = reason.partition(": ")
    return (head, rest) if sep else (reason, "")


def labelled(label: str, reason: str) -> str:
    """A missing figure in the summary line's short form: ``"tokens/s: not measured (the run
    had no two steps in one segment, so no step was timed)"``."""
    head, why = split(reason)
    return f"{label}: {head} ({why})" if why else f"{label}: {head}"


def tagged(reason: str, convention: str) -> str:
    """A figure of one convention as the passport and the summary line write it when it is
    missing: ``"n/a [titan] (titan needs layers, heads, which the model record lacks)"``."""
    head, why = split(reason)
    return f"{head} [{convention}] ({why})" if why else f"{head} [{convention}]"


def why_missing(convention: str, fields: list[str] | tuple[str, ...]) -> str:
    """``"megatron needs ffn, vocab, which the model record lacks"``: the fields a convention
    needs and the model record lacks (:func:`trainmeter.core.flops.missing_fields`)."""
    return f"{convention} needs {', '.join(fields)}, which the model record lacks"


_PLAIN = {'"': "'", "\\": "/"}  # the two printable characters JSON escapes


def _ascii(text: str, limit: int = MAX_REASON) -> str:
    """Printable ASCII that JSON writes as is, one byte a character (``"`` reads ``'``,
    ``\\`` reads ``/``, others outside printable ASCII ``?``), cut to ``limit`` characters
    ("..." when cut): a reason costs its length plus its two quotes in the snapshot."""
    text = "".join(_PLAIN.get(c, c) if " " <= c <= "~" else "?" for c in str(text)[: limit + 1])
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _name(x: Any) -> str:
    return _ascii(str(x), MAX_NAME_IN_REASON)


def attach_reason(pid: Any, is_open: bool) -> str:
    """The reason of every figure only an agent inside the process can give."""
    watch = "watches" if is_open else "watched"
    return (f"no agent: tm attach {watch} process {_name(pid)} from outside, so there are no "
            "steps, tokens, loss, FLOPs or MFU")  # fmt: skip


def no_device(listed_gpu: str | None, is_open: bool) -> str:
    """Why the run's device is not known (no model, no ``--device``): no device seen, or the
    GPU the sampler listed (``listed_gpu``) with no model to say the run trained on it."""
    if listed_gpu:
        gpu = _name(listed_gpu)
        if is_open:
            return f"the GPU sampler lists {gpu}, but no model seen yet says the run trains on it"
        return f"the GPU sampler listed {gpu}, but no model was seen to say the run trained on it"
    return "no device seen yet" if is_open else "no device was seen"


def peak_why(device: str | None, dtype: str | None, table_has_device: bool, is_open: bool,
             listed_gpu: str | None = None) -> str:  # fmt: skip
    """Why there is no dense peak (the part after the headline): no device (:func:`no_device`),
    no dtype for a device the table has, or no row for the device."""
    if not device:
        return f"no dense peak is known ({no_device(listed_gpu, is_open)}); declare one with --peak"
    dev = _name(device)
    if dtype is None and table_has_device:
        if is_open:
            return (f"the run's dtype is not known yet ({WHEN_DTYPE}), so neither is the dense "
                    f"peak of {dev}; or declare one with --peak")  # fmt: skip
        return (f"the run's dtype was never seen, so the dense peak of {dev} is not known; "
                "declare it with --dtype, or a peak with --peak")  # fmt: skip
    return f"no dense peak is known for {dev}; declare one with --peak"


def throughput_reason(is_open: bool) -> str:
    """Why tokens/s, the step time and MFU are missing: fewer than two steps in a segment."""
    if is_open:
        return f"{NOT_YET}: needs two steps in one segment, as the first is not timed"
    return f"{NOT}: the run had no two steps in one segment, so no step was timed"


def model_reason(is_open: bool) -> str:
    if is_open:
        return f"{NOT_YET}: no model seen yet; {WHEN_MODEL}"
    return f"{NOT}: no model was seen; {WHEN_MODEL}, and saw none"


def reasons(snap: dict[str, Any], f: RunFacts) -> dict[str, str]:
    """``{key: reason}`` for each figure of ``snap`` that is missing: the keys of ``SINGLE``,
    and ``<key>/<convention>`` for the keys of ``PER_CONVENTION``. A known figure has none."""
    out: dict[str, str] = {}
    is_open = f.open
    agent = attach_reason(f.attached, is_open) if f.attached is not None else None
    run = snap.get("run") or {}
    state = run.get("state")
    model = snap.get("model")
    conv = snap.get("convention") or CONVENTIONS[0]

    if model is None:
        out["model"] = agent or model_reason(is_open)
    if snap.get("dtype") is None:
        out["dtype"] = agent or (
            f"{NOT_YET}: {WHEN_DTYPE}; or declare it with --dtype"
            if is_open
            else f"{NOT}: the agent saw no dtype; declare it with --dtype"
        )
    peak = snap.get("peak")
    why_peak = None if peak else peak_why(f.device, snap.get("dtype"), f.table_has_device, is_open,
                                          f.listed_gpu)  # fmt: skip
    if why_peak is not None:
        out["peak"] = agent or f"no peak: {why_peak}"
    if not snap.get("device_text"):
        out["device"] = (
            f"{NOT_YET}: neither the agent nor the GPU sampler has named one"
            if is_open
            else f"{NOT}: the agent and the GPU sampler named no device"
        )

    rate_why = agent or throughput_reason(is_open)
    # a run whose inputs are not token ids: the engine's reason (``tokens_missing``), and no
    # convention describes its model (``conventions_missing``)
    no_tokens = _text(snap.get("tokens_missing"))
    no_tokens = f"{NA}: {no_tokens}" if no_tokens else None
    no_convention = _text(snap.get("conventions_missing"))
    for key in ("tokens_per_s", "tokens_per_s_avg", "step_time_s"):
        if snap.get(key) is None:
            out[key] = (no_tokens if key != "step_time_s" else None) or rate_why

    for key in ("samples_per_s", "samples_per_s_avg"):
        if snap.get(key) is None:
            # no step at all: the throughput's reason; steps without samples: no batch axis
            counted = snap.get("samples") or not snap.get("step")
            out[key] = agent or (rate_why if counted else _no_samples(is_open))

    gpus = snap.get("gpus")
    no_gpus = None
    if not gpus:
        dev = (model or {}).get("device") or f.device
        if dev:
            no_gpus = (f"no GPUs: the run trained on {_name(dev)} and declared no peak, so it "
                       "counts no GPUs")  # fmt: skip
        else:
            unknown = no_device(f.listed_gpu, is_open)
            no_gpus = (f"no GPUs: the run's device is not known ({unknown}), and with no peak "
                       "declared it counts no GPUs")  # fmt: skip

    fpt = snap.get("flops_per_token") or {}
    lacks = snap.get("flops_per_token_missing") or {}
    for c in [*CONVENTIONS, *sorted(k for k in fpt if k not in CONVENTIONS)]:
        fpt_why = None
        if fpt.get(c) is None:
            fpt_why = _fpt_reason(c, agent, model, f, lacks.get(c), no_convention)
            out[f"flops_per_token/{c}"] = fpt_why
            if (snap.get("flops_spent") or {}).get(c) is None:
                out[f"flops_spent/{c}"] = fpt_why
        for key, rate_key in (("mfu", "tokens_per_s"), ("mfu_avg", "tokens_per_s_avg")):
            if (snap.get(key) or {}).get(c) is not None:
                continue
            if agent:
                out[f"{key}/{c}"] = agent
            elif no_convention:  # a peak would not help: no convention describes the model
                out[f"{key}/{c}"] = f"no MFU: {no_convention}"
            elif why_peak is not None:
                out[f"{key}/{c}"] = f"no MFU: {why_peak}"
            elif fpt_why is not None:
                out[f"{key}/{c}"] = f"no MFU: {split(fpt_why)[1] or fpt_why}"
            elif snap.get(rate_key) is None:
                out[f"{key}/{c}"] = rate_why
            else:  # the engine's rule: a figure too large to be finite is none
                out[f"{key}/{c}"] = ("no MFU: tokens/s times FLOPs per token is too large to be "
                                     "a number, the steps were logged almost at once")  # fmt: skip
        if (snap.get("model_flops_per_s_per_gpu") or {}).get(c) is None:
            out[f"model_flops_per_s_per_gpu/{c}"] = (
                fpt_why or agent or no_gpus or (rate_why if snap.get("tokens_per_s") is None
                                                else f"{NA}: no model FLOP/s")
            )  # fmt: skip

    if snap.get("flops_per_token_counted") is None:
        out["flops_per_token_counted"] = agent or no_tokens or _counted_reason(snap, f)
    if snap.get("eta_s") is None:
        out["eta_s"] = agent or _eta_reason(snap, f, run, state, conv)
    if snap.get("gpu_hours") is None:
        out["gpu_hours"] = no_gpus or f"{NOT}: the run has no elapsed time"
    if snap.get("energy_j") is None:
        out["energy_j"] = _energy_reason(snap.get("hardware"), is_open)
    if snap.get("hardware") is None:
        out["hardware"] = _hardware_reason(snap.get("notes"), is_open)
    activity = _activity_reason(snap.get("hardware"), f.charted_gpus, is_open)
    if activity is not None:
        out["gpu_activity"] = activity
    if snap.get("plan") is None:
        out["plan"] = agent or _plan_reason(snap, why_peak, conv, out, no_convention)
    series = snap.get("series") if isinstance(snap.get("series"), dict) else {}
    if not series:
        out["series"] = agent or _series_reason(is_open)
    if not any(isinstance(v, dict) and v.get("role") in ("train_loss", "val_loss")
               and not v.get("superseded") for v in series.values()):  # fmt: skip
        out["loss"] = agent or _loss_reason(is_open)
    if snap.get("time_split") is None and f.clock_rank:  # a rank other than 0 clocks the run
        out["time_split"] = (f"{NOT}: the split is rank 0's, and this run has none (one node's "
                             "run of a job: the run of the node with rank 0 has it)")  # fmt: skip
    elif snap.get("time_split") is None:
        out["time_split"] = agent or (
            f"{NOT_YET}: the split begins with rank 0's first time span (the warm-up span "
            "comes with the first optimizer step)"
            if is_open
            else f"{NOT}: rank 0 sent no time span (--no-tap, or an agent without span taps)"
        )
    if run.get("ended") is None:
        out["ended"] = _ended_reason(state, f)
    return {k: _ascii(v) for k, v in out.items()}


def _text(x: Any) -> str | None:
    return x if isinstance(x, str) and x else None


def _fpt_reason(c: str, agent: str | None, model: Any, f: RunFacts, lacks: Any,
                no_convention: str | None) -> str:  # fmt: skip
    if agent:
        return agent
    if model is None:
        return model_reason(f.open)
    if no_convention:
        return f"{NA}: {no_convention}"
    if f.shape_error:
        return f"{NA}: the model record is not usable for FLOPs ({_name(f.shape_error)})"
    if isinstance(lacks, list) and lacks:
        return f"{NA}: {why_missing(_name(c), [str(x) for x in lacks])}"
    return f"{NA}: the model record gives no FLOPs per token under {_name(c)}"


def _no_samples(is_open: bool) -> str:
    if is_open:
        return f"{NOT_YET}: no samples counted yet; the agent reads the batch size at each step"
    return (f"{NOT}: no samples were counted, as the root model's inputs had no batch axis the "
            "agent read")  # fmt: skip


def _series_reason(is_open: bool) -> str:
    if is_open:
        return (f"{NOT_YET}: no series reported yet (a tracker, a framework, trainmeter.emit or "
                "the loss of a training backward() reports them)")  # fmt: skip
    return (f"{NOT}: the run reported no series (no tracker, framework or trainmeter.emit "
            "reported one, and no training backward() was seen)")  # fmt: skip


def _loss_reason(is_open: bool) -> str:
    if is_open:
        return (f"{NOT_YET}: no training or validation loss reported yet (a tracker's, a "
                "framework's, trainmeter.emit's, or a training backward()'s)")  # fmt: skip
    return (f"{NOT}: the run reported no training or validation loss (no tracker, framework "
            "or trainmeter.emit reported one, and no training backward() was seen)")  # fmt: skip


def _activity_reason(hw: Any, charted: frozenset | None, is_open: bool) -> str | None:
    """Why a GPU of the run has no activity over time (its hardware chart), naming the GPUs that
    have none; None when every GPU has one (or it is not known which: ``charted`` None)."""
    gpus = (hw or {}).get("gpus") if isinstance(hw, dict) else None
    if charted is None or not isinstance(gpus, list):
        return None
    lacking = [g.get("index") for g in gpus
               if isinstance(g, dict) and g.get("index") not in charted]  # fmt: skip
    if not lacking:
        return None
    names = ", ".join(_name(i) for i in lacking[:8]) + (", ..." if len(lacking) > 8 else "")
    which = f"GPU {names}" if len(lacking) == 1 else f"GPUs {names}"
    fields = "GPU-Util, SM, tensor-pipe or DRAM activity"
    if is_open:
        return f"{NOT_YET}: no reading of {which}'s {fields} yet"
    return f"{NOT}: the sampler read none of {which}'s {fields}"


def _plan_reason(snap: dict, why_peak: str | None, conv: str, said: dict,
                 no_convention: str | None) -> str:  # fmt: skip
    """Why there is no plan: it needs a dense peak, FLOPs per token under the run's convention
    and devices (core/plan.py); a model no convention describes has none to plan with."""
    if no_convention:
        return f"no plan: {no_convention}"
    if why_peak is not None:
        return f"no plan: a plan needs a dense peak, and {why_peak}"
    fpt_why = said.get(f"flops_per_token/{conv}")
    if (snap.get("flops_per_token") or {}).get(conv) is None and fpt_why:
        why = split(fpt_why)[1] or fpt_why
        return f"no plan: a plan needs FLOPs per token under {_name(conv)}, and {why}"
    return "no plan: no devices to plan for"


def _counted_reason(snap: dict, f: RunFacts) -> str:
    counted = snap.get("flops_counted")
    if isinstance(counted, dict) and not counted.get("tokens"):
        return f"{NA}: the counted step had no tokens"
    if f.step_clock == "backward":
        return (f"{NOT}: no torch.optim optimizer stepped, and one step is counted at the 3rd "
                "optimizer step")  # fmt: skip
    if f.open:
        return f"{NOT_YET}: one step is counted under FlopCounterMode, the 3rd optimizer step"
    return (f"{NOT}: no step was counted under FlopCounterMode (it counts the 3rd optimizer "
            "step; --no-tap leaves it out)")  # fmt: skip


_ENDED = {"finished": "the run has finished", "failed": "the run has failed",
          "interrupted": "the run was interrupted"}  # fmt: skip
_CELL = {"finished": "the cell has finished", "failed": "the cell has failed",
         "interrupted": "the cell was interrupted"}  # fmt: skip


def _eta_reason(snap: dict, f: RunFacts, run: dict, state: Any, conv: str) -> str:
    if not f.budget_declared:
        return "no ETA: no budget declared (--budget-tokens 20B or --budget-flops 1e18)"
    if snap.get("budget_tokens") is None:
        return (f"no ETA: a FLOPs budget, but no FLOPs per token under {_name(conv)}, so no "
                "token budget")  # fmt: skip
    if state == "ended":
        return "no ETA: the run ended without a close"
    if not f.moving:
        if run.get("ended") is not None:
            progress = snap.get("progress")
            at = (f", at {100 * progress:.1f}% of its budget"
                  if isinstance(progress, (int, float)) and not isinstance(progress, bool)
                  else "")  # fmt: skip
            return f"no ETA: {_ENDED.get(state, 'the run has ended')}{at}"
        return f"no ETA: {_CELL.get(state, 'the cell has ended')}; the next cell's steps give one"
    if snap.get("tokens_per_s") is None:
        return f"no ETA: {split(throughput_reason(f.open))[1]}"
    return "no ETA: no tokens per second to extrapolate"


def _energy_reason(hw: Any, is_open: bool) -> str:
    head = "it comes from the GPUs' NVML energy counter"
    if not isinstance(hw, dict):
        if is_open:
            return f"{NOT_YET}: {head}; the hardware sampler has not reported yet"
        return f"{NOT}: {head}; the log has no hardware sampler reading"
    if hw.get("reason"):
        return f"{NOT}: {head}; {_ascii(hw['reason'], 200)}"
    if not hw.get("gpus"):
        return f"{NOT}: {head}; the sampler found no GPU"
    if is_open:
        return f"{NOT_YET}: {head}; no GPU has reported it yet"
    return f"{NOT}: {head}; no GPU reported it"


def _hardware_reason(notes: Any, is_open: bool) -> str:
    for n in notes or []:
        if isinstance(n, str) and n.startswith(("no GPU counters:", "hardware sampling stopped")):
            return f"{NOT}: {n}"
    if is_open:
        return f"{NOT_YET}: the hardware sampler has not reported (GPU and host counters)"
    return f"{NOT}: the log has no hardware sampler reading (GPU and host counters)"


def _ended_reason(state: Any, f: RunFacts) -> str:
    if state == "ended":
        return "unknown: no run_end record (the supervisor stopped without closing the log)"
    if f.moving:
        return "not yet: the run is still open (no run_end record yet)"
    return ("not yet: the run is open between notebook cells (no run_end record yet: its kernel "
            "may run more cells)")  # fmt: skip


def demonstration(backend: str | None, gpus: int, name: str | None) -> dict[str, Any] | None:
    """The snapshot's ``demonstration`` for a fake GPU backend, else None: ``backend``, ``gpus``
    (the fake GPUs), ``text`` ("demonstration: 2 × fake H100", the header's and the passport's
    device line) and ``banner`` (said on every panel that shows a figure from them)."""
    if not backend or not backend.startswith("fake"):
        return None
    short = _name(name).split(" ")[0] if name else "GPU"
    count = f"{gpus} × " if gpus > 1 else ""
    return {
        "backend": _name(backend),
        "gpus": gpus,
        "text": f"demonstration: {count}fake {short}",
        "banner": (f"demonstration, not a measurement: these GPU figures come from the scripted "
                   f"{_name(backend)} backend, not from a GPU"),
    }  # fmt: skip
