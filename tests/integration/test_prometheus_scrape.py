"""The acceptance test of ``--prometheus``: during a real ``tm`` run on two fake H100s, a scrape
of the endpoint parses with prometheus-client's own parser and holds step, tokens/s and GPU
samples with their node, GPU and rank labels; the endpoint ends with the run."""

import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from conftest import FIXTURES, _env, read_log
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.slow

TOKENS_PER_STEP = 4 * 8  # tiny_train.py: batch 4 x sequence 8, one rank
H100 = "NVIDIA H100 80GB HBM3"


def _scrape(port: int) -> dict:
    """{name: [(labels, value)]} of one scrape."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out: dict = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def _one(samples: dict, name: str, **labels) -> float:
    (value,) = [v for lab, v in samples.get(name, []) if labels.items() <= lab.items()]
    return value


def _ready(s: dict) -> bool:
    steps = s.get("trainmeter_step", [])
    return bool(steps) and steps[0][1] >= 3 and "trainmeter_tokens_per_second" in s


def test_a_scrape_during_a_run_holds_step_tokens_per_second_and_gpu_samples(workdir):
    cmd = [sys.executable, "-m", "trainmeter.cli", "--no-web", "--prometheus", "0",
           "--gpu-backend", "fake:h100x2", "--", sys.executable,
           str(FIXTURES / "tiny_train.py"), "--steps", "2000", "--sleep", "0.05"]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=workdir, env=_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        start = proc.stderr.readline()
        m = re.search(r"\[trainmeter\] run (\S+) · prometheus http://0\.0\.0\.0:(\d+)/metrics",
                      start)  # fmt: skip
        assert m, start
        run_id, port = m.group(1), int(m.group(2))
        deadline, s = time.monotonic() + 120, {}
        while time.monotonic() < deadline and not _ready(s):
            time.sleep(0.3)
            s = _scrape(port)
        assert _ready(s), s
        assert proc.poll() is None  # scraped while the child runs
    finally:
        proc.send_signal(signal.SIGTERM)  # forwarded to the child
        proc.communicate(timeout=60)
    node = socket.gethostname()
    step = _one(s, "trainmeter_step", node=node)
    assert _one(s, "trainmeter_tokens_total", node=node) == TOKENS_PER_STEP * step
    assert _one(s, "trainmeter_rank_steps_total", node=node, rank="0") == step
    assert _one(s, "trainmeter_tokens_per_second", node=node) > 0
    assert _one(s, "trainmeter_rank_step_time_seconds", rank="0") > 0.05  # it sleeps 0.05 s a step
    for gpu in ("0", "1"):
        labels = {"node": node, "gpu": gpu, "gpu_name": H100}
        assert 0 <= _one(s, "trainmeter_gpu_utilization_ratio", **labels) <= 1
        assert _one(s, "trainmeter_gpu_power_watts", **labels) > 0
        assert _one(s, "trainmeter_gpu_memory_total_bytes", **labels) == 85_520_809_984  # fake
    (info,) = s["trainmeter_run_info"]
    assert info[0]["run_id"] == run_id and info[0]["node"] == node
    assert read_log(workdir)[0]["opts"]["prometheus"] == f"0.0.0.0:{port}"
    with pytest.raises(urllib.error.URLError):  # the endpoint ends with the run
        _scrape(port)
