"""Multi-node runs: job facts from the environment, node folder names, and ``tm merge`` of two
simulated nodes (written through the supervisor's own ``Live``, ranks and GPUs made up)."""

import itertools
import json
import re
import socket
from pathlib import Path

import pytest
from conftest import Clock

from trainmeter.commands import merge
from trainmeter.core import checkpoint, engine, logread, passport, passport_md, records
from trainmeter.core.engine import replay
from trainmeter.supervisor import store
from trainmeter.supervisor.live import Live

T0 = 1_700_000_000.0
TOKENS = 100  # tokens per rank per step
STEPS = 10
H100 = "NVIDIA H100 80GB HBM3"
SLURM = ("SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_NODEID", "SLURM_NNODES", "TRAINMETER_JOB_ID",
         "TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK", "NODE_RANK",
         "PET_NODE_RANK", "NNODES", "PET_NNODES", "SLURM_JOB_NUM_NODES")  # fmt: skip


@pytest.fixture(autouse=True)
def no_job_env(monkeypatch):
    for name in SLURM:
        monkeypatch.delenv(name, raising=False)


# -- job facts and folder names -------------------------------------------------------------


def test_job_facts_prefer_the_users_id_then_slurm_then_torchelastic_then_the_master():
    env = {"SLURM_JOB_ID": "77", "SLURM_STEP_ID": "0", "SLURM_NODEID": "1", "SLURM_NNODES": "2",
           "TORCHELASTIC_RUN_ID": "abc", "MASTER_ADDR": "n0", "MASTER_PORT": "29500"}  # fmt: skip
    assert store.job_facts(env) == {"id": "slurm:77.0", "node_rank": 1, "nodes": 2}
    assert store.job_facts({**env, "TRAINMETER_JOB_ID": "mine"})["id"] == "mine"
    del env["SLURM_JOB_ID"]
    assert store.job_facts(env)["id"] == "torchelastic:abc"
    env["TORCHELASTIC_RUN_ID"] = "none"  # torchrun's default when no --rdzv-id is given
    assert store.job_facts(env)["id"] == "master:n0:29500"
    assert store.job_facts({}) is None


def test_a_node_folder_carries_the_host_and_once_known_the_rank_range():
    rid, job = "20260101-000000-abcd", {"id": "slurm:1", "node_rank": 1, "nodes": 2}
    assert store.run_folder_name(rid, "gpu-017", job) == f"{rid}-gpu-017"
    assert store.run_folder_name(rid, "gpu-017", job, range(8, 16)) == f"{rid}-gpu-017-r8-15"
    assert store.run_folder_name(rid, "a b/c", job, [3]) == f"{rid}-a_b_c-r3"
    # one node: the plain id, unless the ranks do not start at 0 (torchrun --node_rank 1 alone)
    assert store.run_folder_name(rid, "h", {"id": "slurm:1", "nodes": 1}, [0, 1]) == rid
    assert store.run_folder_name(rid, "h", None, [0, 1]) == rid
    assert store.run_folder_name(rid, "h", None, [4, 5]) == f"{rid}-h-r4-5"


# -- two simulated nodes --------------------------------------------------------------------


def _devices(t, backend="fake:h100x2"):
    devs = [{"index": i, "name": H100, "mem_total_bytes": 80 << 30, "mig": False} for i in (0, 1)]
    return records.make("gpu_devices", t, backend=backend, devices=devs, reason=None)


def _sample(t, joules, procs=None):
    gpus = [{"index": i, "time_s": t, "gpu_util": 0.9, "power_w": 500.0,
             "energy_mj": int(joules * 1000)} for i in (0, 1)]  # fmt: skip
    for gpu, mem in zip(gpus, procs or [], strict=False):  # {pid: bytes} per GPU, as NVML's
        gpu["process_mem_bytes"] = mem
    return records.make("gpu", t, gpus=gpus, host=None)


