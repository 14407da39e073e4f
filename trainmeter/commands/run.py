"""``tm [flags] SCRIPT.py [args]`` and ``tm [flags] -- CMD [args]``: ``tm``'s own run mode.

Parses the run's flags, records its options (``core/options.py``: physics only, never a
price), and runs the command under the supervisor (``supervisor/launcher.py``) with the
dashboard page and the Prometheus endpoint beside it (``commands/serve.py``). Exit status: the
child's (``128 + N`` when a signal N ended it); 2 for a usage error, before anything starts.
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys
from pathlib import Path
from typing import Any

from trainmeter._version import __version__
from trainmeter.commands import SUBCOMMANDS, help_epilog
from trainmeter.commands.args import (
    Parser,
    default_name,
    dtype_arg,
    gpu_backend_spec,
    hz_arg,
    name_arg,
    port_arg,
    runs_dir_arg,
)
from trainmeter.core import flops
from trainmeter.core.envnames import GPU_BACKEND
from trainmeter.core.options import run_options
from trainmeter.supervisor.sampler import DEFAULT_HZ
from trainmeter.web import DEFAULT_PORT, PORT_TRIES


def run_parser() -> argparse.ArgumentParser:
    """The parser of ``tm``'s run mode (its flags, then the command as ``command``)."""
    usage = ("tm [flags] SCRIPT.py [args] | tm [flags] -- CMD [args] | "
             f"tm {{{','.join(SUBCOMMANDS)}}} ...")  # fmt: skip
    p = Parser(
        prog="tm",
        description="Run a training command under trainmeter.",
        usage=usage,
        epilog=help_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
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
    p.add_argument("--gpu-backend", metavar="SPEC", default=os.environ.get(GPU_BACKEND),
                   help="GPU counters: nvml, none, fake:h100x2, fake:a100, fake:mig, fake:lost "
                        f"(default: ${GPU_BACKEND}, else NVML when it loads)")  # fmt: skip
    p.add_argument("--sample-hz", type=hz_arg, default=DEFAULT_HZ, metavar="HZ",
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


def main(argv: list[str]) -> int:
    """Run the command ``argv`` names under trainmeter; the exit status ``tm`` ends with."""
    args = run_parser().parse_args(argv)
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        run_parser().print_usage(sys.stderr)
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
        opts = run_opts(args)
        gpu_backend = gpu_backend_spec(args.gpu_backend)
        if args.prometheus:
            from trainmeter.web.prometheus import require

            require()  # before the child starts: a missing package is a usage error
    except ValueError as exc:
        print(f"tm: {exc}", file=sys.stderr)
        return 2
    name = args.name or default_name(cmd)
    return run_command(cmd, name, opts, quiet=args.quiet, no_tap=args.no_tap, root=args.dir,
                       web=not args.no_web, port=args.port, gpu_backend=gpu_backend,
                       sample_hz=args.sample_hz, prometheus=args.prometheus)  # fmt: skip


def run_command(cmd: list[str], name: str, opts: dict[str, Any], *, quiet: bool = False,
                no_tap: bool = False, root: str | None = None, web: bool = True,
                port: int = DEFAULT_PORT, gpu_backend: str | None = None,
                sample_hz: float = DEFAULT_HZ,
                prometheus: tuple[str, int] | None = None) -> int:  # fmt: skip
    """Run ``cmd`` under trainmeter (``supervisor.launcher.run_command``) with its views;
    returns the exit code ``tm`` should end with.

    With ``web``, the dashboard page is served on 127.0.0.1 from ``port`` (or the next free
    port above it) and its URL is in the start line; a page that cannot start is one line on
    stderr, never a reason not to run the command. ``prometheus`` (host, port): serve live
    metrics there for Prometheus; the bound address is in the start line and in the run's
    options (``prometheus``); one that cannot start is one line on stderr, like the page.
    """
    from trainmeter.commands.serve import RunViews
    from trainmeter.supervisor.launcher import run_command as launch

    views = RunViews(web, port, prometheus)
    return launch(cmd, name, opts, quiet=quiet, no_tap=no_tap, root=root,
                  gpu_backend=gpu_backend, sample_hz=sample_hz, views=views)  # fmt: skip


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


def run_opts(args) -> dict:
    """Launch options recorded in the run log (physics only, never a price)."""
    return run_options(budget_tokens=args.budget_tokens, budget_flops=args.budget_flops,
                       convention=args.convention, peak=args.peak, device=args.device,
                       dtype=args.dtype, pad_tokens=args.pad_tokens).record()  # fmt: skip
