"""Shared helpers: run commands under ``tm`` and read their run logs."""

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
    runs = sorted((Path(cwd) / ".trainmeter" / "runs").glob("*/run.jsonl"))
    assert runs, f"no run log under {cwd}"
    return [json.loads(line) for line in runs[-1].read_text().splitlines() if line.strip()]


def losses(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("step ")]


@pytest.fixture
def workdir(tmp_path):
    return tmp_path


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
