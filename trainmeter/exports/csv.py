"""``tm export csv``: every series in one long-format CSV (``series, step, t, value``).

One row per point (:mod:`trainmeter.exports.points`): ``series`` its name (FLOPs and MFU
series carry their convention: ``mfu/hf``), ``step`` the step clock's optimizer step, ``t``
seconds since the run started, ``value`` in the series' unit. The bytes Python's :mod:`csv`
module writes (RFC 4180 quoting, so any series name reads back; a name's lone surrogate, which
UTF-8 cannot hold, as its ``\\udcff`` escape). ``--passport`` adds ``<stem>-passport.csv`` with
the passport's figures as ``name, value`` rows (:func:`trainmeter.core.passport.flat`). The
files are written beside their places and renamed into them together once whole: a failure
leaves no partial file and an earlier export as it was.
"""

from __future__ import annotations

import csv
import errno
import gc
import io
import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import BinaryIO

from trainmeter.core import passport as core_passport
from trainmeter.exports import numtext
from trainmeter.exports.points import Point, StepRows
from trainmeter.exports.run import RunData

HEADER = ("series", "step", "t", "value")
ERRORS = "backslashreplace"  # a lone surrogate in a name: its escape, never a failed export


def _step_chunks(rows: StepRows) -> Iterator[bytes]:
    """The CSV rows of a :class:`StepRows`, the bytes ``csv.writer`` writes for each point
    (a name quoted as the writer quotes it, ``str`` of a step, ``repr`` of a time and of a
    value), in pieces of at most :data:`CHUNK` rows. The numbers are written a batch at a
    time (:mod:`trainmeter.exports.numtext`); each row's lines are one ``%`` of its format
    (:func:`_row_format`), with its ``step,t`` before each of its values, so no Python runs
    per line."""
    if not (rows.step and rows.names):
        return
    st = _step_t(rows.step, rows.t)
    args: list = []
    for values in _values(rows.cols):
        args += (st, values)
    lines = list(map(_row_format(rows.names).__mod__, zip(*args, strict=True)))
    for a in range(0, len(lines), CHUNK):
        yield b"".join(lines[a : a + CHUNK])


# rows joined at a time (a run holds up to 16,384): each piece, about 26 KB, stays under
# glibc malloc's 128 KiB mmap threshold; a larger one is mapped and unmapped each time (0.02 s
# of system time for 3,000 joins of 133 KB here, none for 26 KB pieces)
CHUNK = 64


def _row_format(names: tuple[str, ...]) -> bytes:
    """``b"<name>,%b,%b\r\n"`` for each of ``names`` (the name quoted, its ``%`` doubled):
    one row's lines, filled with ``(step,t, value)`` for each name in turn."""
    got = _FORMATS.get(names)
    if got is None:
        got = b"".join(_quoted(n).replace(b"%", b"%%") + b"%b,%b\r\n" for n in names)
        if len(_FORMATS) < 64:
            _FORMATS[names] = got
    return got


_FORMATS: dict[tuple[str, ...], bytes] = {}


def _step_t(steps: list, ts: list) -> list[bytes]:
    """``b"<step>,<t>"`` of each row."""
    got = numtext.json_text(list(zip(steps, ts, strict=True)))
    if got is not None:
        return got[2:-2].split(b"],[")
    return [f"{s},{t!r}".encode() for s, t in zip(steps, ts, strict=True)]


def _values(cols: list[list]) -> list[list[bytes]]:
    """The text of each value, for each column: all columns' numbers in one call where their
    text is Python's, else a column at a time."""
    got = numtext.json_text(cols)
    if got is None:
        return [_column(col) for col in cols]
    return [text.split(b",") for text in got[2:-2].split(b"],[")]


def _column(col: list) -> list[bytes]:
    got = numtext.json_text(col)
    if got is None:
        return [repr(y).encode() for y in col]
    return got[1:-1].split(b",")


