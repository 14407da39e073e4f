"""``tm passport [RUN] [--json] [--dir D]``: print a run's passport (Markdown, or its JSON).

Reads ``passport.json`` from the run folder; a run without one (a killed supervisor, a run
still open), or with one another trainmeter version or older words wrote, gets it rebuilt from
``run.jsonl``, and a line on stderr says so (and says when the stored one is shown because the
log cannot be read); ``--full`` rebuilds it from every line of the log, whatever is stored.
Nothing is written. Definitions: docs/spec.md "Passport and exports".
"""

from __future__ import annotations

import json
import sys

from trainmeter.commands.args import Parser, run_arguments
from trainmeter.core.passport_md import markdown
from trainmeter.supervisor import passport_files
from trainmeter.supervisor.store import find_run


def main(argv: list[str]) -> int:
    """Exit 0 printed, 1 no such run or unreadable log, 2 bad usage."""
    p = Parser(
        prog="tm passport",
        description="Print a run's passport: model size, tokens, "
        "FLOPs under each convention, MFU, GPU-hours, energy, hardware, dates.",
    )
    run_arguments(p)
    p.add_argument("--json", action="store_true", help="print the passport as JSON")
    p.add_argument(
        "--full",
        action="store_true",
        help="rebuild it from every line of the log (not passport.json, not a checkpoint)",
    )
    args = p.parse_args(argv)
    try:
        folder = find_run(args.run, args.dir)
        if args.full:
            passport, said = passport_files.rebuild(folder, full=True), None
        else:
            passport, said = passport_files.load(folder)
    except (FileNotFoundError, OSError) as exc:
        print(f"tm: {exc}", file=sys.stderr)
        return 1
    if said:  # rebuilt from the log, or (an unreadable log) the stored one as written
        print(f"tm: {said}", file=sys.stderr)
    sys.stdout.write(json.dumps(passport, indent=2) + "\n" if args.json else markdown(passport))
    return 0
