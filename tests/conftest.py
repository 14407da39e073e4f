"""Shared helpers: run commands under ``tm`` and read their run logs."""

import collections
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
EXAMPLE = ROOT / "examples" / "train_gpt.py"


def _env(extra=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(ROOT), env.get("PYTHONPATH", "")] if p)
    env.pop("TRAINMETER_SOCKET", None)
    env.update(extra or {})
    return env


def run_plain(args, cwd, timeout=300):
    """``python ARGS`` without trainmeter."""
    return subprocess.run([sys.executable, *map(str, args)], cwd=cwd, env=_env(),
                          capture_output=True, text=True, timeout=timeout)  # fmt: skip


def run_tm(tm_args, cwd, timeout=300, env=None):
    """``tm TM_ARGS`` (as the installed console script would run it)."""
    cmd = [sys.executable, "-m", "trainmeter.cli", *map(str, tm_args)]
    return subprocess.run(cmd, cwd=cwd, env=_env(env), capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip


def read_log(cwd) -> list[dict]:
    """The records of the newest run's log under ``cwd/.trainmeter``."""
    from trainmeter.supervisor.store import run_folders

    runs = run_folders(Path(cwd) / ".trainmeter")
    assert runs, f"no run log under {cwd}"
    log = runs[-1] / "run.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def losses(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("step ")]


@pytest.fixture
def workdir(tmp_path):
    return tmp_path


class StandInAgent:
    """A stand-in for :class:`trainmeter.agent.runtime.Agent` in in-process tap tests.

    Steps and spans land on ``sender.queue`` as the real sender's ``put_step`` takes them; other
    records are kept as ``(kind, fields)`` in ``records``, the models found in ``models``.
    """

    armed, step, rank, pad_skip = True, 0, 0, False

    def __init__(self):
        queue = collections.deque()
        self.sender = type("S", (), {"put_step": queue.append, "queue": queue})()
        self.records, self.models = [], []

    def put_model(self, fields):
        self.models.append(fields)

    def put(self, kind, **fields):
        self.records.append((kind, fields))

    def notes(self) -> list[dict]:
        return [fields for kind, fields in self.records if kind == "note"]

    def spans(self, kind=None) -> list[tuple]:
        """(kind, start, seconds) of each span queued, of one kind or all."""
        out = [x for x in self.sender.queue if len(x) == 3]
        return [x for x in out if kind is None or x[0] == kind]


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
