"""``tm``: run a training command under trainmeter, or look at runs. Dispatch only: each
command lives in its own module of ``trainmeter/commands/`` (``main(argv) -> int``).

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

import importlib
import os
import sys

from trainmeter.commands import SUBCOMMANDS


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
    finally:
        if argv is None:  # tm itself (the console script), whose interpreter exits next
            _before_exit()


def _before_exit() -> None:
    """Spare the interpreter's exit its garbage collections over every object ``tm`` loaded
    (about 8 ms of each run on the development machine, docs/performance.md): move them to
    the permanent generation (``gc.freeze``). Only for ``tm`` itself, never for a caller that
    goes on in the same process."""
    import gc

    gc.freeze()


def _main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in SUBCOMMANDS:
        return importlib.import_module(SUBCOMMANDS[argv[0]]).main(argv[1:])
    from trainmeter.commands import run

    return run.main(argv)


if __name__ == "__main__":
    sys.exit(main())
