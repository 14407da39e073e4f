"""The one reader of a run log (``run.jsonl``): lines in, validated records out, never raising.

A run log is written by one supervisor (``supervisor/store.RunLog``), one JSON record a line,
each stamped ``"n"``: 1, 2, 3, ... in its file. What may be in it anyway: a line cut by a
crash or a full disk, lines a same-user process added, a file copied twice together. Every
command that reads a log (``tm replay``, ``tm ls``, ``tm passport``, ``tm export``, ``tm
view``, ``tm merge``, the notebook's replay) reads it here, so each bad line is skipped and
counted the same way, by ``(kind, reason)``, and said (docs/reliability.md).

Limits (why): a line longer than :data:`MAX_LINE` bytes is skipped while it is read, never
held whole (no record is near it: a ``gpu`` record of 16 GPUs is about 8 KiB); JSON nested
deeper than :data:`MAX_DEPTH` is refused by a bracket count before it is parsed (Python's
parser recurses and would raise RecursionError); NaN, Infinity and numbers beyond a float
(``1e400``) are refused; each record passes :func:`trainmeter.core.records.validate`.

Sequence numbers: a line whose ``n`` was already seen is a repeat ("duplicate line", skipped);
numbers skipped over are counted as "missing lines". A log without any ``n`` (written before
trainmeter stamped them) reads exactly as before. Standard library only.

Checkpoints (``checkpoint`` lines, core/checkpoint.py) are a copy of the engine's state, not
records: reading forward skips them unread and uncounted (they carry no ``n``, and may be
longer than :data:`MAX_LINE`); :func:`checkpoints` finds them from the file's end, and
:meth:`LogReader.resume` reads on from the line after one with the position it holds.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator
from os import PathLike
from typing import IO, Any

from trainmeter.core.records import RecordError, Steps, validate

MAX_LINE = 1 << 20  # bytes of one line (1 MiB)
MAX_DEPTH = 64  # nesting of JSON arrays and objects in one line (records use 3)
MAX_HOLES = 100_000  # line numbers remembered as missing (a later line may fill one)
MAX_CHECKPOINT = 64 << 20  # bytes of one checkpoint line (its charts: a few MiB at most)
CHECKPOINT = b'{"v":1,"k":"checkpoint",'  # how the supervisor begins a checkpoint line
CHUNK = 1 << 20  # bytes read at a time when looking for checkpoints from a log's end
DUPLICATE = "duplicate line"
MISSING = "missing lines"
CUT = "last line cut short"
_NONE = object()
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')
_INT = rb"(0|[1-9][0-9]*)"
_COUNT = rb"(0|[1-9][0-9]*|null)"
# a step line as the supervisor writes it (records.encode, store.RunLog's "n") that validate()
# takes, nothing else: its fields in their order, each number as JSON writes it, the time a
# float in [0, 1e11) as repr writes one (a point; an exponent only below 1e-4), ``n`` in
# [1, 2**63); any other line is read by parse()
_STEP_BODY = (
    rb'\{"v":1,"k":"step","t":((?:0|[1-9][0-9]{0,10})\.[0-9]+|[1-9](?:\.[0-9]+)?e-[0-9]{1,3})'
    rb',"step":'
    + _INT
    + rb',"rank":'
    + _INT
    + rb',"tokens":'
    + _COUNT
    + rb',"samples":'
    + _COUNT
    + rb'(,"seq_sq":'
    + _COUNT
    + rb")?"
    + rb'(?:,"n":([1-9][0-9]{0,17}))?\}'
)
_STEP_LINE = re.compile(_STEP_BODY + rb"\n?")
# whole step lines in a block of lines (each from a line's start to its newline): split() on it
# gives every step line's 8 groups, and the other lines between them, in one call
_STEP_LINES = re.compile(rb"^" + _STEP_BODY + rb"\n", re.M)
_GROUPS = 8  # of _STEP_BODY: t, step, rank, tokens, samples, (,"seq_sq":x), x, n
_STRIDE = _GROUPS + 1  # split() puts the text before each match ahead of its groups
BLOCK = 1 << 22  # bytes read at a time by batches() from a file
_BRACKET = re.compile(rb"[\[\]{}]")
_NUMBER_TAIL = re.compile(rb',\s*"n"\s*:\s*([1-9][0-9]{0,15})\s*\}\s*\Z')  # a line's last field


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    x = float(text)
    if not math.isfinite(x):
        raise ValueError(f"{text[:20]} is beyond a float")
    return x


_DECODER = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite_float)
# a line without these can hold no number beyond a float (one needs 309 digits, of its own or
# of its exponent: a run of 200 digits, or an exponent of 3): read without a call per float.
# Looked for in the line with every digit as 0, E as e and - as + (three substring searches):
# a regular expression for them retries at every digit, 15 us on a sampler's line.
_AS_ZERO = bytes.maketrans(b"123456789E-", b"000000000e+")
_RUN = b"0" * 200
_LONG = b"0" * 19  # a run of digits as long as 2**63's
_PLAIN = json.JSONDecoder(parse_constant=_no_constant)


def too_deep(line: bytes, limit: int = MAX_DEPTH) -> bool:
    """True when ``line``'s arrays and objects nest deeper than ``limit`` (brackets inside
    strings do not count). Cheap: a line with at most ``limit`` opening brackets is never
    scanned."""
    if line.count(b"[") + line.count(b"{") <= limit:
        return False
    depth = 0
    for m in _BRACKET.finditer(_STRING.sub(b"", line)):
        depth += 1 if m.group() in (b"[", b"{") else -1
        if depth > limit:
            return True
    return False


def _may_overflow(raw: bytes) -> bool:
    """Whether ``raw`` holds a run of 200 digits or an exponent of 3 digits."""
    return _overflows(raw.translate(_AS_ZERO))


def _overflows(folded: bytes) -> bool:
    """:func:`_may_overflow` of a line already folded (``_AS_ZERO``)."""
    return b"e000" in folded or b"e+000" in folded or _RUN in folded


def parse(line: bytes | str, loads: Any = None) -> dict[str, Any]:
    """One log line as a validated record. ``loads``: a faster JSON parser (``tm export``'s
    orjson) for a line it reads as ``json`` does, tried first on a line with no run of 19
    digits (an int past 64 bits, which orjson turns into a float) and no number that could
    overflow; a line it refuses is read by ``json`` (its error is the reason counted).

    Raises:
        RecordError: too long, too deep, not UTF-8, not JSON (NaN, Infinity and ``1e400``
            included), or not a valid record (the message is the reason counted).
    """
    raw = line.encode("utf-8", "surrogatepass") if isinstance(line, str) else bytes(line)
    if len(raw) > MAX_LINE + 1:  # the newline not counted
        raise RecordError(f"line over {MAX_LINE >> 20} MiB")
    if too_deep(raw):
        raise RecordError(f"JSON nested deeper than {MAX_DEPTH}")
    folded = raw.translate(_AS_ZERO)
    overflow = _overflows(folded)
    if loads is not None and not overflow and _LONG not in folded:
        try:
            rec = loads(raw)
        except Exception:  # not JSON to it: json reads the line, and says why
            pass
        else:
            return validate(rec)
    try:
        rec = (_DECODER if overflow else _PLAIN).decode(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise RecordError("not UTF-8") from None
    except (ValueError, RecursionError):
        raise RecordError("not JSON") from None
    return validate(rec)


def _reason(exc: RecordError, kind: str | None = None) -> str:
    """A short, bounded reason: validate's message without the kind it starts with (the count
    is keyed by kind already), cut to 100 characters."""
    text = str(exc)
    if kind and text.startswith(f"{kind}: "):
        text = text[len(kind) + 2 :]
    return text[:100]


class LogReader:
    """Read one run log; iterate for its valid records, then read the counts.

    Args:
        source: a path (opened here) or an iterable of lines (bytes or str), such as an open
            binary file.
        loads: a faster JSON parser that reads a line as ``json`` does (:func:`parse`).
    Attributes:
        skipped: ``{(kind, reason): lines}``; kind is the record's ``k`` when it could be read,
            else ``"line"``.
        lines: non-blank lines read; ``records``: lines yielded.
        cut: True when the last line had no newline and did not parse (a write cut short).
        numbered: True when any record carried ``n``.
        last_t: the newest ``t`` of a yielded record (None: none).
    Raises:
        OSError: when iterated, a path that cannot be opened or read.
    """

    def __init__(self, source: str | PathLike | Iterable[bytes | str], loads: Any = None) -> None:
        self.source = source
        self.loads = loads  # a faster JSON parser for the lines parse() reads (parse's loads)
        self.skipped: dict[tuple[str, str], int] = {}
        self.lines = 0
        self.records = 0
        self.cut = False
        self.numbered = False
        self.last_t: float | None = None
        self._high = 0  # the largest n seen
        self._holes: set[int] = set()
        self._first: bytes | None = None  # the line stamped n=1 (a reopened log restarts n)
        self.start = 0  # the byte a path is read from (resume)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self._source(self._read, _bounded_lines)

    def _source(self, fold: Any, of_file: Any) -> Iterator[Any]:
        """``fold`` of the source's lines: a path's from :attr:`start` on, as ``of_file``
        gives them from the open file; an iterable's as they come."""
        if not isinstance(self.source, (str, PathLike)):
            yield from fold(_checked_lines(self.source))
            return
        try:
            with open(self.source, "rb") as f:
                f.seek(self.start)
                yield from fold(of_file(f))
        except OSError as exc:  # a read error names no file: name the log
            if exc.filename is not None:
                raise
            raise OSError(exc.errno, exc.strerror or str(exc), str(self.source)) from None

    def position(self) -> dict[str, Any]:
        """Where reading stands, as JSON (a checkpoint holds it): the largest ``n`` seen
        (``high``), the numbers still missing below it (``holes``), ``skipped`` as
        ``[kind, reason, lines]`` rows, ``lines``, ``records``, ``numbered``, ``last_t``."""
        return {"high": self._high, "holes": sorted(self._holes),
                "skipped": [[k, r, n] for (k, r), n in self.skipped.items()],
                "lines": self.lines, "records": self.records, "numbered": self.numbered,
                "last_t": self.last_t}  # fmt: skip

    @classmethod
    def resume(cls, path: str | PathLike, start: int, position: Any,
               first: bytes | None) -> LogReader:  # fmt: skip
        """A reader of ``path`` from byte ``start`` on, as one that has read up to there
        and stands at ``position`` (:meth:`position`); ``first`` the log's line stamped
        ``n`` 1 (its head), or None.

        Raises:
            RecordError: ``position`` is not what :meth:`position` gives (types, bounds).
        """
        p = position if isinstance(position, dict) else {}
        high, holes, skipped = p.get("high"), p.get("holes"), p.get("skipped")
        counts = [p.get("lines"), p.get("records"), high]
        if not all(type(x) is int and 0 <= x < 2**63 for x in counts):
            raise RecordError("checkpoint position: not counts")
        if not (isinstance(holes, list) and len(holes) <= MAX_HOLES
                and all(type(h) is int and 0 < h < high for h in holes)):  # fmt: skip
            raise RecordError("checkpoint position: bad holes")
        if not (isinstance(skipped, list) and len(skipped) <= 256 and all(
                isinstance(r, list) and len(r) == 3 and isinstance(r[0], str)
                and isinstance(r[1], str) and len(r[0]) + len(r[1]) <= 200
                and type(r[2]) is int and 0 < r[2] < 2**63 for r in skipped)):  # fmt: skip
            raise RecordError("checkpoint position: bad counts")
        last_t = p.get("last_t")
        if not (last_t is None or (type(last_t) in (int, float) and 0 <= last_t < 1e11)):
            raise RecordError("checkpoint position: bad time")
        if type(p.get("numbered")) is not bool:
            raise RecordError("checkpoint position: bad flag")
        reader = cls(path)
        reader.start, reader._high, reader._holes = start, high, set(holes)
        reader.skipped = {(k, r): n for k, r, n in skipped}
        reader.lines, reader.records = p["lines"], p["records"]
        reader.numbered, reader.last_t = p["numbered"], last_t
        reader._first = first.strip() if first is not None and high >= 1 else None
        return reader

    def batches(self) -> Iterator[dict[str, Any] | Steps]:
        """What iterating yields, with each run of consecutive step lines of one rank as one
        :class:`~trainmeter.core.records.Steps` (``Engine.apply_steps`` folds it as the rows
        one by one): the same records, skips and counts, read without a dict per step. A
        batch is yielded before any line after it is counted, so counts keep their order.
        A file is read a block at a time (:data:`BLOCK` bytes): its step lines are found and
        cut into their numbers by one regular expression call per block (:func:`_items`).

        Raises:
            OSError: as iterating does.
        """
        return self._source(self._batches, _items)

    def _batches(self, items: Iterable[Any]) -> Iterator[dict[str, Any] | Steps]:
        """:meth:`batches` of lines (bytes, str, None for one over :data:`MAX_LINE`) and runs
        of whole step lines already cut into their numbers (:class:`_Run`)."""
        match = _STEP_LINE.fullmatch
        fields: list[bytes] = []  # the open batch's numbers, 5 a line (no seq_sq: b"null")
        key = None  # (rank, has seq_sq) of the open batch
        prev: Any = _NONE  # a line parse() reads, held back one line (the last may be cut)
        for item in items:
            if item.__class__ is _Run:
                todo: Any = None
            else:
                m = match(item) if item.__class__ is bytes else None
                if m is None:
                    if prev is not _NONE:
                        if fields:
                            yield self._flush(fields, key)
                            fields = []
                        rec = self._one(prev, last=False)
                        if rec is not None:
                            yield rec
                    prev = item
                    continue
                todo = ((m, item),)
            if prev is not _NONE:  # read the line before this one first
                if fields:
                    yield self._flush(fields, key)
                    fields = []
                rec = self._one(prev, last=False)
                prev = _NONE
                if rec is not None:
                    yield rec
            if todo is None:  # a run of step lines: one batch when it is the plain case
                got = self._run_steps(item)
                if got is not None:
                    if fields:
                        yield self._flush(fields, key)
                        fields = []
                    yield got
                    continue
                todo = [(match(line), line) for line in item.lines()]
            for m, line in todo:
                self.lines += 1
                g = m.groups()  # t, step, rank, tokens, samples, (,"seq_sq":x), x, n
                if g[7] is not None:
                    n = int(g[7])
                    if n == self._high + 1 and n != 1:  # the next line, as it should be
                        self._high = n
                        self.numbered = True
                    else:  # out of order, a repeat or a restart: counted by _in_sequence
                        if fields:
                            yield self._flush(fields, key)
                            fields = []
                        if not self._in_sequence_n(n, line):
                            self.count("step", DUPLICATE)
                            continue
                k = (g[2], g[5] is not None)
                if k != key and fields:
                    yield self._flush(fields, key)
                    fields = []
                key = k
                fields += (g[0], g[1], g[3], g[4], g[6] or b"null")
        if fields:
            yield self._flush(fields, key)
        if prev is not _NONE:
            rec = self._one(prev, last=True)
            if rec is not None:
                yield rec

    def _run_steps(self, run: _Run) -> Steps | None:
        """A run of step lines as one batch when it is the plain case: one rank, seq_sq in
        every line or in none, and each ``n`` the next one (as the line-by-line reading would
        take them, with the same counts); None otherwise (then its lines are read one by one)."""
        rank, seq, ns = run.col(2), run.col(6), run.col(7)
        m, n0 = len(rank), self._high + 1
        if rank.count(rank[0]) != m or seq.count(None) not in (0, m) or n0 == 1:
            return None
        try:
            ts, steps, nums = self._numbers(run.col(0), run.col(1), ns)
        except TypeError:  # a line without n (an older log's)
            return None
        if nums != list(range(n0, n0 + m)):
            return None
        self.lines += m
        self._high, self.numbered = n0 + m - 1, True
        self.records += m
        top = max(ts)
        if self.last_t is None or top > self.last_t:
            self.last_t = top
        return Steps(1, int(rank[0]), ts, steps, _counts(run.col(3)), _counts(run.col(4)),
                     _counts(seq) if seq[0] is not None else None)  # fmt: skip

    def _numbers(self, ts: list, steps: list, ns: list) -> tuple[list, list, list]:
        """The times (floats, as json reads them: correctly rounded, finite), steps and line
        numbers (ints) of a run's step lines, from their text: by the reader's ``loads`` in
        one call where it is given and no step has 19 digits (an int it could make a float),
        else one number at a time. Raises TypeError for a line without ``n`` (None)."""
        if self.loads is not None and max(map(len, steps)) < 19:
            text = b"[[%b],[%b],[%b]]" % (b",".join(ts), b",".join(steps), b",".join(ns))
            return self.loads(text)
        return list(map(float, ts)), list(map(int, steps)), list(map(int, ns))

    def _flush(self, fields: list[bytes], key: tuple) -> Steps:
        """The open batch's lines as columns: their numbers read by json itself (so each is
        the int, float or None a line's parse gives)."""
        values = json.loads(b"[" + b",".join(fields) + b"]")
        ts = values[0::5]
        n = len(ts)
        self.records += n
        top = max(ts)
        if self.last_t is None or top > self.last_t:
            self.last_t = top
        rank, with_sq = key
        return Steps(1, int(rank), ts, values[1::5], values[2::5], values[3::5],
                     values[4::5] if with_sq else None)  # fmt: skip

    def _read(self, lines: Iterable[bytes | str | None]) -> Iterator[dict[str, Any]]:
        prev: Any = _NONE  # one line behind: the last line is read knowing it is the last
        for line in lines:
            if prev is not _NONE:
                rec = self._one(prev, last=False)
                if rec is not None:
                    yield rec
            prev = line
        if prev is not _NONE:
            rec = self._one(prev, last=True)
            if rec is not None:
                yield rec

    def _one(self, line: bytes | str | None, last: bool) -> dict[str, Any] | None:
        if line is None:  # a line over MAX_LINE, skipped while read
            self.lines += 1
            self.count("line", f"line over {MAX_LINE >> 20} MiB")
            return None
        if not line.strip() or _is_checkpoint(line):
            return None
        self.lines += 1
        try:
            rec = parse(line, self.loads)
        except RecordError as exc:
            ended = line.endswith(b"\n" if isinstance(line, bytes) else "\n")
            if last and not ended:
                self.cut = True
                self.count("line", CUT)
            else:
                kind = _kind_of(line)
                self.count(kind, _reason(exc, kind))
                self._take_number(line)
            return None
        if rec["k"] == "checkpoint":  # not the supervisor's own line: a copy of state, no record
            self.lines -= 1
            return None
        if not self._in_sequence(rec, line):
            self.count(rec["k"], DUPLICATE)
            return None
        self.records += 1
        if self.last_t is None or rec["t"] > self.last_t:
            self.last_t = rec["t"]
        return rec

    def _take_number(self, line: bytes | str) -> None:
        """An unreadable line whose tail is intact and names the number due (the next one, or
        one still missing) takes that place: it is counted once, as unreadable, not again as a
        missing line. Any other number it seems to hold is not trusted."""
        raw = line if isinstance(line, bytes) else line.encode("utf-8", "surrogatepass")
        m = _NUMBER_TAIL.search(raw)
        if m is None:
            return
        n = int(m.group(1))
        if n == self._high + 1 and n > 1:
            self._high, self.numbered = n, True
        elif n in self._holes:
            self._holes.discard(n)
            self.count("line", MISSING, -1)

    def _in_sequence(self, rec: dict[str, Any], line: bytes | str) -> bool:
        """False for a line whose ``n`` was seen already; counts numbers skipped over."""
        n = rec.get("n")
        if n is None:
            return True
        return self._in_sequence_n(n, line)

    def _in_sequence_n(self, n: int, line: bytes | str) -> bool:
        self.numbered = True
        if n == 1:
            raw = (
                line.strip() if isinstance(line, bytes) else line.strip().encode("utf-8", "replace")
            )
            if self._first is None or (raw != self._first and self._high > 1):
                self._first, self._high = raw, 1  # a new writer started this file over
                self._holes.clear()
                return True
        if n > self._high:
            gap = n - self._high - 1
            if gap:
                self.count("line", MISSING, gap)
                if len(self._holes) + gap <= MAX_HOLES:
                    self._holes.update(range(self._high + 1, n))
            self._high = n
            return True
        if n in self._holes:  # a line out of order fills its place
            self._holes.discard(n)
            self.count("line", MISSING, -1)
            return True
        return False

    def count(self, kind: str, reason: str, n: int = 1) -> None:
        key = (kind, reason)
        total = self.skipped.get(key, 0) + n
        if total > 0:
            self.skipped[key] = total
        else:
            self.skipped.pop(key, None)

    def by_reason(self) -> dict[str, int]:
        """``{"<kind>: <reason>": lines}``, largest first (kind "line": not a readable record)."""
        out = {f"{k}: {r}" if k != "line" else r: n for (k, r), n in self.skipped.items()}
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))

    def total_skipped(self) -> int:
        """Lines skipped, the missing ones included."""
        return sum(self.skipped.values())


