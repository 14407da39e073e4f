"""The wire and run-log schema: one JSON object per line, versioned.

Every record is a flat JSON object with three common keys:

- ``v``: schema version (:data:`SCHEMA_VERSION`); a reader rejects a newer major version.
- ``k``: the record kind, one of :data:`KINDS`.
- ``t``: wall-clock time in seconds since the Unix epoch (float), stamped by the sender.

The same records travel over the agent socket and are written to ``run.jsonl`` by the
supervisor (the one writer), so ``replay`` rebuilds what the live engine saw. Records hold
physics (time, tokens, FLOPs inputs, reported series), never prices or secrets.
See docs/spec.md "Run log" for each kind's fields.
"""

from __future__ import annotations

import json
import math

TYPE_CHECKING = False  # typing is not imported at run time: the agent loads this module at boot
if TYPE_CHECKING:
    from typing import Any

SCHEMA_VERSION = 1
MAX_TIME = 1e11  # a record's `t` (s since the epoch) is below: the year 5138, within time_t

# kind -> {field: allowed types}; fields not listed are kept but not checked.
_NUM = (int, float)
_OPT_NUM = (int, float, type(None))
_OPT_INT = (int, type(None))
_OPT_STR = (str, type(None))
KINDS: dict[str, dict[str, tuple[type, ...]]] = {
    # supervisor: a run folder was opened
    "run_start": {"id": (str,), "name": (str,), "argv": (list,), "version": (str,)},
    # an agent connected: which process and rank
    "agent_hello": {"pid": (int,), "rank": (int,), "world_size": (int,)},
    # the model the agent found: counts and shape (inputs of the FLOPs conventions)
    "model": {"params": (int,), "embedding_params": (int,), "token_embedding_params": (int,)},
    # one optimizer step finished on a rank; tokens/samples seen since the previous step, and
    # seq_sq: the sum over those sequences of the squared sequence length (tokens x length);
    # arr: when the rank arrived at the step (its last training backward() call before the
    # step, s since the epoch; docs/spec.md "Stragglers"), null or absent when unknown;
    # agg: how many steps the record stands for, when the agent merged steps its full outbound
    # buffer could not take (`step` and `t` the last one's, the counts their sums; absent: 1)
    "step": {
        "step": (int,),
        "rank": (int,),
        "tokens": _OPT_INT,
        "samples": _OPT_INT,
        "seq_sq": _OPT_INT,
        "arr": _OPT_NUM,
        "agg": _OPT_INT,
    },
    # what clocks a rank's steps from now on: `source` one of STEP_CLOCKS (agent/backward.py)
    "step_clock": {"source": (str,), "rank": (int,)},
    # a time span on a rank (agent/spans.py): `name` its kind (SPAN_KINDS; others are kept, not
    # used), `t` its start, `dur` its own seconds (less the spans inside it)
    "span": {"name": (str,), "dur": _NUM, "rank": (int,)},
    # one step's executed FLOPs under torch's FlopCounterMode (agent/flop_count.py): `flops` of
    # the whole step, `tokens` and `samples` the agent counted in it (null: not known; absent
    # in older logs), `attention` one of ATTENTION, `mapped`
    # the ops given a formula torch lacks, `not_counted` work that ran and no formula counted
    # (strings), `ops` FLOPs by op name (not checked)
    "flops_counted": {
        "step": (int,),
        "rank": (int,),
        "flops": _NUM,
        "tokens": _OPT_INT,
        "samples": _OPT_INT,
        "attention": (str,),
        "mapped": (list, type(None)),
        "not_counted": (list, type(None)),
    },
    # what a step's tokens are (agent/pad_tokens.py, --pad-tokens skip): `counting` one of
    # TOKENS_COUNTING, `reason` why every position is counted
    "tokens_counting": {"counting": (str,), "rank": (int,), "reason": _OPT_STR},
    # a named scalar series point (emit() or a tracker tap)
    "series": {"name": (str,), "value": _NUM, "step": _OPT_INT},
    # a %%trainmeter cell (or a tm run) began / ended a segment of the run
    "segment_start": {"segment": (int,)},
    "segment_end": {"segment": (int,), "status": (str,)},
    # supervisor: the run ended (tm child exited, or the notebook supervisor closed)
    "run_end": {"status": (str,), "exit_code": _OPT_INT},
    # a short message for the person (an agent warning, a dropped record)
    "note": {"text": (str,), "source": _OPT_STR},
    # supervisor sampler: the GPU backend and each device's static facts (core/hardware.py)
    "gpu_devices": {"backend": (str,), "devices": (list,), "reason": _OPT_STR},
    # supervisor sampler: one reading of every GPU and of the host (core/hardware.py)
    "gpu": {"gpus": (list,), "host": (dict, type(None))},
    # what one place (`source`: an agent's queue, the socket, the supervisor, the disk) has
    # dropped so far, by reason: cumulative counts, the newest per (node, source, pid) replaces
    # the earlier ones (node: a merged log's, core/drops.py; docs/reliability.md)
    "dropped": {"source": (str,), "counts": (dict,), "pid": _OPT_INT, "rank": _OPT_INT},
    # supervisor: a copy of the engine's state after the line numbered `upto`, written at byte
    # `at` of the log, with the log reader's position there (`log`), the run's id (`run`) and
    # the CRC-32 of the state's JSON text as written (`crc`); unnumbered, and no record: replay
    # may start from it (core/checkpoint.py, docs/spec.md "Checkpoints")
    "checkpoint": {
        "at": (int,),
        "upto": (int,),
        "run": _OPT_STR,
        "log": (dict,),
        "crc": (int,),
        "state": (dict,),
    },
}

