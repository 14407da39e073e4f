"""A checkpoint: the engine's whole state as one JSON object, and back, checked.

The supervisor writes one into the run log now and then (``checkpoint`` records, docs/spec.md
"Checkpoints"), so that replay starts from the last one and folds only the lines after it
(:func:`trainmeter.core.engine.replay`). A log can hold lines another same-user process wrote,
so a checkpoint is data, never code: JSON (no pickle), only the classes named in
:data:`SPECS` are ever built, each attribute is checked against its spec (type, element
types, length) before it is set, and the restored engine must give a snapshot that is finite
JSON. Anything else raises :class:`CheckpointError`, which the caller counts and falls back
from. Standard library only.

Encoding: JSON scalars as they are (floats must be finite), a list as a JSON list, anything
else as an object with one tag: ``{"m": {...}}`` a dict with string keys, ``{"d": [[k, v],
...]}`` any other dict, ``{"t": [...]}`` a tuple, ``{"s": [...]}`` a set, ``{"q": [...]}`` a
deque, ``{"o": class name, "a": {attribute: value}}`` an object of a class in :data:`SPECS`.
"""

from __future__ import annotations

import json
import math
import re
import zlib
from collections import deque
from dataclasses import fields, is_dataclass
from typing import Any

from trainmeter.core import flops, ranks, timeline
from trainmeter.core.counters import EnergyMeter
from trainmeter.core.drops import MAX_PLACES, Drops
from trainmeter.core.hardware import MAX_DEVICES, HardwareState
from trainmeter.core.rank_counts import RankCounts, _Own
from trainmeter.core.records import SPAN_KINDS

FORMAT = 2  # bump when an attribute keeps its name and changes its meaning
MAX_ITEMS = 100_000  # items of any one container
MAX_TEXT = 100_000  # characters of a string
MAX_INT = 2**63  # magnitude of an int, below
_SCALARS = {type(None), bool, int, float, str}
# attributes that are caches or replay-only: never written, left as a fresh engine has them
TRANSIENT = {
    "Engine": {"_handlers", "_options", "_mfu_divisor", "_peak_of", "log_read"},
    "Timeline": {"_scale_ix", "_led"},
}

NUM, INT, STR, BOOL, JSON = "num", "int", "str", "bool", "json"
SEC = "sec"  # a time or a sum of seconds (or joules): a number below MAX_SEC in magnitude
MAX_SEC = 1e13  # records' times are below 1e11 (records.MAX_TIME); a year at 1 kW is 3e10 J


def opt(spec: Any) -> tuple:
    return ("opt", spec)


def obj(name: str) -> tuple:
    return ("obj", name)


