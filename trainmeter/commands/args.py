"""What the ``tm`` commands share: the argument parser that refuses abbreviations and names
the closest flag, the argparse types of the flags several commands take, the arguments of
every command that reads a finished run, and the one line for a run that cannot be read. Every
module of ``commands/`` uses these; nothing here starts anything.
"""

from __future__ import annotations

import argparse
import difflib
import os
from pathlib import Path

from trainmeter.core.options import parse_dtype
from trainmeter.core.units import quoted, run_name


class Parser(argparse.ArgumentParser):
    """argparse that suggests the closest flag for a typo and exits 2 with one clear line.

    Abbreviated flags are refused: ``--no-browse`` is a typo to name, not a flag to guess.
    """

    def __init__(self, *args, prefix: str = "tm", **kwargs) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self.prefix = prefix  # the error line's first word(s): "tm", "tm plan"

    def error(self, message: str):
        if "unrecognized arguments" in message or "ambiguous option" in message:
            flags = [o for a in self._actions for o in a.option_strings]
            bad = message.split(":")[-1].split()
            close = difflib.get_close_matches(bad[0].split("=")[0], flags, n=1) if bad else []
            if close:
                message += f" (did you mean {close[0]}?)"
        self.exit(2, f"{self.prefix}: {message}\n")


def port_arg(text: str) -> int:
    """argparse type for a TCP port: 0-65535 (0: any free port)."""
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{quoted(text)} is not a port: use a whole number "
                                         "0-65535 (0: any free port)")  # fmt: skip
    return port


def runs_dir_arg(text: str) -> str:
    """argparse type for a run's ``--dir`` (``tm``, ``tm attach``): a folder that is there or
    can be made, and written to (made here, before the child starts).

    Raises: argparse.ArgumentTypeError naming the folder and why.
    """
    try:
        if os.path.exists(text) and not os.path.isdir(text):
            why = "not a folder"
        else:
            os.makedirs(text, exist_ok=True)
            why = "" if os.access(text, os.W_OK | os.X_OK) else "not writable"
    except (OSError, ValueError) as exc:  # a name too long, a NUL, no permission
        why = getattr(exc, "strerror", None) or str(exc)
    if why:
        raise argparse.ArgumentTypeError(f"{quoted(text)}: {why}")
    return text


def name_arg(text: str) -> str:
    """argparse type for ``--name`` (``tm``, ``tm attach``): :func:`units.run_name`.

    Raises: argparse.ArgumentTypeError naming the rule.
    """
    try:
        return run_name(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def dtype_arg(text: str) -> str:
    """argparse type for ``--dtype`` (``tm`` and ``tm plan``): ``options.parse_dtype``."""
    try:
        return parse_dtype(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def hz_arg(text: str) -> float:
    """argparse type for ``--sample-hz``: 1 to 10 samples per second."""
    try:
        hz = float(text)
    except ValueError:
        hz = 0.0
    if not 1.0 <= hz <= 10.0:
        raise argparse.ArgumentTypeError(f"{quoted(text)}: the sampling rate is 1 to 10 Hz")
    return hz


def gpu_backend_spec(spec: str | None) -> str | None:
    """``--gpu-backend`` checked (``sources.check_spec``); None for none given.

    Raises: ValueError "--gpu-backend: ..."
    """
    if not spec:
        return None
    from trainmeter.sources import check_spec

    try:
        return check_spec(spec)
    except ValueError as exc:
        raise ValueError(f"--gpu-backend: {exc}") from None


def default_name(cmd: list[str]) -> str:
    """A run's name from its command: the first script's stem, else the program's name."""
    scripts = [Path(c).stem for c in cmd if c.endswith(".py")]
    return scripts[0] if scripts else Path(cmd[0]).name


def run_arguments(p: argparse.ArgumentParser, run: bool = True) -> None:
    """The arguments every command that reads a finished run takes: RUN (optional) and --dir."""
    if run:
        p.add_argument("run", nargs="?", help="run id, id prefix or folder (default: the newest)")
    p.add_argument("--dir", default=None, help="the .trainmeter folder (default ./.trainmeter)")


def os_error(exc: OSError) -> str:
    """One line for a run or log that cannot be read (``tm replay``, ``tm ls``)."""
    if exc.filename is not None and exc.strerror:
        return f"cannot read {exc.filename}: {exc.strerror}"
    return str(exc)
