"""``tm ls [--dir D]``: list the runs under ``./.trainmeter``, oldest first, one line each.

Exit status: 0; 1 when a run's log cannot be read (it is named on stderr, the others are
listed); 2 for a usage error.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from trainmeter.commands.args import Parser, os_error, run_arguments
from trainmeter.core.units import format_duration


def ls_row(folder: Path, now: float | None = None) -> str:
    """One ``tm ls`` line for a run folder: id, name, start (local), time, steps, state.

    The log is replayed as :func:`trainmeter.core.engine.replay` reads it (bad lines skipped);
    ``now`` (s since the epoch, default the clock) tells a run still being written from one
    whose supervisor stopped without closing it.

    Raises:
        OSError: the log cannot be read.
    """
    from trainmeter.core.engine import replay
    from trainmeter.core.summary import state_text

    snap = replay(folder / "run.jsonl", now=time.time() if now is None else now).snapshot()
    run = snap["run"]
    try:
        started = time.strftime("%Y-%m-%d %H:%M", time.localtime(run.get("started") or 0))
    except (OverflowError, OSError, ValueError):  # a start time beyond the C library's
        started = "?"
    took = format_duration(snap.get("elapsed_s"))
    name = "".join(c if c.isprintable() else "?" for c in str(run.get("name", "?")))
    skipped = f"  ({snap['log']['text']})" if snap.get("log") else ""
    return (f"{folder.name}  {name:<20} {started}  {took:>10}  {snap['step']:>7} steps  "
            f"{state_text(run)}{skipped}")  # fmt: skip


def main(argv: list[str]) -> int:
    p = Parser(prog="tm ls", description="List runs, oldest first.")
    run_arguments(p, run=False)
    args = p.parse_args(argv)
    from trainmeter.supervisor.store import run_folders, runs_dir

    base = runs_dir(args.dir)
    folders = run_folders(args.dir)
    if not folders:
        print(f"no runs under {base.resolve()}")
        return 0
    failed = 0
    for d in folders:
        try:
            row = ls_row(d)
        except OSError as exc:  # one unreadable log: say so, list the others
            failed += 1
            print(f"tm: {os_error(exc)}", file=sys.stderr)
            continue
        except Exception as exc:  # a log no reader foresaw: say which, list the others
            failed += 1
            print(f"tm: {d.name}: cannot be listed: {type(exc).__name__}: {exc}", file=sys.stderr)
            continue
        try:
            print(row, flush=True)
        except BrokenPipeError:  # `tm ls | head`: the reader has what it wanted
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0
    return 1 if failed else 0