ONUM = opt(SEC)
# class name -> {attribute: spec}; an attribute not listed takes the spec of its value in a
# fresh object (a number, a string, a bool, or an object of a class listed here)
SPECS: dict[str, dict[str, Any]] = {
    "Engine": {
        "run": JSON, "opts": JSON, "agents": ("dict", ("tuple", opt(STR), INT), JSON),
        "model": opt(JSON), "rank_models": ("dict", INT, JSON), "shape": opt(obj("ModelShape")),
        "shape_error": opt(STR), "clock_rank": opt(INT),
        "rank_clocks": ("dict", INT, obj("_RankClock")), "series": ("dict", STR, JSON),
        "notes": ("deque", STR), "segment_t0": ONUM, "last_t": ONUM, "charted_gpus": ("set", INT),
        "counted": opt(JSON), "step_clock": opt(STR), "counting_seen": ("set", STR),
        "process": opt(JSON), "span_s": ("dict", STR, SEC), "seg_first_t": ONUM,
        "slow_evals": ("dict", INT, INT), "stragglers": opt(("list", INT)),
        "refused_series": ("set", INT), "first_refused": opt(STR),
    },
    "_Clock": {"last_t": ONUM, "recent": ("deque", ("tuple", SEC, INT, INT, INT, INT))},
    "_RankClock": {"last_t": ONUM, "recent": ("deque", ("tuple", SEC, INT)), "mean": ONUM},
    "RankCounts": {"own": ("dict", INT, obj("_Own")), "newest_t": ONUM},
    "_Own": {"node": opt(STR), "recent": ("deque", ("tuple", SEC, INT, INT))},
    "Timeline": {
        "_series": ("dict", STR, obj("_Series")), "_refused_names": ("set", INT),
        "scales": ("list", ("tuple", NUM, ("tuple*", STR), ("tuple*", NUM))),
    },
    "_Series": {
        "xs": ("list", NUM), "ys": ("list", NUM), "seqs": ("list", INT), "sc": ("list", INT),
        "of": opt(STR),
    },
    "HardwareState": {
        "backend": opt(STR), "reason": opt(STR), "devices": ("list", JSON),
        "samples": ("dict", INT, JSON), "missing": ("dict", INT, JSON),
        "meters": ("dict", INT, obj("EnergyMeter")), "host": opt(JSON), "lost": ("set", INT),
    },
    "EnergyMeter": {"_last": ONUM},
    "Ranks": {
        "ranks": ("dict", INT, obj("_Rank")), "groups": ("dict", STR, obj("_Group")),
        "_groups_of": ("dict", INT, STR), "_expected": ("dict", STR, INT),
        "_segment": ("tuple", ONUM, SEC),
    },
    "_Rank": {
        "first_t": ONUM, "last_t": ONUM, "start_t": ONUM, "before_s": ONUM,
        "recent": ("deque", ("tuple", SEC, INT)), "span_s": ("dict", STR, SEC),
        "lags": ("deque", SEC), "costs": ("deque", SEC),
    },
    "_Group": {
        "members": ("set", INT), "sync": ("deque", BOOL),
        "open": ("dict", INT, ("dict", INT, ("tuple", SEC, SEC))),
    },
    "Drops": {"places": ("dict", ("tuple", opt(STR), STR, opt(INT)), ("dict", STR, INT))},
    "ModelShape": {},  # built by its own constructor, which checks it
}  # fmt: skip
_CLASSES = {
    RankCounts: "RankCounts", _Own: "_Own", timeline.Timeline: "Timeline",
    timeline._Series: "_Series", HardwareState: "HardwareState", EnergyMeter: "EnergyMeter",
    ranks.Ranks: "Ranks", ranks._Rank: "_Rank", ranks._Group: "_Group", Drops: "Drops",
    flops.ModelShape: "ModelShape",
}  # fmt: skip
ENGINE_MODULE = "trainmeter.core.engine"  # its classes: given by the engine (no import cycle)
_ENGINE_CLASSES = ("Engine", "_Clock", "_RankClock")


def _name_of(t: type) -> str | None:
    """The name :data:`SPECS` knows class ``t`` by, or None."""
    name = _CLASSES.get(t)
    if name is None and t.__module__ == ENGINE_MODULE and t.__name__ in _ENGINE_CLASSES:
        name = t.__name__
    return name


def _factories(mod: Any) -> dict[str, Any]:
    """Class name -> a fresh object of it as the engine module ``mod`` builds it."""
    return {
        "Engine": mod.Engine, "_Clock": mod._Clock, "_RankClock": mod._RankClock,
        "RankCounts": lambda: RankCounts(mod.MAX_RANKS, mod.WINDOW_STEPS), "_Own": _Own,
        "Timeline": lambda: timeline.Timeline(max_series=mod.MAX_SERIES + mod.OWN_SERIES),
        "_Series": timeline._Series, "HardwareState": HardwareState, "EnergyMeter": EnergyMeter,
        "Ranks": lambda: ranks.Ranks(mod.MAX_RANKS), "_Rank": lambda: ranks._Rank(""),
        "_Group": lambda: ranks._Group(0), "Drops": Drops,
    }  # fmt: skip


class CheckpointError(ValueError):
    """A checkpoint that cannot be written or restored (the message says why, briefly)."""


