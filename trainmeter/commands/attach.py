"""``tm attach PID``: watch a program that is already running, from outside.

No agent runs inside it, so there are no steps, tokens, loss, FLOPs or MFU; what can be seen
from outside is logged like any run: the process's facts from /proc (command line, user, start
time, CPU %, resident memory, threads, children: ``trainmeter/sources/process.py``) and the
counters of the GPUs it uses (NVML's per-GPU process lists say which; all GPUs when none lists
it). The run's options hold ``attached: PID``, so the engine says what is missing and why.

``tm attach`` opens a run as ``tm`` does (``Live``, the sampler, the dashboard page from
``commands/serve.py``), polls the process every ``POLL_S`` seconds, and when it has ended
(gone, a zombie, or its pid reused by another process) takes a last reading, closes the run log
and exits 0. Ctrl-C, SIGTERM or SIGHUP stop the watching (the run ends ``interrupted``, exit
128 + the signal's number); the watched process is never signalled (only ``kill(pid, 0)``, which
sends nothing, checks that it is ours). Its exit status cannot be seen from outside: the run's
``exit_code`` is null.

Exit status 2 with one line on stderr: no such process, another user's process, tm attach's own
pid, or a bad flag.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading

from trainmeter.commands.args import (
    Parser,
    default_name,
    gpu_backend_spec,
    hz_arg,
    name_arg,
    port_arg,
    runs_dir_arg,
)
from trainmeter.core.envnames import GPU_BACKEND
from trainmeter.core.summary import summary_line
from trainmeter.core.units import quoted
from trainmeter.web import DEFAULT_PORT, PORT_TRIES

PID_MAX = 1 << 22  # Linux's PID_MAX_LIMIT on 64-bit (include/linux/threads.h): no pid is larger
POLL_S = 0.2  # how often the process is checked: tm attach ends within this of the process
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _pid(text: str) -> int:
    try:
        pid = int(text)
    except ValueError:
        pid = 0
    if not 0 < pid <= PID_MAX:
        raise argparse.ArgumentTypeError(f"{quoted(text)} is not a process id (a whole number "
                                         f"from 1 to {PID_MAX}; see `ps`)")  # fmt: skip
    return pid


def _parser() -> argparse.ArgumentParser:
    p = Parser(prog="tm attach", description="Watch a running program from outside: its "
                "process facts and the counters of its GPUs (no agent: no loss, steps or "
                "FLOPs). Ends when the program ends.")  # fmt: skip
    p.add_argument("pid", type=_pid, metavar="PID", help="the process to watch (yours)")
    p.add_argument("--name", type=name_arg, help="run name (default: its script's name)")
    p.add_argument("--gpu-backend", metavar="SPEC", default=os.environ.get(GPU_BACKEND),
                   help="GPU counters: nvml, none, fake:h100x2, ... (default: "
                        f"${GPU_BACKEND}, else NVML when it loads)")  # fmt: skip
    p.add_argument("--sample-hz", type=hz_arg, default=1.0, metavar="HZ",
                   help="samples per second, 1 to 10 (default 1)")  # fmt: skip
    p.add_argument("--port", type=port_arg, default=DEFAULT_PORT,
                   help=f"dashboard page port on 127.0.0.1 (default {DEFAULT_PORT}; if taken, the "
                        f"next free one of {PORT_TRIES}; 0: any free port)")  # fmt: skip
    p.add_argument("--no-web", action="store_true", help="serve no dashboard page")
    p.add_argument("-q", "--quiet", action="store_true", help="print only errors")
    p.add_argument("--dir", type=runs_dir_arg, default=None,
                   help="where .trainmeter runs go (default ./.trainmeter)")  # fmt: skip
    return p


def main(argv: list[str]) -> int:
    """``tm attach`` (see the module docstring); returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        spec = gpu_backend_spec(args.gpu_backend)
        watch = open_watch(args.pid)
    except (ValueError, OSError) as exc:
        print(f"tm: {exc}", file=sys.stderr)
        return 2
    name = args.name or default_name(watch.argv() or [f"pid-{args.pid}"])
    return attach(watch, name, quiet=args.quiet, root=args.dir, web=not args.no_web,
                  port=args.port, gpu_backend=spec, sample_hz=args.sample_hz)  # fmt: skip