SPAN_KINDS = ("data", "checkpoint", "eval", "warmup")
STEP_CLOCKS = ("optimizer", "backward")  # the clock optimizer's steps, or backward() calls
TOKENS_COUNTING = ("all positions", "non-pad")
# sdpa: an attention kernel was counted; matmul: batched matmuls of two activations; "counted"
# is what older agents wrote for sdpa
ATTENTION = ("sdpa", "matmul", "none counted", "counted")
MAX_SPAN_KIND = 32  # characters of a span kind
MAX_DROP_REASONS = 32  # reasons in one dropped record
MAX_DROP_REASON = 120  # characters of a reason
MAX_AGG = 2**53  # steps one step record stands for, below (the engine's counts: exact ints)
# An agent's final counts, left at its exit in the folder of the supervisor's socket: its last
# ``dropped`` record as one JSON line (agent/sender.py writes it, supervisor/exit_counts.py
# reads it; docs/reliability.md "The training process")
EXIT_FILE = "agent-exit-{pid}.json"

# "ended": the log has no run_end (the supervisor stopped without closing it); the snapshot's
# run.state_text then says so in words (engine.Engine.end_unclosed)
RUN_STATES = ("running", "finished", "failed", "interrupted", "idle", "ended")
SEGMENT_STATUSES = ("ok", "error", "interrupted")


class RecordError(ValueError):
    """A line or object that is not a valid trainmeter record (the message says why)."""


def make(kind: str, t: float, **fields: Any) -> dict[str, Any]:
    """Build a record dict ``{"v", "k", "t", **fields}``.

    Args:
        kind: one of :data:`KINDS`.
        t: wall-clock seconds since the epoch.
    Raises:
        RecordError: unknown kind or a field of the wrong type.
    """
    rec = {"v": SCHEMA_VERSION, "k": kind, "t": float(t), **fields}
    validate(rec)
    return rec


def validate(rec: Any) -> dict[str, Any]:
    """Check a decoded record and return it unchanged.

    Raises:
        RecordError: not an object, missing/unknown ``k``, newer schema, bad time, or a
            listed field missing or of the wrong type (bool is not accepted as a number).
    """
    if not isinstance(rec, dict):
        raise RecordError(f"record is not a JSON object: {type(rec).__name__}")
    kind = rec.get("k")
    if not isinstance(kind, str) or kind not in KINDS:  # a list or an object is no kind
        raise RecordError(f"unknown record kind {kind!r}")
    v = rec.get("v")
    if not isinstance(v, int) or isinstance(v, bool) or v > SCHEMA_VERSION or v < 1:
        raise RecordError(
            f"unsupported schema version {v!r} (this trainmeter reads 1..{SCHEMA_VERSION})"
        )
    t = rec.get("t")
    if not _is(t, _NUM) or not _finite(t) or not 0 <= t < MAX_TIME:
        raise RecordError(f"{kind}: 't' must be a finite number of seconds in [0, 1e11), got {t!r}")
    for name, types in KINDS[kind].items():
        if name not in rec:
            if type(None) in types:
                continue
            raise RecordError(f"{kind}: missing field {name!r}")
        if not _is(rec[name], types):
            raise RecordError(f"{kind}: field {name!r} has type {type(rec[name]).__name__}")
    if kind == "series" and not _finite(rec["value"]):
        raise RecordError(f"series {rec['name']!r}: value must be finite")
    if kind == "step" and rec.get("arr") is not None and not 0 <= rec["arr"] < MAX_TIME:
        raise RecordError(f"step: 'arr' must be a finite number of seconds in [0, 1e11), got "
                          f"{rec['arr']!r}")  # fmt: skip
    if kind == "step" and rec.get("agg") is not None and not 1 <= rec["agg"] < MAX_AGG:
        raise RecordError(f"step: 'agg' must be a whole number of steps in [1, 2**53), got "
                          f"{rec['agg']!r}")  # fmt: skip
    if kind == "span" and not (_finite(rec["dur"]) and rec["dur"] >= 0):
        raise RecordError(f"span: 'dur' must be a finite number >= 0, got {rec['dur']!r}")
    if kind == "span" and len(rec["name"]) > MAX_SPAN_KIND:
        raise RecordError(f"span: 'name' longer than {MAX_SPAN_KIND} characters")
    if kind == "flops_counted":
        _check_counted(rec)
    if kind == "tokens_counting" and rec["counting"] not in TOKENS_COUNTING:
        raise RecordError(f"tokens_counting: 'counting' must be one of {TOKENS_COUNTING}")
    if kind == "dropped":
        _check_dropped(rec)
    if kind == "step_clock" and rec["source"] not in STEP_CLOCKS:
        raise RecordError(f"step_clock: 'source' must be one of {STEP_CLOCKS}")
    n = rec.get("n")
    if n is not None and not (type(n) is int and 1 <= n < 2**63):
        raise RecordError(f"{kind}: 'n' (the line's number) must be an int >= 1, got {n!r}")
    deep = _DEEP.get(kind)
    if deep is not None:
        deep(rec)
    return rec