# -- out ----------------------------------------------------------------------------------------
def attributes(x: Any) -> list[str]:
    """The attributes of an object of a class in :data:`SPECS` that a checkpoint holds: those
    a fresh one has (an attribute set later, such as a cache kept in ``__dict__``, is left
    out), less :data:`TRANSIENT`."""
    name = _name_of(type(x))
    names = _NAMES.get(name)
    if names is None:
        if is_dataclass(x):
            names = [f.name for f in fields(x)]
        elif hasattr(x, "__slots__"):
            names = list(x.__slots__)
        else:  # every such class is built without arguments, but RankCounts
            names = list(vars(type(x)(1, 1) if name == "RankCounts" else type(x)()))
        skip = TRANSIENT.get(name, ())
        names = _NAMES[name] = [n for n in names if n not in skip]
    return names


_NAMES: dict[str, list[str]] = {}


def encode(x: Any) -> Any:
    """``x`` as a JSON-able tree (module docstring).

    Raises:
        CheckpointError: an object of a class not in :data:`SPECS`, or a float that is not
            finite.
    """
    t = type(x)
    if t is float:
        if x - x != 0.0:
            raise CheckpointError("a float that is not finite")
        return x
    if t in _SCALARS:
        return x
    if t is list:
        types = set(map(type, x))
        if types <= _SCALARS:  # the usual case: numbers (a chart's points)
            if float in types and not _finite(x):
                raise CheckpointError("a float that is not finite")
            return x
        return [encode(v) for v in x]
    if t is dict:
        if all(type(k) is str for k in x):
            return {"m": {k: encode(v) for k, v in x.items()}}
        return {"d": [[encode(k), encode(v)] for k, v in x.items()]}
    if t is tuple:
        return {"t": [encode(v) for v in x]}
    if t is set or t is frozenset:
        return {"s": [encode(v) for v in x]}
    if t is deque:
        return {"q": [encode(v) for v in x]}
    name = _name_of(t)
    if name is None:
        raise CheckpointError(f"no checkpoint form for a {t.__name__}")
    return {"o": name, "a": {a: encode(getattr(x, a)) for a in attributes(x)}}


def _finite(xs: list) -> bool:
    """Whether every float of ``xs`` is finite (their sum is, then, unless it overflows)."""
    floats = [v for v in xs if type(v) is float]
    try:
        if math.isfinite(math.fsum(floats)):
            return True
    except (OverflowError, ValueError):  # an intermediate sum past a float, or inf - inf
        pass
    return all(map(math.isfinite, floats))


def engine_state(eng: Any, records: int | None = None) -> dict[str, Any]:
    """The ``state`` of a checkpoint record: ``{"format", "engine"}``; ``records`` (the log's
    lines, what a replay counts) in place of the engine's own count when given.

    Raises:
        CheckpointError: as :func:`encode`.
    """
    tree = encode(eng)
    if records is not None:
        tree["a"]["records"] = records
    return {"format": FORMAT, "engine": tree}


# -- in -----------------------------------------------------------------------------------------
def restore(state: Any, mod: Any) -> Any:
    """The engine a checkpoint's ``state`` holds, checked (module docstring); ``mod`` the
    engine module (``trainmeter.core.engine``), whose classes and bounds it is built with.

    Raises:
        CheckpointError: anything in it that is not what :func:`engine_state` writes for an
            engine of this version, or an engine whose snapshot fails or is not finite JSON.
    """
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError("not a checkpoint of this format")
    if not _FACTORIES:
        _FACTORIES.update(_factories(mod), mod=mod)
    try:
        eng = _decode(state.get("engine"), obj("Engine"), "engine")
        json.dumps(eng.snapshot(), allow_nan=False)  # the state gives a snapshot: finite JSON
    except CheckpointError:
        raise
    except Exception as exc:  # a state that passed every check and still fails
        raise CheckpointError(f"restored engine fails: {type(exc).__name__}") from None
    return eng


UNSOUND = "fails with the lines after it"


