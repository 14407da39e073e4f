"""Shared helpers: run commands under ``tm`` and read their run logs."""

import collections
import errno
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
EXAMPLE = ROOT / "examples" / "train_gpt.py"


def _env(extra=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(ROOT), env.get("PYTHONPATH", "")] if p)
    env.pop("TRAINMETER_SOCKET", None)
    env.update(ONE_THREAD)
    env.update(extra or {})
    return env


# One intra-op thread in every process a test starts: torch's CPU kernels over two threads are not
# the same numbers run to run on a loaded machine (a reduction split over another thread team). The
# HF Trainer's step 1 gave, once in CI, 3.889193535 against 3.889193296 in 15 runs; the example's
# tiny GPT (--batch-size 2 --seq-len 64 --grad-accum 2), run plain beside two busy loops, printed
# another step 2 or 3 loss in 1 of 12 and 1 of 20 runs, and in 0 of 20 with one thread. The tests
# that compare losses to the last digit (the same-numerics invariant) compare trainmeter against
# the same numerics this way, not two thread schedules.
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


# torch 2.13 with gloo: a worker thread that releases a finished collective's tensors after the
# rank's interpreter began to exit needs the GIL then, and the rank aborts with this line on
# stderr, after its last step. DDP keeps the group (and its threads) alive to the end, so no
# cleanup in the training program rules it out; a barrier first makes it rare (1 plain 4-rank
# run in ~13 without one here, with or without tm). It is torch's, not trainmeter's.
GLOO_EXIT_ABORT = "terminate called without an active exception"


def once_more_after_gloo_exit_abort(run):
    """``run()``, and once more, with a warning in pytest's summary, when it died of the gloo
    exit abort alone (a non-zero exit with GLOO_EXIT_ABORT on stderr); anything else, and a
    second abort, is returned as it is."""
    done = run()
    if done.returncode != 0 and GLOO_EXIT_ABORT in done.stderr:
        cmd = " ".join(map(str, done.args))
        warnings.warn(f"torch's gloo exit abort in {cmd}: ran again", stacklevel=2)
        done = run()
    return done


def run_plain(args, cwd, timeout=300, env=None):
    """``python ARGS`` without trainmeter."""
    cmd = [sys.executable, *map(str, args)]
    return once_more_after_gloo_exit_abort(lambda: _capture(cmd, cwd, timeout, env))


def run_tm(tm_args, cwd, timeout=300, env=None):
    """``tm TM_ARGS`` (as the installed console script would run it); a run again after the
    gloo exit abort is a second run folder, the newest (read_log's)."""
    cmd = [sys.executable, "-m", "trainmeter.cli", *map(str, tm_args)]
    return once_more_after_gloo_exit_abort(lambda: _capture(cmd, cwd, timeout, env))