# Deep checks: the nested fields the engine (core/engine.py, core/hardware.py) reads, so a
# record that passes validate() can never make Engine.apply or Engine.snapshot raise.
MAX_LIST = 4096  # items of a list field (argv, devices, gpus, not_counted)
MAX_GPUS = 256  # entries of a gpu record's `gpus` or a gpu_devices' `devices`
MAX_TEXT = 100_000  # characters of a string field (a note, an argv word, an error)
MAX_OPTS = 256  # entries of a run's `opts`
MAX_OPT_NUMBER = 1e30  # a numeric option's magnitude at most (1e30 FLOP or tokens: far beyond
# any budget, and its products with FLOPs per token stay finite)
# run options read as numbers, and as strings (docs/spec.md "Run log": run_start `opts`)
_OPT_NUMBERS = ("budget_tokens", "budget_flops", "peak_flops", "plan_mfu", "gpus", "attached")
_OPT_STRINGS = ("device", "dtype", "convention", "pad_tokens")
_MODEL_INTS = ("layers", "width", "heads", "kv_heads", "head_dim", "ffn", "vocab", "seq_len",
               "context", "gpus", "rank")  # fmt: skip
_MODEL_BOOLS = ("gated_mlp", "tied_embeddings")
_MODEL_STRS = ("name", "device", "device_name", "dtype", "run_dtype", "torch")
_GPU_NUMBERS = ("time_s", "gpu_util", "sm_active", "sm_occupancy", "tensor_active",
                "dram_active", "mem_used_bytes", "mem_total_bytes", "power_w", "energy_mj",
                "sm_clock_mhz", "mem_clock_mhz", "throttle_mask", "power_limit_w",
                "gpu_index", "gpu_instance_id", "cpu_util", "rss_bytes")  # fmt: skip


def _scalar_ok(x: Any) -> bool:
    """A JSON scalar: null, bool, a bounded string, or a finite number."""
    if x is None or isinstance(x, bool):
        return True
    if isinstance(x, str):
        return len(x) <= MAX_TEXT
    return isinstance(x, (int, float)) and _finite(x)


def _number_ok(x: Any) -> bool:
    """null or a finite number (bool and strings are not numbers)."""
    return x is None or (_is(x, _NUM) and _finite(x))


def _need(ok: bool, kind: str, what: str) -> None:
    if not ok:
        raise RecordError(f"{kind}: {what}")


def _str_map(x: Any) -> bool:
    """null, or a bounded dict of strings to bounded strings (a `missing` reasons dict)."""
    if x is None:
        return True
    return (isinstance(x, dict) and len(x) <= MAX_OPTS
            and all(isinstance(v, str) and len(v) <= MAX_TEXT for v in x.values()))  # fmt: skip


def _counter_ok(x: Any) -> bool:
    """null, or a number in [0, 2**64]: what a sampler reading can be (NVML's counters are
    64-bit); sums and differences of such readings stay finite."""
    if x.__class__ is float:  # the usual reading, without a call: finite, in range
        return x - x == 0.0 and 0.0 <= x <= 2.0**64
    return x is None or (_is(x, _NUM) and _finite(x) and 0 <= x <= 2**64)


def _number_map(x: Any) -> bool:
    """null, or a bounded dict of readings (bytes per pid), each as :func:`_counter_ok`."""
    if x is None:
        return True
    return isinstance(x, dict) and len(x) <= MAX_LIST and all(_counter_ok(v) for v in x.values())