def sound(eng: Any) -> bool:
    """Whether an engine restored from a checkpoint, with the lines after it folded, still
    gives a snapshot and a chart history that are finite JSON, and a snapshot every text
    surface reads without an error (the summary line, ``tm ls``'s time, the passport and its
    Markdown): a state that passed every check of :func:`restore` and is not one a run could
    reach (counts that disagree, a negative sum of seconds) may fail only later; replay then
    reads the whole log."""
    from trainmeter.core import passport, passport_md, summary, units

    try:
        snap = eng.snapshot()
        json.dumps(snap, allow_nan=False)
        series = eng.timeline.full()["series"].values()
        if not all(_finite(xs) and _finite(ys) for xs, ys in series):
            return False
        summary.summary_line(snap)
        units.format_duration(snap.get("elapsed_s"))
        passport_md.markdown(passport.build(snap))
        return True
    except Exception:  # any failure of a state no run reaches
        return False


_FACTORIES: dict[str, Any] = {}  # _factories(the engine module), and "mod": it


def _fail(where: str, what: str) -> CheckpointError:
    return CheckpointError(f"{where[-60:]}: {what}")


def _decode(node: Any, spec: Any, where: str) -> Any:
    """``node`` (a JSON tree) decoded as ``spec`` says, or :class:`CheckpointError`."""
    if spec.__class__ is str:
        return _scalar(node, spec, where)
    kind = spec[0]
    if kind == "opt":
        return None if node is None else _decode(node, spec[1], where)
    if kind == "obj":
        return _object(node, spec[1], where)
    if kind == "tuple*":  # a tuple of any length, each item as spec[1]
        return tuple(_decode(v, spec[1], where) for v in _tagged(node, "t", where))
    if kind == "tuple":
        items = _tagged(node, "t", where)
        if len(items) != len(spec) - 1:
            raise _fail(where, "a tuple of the wrong length")
        return tuple(_decode(v, s, where) for v, s in zip(items, spec[1:], strict=True))
    if kind == "dict":
        return _dict(node, spec[1], spec[2], where)
    if kind == "list":
        if not isinstance(node, list) or len(node) > MAX_ITEMS:
            raise _fail(where, "not a list of at most 100000 items")
        if spec[1] in (NUM, INT):
            return _numbers(node, spec[1], where)
        return [_decode(v, spec[1], where) for v in node]
    items = _tagged(node, {"set": "s", "deque": "q"}[kind], where)
    out = [_decode(v, spec[1], where) for v in items]
    return set(out) if kind == "set" else deque(out)


def _numbers(node: list, spec: str, where: str) -> list:
    """A list of numbers (a chart's points), checked a list at a time: ints (and floats, for
    ``NUM``), the ints below 2**63 in magnitude (the JSON reader refused non-finite floats)."""
    types = set(map(type, node))
    if not types <= ({int} if spec == INT else {int, float}):
        raise _fail(where, f"not a list of {spec}s")
    if int in types and not -MAX_INT < min(node) <= max(node) < MAX_INT:
        raise _fail(where, "an int beyond 2**63")
    return node


def _tagged(node: Any, tag: str, where: str) -> list:
    if not (isinstance(node, dict) and len(node) == 1 and isinstance(node.get(tag), list)):
        raise _fail(where, f"not a {tag!r} item")
    if len(node[tag]) > MAX_ITEMS:
        raise _fail(where, "over 100000 items")
    return node[tag]


def _scalar(node: Any, spec: str, where: str) -> Any:
    t = type(node)
    if spec == JSON:
        return _json(node, where, 0)
    number = t is float or t is int
    ok = {NUM: number, SEC: number, INT: t is int, STR: t is str, BOOL: t is bool}[spec]
    if not ok:
        raise _fail(where, f"not a {spec}")
    if spec == SEC and not -MAX_SEC < node < MAX_SEC:
        raise _fail(where, "seconds beyond 1e13")
    if t is int and not -MAX_INT < node < MAX_INT:
        raise _fail(where, "an int beyond 2**63")
    if t is str and len(node) > MAX_TEXT:
        raise _fail(where, "a string over 100000 characters")
    return node