def _capture(cmd, cwd, timeout, env):
    return subprocess.run(cmd, cwd=cwd, env=_env(env), capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip


def read_log(cwd) -> list[dict]:
    """The records of the newest run's log under ``cwd/.trainmeter``."""
    from trainmeter.supervisor.store import run_folders

    runs = run_folders(Path(cwd) / ".trainmeter")
    assert runs, f"no run log under {cwd}"
    log = runs[-1] / "run.jsonl"
    recs = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return [r for r in recs if r["k"] != "checkpoint"]  # checkpoints: state, not records


def losses(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("step ")]


@pytest.fixture
def workdir(tmp_path):
    return tmp_path


class StandInSender:
    """The agent's sender without its thread or socket: items land on ``queue`` as the real
    ``put_step`` and ``put`` take them, and ``drain()`` reads them as the sender thread would
    (``trainmeter.agent.sender.QueueReader``: root calls counted, steps, spans, records),
    keeping everything it read in ``steps``, ``spans`` and ``records``."""

    def __init__(self):
        from trainmeter.agent.sender import QueueReader

        self.queue = collections.deque()
        self.put_step = self.put = self.queue.append
        self.reader = QueueReader(0)
        self.max_items, self.on_stop = None, None
        self.steps, self.spans, self.records = [], [], []
        self.drops: dict[str, int] = {}  # reason -> count, as Sender.count keeps them

    def count(self, reason, n=1):
        self.drops[reason] = self.drops.get(reason, 0) + n

    def set_counter(self, tensor_type, int_dtypes, count_call, on_stop):
        self.reader.tensor, self.reader.ints = tensor_type, int_dtypes
        self.reader.ledger.tensor = tensor_type
        self.reader.count_call, self.on_stop = count_call, on_stop

    def drain(self):
        steps, spans, records = self.reader.read(self.queue)
        if steps is not None:
            self.steps += zip(steps["step"], steps["tokens"], steps["samples"], strict=True)
        if spans is not None:
            self.spans += zip(spans["name"], spans["t"], spans["dur"], strict=True)
        self.records += records

    def counts(self):
        """``([(step, tokens, samples) of every step], (tokens, samples) queued since)``."""
        self.drain()
        return self.steps, (self.reader.tokens, self.reader.samples)


class StandInAgent:
    """A stand-in for :class:`trainmeter.agent.runtime.Agent` in in-process tap tests.

    Records go through a :class:`StandInSender` as the real agent's do; ``records`` gives them
    back as ``(kind, fields)``, the models found are in ``models``.
    """

    armed, rank, pad_skip = True, 0, False

    def __init__(self):
        from trainmeter.agent.step_clock import new_step_count

        self.sender = StandInSender()
        self.steps = new_step_count()
        self.models = []

    @property
    def step(self):
        from trainmeter.agent.step_clock import steps_taken

        return steps_taken(self.steps)

    def put_model(self, fields):
        self.models.append(fields)

    def put(self, kind, **fields):
        self.sender.put({"v": 1, "k": kind, "t": 0.0, **fields})

    @property
    def records(self) -> list[tuple]:
        self.sender.drain()
        return [(r["k"], {k: v for k, v in r.items() if k not in ("v", "k", "t")})
                for r in self.sender.records]  # fmt: skip

    def notes(self) -> list[dict]:
        return [fields for kind, fields in self.records if kind == "note"]

    def spans(self, kind=None) -> list[tuple]:
        """(kind, start, seconds) of each span queued, of one kind or all."""
        self.sender.drain()
        return [x for x in self.sender.spans if kind is None or x[0] == kind]


@pytest.fixture
def fresh_guard(monkeypatch):
    """Every guarded tap on again, and no warning given yet (guard.py keeps both per process)."""
    from trainmeter.agent import guard

    monkeypatch.setattr(guard, "_off", set())
    monkeypatch.setattr(guard, "_reported", set())


def run_jobs(job, names, root):
    """``job(name, root)`` for each name, two at a time; asserts each run exited 0."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {name: pool.submit(job, name, root) for name in names}
        done = {name: f.result() for name, f in futures.items()}
    for name, ran in done.items():
        assert ran["out"].returncode == 0, f"{name}:\n{ran['out'].stdout}\n{ran['out'].stderr}"
    return done


class Clock:
    """A manual clock (seconds since the epoch): tests move time by hand with ``tick``."""

    def __init__(self, t: float = 1_700_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def tick(self, dt: float) -> None:
        self.t += dt


def run_cell(kc, code, timeout=60):
    """Execute ``code`` on a jupyter_client kernel; returns (reply content, stdout text)."""
    out = []

    def hook(msg):
        if msg["msg_type"] == "stream":
            out.append(msg["content"]["text"])

    reply = kc.execute_interactive(code, timeout=timeout, output_hook=hook)
    return reply["content"], "".join(out)


class FullDisk:
    """``os.write`` refusing with ``errno`` (ENOSPC: a full disk) while :attr:`full` is set;
    clear it and writes go through again."""

    def __init__(self, monkeypatch, errno_: int = errno.ENOSPC) -> None:
        self.full, self.errno = True, errno_
        real = os.write

        def write(fd, data):
            if self.full:
                raise OSError(self.errno, os.strerror(self.errno))
            return real(fd, data)

        monkeypatch.setattr(os, "write", write)


@pytest.fixture
def full_disk(monkeypatch):
    """``full_disk()``: from now on the disk refuses every write (ENOSPC), until the returned
    :class:`FullDisk`'s ``full`` is cleared."""
    return lambda errno_=errno.ENOSPC: FullDisk(monkeypatch, errno_)


# A skipped test is not a passing one: the run fails when any test was skipped, naming it (a
# missing package must be installed, never left out of the count: pip install -e ".[test]").
_SKIPPED: list[str] = []


def pytest_runtest_logreport(report):
    if report.skipped and not hasattr(report, "wasxfail"):
        _SKIPPED.append(report.nodeid)


def pytest_sessionfinish(session, exitstatus):
    if _SKIPPED and exitstatus == 0:
        names = ", ".join(_SKIPPED[:10])
        print(f"\n{len(_SKIPPED)} test(s) skipped, which fails the run: {names}")
        session.exitstatus = 1