def _check_opts(kind: str, opts: Any) -> None:
    """A run's options: a dict of JSON scalars, the numeric ones finite numbers."""
    if opts is None:
        return
    _need(isinstance(opts, dict) and len(opts) <= MAX_OPTS, kind, "'opts' must be an object")
    for k, v in opts.items():
        _need(_scalar_ok(v), kind, f"opts {k[:40]!r} must be a JSON scalar (finite)")
        if k in _OPT_NUMBERS:
            ok = _number_ok(v) and (v is None or abs(v) <= MAX_OPT_NUMBER)
            _need(ok, kind, f"opts {k!r} must be a number within 1e30, or null")
        elif k in _OPT_STRINGS:
            _need(v is None or isinstance(v, str), kind, f"opts {k!r} must be a string or null")


def _check_run_start(rec: dict) -> None:
    argv = rec["argv"]
    _need(len(argv) <= MAX_LIST and all(isinstance(a, str) and len(a) <= MAX_TEXT for a in argv),
          "run_start", "'argv' must be a list of strings")  # fmt: skip
    for k in ("id", "name", "version", "cwd", "host"):
        v = rec.get(k)
        optional = k in ("cwd", "host") and v is None
        _need(optional or (isinstance(v, str) and len(v) <= MAX_TEXT), "run_start",
              f"{k!r} must be a string")  # fmt: skip
    _check_opts("run_start", rec.get("opts"))
    job = rec.get("job")  # store.job_facts: {"id", "node_rank", "nodes"} (tm merge reads it)
    _need(job is None or (isinstance(job, dict) and len(job) <= MAX_OPTS
                          and all(_scalar_ok(v) for v in job.values())),
          "run_start", "'job' must be an object of JSON scalars")  # fmt: skip


def _check_segment_start(rec: dict) -> None:
    _check_opts("segment_start", rec.get("opts"))


def _check_segment_end(rec: dict) -> None:
    err = rec.get("error")
    _need(err is None or isinstance(err, str), "segment_end", "'error' must be a string")


def _check_agent_hello(rec: dict) -> None:
    for k in ("host", "python", "torch"):
        _need(_scalar_ok(rec.get(k)), "agent_hello", f"{k!r} must be a JSON scalar")


def _check_model(rec: dict) -> None:
    for k in ("params", "embedding_params", "token_embedding_params", *_MODEL_INTS):
        v = rec.get(k)  # the shape's counts as the agent sends them (agent/describe.py: ints)
        _need(v is None or (_is(v, (int,)) and -(2**63) <= v < 2**63), "model",
              f"{k!r} must be a 64-bit int")  # fmt: skip
    for k in _MODEL_BOOLS:
        _need(rec.get(k) is None or isinstance(rec[k], bool), "model", f"{k!r} must be a bool")
    for k in _MODEL_STRS:
        _need(rec.get(k) is None or isinstance(rec[k], str), "model", f"{k!r} must be a string")
    _need(len(rec) <= 4 * MAX_OPTS, "model", "too many fields")
    for k, v in rec.items():
        _need(_scalar_ok(v), "model", f"{k[:40]!r} must be a JSON scalar (finite)")


def _check_entry(kind: str, d: Any) -> None:
    """One GPU entry (a device's facts, a sample) or the host: a dict of JSON scalars with an
    int ``index`` (not the host), numbers where the sampler writes numbers."""
    _need(isinstance(d, dict) and len(d) <= MAX_OPTS, kind, "entries must be objects")
    for k, v in d.items():
        if k == "missing":
            _need(_str_map(v), kind, "'missing' must be an object of strings")
        elif k in ("process_mem_bytes", "rss_by_pid"):
            _need(_number_map(v), kind, f"{k!r} must be an object of numbers")
        elif k in _GPU_NUMBERS:  # counters and readings: >= 0, within NVML's 64 bits
            if not _counter_ok(v):
                got = type(v).__name__
                raise RecordError(f"{kind}: {k!r} must be a finite number >= 0 or null, got {got}")
        else:
            _need(_scalar_ok(v), kind, f"{k[:40]!r} must be a JSON scalar (finite)")


def _check_gpu_list(kind: str, entries: list) -> None:
    _need(len(entries) <= MAX_GPUS, kind, f"more than {MAX_GPUS} entries")
    for d in entries:
        i = d.get("index") if isinstance(d, dict) else None
        _need(_is(i, (int,)) and 0 <= i < 2**31, kind, f"'index' must be an int >= 0, got {i!r}")
        _check_entry(kind, d)


def _check_gpu_devices(rec: dict) -> None:
    _check_gpu_list("gpu_devices", rec["devices"])