def open_watch(pid: int):
    """A ``ProcessSource`` for ``pid``.

    Raises:
        ProcessLookupError: no such process, or it has already ended (a zombie).
        PermissionError: another user's process.
        ValueError: ``pid`` is this process.
    """
    from trainmeter.core.redact import redact_argv
    from trainmeter.sources.process import ProcessSource, check_pid

    if pid == os.getpid():
        raise ValueError(f"{pid} is tm attach itself; give the pid of the program to watch")
    try:
        check_pid(pid)
    except ProcessLookupError:
        raise ProcessLookupError(f"no process {pid} is running (see `ps`)") from None
    except PermissionError:
        raise PermissionError(f"process {pid} belongs to another user; tm attach watches your "
                              "own processes (run it as that user)") from None  # fmt: skip
    return ProcessSource(pid, redact=redact_argv)


def attach(watch, name: str, *, quiet: bool = False, root: str | None = None, web: bool = True,
           port: int = DEFAULT_PORT, gpu_backend: str | None = None, sample_hz: float = 1.0,
           poll_s: float = POLL_S) -> int:  # fmt: skip
    """Watch ``watch`` (a ``ProcessSource``) until its process ends (0) or a signal stops the
    watching (128 + its number); the run log and page as under ``tm``."""
    from trainmeter.commands.serve import close_page, open_page
    from trainmeter.supervisor.live import Live

    say = (lambda s: None) if quiet else (lambda s: print(s, file=sys.stderr, flush=True))
    stop = _StopOnSignal()
    with stop:
        live = Live(root)
        info = live.open_run(name, watch.argv(), {"attached": watch.pid})
        page = open_page(live, web, port)
        url = f" · dashboard {page.url}" if page is not None else ""
        what = " ".join((watch.sample().cmdline or "?").split())  # one line, even for -c code
        say(f"[trainmeter] run {info['run_id']}{url} · attached to process {watch.pid} ({what}) "
            f"· log {info['log']}")  # fmt: skip
        sampler = _start_sampler(live, gpu_backend, sample_hz, watch)
        while not stop.event.wait(poll_s) and watch.alive():
            pass
        ended = stop.signum is None
        sampler.stop(last=True)  # the last reading logs the end (or the facts when stopped)
        if ended:
            live.note(f"process {watch.pid} ended; its exit status cannot be seen from outside "
                      "(tm did not start it)")  # fmt: skip
        snap = live.close_run("ok" if ended else "interrupted", None)
        close_page(live, page)
    say(f"[trainmeter] process {watch.pid} {'ended' if ended else 'still runs; stopped watching'}")
    if snap is not None:
        say(summary_line(snap))
    return 0 if ended else 128 + stop.signum


def _start_sampler(live, spec: str | None, hz: float, watch):
    """The sampler over the GPUs ``watch``'s process uses (all when NVML lists it on none), the
    host, and its process facts. A backend that cannot open leaves the counters out (the
    reason is in the snapshot) and the facts in."""
    from trainmeter.sources import HostSource, NoneBackend, open_backend
    from trainmeter.sources.process import OnlyDevices, gpus_used
    from trainmeter.supervisor.sampler import Sampler

    try:
        backend = open_backend(spec)
    except Exception as exc:  # an explicit nvml without NVML: watch the process all the same
        backend = NoneBackend(str(exc))  # the snapshot's notes: "no GPU counters: <why>"
    adopt = getattr(getattr(backend, "nvml", None), "adopt", None)
    if callable(adopt):  # a fake GPU lists the watched process (a demonstration)
        adopt(watch.pid)
    if backend.devices():
        used = gpus_used([s.as_dict() for s in backend.sample()], watch.pids())
        if used:
            backend = OnlyDevices(backend, used)
        else:
            live.note(f"no GPU lists process {watch.pid} or its children as a compute process "
                      "(no CUDA context yet, or NVML sees another pid namespace): every GPU "
                      "is shown")  # fmt: skip
    return Sampler(live, backend, HostSource(), hz=hz, pids=watch.pids,
                   process=lambda: watch.sample().as_dict()).start()  # fmt: skip


class _StopOnSignal:
    """While entered, SIGINT/SIGTERM/SIGHUP set ``event`` (and ``signum``, the first one)
    instead of ending tm attach, so the run log is always closed; the handlers are restored on
    exit. Nothing is forwarded: the watched process is not ours to signal."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.signum: int | None = None
        self._old: dict = {}

    def _on(self, signum, frame) -> None:
        if self.signum is None:
            self.signum = signum
        self.event.set()

    def __enter__(self) -> _StopOnSignal:
        self._old = {s: signal.signal(s, self._on) for s in _STOP_SIGNALS}
        return self

    def __exit__(self, *exc) -> None:
        for s, h in self._old.items():
            signal.signal(s, h)