def _json(node: Any, where: str, depth: int) -> Any:
    """A plain JSON value: scalars, lists and dicts, as the log's JSON holds what the engine
    was given (a key a record made in the supervisor held as an int is a string there, a
    tuple a list); no set, no object."""
    t = type(node)
    if depth > 8:
        raise _fail(where, "nested too deep")
    if t is list:
        if len(node) > MAX_ITEMS:
            raise _fail(where, "over 100000 items")
        return [_json(v, where, depth + 1) for v in node]
    if t is dict:
        tag, inner = next(iter(node.items())) if len(node) == 1 else (None, None)
        if tag == "m" and isinstance(inner, dict) and len(inner) <= MAX_ITEMS:
            return {k: _json(v, where, depth + 1) for k, v in inner.items()}
        if tag == "d" and isinstance(inner, list) and len(inner) <= MAX_ITEMS:
            if not all(isinstance(p, list) and len(p) == 2 for p in inner):
                raise _fail(where, "not a list of pairs")
            return {_json_key(k, where): _json(v, where, depth + 1) for k, v in inner}
        if tag == "t" and isinstance(inner, list):
            return _json(inner, where, depth)
        raise _fail(where, "not a plain JSON value")
    if t is str:
        return _scalar(node, STR, where)
    if t is int:
        return _scalar(node, INT, where)
    return node  # None, bool, float (the JSON reader refused NaN and Infinity)


def _json_key(key: Any, where: str) -> str:
    """A dict key as JSON writes it: a string, else its JSON text (``1``, ``1.5``, ``true``)."""
    if isinstance(key, str):
        return _scalar(key, STR, where)
    if key is None or isinstance(key, (bool, int, float)):
        return json.dumps(_scalar(key, INT, where) if type(key) is int else key)
    raise _fail(where, "a key JSON has no form for")


def _dict(node: Any, kspec: Any, vspec: Any, where: str) -> dict:
    if isinstance(node, dict) and len(node) == 1 and isinstance(node.get("m"), dict):
        if kspec != STR and node["m"]:
            raise _fail(where, "string keys where others belong")
        pairs = list(node["m"].items())
    else:
        pairs = _tagged(node, "d", where)
        if not all(isinstance(p, list) and len(p) == 2 for p in pairs):
            raise _fail(where, "not a list of pairs")
    if len(pairs) > MAX_ITEMS:
        raise _fail(where, "over 100000 items")
    out = {}
    for k, v in pairs:
        key = _decode(k, kspec, where)
        out[key] = _decode(v, vspec, f"{where}.{key}")
    return out


def _object(node: Any, name: str, where: str) -> Any:
    if not (isinstance(node, dict) and node.get("o") == name and isinstance(node.get("a"), dict)):
        raise _fail(where, f"not a {name}")
    attrs = node["a"]
    if name == "ModelShape":
        values = {k: _scalar(v, JSON, where) for k, v in attrs.items()}
        try:
            return flops.ModelShape(**values)
        except (TypeError, ValueError):
            raise _fail(where, "not a model shape") from None
    specs = SPECS[name]
    x = _FACTORIES[name]()
    names = attributes(x)
    if set(attrs) != set(names):
        raise _fail(where, f"{name} attributes differ from this version's")
    for a in names:
        fresh = getattr(x, a)
        value = _decode(attrs[a], specs.get(a) or _spec_of(fresh, where), f"{where}.{a}")
        if isinstance(fresh, deque):
            if fresh.maxlen is not None and len(value) > fresh.maxlen:
                raise _fail(f"{where}.{a}", "longer than its bound")
            value = deque(value, maxlen=fresh.maxlen)
        setattr(x, a, value)
    _bounded(x, name, where)
    return x


def _spec_of(fresh: Any, where: str) -> Any:
    """The spec of an attribute :data:`SPECS` does not list: that of its fresh value."""
    t = type(fresh)
    if t is bool:
        return BOOL
    if t is int or t is float:
        return SEC if t is float else INT  # a float kept from a fresh 0.0: seconds, joules
    if t is str:
        return STR
    if _name_of(t) is not None:
        return obj(_name_of(t))
    raise _fail(where, f"no spec for a {t.__name__}")