def _quoted(name: str) -> bytes:
    """``name`` and the comma after it as ``csv.writer`` writes a field (quoted only where
    it must be); kept for the names a run charts at every step (a few), looked up again for
    each batch."""
    got = _QUOTED.get(name)
    if got is None:
        out = io.StringIO()
        csv.writer(out, lineterminator="").writerow((name, 0))
        got = out.getvalue()[:-1].encode("utf-8", ERRORS)
        if len(_QUOTED) < 256:
            _QUOTED[name] = got
    return got


_QUOTED: dict[str, bytes] = {}


def export(run: RunData, out: str | None = None, with_passport: bool = False) -> str:
    """Write the CSV (default ``<run folder>/series.csv``), and with ``with_passport`` its
    ``<stem>-passport.csv`` beside it; returns where. Both files are renamed into place
    together, once both are whole.

    Raises: OSError (naming the file asked for) when a file cannot be written or the log read.
    """
    path = Path(out) if out else run.folder / "series.csv"
    side = path.with_name(f"{path.stem}-passport.csv") if with_passport else None
    with _whole([path, side] if side else [path]) as files, _collector_paused():
        _write_series(files[0], run)
        if side:
            _write_passport(files[1], run.passport)
    return f"{path} and {side}" if side else str(path)


def _write_series(f: BinaryIO, run: RunData) -> None:
    # the writer's text goes straight to f (write_through), so it keeps its place between
    # the runs of steps written to f as bytes
    text = io.TextIOWrapper(f, encoding="utf-8", errors=ERRORS, newline="", write_through=True)
    w = csv.writer(text)
    w.writerow(HEADER)
    for item in run.rows():
        if item.__class__ is Point:
            w.writerow((item.series, item.step, repr(item.t), repr(item.value)))
        else:  # a run of steps: their rows formatted at once, as the writer writes them
            for piece in _step_chunks(item):
                f.write(piece)
    text.detach()  # f is closed once, by _whole


def _write_passport(f: BinaryIO, passport: dict) -> None:
    config, summary = core_passport.flat(passport)
    text = io.TextIOWrapper(f, encoding="utf-8", errors=ERRORS, newline="")
    w = csv.writer(text)
    w.writerow(("name", "value"))
    w.writerows({**config, **summary}.items())
    text.detach()


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused while the rows are written: they make no
    cycles (reference counting frees each batch's lists and tuples), and its passes over
    the young ones were 5 to 10 % of an export of 100,000 steps (benchmarks/replay.py)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@contextmanager
def _whole(paths: list[Path]) -> Iterator[list[BinaryIO]]:
    """Each of ``paths`` opened for bytes as a new file beside it (beside the file a link
    names); all renamed into their places when the block ends without an error, all removed
    when it raises. A path that is there and not a file (``/dev/stdout``, a pipe,
    ``/dev/null``) is written straight: it has no place to rename into.

    Raises: OSError naming the path asked for, not its temporary file (an error while the
    block writes, such as a full disk, names the first).
    """
    current = paths[0]
    with ExitStack() as stack:
        files, moves = [], []
        try:
            for current in paths:
                real = Path(os.path.realpath(current))
                if real.is_dir():
                    raise IsADirectoryError(errno.EISDIR, "is a folder")
                if real.exists() and not real.is_file():
                    files.append(stack.enter_context(open(real, "wb")))
                    continue
                part = real.with_name(f".{real.name}.{os.getpid()}.part")
                stack.callback(part.unlink, missing_ok=True)  # gone once renamed, or on error
                files.append(stack.enter_context(open(part, "wb")))
                moves.append((part, real, current))
            current = paths[0]
            yield files
            for f in files:
                f.close()
            for part, real, asked in moves:
                current = asked  # the one an error names
                os.replace(part, real)
        except OSError as exc:
            if exc.filename is None or str(exc.filename).endswith(".part"):
                raise type(exc)(exc.errno, exc.strerror, str(current)) from None
            raise