def _kind_of(line: bytes | str) -> str:
    """The ``k`` a bad line claims, when it says one plainly (else "line")."""
    head = line[:200] if isinstance(line, str) else line[:200].decode("utf-8", "replace")
    m = re.search(r'"k"\s*:\s*"([a-z_]{1,20})"', head)
    return m.group(1) if m else "line"


def _is_checkpoint(line: bytes | str) -> bool:
    return line.startswith(CHECKPOINT if line.__class__ is bytes else _CHECKPOINT_STR)


_CHECKPOINT_STR = CHECKPOINT.decode()


def _bounded_lines(f: IO[bytes]) -> Iterator[bytes | None]:
    """``f``'s lines; ``None`` for each line over ``MAX_LINE`` (read past in pieces, never
    held whole); a checkpoint line over it is read past too and given as a blank line."""
    while True:
        line = f.readline(MAX_LINE + 1)
        if not line:
            return
        if len(line) <= MAX_LINE or (line.endswith(b"\n") and len(line) == MAX_LINE + 1):
            yield line
            continue
        checkpoint = line.startswith(CHECKPOINT)
        while line and not line.endswith(b"\n"):
            line = f.readline(MAX_LINE)
        yield b"\n" if checkpoint else None


def _checked_lines(lines: Iterable[bytes | str]) -> Iterator[bytes | str | None]:
    for line in lines:
        yield None if len(line) > MAX_LINE + 1 and not _is_checkpoint(line) else line


