"""``tm``: run a training command under trainmeter, or look at runs. Thin: parse, call, print.

tm train.py [args]            run a Python script (same interpreter as tm)
tm [flags] -- CMD [args]      run any command (torchrun, a shell script, ...)
tm replay [RUN] [--json]      rebuild a run's final snapshot from its log
tm ls                         list runs in ./.trainmeter
tm peaks [NAME] [--json]      the dense peaks table; with NAME, the row a GPU name finds
tm doctor [--json]            what trainmeter can see on this node, and what to do about gaps
tm plan MODEL --tokens N --gpu NAME --gpus K   FLOPs, time, GPU-hours, kWh of a planned run
tm --version
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import json
import os
import sys
import time
from pathlib import Path

from trainmeter._version import __version__
from trainmeter.commands.args import (
    ENV_GPU_BACKEND,
    Parser,
    default_name,
    dtype_arg,
    gpu_backend_spec,
    hz_arg,
    name_arg,
    port_arg,
    run_arguments,
    runs_dir_arg,
)
from trainmeter.core import flops, peaks
from trainmeter.core.options import run_options
from trainmeter.core.passport_md import short_citation
from trainmeter.core.units import (
    format_duration,
)
from trainmeter.web import DEFAULT_PORT, PORT_TRIES

# Subcommands that live in their own module: name -> module with main(argv) -> int.
_MODULES = {
    "plan": "trainmeter.commands.plan",
    "view": "trainmeter.commands.view",
    "passport": "trainmeter.commands.passport",
    "export": "trainmeter.commands.export",
    "merge": "trainmeter.commands.merge",
    "attach": "trainmeter.commands.attach",
}
SUBCOMMANDS = ("replay", "ls", "peaks", "doctor", *_MODULES)


def _run_parser() -> argparse.ArgumentParser:
    usage = ("tm [flags] SCRIPT.py [args] | tm [flags] -- CMD [args] | "
             f"tm {{{','.join(SUBCOMMANDS)}}} ...")  # fmt: skip
    p = Parser(prog="tm", description="Run a training command under trainmeter.", usage=usage)
    p.add_argument("--version", action="version", version=f"trainmeter {__version__}")
    p.add_argument("--name", type=name_arg, help="run name (default: the script's name)")
    p.add_argument("--budget-tokens", metavar="N", help="token budget for progress and ETA (20B)")
    p.add_argument("--budget-flops", metavar="FLOPS",
                   help="training FLOPs budget for progress and ETA (1e18, 250P)")  # fmt: skip
    p.add_argument("--convention", choices=flops.CONVENTIONS, default=flops.DEFAULT_CONVENTION,
                   help="FLOPs convention shown first (all are computed)")  # fmt: skip
    p.add_argument("--peak", metavar="FLOP/s", help="declare the dense peak per device (312T)")
    p.add_argument("--device", metavar="NAME",
                   help='GPU for the peak: NVML name, row label or short name ("H100 SXM", '
                        "h100-sxm, mi300x; tm peaks lists them)")  # fmt: skip
    p.add_argument("--dir", type=runs_dir_arg, default=None,
                   help="where .trainmeter runs go (default ./.trainmeter)")  # fmt: skip
    p.add_argument("--dtype", type=dtype_arg,
                   help="the run's dtype for the peak: bf16, fp16, tf32, fp8, fp32 "
                        "(default: what the agent sees)")  # fmt: skip
    p.add_argument("--gpu-backend", metavar="SPEC", default=os.environ.get(ENV_GPU_BACKEND),
                   help="GPU counters: nvml, none, fake:h100x2, fake:a100, fake:mig, fake:lost "
                        f"(default: ${ENV_GPU_BACKEND}, else NVML when it loads)")  # fmt: skip
    p.add_argument("--sample-hz", type=hz_arg, default=1.0, metavar="HZ",
                   help="hardware samples per second, 1 to 10 (default 1)")  # fmt: skip
    p.add_argument("--no-tap", action="store_true", help="no automatic taps (emit() only)")
    p.add_argument("--pad-tokens", choices=("count", "skip"), default="count",
                   help="tokens per step: count every position, pad included (default), or skip "
                        "positions where the forward's attention_mask is 0 (CPU masks only; "
                        "docs/spec.md 'Tokens and padding')")  # fmt: skip
    p.add_argument("--port", type=port_arg, default=DEFAULT_PORT,
                   help=f"dashboard page port on 127.0.0.1 (default {DEFAULT_PORT}; if taken, the "
                        f"next free one of {PORT_TRIES}; 0: any free port)")  # fmt: skip
    p.add_argument("--no-web", action="store_true", help="serve no dashboard page")
    p.add_argument("--prometheus", metavar="[HOST:]PORT", type=_prometheus,
                   help="serve live metrics at http://HOST:PORT/metrics for Prometheus; a bare "
                        "PORT binds ALL interfaces (0.0.0.0), so the cluster's Prometheus can "
                        "scrape it from another host; 127.0.0.1:PORT keeps it on this machine; "
                        "0: any free port (docs/prometheus.md)")  # fmt: skip
    p.add_argument("-q", "--quiet", action="store_true", help="print only errors")
    p.add_argument("command", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    """The ``tm`` console script. Returns the exit status.

    A reader that leaves a pipe early (``tm peaks | head``) is not an error worth a traceback:
    stdout is pointed at /dev/null so the interpreter's last flush stays quiet (the recipe in
    Python's documentation, "Note on SIGPIPE", signal module).
    """
    try:
        rc = _main(argv)
        sys.stdout.flush()
        return rc
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1


def _main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in _MODULES:
        return importlib.import_module(_MODULES[argv[0]]).main(argv[1:])
    if argv and argv[0] in SUBCOMMANDS:
        return _SUB[argv[0]](argv[1:])
    args = _run_parser().parse_args(argv)
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        _run_parser().print_usage(sys.stderr)
        print("tm: nothing to run: give a script (tm train.py) or a command (tm -- CMD)",
              file=sys.stderr)  # fmt: skip
        return 2
    if args.command[:1] != ["--"]:
        err = _script_error(cmd[0])
        if err:
            print(f"tm: {err}", file=sys.stderr)
            return 2
        cmd = [sys.executable, *cmd]
    try:
        opts = _run_opts(args)
        gpu_backend = gpu_backend_spec(args.gpu_backend)
        if args.prometheus:
            from trainmeter.web.prometheus import require

            require()  # before the child starts: a missing package is a usage error
    except ValueError as exc:
        print(f"tm: {exc}", file=sys.stderr)
        return 2
    from trainmeter.supervisor.launcher import run_command

    name = args.name or default_name(cmd)
    return run_command(cmd, name, opts, quiet=args.quiet, no_tap=args.no_tap, root=args.dir,
                       web=not args.no_web, port=args.port, gpu_backend=gpu_backend,
                       sample_hz=args.sample_hz, prometheus=args.prometheus)  # fmt: skip


def _prometheus(text: str) -> tuple[str, int]:
    from trainmeter.web.prometheus import parse_address

    try:
        return parse_address(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _script_error(first: str) -> str | None:
    if first.endswith(".py"):
        return None if Path(first).is_file() else f"no such script: {first}"
    close = difflib.get_close_matches(first, SUBCOMMANDS, n=1)
    hint = f"did you mean `tm {close[0]}`? " if close else ""
    return f"{first!r} is not a .py script or a subcommand; {hint}to run a command: tm -- {first}"


def _run_opts(args) -> dict:
    """Launch options recorded in the run log (physics only, never a price)."""
    return run_options(budget_tokens=args.budget_tokens, budget_flops=args.budget_flops,
                       convention=args.convention, peak=args.peak, device=args.device,
                       dtype=args.dtype, pad_tokens=args.pad_tokens).record()  # fmt: skip


def _replay(argv: list[str]) -> int:
    p = Parser(prog="tm replay", description="Rebuild a run's final snapshot from its log.")
    run_arguments(p)
    p.add_argument("--json", action="store_true", help="print the snapshot as JSON")
    args = p.parse_args(argv)
    from trainmeter.core.engine import replay
    from trainmeter.core.summary import summary_line
    from trainmeter.supervisor.store import find_run

    try:
        folder = find_run(args.run, args.dir)
        log = folder / "run.jsonl"
        # bad lines skipped and counted (core/logread.py); no run_end and nothing written for
        # 30 s: "ended without a close"
        snap = replay(log, now=time.time()).snapshot()
    except OSError as exc:  # FileNotFoundError: no such run; else the log is unreadable
        print(f"tm: {_os_error(exc)}", file=sys.stderr)
        return 1
    snap["run"]["log"] = str(log)
    print(json.dumps(snap, indent=2, sort_keys=True) if args.json else summary_line(snap))
    return 0


def _os_error(exc: OSError) -> str:
    """One line for a run or log that cannot be read."""
    if exc.filename is not None and exc.strerror:
        return f"cannot read {exc.filename}: {exc.strerror}"
    return str(exc)


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
    name = str(run.get("name", "?"))
    skipped = f"  ({snap['log']['text']})" if snap.get("log") else ""
    return (f"{folder.name}  {name:<20} {started}  {took:>10}  {snap['step']:>7} steps  "
            f"{state_text(run)}{skipped}")  # fmt: skip


def _ls(argv: list[str]) -> int:
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
            print(ls_row(d))
        except OSError as exc:  # one unreadable log: say so, list the others
            failed += 1
            print(f"tm: {_os_error(exc)}", file=sys.stderr)
    return 1 if failed else 0


UNKNOWN_PEAK = "unknown: declare one with --peak"


def _peaks(argv: list[str]) -> int:
    p = Parser(prog="tm peaks", description="The dense peaks table (TFLOP/s, not 2:4 sparse); "
                "with NAME, the row that GPU name finds, and why.")  # fmt: skip
    p.add_argument("name", nargs="?", help='a GPU: NVML name ("NVIDIA H100 80GB HBM3"), row '
                   'label ("H100 SXM") or short name (h100-sxm, mi300x)')  # fmt: skip
    p.add_argument("--json", action="store_true", help="print JSON (full citations)")
    args = p.parse_args(argv)
    if args.name is None:
        rows = peaks.table()
        if args.json:
            print(json.dumps([{**r, "citation_short": short_citation(r["citation"])} for r in rows],
                             indent=2))  # fmt: skip
        else:
            print("\n".join(_peak_table(rows)))
        return 0
    found = peaks.match_gpu(args.name)
    if found is None:
        close = peaks.close_gpu_names(args.name)
        hint = f" (no row has this name; close but not the same: {', '.join(close)})"
        if args.json:
            print(json.dumps({"name": args.name, "match": None, "why": UNKNOWN_PEAK,
                              "close": close}, indent=2))  # fmt: skip
        print(f"tm: {args.name!r}: {UNKNOWN_PEAK}{hint if close else ''}", file=sys.stderr)
        return 1
    row, why = found
    if args.json:
        d = row.as_dict()
        print(json.dumps({"name": args.name, "match": {**d, "citation_short":
                          short_citation(d["citation"])}, "why": why}, indent=2))  # fmt: skip
        return 0
    print("\n".join(_peak_table([row.as_dict()])))
    print(f"why: {why}")
    print(f"citation: {row.citation}")
    return 0


_PEAK_HEAD = ("device", "kind", *(d.upper() for d in peaks.DTYPES), "GB/s", "W", "verified")


def _peak_table(rows) -> list[str]:
    """Rows of ``peaks.table()`` as aligned text: one line of figures, one of names and source."""

    def num(x) -> str:
        return "-" if x is None else f"{x:g}"

    cells = [[r["label"], r["kind"], *(num(r["tflops"][d]) for d in peaks.DTYPES),
              num(r["mem_bw"] / 1e9), num(r["tdp_w"]), "yes" if r["verified"] else "no"]
             for r in rows]  # fmt: skip
    width = [max(len(c[i]) for c in [list(_PEAK_HEAD), *cells]) for i in range(len(_PEAK_HEAD))]

    def line(c) -> str:
        last = len(c) - 1
        cols = [c[i].ljust(width[i]) if i in (0, 1, last) else c[i].rjust(width[i])
                for i in range(len(c))]  # fmt: skip
        return "  ".join(cols).rstrip()

    out = ["Dense peaks per device: TFLOP/s by dtype (tensor or matrix cores; FP32 is the "
           "CUDA-core or vector rate; '-': no rate), memory GB/s, board W.",
           line(list(_PEAK_HEAD))]  # fmt: skip
    for r, c in zip(rows, cells, strict=True):
        out.append(line(c))
        names = " / ".join(f'"{n}"' for n in r["names"])
        source = peaks.NAME_SOURCE[r["vendor"]]
        out.append(f"    {source} {names} · {short_citation(r['citation'])}")
    return out


def _doctor(argv: list[str]) -> int:
    p = Parser(prog="tm doctor", description="What trainmeter can see on this node (NVML, "
                "driver, GPUs, peaks, GPM, MIG, torch, trackers, front end) and what to do "
                "about each gap. Exit 0 whenever it could look.")  # fmt: skip
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--gpu-backend", metavar="SPEC", default=os.environ.get(ENV_GPU_BACKEND),
                   help="look through this backend (nvml, none, fake:h100x2, ...; default: "
                        f"${ENV_GPU_BACKEND}, else NVML when it loads)")  # fmt: skip
    args = p.parse_args(argv)
    from trainmeter import doctor

    try:
        report = doctor.look(args.gpu_backend or None)
    except ValueError as exc:
        print(f"tm: --gpu-backend: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(report, indent=2) if args.json else "\n".join(doctor.lines(report)))
    return 0


_SUB = {"replay": _replay, "ls": _ls, "peaks": _peaks, "doctor": _doctor}

if __name__ == "__main__":
    sys.exit(main())