def _check_gpu(rec: dict) -> None:
    _check_gpu_list("gpu", rec["gpus"])
    if rec.get("host") is not None:
        _check_entry("gpu", rec["host"])
    proc = rec.get("process")  # tm attach's facts: bounded by engine._process_facts itself
    if proc is not None:
        _need(isinstance(proc, dict), "gpu", "'process' must be an object")
        for k, v in proc.items():
            if k == "pids":
                _need(isinstance(v, list), "gpu", "'pids' must be a list")
            elif k == "missing":
                _need(isinstance(v, dict), "gpu", "process 'missing' must be an object")
            else:
                _need(_scalar_ok(v), "gpu", f"process {k[:40]!r} must be a JSON scalar")
    _need(
        rec.get("resume") is None or isinstance(rec["resume"], bool),
        "gpu",
        "'resume' must be a bool",
    )


def _check_text(rec: dict) -> None:
    _need(len(rec["text"]) <= MAX_TEXT, "note", "'text' too long")


def _check_lists(rec: dict) -> None:
    for k in ("mapped", "not_counted"):
        _need(len(rec.get(k) or ()) <= MAX_LIST, rec["k"], f"{k!r} too long")


_DEEP = {
    "run_start": _check_run_start,
    "segment_start": _check_segment_start,
    "segment_end": _check_segment_end,
    "agent_hello": _check_agent_hello,
    "model": _check_model,
    "gpu_devices": _check_gpu_devices,
    "gpu": _check_gpu,
    "note": _check_text,
    "flops_counted": _check_lists,
}


def _check_counted(rec: dict) -> None:
    """``flops_counted``: finite FLOPs >= 0, tokens and samples > 0 when known, a known
    ``attention``, ``not_counted`` strings."""
    if not (_finite(rec["flops"]) and rec["flops"] >= 0):
        raise RecordError(f"flops_counted: 'flops' must be finite and >= 0, got {rec['flops']!r}")
    for name in ("tokens", "samples"):
        n = rec.get(name)
        if n is not None and n <= 0:
            raise RecordError(f"flops_counted: {name!r} must be > 0 or null, got {n!r}")
    if rec["attention"] not in ATTENTION:
        raise RecordError(f"flops_counted: 'attention' must be one of {ATTENTION}")
    if not all(isinstance(x, str) for x in rec.get("not_counted") or ()):
        raise RecordError("flops_counted: 'not_counted' must be a list of strings")


def _check_dropped(rec: dict) -> None:
    """``dropped``: at most ``MAX_DROP_REASONS`` reasons (strings of at most
    ``MAX_DROP_REASON`` characters), each a whole count in [0, 2**53)."""
    counts = rec["counts"]
    if len(counts) > MAX_DROP_REASONS or len(rec["source"]) > MAX_SPAN_KIND:
        raise RecordError(f"dropped: more than {MAX_DROP_REASONS} reasons, or a long source")
    for reason, n in counts.items():
        if len(reason) > MAX_DROP_REASON or type(n) is not int or not 0 <= n < 2**53:
            raise RecordError(f"dropped: reason {reason[:40]!r} needs a whole count >= 0")


def _finite(x: float | int) -> bool:
    """True for a finite number. An int too large for a float (JSON allows any) is not:
    ``math.isfinite`` would raise OverflowError on it instead of answering."""
    try:
        return math.isfinite(x)
    except OverflowError:
        return False


def decode_wire(line: bytes | str) -> list[dict[str, Any]]:
    """Parse one line from an agent: a record, or a ``steps`` or ``spans`` batch expanded to
    ``step`` or ``span`` records.

    A ``steps`` batch (wire only, never in the run log) carries the steps one agent flush
    collected as columns: ``{"v", "k": "steps", "rank", "t0", "dt_us": [...], "step": [...],
    "tokens": [...], "samples": [...], "seq_sq": [...]}`` (times: ``t0`` plus whole
    microseconds; a ``t`` list of times is read too; ``seq_sq`` may be absent, as older agents
    sent none). ``arr_us`` (optional): each step's arrival (its last training ``backward()``
    call) in whole microseconds before the step's time, null where unknown, expanded to the
    step record's ``arr`` (s since the epoch). ``agg`` (optional): how many steps each row
    stands for, null or 1 for one; the agent sends one row of several steps when its outbound
    buffer could not take them (agent/sender.py ``StepAggregate``), expanded to the step
    record's ``agg``. Encoding columns costs the training process far less than one JSON
    object per step (docs/performance.md). A ``spans`` batch is the same for time spans:
    ``{"v", "k": "spans", "rank", "name": [...], "t": [...], "dur": [...]}``. An agent sends a
    flush's ``spans`` batch right after its ``steps`` batch, so every step that was queued
    before a span's end has reached the engine when the span does (the engine's
    ``time_split`` relies on it, docs/spec.md "Time spans").

    Raises:
        RecordError: invalid JSON, an invalid record, or ragged columns.
    """
    got = decode_batch(line)
    return got.rows() if isinstance(got, Steps) else got