def _node(root, monkeypatch, host, node_rank, ranks, *, job="4242", slow=(), joules=50.0,
          pids=None, procs=None, extra=(), backend="fake:h100x2"):  # fmt: skip
    """One node's run through ``Live``: ``ranks`` of a world of 4 (rank r's process: pid
    ``pids[i]``, default 100 + r), STEPS steps each of TOKENS tokens (a rank in ``slow``
    takes 1.3 s a step, the others 1 s), two GPUs that use ``joules`` each (``procs``: each
    GPU's processes' memory; a fake backend's processes all count, NVML's only the agents');
    ``extra`` records too. Returns the closed run's folder."""
    monkeypatch.setattr(socket, "gethostname", lambda: host)
    if job is not None:
        monkeypatch.setenv("SLURM_JOB_ID", job)
    monkeypatch.setenv("SLURM_NODEID", str(node_rank))
    monkeypatch.setenv("SLURM_NNODES", "2")
    clock = Clock(T0)
    live = Live(root, clock=clock)
    live.open_run("pretrain", ["train.py"], {})
    pids = pids or [100 + r for r in ranks]
    recs = [records.make("agent_hello", T0, pid=p, rank=r, world_size=4)
            for r, p in zip(ranks, pids, strict=True)]  # fmt: skip
    recs += [_devices(T0, backend), _sample(T0 + 0.5, 1000.0, procs), *extra]
    for r in ranks:
        dt = 1.3 if r in slow else 1.0
        recs += [records.make("step", T0 + n * dt, step=n, rank=r, tokens=TOKENS)
                 for n in range(1, STEPS + 1)]  # fmt: skip
    recs.append(_sample(T0 + 14.0, 1000.0 + joules, procs))
    live.ingest(sorted(recs, key=lambda rec: rec["t"]))  # as a supervisor receives them
    clock.t = T0 + 15.0
    snap = live.close_run("ok", 0)
    return Path(snap["run"]["log"]).parent


def _replay(folder):
    with open(folder / "run.jsonl", "rb") as f:
        return replay(f).snapshot()


def _log(folder):
    recs = [json.loads(x) for x in (folder / "run.jsonl").read_text().splitlines()]
    return [r for r in recs if r["k"] != "checkpoint"]  # checkpoints: state, not records


@pytest.fixture
def two_nodes(tmp_path, monkeypatch):
    root = tmp_path / ".trainmeter"
    a = _node(root, monkeypatch, "node-a", 0, [0, 1], joules=50.0)
    b = _node(root, monkeypatch, "node-b", 1, [2, 3], slow={3}, joules=70.0)
    return root, a, b


def test_each_node_folder_is_named_by_host_and_rank_range(two_nodes):
    _, a, b = two_nodes
    assert re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{4}-node-a-r0-1", a.name), a.name
    assert re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{4}-node-b-r2-3", b.name), b.name
    start = _log(b)[0]
    assert start["job"] == {"id": "slurm:4242", "node_rank": 1, "nodes": 2}


def test_the_merged_run_replays_as_the_whole_job(two_nodes):
    _, a, b = two_nodes
    out, warnings = merge.merge([b, a])  # any order: the node with rank 0 comes first
    assert warnings == [] and out.parent == a.parent and out.name.endswith("-merged")
    snap = _replay(out)
    node_a, node_b = _replay(a), _replay(b)
    # world size = the nodes' ranks together: 2 + 2
    assert sorted(snap["ranks"], key=int) == ["0", "1", "2", "3"]
    assert all(v == STEPS for v in snap["ranks"].values())
    # tokens = what every rank of both nodes trained: 4 ranks x 10 steps x 100 (by hand)
    every_step = [r for f in (a, b) for r in _log(f) if r["k"] == "step"]
    assert snap["tokens"] == sum(r["tokens"] for r in every_step) == 4 * STEPS * TOKENS
    assert snap["step"] == STEPS and node_a["tokens"] == 4000
    # node B alone (ranks 2, 3 of 4; no rank 0): its own steps on its lowest rank's clock, and
    # its 2 ranks' 2000 tokens with the 2 ranks it never heard estimated as them: 4000
    assert node_b["step"] == STEPS and node_b["tokens"] == 4000
    assert node_b["rank_counts"]["estimated_ranks"] == 2
    # every rank labelled with its node in the merged run (its records' node), none alone
    labels = snap["rank_nodes"]
    assert labels["0"] == labels["1"] != labels["2"] == labels["3"] and node_a["rank_nodes"] is None
    # both nodes' GPUs, renumbered; energy 2 x 50 J + 2 x 70 J (by hand), as the nodes sum
    gpus = snap["hardware"]["gpus"]
    assert [g["index"] for g in gpus] == [0, 1, 2, 3] and {g["name"] for g in gpus} == {H100}
    # each GPU says which node it is on and its index there; a node's own run: null
    assert [(g["node"], g["node_index"]) for g in gpus] == [
        ("node-a", 0), ("node-a", 1), ("node-b", 0), ("node-b", 1)]  # fmt: skip
    assert {(g["node"], g["node_index"]) for g in node_b["hardware"]["gpus"]} == {(None, None)}
    assert snap["energy_j"] == pytest.approx(240.0)
    assert snap["energy_j"] == pytest.approx(node_a["energy_j"] + node_b["energy_j"])
    # rank 3 (node b, 1.3 s a step against 1 s): node b alone sees it too (its clock: rank 2)
    assert snap["stragglers"] == [3] and node_a["stragglers"] == [] and node_b["stragglers"] == [3]
    assert snap["run"]["state"] == "finished" and snap["elapsed_s"] == pytest.approx(15.0)
    assert any(
        n.startswith("merge: merged from 2 node runs: node-a ranks 0-1") for n in snap["notes"]
    )