def checkpoints(path: str | PathLike, limit: int = 8) -> Iterator[tuple[int, bytes | None]]:
    """The last ``limit`` checkpoint lines of a log, newest first, found from the file's end
    (read backwards in pieces of :data:`CHUNK`, never whole): ``(offset, line)``, ``line``
    None when it is over :data:`MAX_CHECKPOINT` or has no newline (the file's last line, cut
    short or being written).

    Raises:
        OSError: the file cannot be opened or read.
    """
    keep = len(CHECKPOINT) - 1  # a match across two pieces: the later piece's first bytes
    with open(path, "rb") as f:
        hi, tail = f.seek(0, 2), b""
        while hi > 0 and limit > 0:
            lo = max(0, hi - CHUNK)
            f.seek(lo)
            data = f.read(hi - lo) + tail
            j = len(data)
            while limit > 0:
                i = data.rfind(CHECKPOINT, 0, j)
                if i < 0:
                    break
                j = i + keep  # the next match begins before this one
                if _line_start(f, data, lo, i):
                    limit -= 1
                    f.seek(lo + i)
                    line = f.readline(MAX_CHECKPOINT + 1)
                    yield lo + i, line if line.endswith(b"\n") else None
            tail, hi = data[:keep], lo


def _line_start(f: IO[bytes], data: bytes, lo: int, i: int) -> bool:
    """Whether ``data[i]`` (byte ``lo + i`` of ``f``) begins a line."""
    if i:
        return data[i - 1] == 0x0A
    if not lo:
        return True
    f.seek(lo - 1)
    return f.read(1) == b"\n"