def decode_batch(line: bytes | str) -> list[dict[str, Any]] | Steps:
    """:func:`decode_wire` without expanding a non-empty ``steps`` batch: its rows as a
    :class:`Steps` of columns (what the supervisor writes and folds without a dict per step;
    ``Steps.rows()`` is what :func:`decode_wire` returns), else the same list of records.

    Raises:
        RecordError: as :func:`decode_wire`, with the same messages.
    """
    try:
        rec = json.loads(line)
    except (ValueError, UnicodeDecodeError) as exc:
        raise RecordError(f"not JSON: {exc}") from None
    if isinstance(rec, dict) and rec.get("k") == "spans":
        return _spans(rec)
    if not isinstance(rec, dict) or rec.get("k") != "steps":
        return [validate(rec)]
    times = _step_times(rec)
    cols = [times, *(rec.get(c) for c in ("step", "tokens", "samples"))]
    sq = rec.get("seq_sq")
    if sq is not None:
        cols.append(sq)
    if not all(isinstance(c, list) for c in cols) or len({len(c) for c in cols}) != 1:
        raise RecordError(
            "steps batch: 't' (or 't0' and 'dt_us'), 'step', 'tokens', 'samples' (and "
            "'seq_sq') must be equal-length lists"
        )
    rank, v = rec.get("rank", 0), rec.get("v")
    # what the rows' records hold: a count of 0 is null (none seen), as one record each says
    tokens, samples = _or_none(cols[2]), _or_none(cols[3])
    seq_sq = None if sq is None else _or_none(sq)
    arr = None
    if sq is not None and rec.get("arr_us") is not None:
        arr = _arrivals(rec["arr_us"], times)
    batch = Steps(v, rank, times, cols[1], tokens, samples, seq_sq, arr)
    if times:  # what validate() checks of each record, a column at a time (the supervisor's
        validate(batch.row(0))  # CPU per step: docs/performance.md); the first in full
        _check_step_columns(*cols)
        if arr is not None and not all(a is None or (_finite(a) and 0 <= a < MAX_TIME)
                                       for a in arr):  # fmt: skip
            raise RecordError("step: 'arr' must be a finite number of seconds in [0, 1e11)")
    batch.agg = _merged_column(rec, len(times))
    return batch if times else []


def _or_none(col: list) -> list:
    """``col`` with each 0 as None (a step's record says null for a count of none)."""
    return [x or None for x in col] if 0 in col else col


def _arrivals(arr_us: Any, times: list) -> list:
    """Each step's ``arr`` (s since the epoch, None where unknown) from a batch's ``arr_us``
    column (whole microseconds before the step's time).

    Raises:
        RecordError: a column of another length, or a value neither an int nor null.
    """
    if not isinstance(arr_us, list) or len(arr_us) != len(times):
        raise RecordError("steps batch: 'arr_us' must be a list as long as 'step'")
    if not all(a is None or type(a) is int for a in arr_us):
        raise RecordError("step: 'arr_us' must hold whole microseconds or null")
    return [None if a is None else t - a / 1e6 for t, a in zip(times, arr_us, strict=True)]


def _merged_column(rec: dict, n: int) -> list | None:
    """A batch's ``agg`` column as the rows' records hold it (None for one step), or None
    when no row stands for more than one step.

    Raises:
        RecordError: an ``agg`` column of another length, or a row not a whole number of
            steps in [1, 2**53).
    """
    agg = rec.get("agg")
    if agg is None:
        return None
    if not isinstance(agg, list) or len(agg) != n:
        raise RecordError("steps batch: 'agg' must be a list as long as 'step'")
    out, merged = [], False
    for k in agg:
        if k is None or (type(k) is int and k == 1):
            out.append(None)
            continue
        if type(k) is not int or not 1 <= k < MAX_AGG:
            raise RecordError("step: 'agg' must be a whole number of steps in [1, 2**53)")
        out.append(k)
        merged = True
    return out if merged else None