def test_the_merged_run_ends_with_a_checkpoint_that_replays_as_the_full_fold(two_nodes):
    """Each node's checkpoints are not merged (read as no record); the merged log's own last
    line is one of the whole job, and replay from it equals the full replay field by field."""
    _, a, b = two_nodes
    out, _ = merge.merge([a, b])
    lines = (out / "run.jsonl").read_bytes().splitlines()
    assert [x.startswith(logread.CHECKPOINT) for x in lines].count(True) == 1
    assert lines[-1].startswith(logread.CHECKPOINT)
    eng, reader, _ = checkpoint.resume(out / "run.jsonl", engine)
    assert eng is not None and reader.start == (out / "run.jsonl").stat().st_size
    fast, full = replay(out / "run.jsonl"), replay(out / "run.jsonl", full=True)
    assert fast.snapshot() == full.snapshot() == _replay(out)
    assert fast.timeline.since(0) == full.timeline.since(0)


def test_merged_records_keep_rank_order_per_node_and_label_hardware_by_node(two_nodes):
    _, a, b = two_nodes
    out, _ = merge.merge([a, b], name="joined")
    log = _log(out)
    assert log[0]["k"] == "run_start" and log[-1]["k"] == "run_end"
    assert [r["k"] for r in log].count("run_start") == [r["k"] for r in log].count("run_end") == 1
    start = log[0]
    assert start["name"] == "joined" and start["job"]["id"] == "slurm:4242"
    assert [(n["node"], n["ranks"], n["gpus"]) for n in start["nodes"]] == [
        ("node-a", [0, 1], [0, 1]), ("node-b", [2, 3], [2, 3])]  # fmt: skip
    (devices,) = [r for r in log if r["k"] == "gpu_devices"]
    assert [(d["index"], d["node"], d["node_index"]) for d in devices["devices"]] == [
        (0, "node-a", 0), (1, "node-a", 1), (2, "node-b", 0), (3, "node-b", 1)]  # fmt: skip
    body = log[1:-1]
    assert all(r["t"] <= s["t"] for r, s in itertools.pairwise(body[2:]))  # by time
    for rank in range(4):
        steps = [r["step"] for r in log if r["k"] == "step" and r["rank"] == rank]
        assert steps == list(range(1, STEPS + 1))
    samples = [g for r in log if r["k"] == "gpu" for g in r["gpus"]]
    assert {(g["node"], g["index"]) for g in samples} == {
        ("node-a", 0), ("node-a", 1), ("node-b", 2), ("node-b", 3)}  # fmt: skip


def test_the_merged_runs_passport_lists_each_gpus_node(two_nodes):
    _, a, b = two_nodes
    out, _ = merge.merge([a, b])
    p = passport.build(_replay(out))
    assert p["hardware"]["devices"] == [H100] * 4
    assert p["hardware"]["device_nodes"] == ["node-a", "node-a", "node-b", "node-b"]
    assert "GPUs by node: node-a 2, node-b 2" in passport_md.markdown(p)
    assert passport.build(_replay(a))["hardware"]["device_nodes"] is None  # one node's own


