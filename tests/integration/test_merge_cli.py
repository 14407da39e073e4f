"""Two nodes of one job simulated on this machine: two ``tm`` runs started as Slurm would start
them on node 0 and node 1 (SLURM_JOB_ID, SLURM_NODEID, SLURM_NNODES; RANK and WORLD_SIZE as
torchrun would give each rank), each on two fake H100s; then ``tm merge`` and ``tm replay``."""

import json
import socket
import subprocess
import sys

import pytest
from conftest import FIXTURES, _env, run_tm

pytestmark = pytest.mark.slow

STEPS = 6
TOKENS_PER_STEP = 4 * 8  # tiny_train.py: batch 4 x sequence 8, per rank


def _node(cwd, node_rank: int) -> subprocess.Popen:
    env = _env({"SLURM_JOB_ID": "31337", "SLURM_NODEID": str(node_rank), "SLURM_NNODES": "2",
                "RANK": str(node_rank), "WORLD_SIZE": "2"})  # fmt: skip
    cmd = [sys.executable, "-m", "trainmeter.cli", "--no-web", "-q", "--gpu-backend",
           "fake:h100x2", str(FIXTURES / "tiny_train.py"), "--steps", str(STEPS)]  # fmt: skip
    return subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip


def test_two_node_runs_merge_into_one_job_that_replays_with_both_nodes(workdir):
    procs = [_node(workdir, k) for k in (0, 1)]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    host = "".join(c if c.isalnum() or c in "._-" else "_" for c in socket.gethostname())
    folders = sorted((workdir / ".trainmeter" / "runs").iterdir())
    assert sorted(f.name.split("-", 3)[3] for f in folders) == [f"{host}-r0", f"{host}-r1"]
    out = run_tm(["merge", *folders, "--out", workdir / "job"], workdir)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"merged 2 runs into {workdir / 'job'}")
    snap = json.loads(run_tm(["replay", "--json", workdir / "job"], workdir).stdout)
    assert snap["ranks"] == {"0": STEPS, "1": STEPS}  # world size 2 = 1 rank + 1 rank
    assert snap["tokens"] == 2 * STEPS * TOKENS_PER_STEP  # both nodes' tokens, by hand
    gpus = snap["hardware"]["gpus"]
    assert [g["index"] for g in gpus] == [0, 1, 2, 3]
    assert {g["name"] for g in gpus} == {"NVIDIA H100 80GB HBM3"}
    start = json.loads((workdir / "job" / "run.jsonl").read_text().splitlines()[0])
    assert start["job"]["id"] == "slurm:31337"
    assert [n["ranks"] for n in start["nodes"]] == [[0, 0], [1, 1]]
