"""``tm export {wandb,mlflow,csv} [RUN] [--dir D] [--out PATH]``: a finished run to a tracker.

Thin: find the run, hand it to ``trainmeter.exports.<target>.export``, print where it went.
Each target's module documents what it writes (docs/exports.md).
"""

from __future__ import annotations

import importlib
import sys

from trainmeter.commands.args import Parser, run_arguments
from trainmeter.exports import MissingPackage
from trainmeter.exports.run import RunData
from trainmeter.supervisor.store import find_run

TARGETS = ("wandb", "mlflow", "csv")
_OUT_HELP = (
    "wandb: the folder W&B's offline run goes under (default: the run folder); "
    "mlflow: a tracking URI or a folder for a file store (default: "
    "<run folder>/mlruns); csv: the file (default: <run folder>/series.csv)"
)


def _parser() -> Parser:
    p = Parser(
        prog="tm export",
        description="Export a run's series (full resolution) and "
        "passport to W&B (offline), MLflow or CSV; FLOPs and MFU figures carry their "
        "convention's name.",
    )
    p.add_argument("target", choices=TARGETS, help="where to: " + ", ".join(TARGETS))
    run_arguments(p)
    p.add_argument("--out", default=None, metavar="PATH", help=_OUT_HELP)
    p.add_argument(
        "--project",
        default="trainmeter",
        help="W&B project or MLflow experiment (default: trainmeter)",
    )
    p.add_argument(
        "--passport",
        action="store_true",
        help="csv: also write the passport's figures to <stem>-passport.csv",
    )
    return p


def main(argv: list[str]) -> int:
    """Exit 0 exported, 1 no such run or a write or tracker failure, 2 bad usage or a
    missing package."""
    args = _parser().parse_args(argv)
    options = {
        "wandb": {"project": args.project},
        "mlflow": {"experiment": args.project},
        "csv": {"with_passport": args.passport},
    }[args.target]
    try:
        folder = find_run(args.run, args.dir)
    except FileNotFoundError as exc:
        print(f"tm: {exc}", file=sys.stderr)
        return 1
    try:
        module = importlib.import_module(f"trainmeter.exports.{args.target}")
        run = RunData.open(folder)
        where = module.export(run, out=args.out, **options)
    except MissingPackage as exc:
        print(f"tm: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # a tracker's own errors (MlflowException, wandb.Error, OSError)
        print(f"tm: export {args.target}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    if run.read:  # lines the reader could not take: their points are not in the export
        print(f"tm: {run.read['text']}", file=sys.stderr)
    print(f"tm: exported {folder.name} to {where}", file=sys.stderr)
    return 0