class Steps:
    """One rank's step records as columns: a decoded wire ``steps`` batch, or consecutive
    step lines of a run log (core/logread.py). Each column holds what the rows' ``step``
    records hold (``tokens`` None for none seen; ``arr`` in s since the epoch, None where
    unknown; ``agg`` None for one step); ``seq_sq``, ``arr`` and ``agg`` are None when no row
    has the field. ``Engine.apply_steps`` folds it as ``Engine.apply`` of each row would,
    and ``step_lines`` writes its log lines, without building a dict per step.
    """

    __slots__ = ("agg", "arr", "rank", "samples", "seq_sq", "step", "t", "tokens", "v")

    def __init__(self, v: Any, rank: Any, t: list, step: list, tokens: list, samples: list,
                 seq_sq: list | None = None, arr: list | None = None,
                 agg: list | None = None) -> None:  # fmt: skip
        self.v, self.rank, self.t, self.step = v, rank, t, step
        self.tokens, self.samples, self.seq_sq = tokens, samples, seq_sq
        self.arr, self.agg = arr, agg

    def __len__(self) -> int:
        return len(self.step)

    def row(self, i: int) -> dict[str, Any]:
        """Row ``i`` as its ``step`` record (the keys in :func:`decode_wire`'s order)."""
        rec = {"v": self.v, "k": "step", "t": self.t[i], "step": self.step[i], "rank": self.rank,
               "tokens": self.tokens[i], "samples": self.samples[i]}  # fmt: skip
        if self.seq_sq is not None:
            rec["seq_sq"] = self.seq_sq[i]
        if self.arr is not None and self.arr[i] is not None:
            rec["arr"] = self.arr[i]
        if self.agg is not None and self.agg[i] is not None:
            rec["agg"] = self.agg[i]
        return rec

    def rows(self) -> list[dict[str, Any]]:
        """Every row as its ``step`` record."""
        return [self.row(i) for i in range(len(self.step))]


def step_lines(b: Steps, n: int) -> bytes | None:
    """The run-log lines of ``b``'s rows, stamped ``"n"`` from ``n`` on: byte for byte
    :func:`encode` of each row's record with its ``n`` appended (``store.RunLog``), in one
    ``%`` operation over the whole batch (the times' ``repr`` taken as a column first: most of
    the cost; a count the same in every row, as a fixed batch's, written into the line once);
    None for a batch this does not format (merged rows, a time that is not a float,
    columns of unequal length)."""
    if b.agg is not None or type(b.v) is not int or type(b.rank) is not int:
        return None
    if set(map(type, b.t)) != {float}:  # finite: checked when decoded
        return None
    m = len(b.step)
    line = '{"v":' + str(b.v) + ',"k":"step","t":%s,"step":%s,"rank":' + str(b.rank) + ","
    cols: list = [list(map(float.__repr__, b.t)), b.step]
    parts = [("tokens", b.tokens), ("samples", b.samples)]
    if b.seq_sq is not None:
        parts.append(("seq_sq", b.seq_sq))
    for name, col in parts:
        if len(col) == m and col.count(col[0]) == m:  # the same every row: written once
            line += f'"{name}":{_json_ints(col[:1])[0]},'
        else:
            line += f'"{name}":%s,'
            cols.append(_json_ints(col))
    if b.arr is not None:  # encode writes it where a row has one, after seq_sq
        if set(map(type, b.arr)) - {float, type(None)}:
            return None
        line += "%s"
        cols.append(["" if a is None else f'"arr":{a!r},' for a in b.arr])
    line += '"n":%s}\n'
    cols.append(range(n, n + m))
    if any(len(col) != m for col in cols):
        return None
    fields = [None] * (len(cols) * m)  # row by row: each row's fields in the line's order
    for q, col in enumerate(cols):
        fields[q :: len(cols)] = col
    return ((line * m) % tuple(fields)).encode()


def _json_ints(col: list) -> list:
    """A column of ints and None as JSON writes each (``null`` for None)."""
    try:  # ints only, the usual case: sum in C is faster than a scan for None
        sum(col)
    except TypeError:
        return ["null" if x is None else x for x in col]
    return col


def _check_step_columns(times: list, steps: list, tokens: list, samples: list,
                        seq_sq: list | None = None) -> None:  # fmt: skip
    """Every row of a steps batch as :func:`validate` would check its ``step`` record.

    Raises:
        RecordError: a time that is not a finite number, a step that is not an int, or tokens,
            samples or seq_sq that are neither an int nor null (bool is no number here either).
    """
    if not _times_ok(times) and not all(
        type(t) in (int, float) and _finite(t) and 0 <= t < MAX_TIME for t in times
    ):
        raise RecordError("step: 't' must be a finite number of seconds in [0, 1e11)")
    if set(map(type, steps)) - {int}:
        raise RecordError("step: field 'step' must be an int")
    for name, col in (("tokens", tokens), ("samples", samples), ("seq_sq", seq_sq or ())):
        if set(map(type, col)) - _INT_OR_NONE:
            raise RecordError(f"step: field {name!r} must be an int or null")


_INT_OR_NONE = {int, type(None)}