def head(path: str | PathLike) -> bytes:
    """A log's first line (at most :data:`MAX_LINE` bytes).

    Raises:
        OSError: the file cannot be read.
    """
    with open(path, "rb") as f:
        return f.readline(MAX_LINE + 1)


def parse_checkpoint(line: bytes) -> dict[str, Any]:
    """A checkpoint line as its validated record (its ``state`` is checked by
    core/checkpoint.py).

    Raises:
        RecordError: not JSON, too deep, or not a valid ``checkpoint`` record.
    """
    if too_deep(line):
        raise RecordError(f"JSON nested deeper than {MAX_DEPTH}")
    try:
        rec = _DECODER.decode(line.decode("utf-8"))
    except UnicodeDecodeError:
        raise RecordError("not UTF-8") from None
    except (ValueError, RecursionError):
        raise RecordError("not JSON") from None
    rec = validate(rec)
    if rec["k"] != "checkpoint":
        raise RecordError("not a checkpoint")
    return rec


class _Run:
    """Consecutive whole step lines of a block: matches ``a`` to ``b - 1`` of
    ``_STEP_LINES.split(block)`` (``parts``), read as columns of their numbers' text."""

    __slots__ = ("a", "b", "parts")

    def __init__(self, parts: list, a: int, b: int) -> None:
        self.parts, self.a, self.b = parts, a, b

    def col(self, g: int) -> list:
        """Group ``g`` (0: t, 1: step, 2: rank, 3: tokens, 4: samples, 6: seq_sq, 7: n) of
        each line: its text, None where the line lacks it."""
        return self.parts[_STRIDE * self.a + 1 + g : _STRIDE * self.b : _STRIDE]

    def lines(self) -> list[bytes]:
        """The lines themselves, as they were in the file (the pattern is literal around its
        groups)."""
        out = []
        for k in range(self.a, self.b):
            t, step, rank, tok, smp, sq, _, n = self.parts[_STRIDE * k + 1 : _STRIDE * (k + 1)]
            tail = (sq or b"") + (b',"n":' + n if n is not None else b"")
            out.append(b'{"v":1,"k":"step","t":%s,"step":%s,"rank":%s,"tokens":%s,'
                       b'"samples":%s%s}\n' % (t, step, rank, tok, smp, tail))  # fmt: skip
        return out


