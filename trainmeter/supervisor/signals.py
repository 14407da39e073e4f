"""How ``tm`` passes signals to its child: once, as if ``tm`` were not there.

A terminal sends Ctrl-C (SIGINT) and Ctrl-\\ (SIGQUIT) to its whole foreground process group,
so a child in ``tm``'s group already has them: forwarding would deliver a second one, and a
second SIGINT interrupts a script's ``except KeyboardInterrupt`` cleanup (its checkpoint save).
Whether the terminal sent it is read from the controlling terminal (``/dev/tty``), never from
stdin, which a pipe or ``< /dev/null`` replaces while the terminal stays.

Without a controlling terminal (CI, ``nohup``, a scheduler, a parent script), a signal can come
to ``tm``'s process group (``kill -INT -PGID``, a runner stopping a job) or to ``tm`` alone, and
nothing tells the two apart. So there the child gets a process group of its own, every signal
reaches it through ``tm`` only, exactly once; and since a signal to ``tm``'s group no longer
reaches it, the child asks the kernel for SIGTERM when ``tm`` dies (Linux
``PR_SET_PDEATHSIG``, prctl(2)), so a ``tm`` killed with SIGKILL leaves no orphan on a GPU.

docs/reliability.md "Signals" states the promise and the tests that show it
(tests/integration/test_signals.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
TERMINAL_SENT = (signal.SIGINT, signal.SIGQUIT)  # a terminal signals its foreground group
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def terminal_pgrp() -> int | None:
    """The foreground process group of this process's controlling terminal, or None when it
    has none (``/dev/tty`` cannot be opened: ENXIO) or it cannot be read."""
    try:
        fd = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY)
    except OSError:
        return None
    try:
        return os.tcgetpgrp(fd)
    except OSError:
        return None
    finally:
        os.close(fd)


def child_options() -> dict:
    """Extra ``subprocess.Popen`` arguments for the child: none under a controlling terminal
    (the child shares ``tm``'s process group, so the terminal's keys reach it and it can read
    the terminal); without one, a process group of its own and SIGTERM when ``tm`` dies."""
    if terminal_pgrp() is not None:
        return {}
    return {"preexec_fn": _own_group(os.getpid(), _prctl())}


def wait(proc: subprocess.Popen) -> int:
    """Wait for ``proc``, forwarding FORWARDED signals to it; returns its return code.

    A SIGINT or SIGQUIT is not forwarded while the controlling terminal's foreground group is
    ``tm``'s own and the child is in it: the terminal has sent it to the child already. A child
    with a process group of its own gets the signal at that whole group, so a training script
    a shell runs (``tm -- bash -c "python train.py; echo done"``) gets it as without ``tm``.
    """
    group = _pgid(proc.pid)
    shares_group = group == os.getpgrp()

    def forward(signum, frame):
        if signum in TERMINAL_SENT and shares_group and terminal_pgrp() == os.getpgrp():
            return
        try:
            if shares_group or group is None:
                proc.send_signal(signum)
            else:  # its own group: to all of it, as to tm's group (bash -c "python train.py; ...")
                os.killpg(group, signum)
        except ProcessLookupError:
            pass

    old = {s: signal.signal(s, forward) for s in FORWARDED}
    try:
        while True:
            try:
                return proc.wait()
            except InterruptedError:
                continue
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:  # exited already
        return None


def _prctl():
    """libc's ``prctl``, looked up before the fork (the child may only call it), or None off
    Linux or without a libc that has it. It is looked up in this process's own symbols first
    (Python is linked with libc): ``ctypes.util.find_library`` runs ``ldconfig``, which costs
    every ``tm`` run a few milliseconds."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        pass
    import ctypes.util

    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def _own_group(parent: int, prctl):
    """The child's ``preexec_fn``: a new process group, then SIGTERM on ``tm``'s death. A ``tm``
    that died before the prctl took effect is seen as a changed parent: the child ends."""

    def preexec() -> None:
        os.setpgid(0, 0)
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
            if os.getppid() != parent:
                os._exit(128 + int(signal.SIGTERM))

    return preexec