def _bounded(x: Any, name: str, where: str) -> None:
    """The bounds the folding code keeps, held by the restored object too."""
    _engine = _FACTORIES["mod"]
    fresh_ok = {
        "Engine": lambda: len(x.rank_clocks) <= _engine.MAX_RANKS
        and len(x.series) <= _engine.MAX_SERIES and len(x.agents) <= _engine.MAX_RANKS
        and len(x.rank_models) <= _engine.MAX_RANKS and len(x.refused_series) <= 1000
        and set(x.span_s) == set(SPAN_KINDS),
        "Timeline": lambda: (x.cap, x.max_series) == (timeline.DEFAULT_CAP,
                                                      _engine.MAX_SERIES + _engine.OWN_SERIES)
        and len(x._series) <= x.max_series and len(x._refused_names) <= 1000
        and all(len(s.xs) == len(s.ys) == len(s.seqs) <= x.cap for s in x._series.values())
        and _scales_ok(x),
        "RankCounts": lambda: (x.max_ranks, x.window) == (_engine.MAX_RANKS,
                                                          _engine.WINDOW_STEPS)
        and len(x.own) <= x.max_ranks
        and all(len(o.recent) <= x.window for o in x.own.values()),
        "Ranks": lambda: x.max_ranks == _engine.MAX_RANKS and len(x.ranks) <= x.max_ranks,
        "_Rank": lambda: set(x.span_s) == set(SPAN_KINDS),
        "_Group": lambda: len(x.open) <= 2 * ranks.JOIN_STEPS + 2,
        "HardwareState": lambda: len(x.devices) <= MAX_DEVICES and len(x.meters) <= MAX_DEVICES,
        "Drops": lambda: len(x.places) <= MAX_PLACES + 1,
    }.get(name)  # fmt: skip
    if fresh_ok is not None and not fresh_ok():
        raise _fail(where, f"a {name} past its bounds")


def _scales_ok(tl: Any) -> bool:
    """A restored timeline's scales and derived series as :class:`timeline.Timeline` keeps
    them: each scale once, ``(den, names, factors)`` with ``0 < den``, as many factors (``>= 0``)
    as names, none repeated; each point's index into them in range (or -1), on every point of
    a series or none; a derived series without points of its own, named by a scale, led by a
    series whose points carry scales."""
    if len(tl.scales) > 3 * tl.cap + 64 or len(set(tl.scales)) != len(tl.scales):
        return False  # Timeline._scale keeps it at 2 * cap + 65 at most, each scale once
    for den, names, factors in tl.scales:
        if not (den > 0 and len(names) == len(factors) == len(set(names))):
            return False
        if factors and min(factors) < 0:
            return False
    named = {n for _, names, _ in tl.scales for n in names}
    for name, s in tl._series.items():
        if s.of is not None:
            lead = tl._series.get(s.of)
            if s.xs or s.sc or lead is None or lead.of is not None or not lead.sc:
                return False
            if name not in named:
                return False
        elif s.sc and (len(s.sc) != len(s.xs) or not -1 <= min(s.sc) <= max(s.sc) < len(tl.scales)):
            return False
    return True


# -- from a log ---------------------------------------------------------------------------------
MAX_TRIED = 8  # checkpoints tried from the log's end before a full replay


def resume(path: Any, mod: Any) -> tuple[Any, Any, dict[tuple[str, str], int]]:
    """``(engine, reader, refused)``: the engine of the log's last valid checkpoint and a
    :class:`~trainmeter.core.logread.LogReader` of the lines after it, or ``(None, None,
    refused)`` when none of the last :data:`MAX_TRIED` is valid (then replay reads the whole
    log). Reads the log's head (its ``run_start``: a checkpoint of another run is refused)
    and the checkpoints from the end, nothing else. ``refused``: the checkpoints refused, by
    ``("checkpoint", reason)``; the reader returned has counted them already. ``mod``: the
    engine module (:func:`restore`). Never raises.
    """
    from trainmeter.core import logread
    from trainmeter.core.records import RecordError

    refused: dict[tuple[str, str], int] = {}
    try:
        head = logread.head(path)
        first = logread.parse(head)
        if first["k"] != "run_start":
            return None, None, refused
        for at, line in logread.checkpoints(path, MAX_TRIED):
            if line is None:  # the last line, cut short or being written: not a checkpoint yet
                continue
            try:
                eng, reader = _from_line(path, at, line, first, head, mod)
            except (RecordError, CheckpointError) as exc:
                key = ("checkpoint", str(exc)[:100])
                refused[key] = refused.get(key, 0) + 1
                continue
            for (kind, reason), n in refused.items():
                reader.count(kind, reason, n)
            return eng, reader, refused
    except (OSError, ValueError):  # unreadable: the full replay says so
        pass
    return None, None, refused