def _counts(col: list) -> list:
    """A count column's text as json reads it (``null``: None)."""
    if col.count(col[0]) == len(col):  # the same count every step (a fixed batch): read once
        return [None if col[0] == b"null" else int(col[0])] * len(col)
    if b"null" in col:
        return [None if x == b"null" else int(x) for x in col]
    return list(map(int, col))


def _items(f: IO[bytes]) -> Iterator[bytes | _Run | None]:
    """``f``'s lines as :func:`_bounded_lines` gives them, except that each run of whole step
    lines comes as one :class:`_Run`: a block's step lines are found by one ``split``."""
    for chunk in _chunks(f):
        if chunk is None:
            yield None
            continue
        parts = _STEP_LINES.split(chunk)
        k = len(parts) // _STRIDE  # step lines; parts[_STRIDE * j]: the text before the j-th
        start = 0
        for j in [j for j, x in enumerate(parts[0::_STRIDE]) if x]:
            if j > start:
                yield _Run(parts, start, j)
            yield from _lines_of(parts[_STRIDE * j])
            start = j
        if k > start:
            yield _Run(parts, start, k)


def _lines_of(text: bytes) -> Iterator[bytes | None]:
    """The lines of ``text`` (whole lines, the last one without its newline at the end of the
    file), None for one over :data:`MAX_LINE` (as :func:`_bounded_lines`)."""
    pieces = text.split(b"\n")
    last = pieces.pop()  # after the last newline: empty unless the file ends without one
    for x in pieces:
        yield _bounded(x + b"\n", MAX_LINE + 1)
    if last:
        yield _bounded(last, MAX_LINE)