def _times_ok(times: list) -> bool:
    """Every time a finite float in [0, 1e11), checked by columns (False: look row by row)."""
    if set(map(type, times)) != {float}:
        return False
    total = sum(times)  # finite when every time is (an overflow: row by row)
    return total - total == 0.0 and min(times) >= 0 and max(times) < MAX_TIME


def _step_times(rec: dict) -> list | None:
    """A steps batch's times (s since the epoch): ``t`` as listed, or ``t0`` plus ``dt_us``
    (whole microseconds after ``t0``, what the agent's sender writes)."""
    t0, dt = rec.get("t0"), rec.get("dt_us")
    if dt is None:
        return rec.get("t")
    if not _is(t0, (int, float)) or not isinstance(dt, list) or set(map(type, dt)) - {int}:
        raise RecordError("steps batch: 't0' must be a number and 'dt_us' whole numbers")
    return [t0 + d / 1e6 for d in dt]


def _spans(rec: dict) -> list[dict[str, Any]]:
    cols = [rec.get(c) for c in ("name", "t", "dur")]
    if not all(isinstance(c, list) for c in cols) or len({len(c) for c in cols}) != 1:
        raise RecordError("spans batch: 'name', 't', 'dur' must be equal-length lists")
    rank, v = rec.get("rank", 0), rec.get("v")
    return [
        validate({"v": v, "k": "span", "t": t, "name": name, "dur": dur, "rank": rank})
        for name, t, dur in zip(*cols, strict=True)
    ]


def _is(value: Any, types: tuple[type, ...]) -> bool:
    if isinstance(value, bool):  # bool is an int subclass; never a count or a time
        return False
    return isinstance(value, types)


def encode(rec: dict[str, Any]) -> bytes:
    """One record as a compact UTF-8 JSON line ending in ``\\n`` (NaN/inf refused).

    A ``step`` record as ``decode_wire`` builds it (the run log's most common line) is
    formatted directly: the same bytes as ``json.dumps``, in a fraction of its time.
    """
    line = _step_line(rec)
    if line is not None:
        return line
    return (json.dumps(rec, separators=(",", ":"), allow_nan=False) + "\n").encode()


_STEP_KEYS = ("v", "k", "t", "step", "rank", "tokens", "samples")
_STEP_KEYS_SQ = (*_STEP_KEYS, "seq_sq")
_STEP_KEYS_ARR = (*_STEP_KEYS_SQ, "arr")
_STEP_LINE = '{{"v":{},"k":"step","t":{},"step":{},"rank":{},"tokens":{},"samples":{}}}\n'
_STEP_LINE_SQ = (
    '{{"v":{},"k":"step","t":{},"step":{},"rank":{},"tokens":{},"samples":{},"seq_sq":{}}}\n'
)


_STEP_LINE_ARR = _STEP_LINE_SQ[:-3] + ',"arr":{}}}\n'


def _step_line(rec: dict[str, Any]) -> bytes | None:
    """``rec`` formatted as ``json.dumps`` would, if it is a plain step record; else None."""
    keys = tuple(rec)
    if keys not in (_STEP_KEYS, _STEP_KEYS_SQ, _STEP_KEYS_ARR) or rec["k"] != "step":
        return None
    v, t, n, rank, tok, smp = (rec[k] for k in ("v", "t", "step", "rank", "tokens", "samples"))
    if type(t) is not float or not math.isfinite(t):
        return None
    if not (type(v) is int and type(n) is int and type(rank) is int):
        return None
    if not (tok is None or type(tok) is int) or not (smp is None or type(smp) is int):
        return None
    if len(keys) == len(_STEP_KEYS):
        return _STEP_LINE.format(v, repr(t), n, rank, _json_int(tok), _json_int(smp)).encode()
    sq = rec["seq_sq"]
    if not (sq is None or type(sq) is int):
        return None
    if len(keys) == len(_STEP_KEYS_SQ):
        line = _STEP_LINE_SQ.format(v, repr(t), n, rank, _json_int(tok), _json_int(smp),
                                    _json_int(sq))  # fmt: skip
        return line.encode()
    arr = rec["arr"]
    if arr is not None and (type(arr) is not float or not math.isfinite(arr)):
        return None
    a = "null" if arr is None else repr(arr)
    return _STEP_LINE_ARR.format(v, repr(t), n, rank, _json_int(tok), _json_int(smp),
                                 _json_int(sq), a).encode()  # fmt: skip


def _json_int(x: int | None) -> str:
    return "null" if x is None else str(x)


def decode(line: bytes | str) -> dict[str, Any]:
    """Parse and validate one line.

    Raises:
        RecordError: invalid JSON or an invalid record.
    """
    try:
        rec = json.loads(line)
    except (ValueError, UnicodeDecodeError) as exc:
        raise RecordError(f"not JSON: {exc}") from None
    return validate(rec)