_CRC = re.compile(rb',"crc":(0|[1-9][0-9]{0,9}),"state":')
KEYS = {"v", "k", "t", "at", "upto", "run", "log", "crc", "state"}


def crc_of(line: bytes) -> int:
    """The CRC-32 (zlib's, ISO 3309) a checkpoint line claims, checked against the line's own
    bytes: all of them but the claim itself (what comes before ``,"crc":``, then the state
    after ``,"state":`` less the closing ``}`` and newline), so damage anywhere in a
    checkpoint is found before it is parsed.

    Raises:
        CheckpointError: no claim, or the bytes do not match it.
    """
    m = _CRC.search(line)
    if m is None or not line.endswith(b"}\n"):
        raise CheckpointError("no CRC-32")
    claim = int(m.group(1))
    view = memoryview(line)
    if zlib.crc32(view[m.end() : -2], zlib.crc32(view[: m.start()])) != claim:
        raise CheckpointError("damaged (its CRC-32 differs)")
    return claim


def _from_line(path: Any, at: int, line: bytes, first: dict, head: bytes, mod: Any) -> tuple:
    from trainmeter.core import logread

    claim = crc_of(line)
    rec = logread.parse_checkpoint(line)
    if rec.keys() != KEYS or rec["crc"] != claim:
        raise CheckpointError("fields other than a checkpoint's")
    if rec["at"] != at:
        raise CheckpointError("not at the byte it was written at")
    if rec["run"] != first.get("id") or rec["upto"] != rec["log"].get("high"):
        raise CheckpointError("another run's, or another log's")
    eng = restore(rec["state"], mod)
    if eng.run.get("id") != first.get("id"):
        raise CheckpointError("another run's state")
    reader = logread.LogReader.resume(path, at + len(line), rec["log"],
                                      head if first.get("n") == 1 else None)  # fmt: skip
    return eng, reader


def line(eng: Any, t: float, at: int, upto: int, run: str | None) -> bytes:
    """The ``checkpoint`` line a supervisor writes at byte ``at`` of its log after the line
    numbered ``upto`` (every line before it written whole by this supervisor, so the reader's
    position there is that of a log without a flaw).

    Raises:
        CheckpointError: a state :func:`encode` refuses, or a line over
            ``logread.MAX_CHECKPOINT``.
    """
    from trainmeter.core.logread import MAX_CHECKPOINT

    position = {"high": upto, "holes": [], "skipped": [], "lines": upto, "records": upto,
                "numbered": upto > 0, "last_t": eng.last_t}  # fmt: skip
    state = json.dumps(engine_state(eng, records=upto), separators=(",", ":"), allow_nan=False)
    body = state.encode()  # ASCII: json.dumps escapes the rest
    rec = {"v": 1, "k": "checkpoint", "t": float(t), "at": at, "upto": upto, "run": run,
           "log": position}  # fmt: skip
    head = json.dumps(rec, separators=(",", ":"), allow_nan=False).encode()[:-1]
    crc = zlib.crc32(body, zlib.crc32(head))  # what crc_of reads: all but the claim
    out = b'%s,"crc":%d,"state":%s}\n' % (head, crc, body)
    if len(out) > MAX_CHECKPOINT:
        raise CheckpointError("a checkpoint over 64 MiB")
    return out