def _bounded(line: bytes, limit: int) -> bytes | None:
    """``line``, None when over ``limit`` bytes (a checkpoint over it: a blank line, which
    reading forward skips anyway)."""
    if len(line) <= limit:
        return line
    return b"\n" if line.startswith(CHECKPOINT) else None


def _chunks(f: IO[bytes]) -> Iterator[bytes | None]:
    """``f`` in blocks of whole lines (the last may lack its newline at the end of the file);
    None in place of a line over :data:`MAX_LINE`, read past in blocks, never held whole."""
    carry = b""
    while True:
        data = f.read(BLOCK)
        if not data:
            if carry:
                yield carry
            return
        if carry:
            data = carry + data
        cut = data.rfind(b"\n") + 1
        if cut:
            yield data[:cut]
        carry = data[cut:]
        if len(carry) > MAX_LINE:  # a line longer than any record, not ended yet
            yield _bounded(carry, MAX_LINE)
            while True:
                data = f.read(BLOCK)
                if not data:
                    return
                end = data.find(b"\n")
                if end >= 0:
                    carry = data[end + 1 :]
                    break


def read(source: str | PathLike | Iterable[bytes | str]) -> tuple[list[dict[str, Any]], LogReader]:
    """``(records, reader)``: every valid record of a log, in order, and the reader's counts.

    Raises:
        OSError: ``source`` is a path that cannot be opened or read.
    """
    reader = LogReader(source)
    return list(reader), reader