def test_processes_of_two_nodes_that_share_a_pid_stay_apart(tmp_path, monkeypatch):
    """Pids are per host: rank 0 (node-a) and rank 2 (node-b) are both pid 100, and pid 101 is
    rank 1 on node-a but someone else's process on node-b. Per (node, pid), by hand:

    - agents: 4 hellos, 4 agents (by pid alone, 3);
    - GPU memory of the training processes: node-a GPU 0 pid 100 = 3 GiB, GPU 1 pid 101 =
      3 GiB; node-b GPU 0 pid 100 = 5 GiB, GPU 1 pid 102 = 5 GiB, its pid 101 (1 GiB) not
      training (by pid alone, node-b's GPU 1 would read 6 GiB);
    - drops: each node's pid-100 agent dropped 3 and 4 records: 7 (by pid alone the later
      record would replace the earlier: 4).
    """
    gib = 2**30
    root = tmp_path / ".trainmeter"

    def dropped(n):
        return records.make("dropped", T0 + 1, source="agent", counts={"queue full": n},
                            pid=100, rank=None)  # fmt: skip

    a = _node(root, monkeypatch, "node-a", 0, [0, 1], pids=[100, 101], backend="nvml",
              procs=[{"100": 3 * gib}, {"101": 3 * gib}], extra=[dropped(3)])  # fmt: skip
    b = _node(root, monkeypatch, "node-b", 1, [2, 3], pids=[100, 102], backend="nvml",
              procs=[{"100": 5 * gib}, {"102": 5 * gib, "101": gib}],
              extra=[dropped(4)])  # fmt: skip
    out, _ = merge.merge([a, b])
    eng = replay(out / "run.jsonl")
    assert sorted(eng.agents) == [("node-a", 100), ("node-a", 101), ("node-b", 100),
                                  ("node-b", 102)]  # fmt: skip
    assert sorted(eng.agent_pids()) == [100, 100, 101, 102]
    snap = eng.snapshot()
    mem = [(g["node"], g["node_index"], g["train_mem_bytes"]) for g in snap["hardware"]["gpus"]]
    assert mem == [("node-a", 0, 3 * gib), ("node-a", 1, 3 * gib), ("node-b", 0, 5 * gib),
                   ("node-b", 1, 5 * gib)]  # fmt: skip
    assert snap["dropped"] == {"total": 7, "by": {"queue full (agent)": 7}}
    # each node's own run reads the same (its pids, its GPUs)
    assert [g["train_mem_bytes"] for g in _replay(b)["hardware"]["gpus"]] == [5 * gib, 5 * gib]
    assert _replay(b)["dropped"]["total"] == 4


def test_runs_of_different_jobs_are_refused_unless_forced(tmp_path, monkeypatch):
    root = tmp_path / ".trainmeter"
    a = _node(root, monkeypatch, "node-a", 0, [0, 1], job="1")
    b = _node(root, monkeypatch, "node-b", 1, [2, 3], job="2")
    refused = r"different jobs: .* is slurm:1, .* is slurm:2; --force merges anyway"
    with pytest.raises(merge.MergeError, match=refused):
        merge.merge([a, b])
    assert not list(root.glob("runs/*-merged"))  # nothing written
    out, warnings = merge.merge([a, b], force=True)
    assert warnings and warnings[0].startswith("merged anyway (--force): the runs belong to")
    assert len(_replay(out)["ranks"]) == 4


def test_a_run_without_a_job_id_or_sharing_ranks_is_refused(tmp_path, monkeypatch):
    root = tmp_path / ".trainmeter"
    a = _node(root, monkeypatch, "node-a", 0, [0, 1])
    b = _node(root, monkeypatch, "node-b", 1, [1, 2])
    with pytest.raises(merge.MergeError, match="rank 1 in both"):
        merge.merge([a, b])
    monkeypatch.delenv("SLURM_JOB_ID")
    c = _node(root, monkeypatch, "node-c", 1, [2, 3], job=None)
    with pytest.raises(merge.MergeError, match="records no job id"):
        merge.merge([a, c])
    with pytest.raises(merge.MergeError, match="given twice"):
        merge.merge([a, a], force=True)


def test_a_missing_node_is_a_warning_in_the_merged_run(tmp_path, monkeypatch):
    root = tmp_path / ".trainmeter"
    a = _node(root, monkeypatch, "node-a", 0, [0])
    b = _node(root, monkeypatch, "node-b", 1, [1])
    out, warnings = merge.merge([a, b])
    assert warnings == ["ranks 2-3 of a world of 4 are in none of these runs (a node's run "
                        "not given?)"]  # fmt: skip
    assert f"merge: {warnings[0]}" in _replay(out)["notes"]


def test_tm_merge_prints_the_folder_and_summary_and_exits_2_on_refusal(two_nodes, capsys):
    root, a, b = two_nodes
    assert merge.main([a.name[:24], b.name[:24], "--dir", str(root)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("merged 2 runs into ") and out[0].endswith("-merged")
    assert out[1].startswith("trainmeter: finished · 10 steps · 4.00 k tokens")
    assert merge.main([str(a), str(a)]) == 2
    assert capsys.readouterr().err == "tm merge: the same run folder is given twice\n"
    assert merge.main(["nope", "--dir", str(root)]) == 1
    assert capsys.readouterr().err.startswith("tm: no run matching 'nope'")
    out_dir = root / "runs" / "taken"
    (out_dir / "x").parent.mkdir(parents=True)
    (out_dir / "x").write_text("")
    assert merge.main([str(a), str(b), "--out", str(out_dir)]) == 2
    assert "exists and is not empty" in capsys.readouterr().err
