"""``tm replay [RUN] [--json] [--full] [--dir D]``: rebuild a run's final snapshot from its log.

Prints the summary line, or with ``--json`` the whole snapshot (with ``run.log``, the log's
path). The log is read as :func:`trainmeter.core.engine.replay` reads it: from its last valid
checkpoint on (``--full``: every line from the first), bad lines skipped and counted, and a
log with no ``run_end`` and nothing written for 30 s "ended without a close".
Exit status: 0; 1 when the run is not found or its log cannot be read; 2 for a usage error.
"""

from __future__ import annotations

import sys
import time

from trainmeter.commands.args import Parser, os_error, run_arguments
from trainmeter.core import strict_json


def main(argv: list[str]) -> int:
    p = Parser(prog="tm replay", description="Rebuild a run's final snapshot from its log.")
    run_arguments(p)
    p.add_argument("--json", action="store_true", help="print the snapshot as JSON")
    p.add_argument(
        "--full",
        action="store_true",
        help="fold every line of the log from the first, not from its last checkpoint",
    )
    args = p.parse_args(argv)
    from trainmeter.core.engine import replay
    from trainmeter.core.summary import summary_line
    from trainmeter.supervisor.store import find_run

    try:
        folder = find_run(args.run, args.dir)
        log = folder / "run.jsonl"
        # bad lines skipped and counted (core/logread.py); no run_end and nothing written for
        # 30 s: "ended without a close"
        snap = replay(log, now=time.time(), full=args.full).snapshot()
    except OSError as exc:  # FileNotFoundError: no such run; else the log is unreadable
        print(f"tm: {os_error(exc)}", file=sys.stderr)
        return 1
    snap["run"]["log"] = str(log)
    print(strict_json.dumps(snap, indent=2, sort_keys=True) if args.json else summary_line(snap))
    return 0
