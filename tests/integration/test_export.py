"""``tm export {csv,mlflow,wandb}``: every series at full resolution with its steps, FLOPs and
MFU figures named by convention, the passport as the summary; each read back by its own reader
(Python's csv module, MLflow's client, W&B's offline reader ``wandb leet inspect``).

The run is test_passport_cli.known_run: 1000 tokens a step, one step a second, 2 GPUs at a
declared 1 GFLOP/s, so by hand tokens/s = 1000 at every timed step and MFU[hf] = 1000 x 5400
/ (2 x 1e9) = 0.0027, MFU[titan] = 1000 x 6168 / 2e9 = 0.003084 (FLOPs per token derived there).
"""

import csv
import json
import math
import os
import subprocess
import sys

import pytest
from conftest import _env
from test_passport_cli import known_run, tm, write_run

from trainmeter.core.engine import replay
from trainmeter.core.timeline import DEFAULT_CAP

MFU_HF, MFU_TITAN = 1000 * 5400 / 2e9, 1000 * 6168 / 2e9


def _run(tmp_path, n):
    """A known run of ``n`` one-second steps; returns its .trainmeter folder."""
    steps = tuple(float(i) for i in range(1, n + 1))
    return str(write_run(tmp_path, known_run(steps=steps, end=n + 1.0)).parents[1])


def _by_series(rows):
    out = {}
    for r in rows:
        out.setdefault(r["series"], []).append(r)
    return out


def test_csv_holds_every_point_of_every_series_not_the_thinned_chart(tmp_path, capsys):
    n = DEFAULT_CAP + 500  # more points than the live chart keeps of one series
    root = _run(tmp_path, n)
    out = tmp_path / "series.csv"
    rc, _, err = tm(capsys, "export", "csv", "--dir", root, "--out", str(out))
    assert rc == 0 and str(out) in err
    with open(out, newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["series", "step", "t", "value"]
    s = _by_series(rows)
    loss = s["train_loss"]
    assert [int(r["step"]) for r in loss] == list(range(1, n + 1))
    assert [float(r["value"]) for r in loss] == [1.0 / i for i in range(1, n + 1)]
    assert [float(r["t"]) for r in loss] == [float(i) for i in range(1, n + 1)]  # s after start
    with open(next((tmp_path / ".trainmeter/runs").iterdir()) / "run.jsonl", "rb") as f:
        assert replay(f).timeline.sizes()["train_loss"] < n  # the chart thinned; the CSV not
    assert [int(r["step"]) for r in s["tokens"]] == list(range(1, n + 1))
    assert float(s["tokens"][-1]["value"]) == 1000 * n
    rate = s["tokens_per_s"]  # step 1 is untimed
    assert len(rate) == n - 1 and {float(r["value"]) for r in rate} == {1000.0}
    # 8 samples a step, one step a second: 8 samples/s at every timed step, 8 i fed by step i
    assert [float(r["value"]) for r in s["samples"]] == [8.0 * i for i in range(1, n + 1)]
    rate = s["samples_per_s"]
    assert [int(r["step"]) for r in rate] == list(range(2, n + 1))
    assert {float(r["value"]) for r in rate} == {8.0}
    for name, mfu in (("mfu/hf", MFU_HF), ("mfu/titan", MFU_TITAN)):
        assert len(s[name]) == n - 1
        assert all(float(r["value"]) == pytest.approx(mfu) for r in s[name])
    assert "mfu/megatron" not in s  # no FLOPs per token under megatron: no series, not zeros
    util = s["gpu0/gpu_util"]  # GPU counters: at their readings (t), with the step count then
    assert [(float(r["t"]), float(r["value"])) for r in util] == [(1.0, 0.25), (float(n), 0.75)]


def test_csv_with_the_passport_names_each_figure_by_convention(tmp_path, capsys):
    root = _run(tmp_path, 4)
    out = tmp_path / "run.csv"
    assert tm(capsys, "export", "csv", "--dir", root, "--out", str(out), "--passport")[0] == 0
    with open(tmp_path / "run-passport.csv", newline="") as f:
        figures = dict(csv.reader(f))
    assert figures["convention"] == "hf"
    assert float(figures["flops_spent/hf"]) == 4 * 1000 * 5400  # tokens x FLOP/token
    assert float(figures["mfu_avg/titan"]) == pytest.approx(MFU_TITAN)
    assert "flops_spent/megatron" not in figures  # unknown: left out, never 0
    assert float(figures["samples_per_s_avg"]) == 8.0 and float(figures["samples_per_step"]) == 8
    assert "hfu_counted_avg" not in figures  # no counted step in this log: unknown, left out


def _csv_rows(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_a_node_run_without_rank_0_exports_its_own_steps(tmp_path, capsys):
    # one node's run of a two-node job (docs/multinode.md): ranks 2 and 3 of 4; the step
    # clock is rank 2, the lowest that stepped, as the engine's
    n = 30
    recs = []
    for kind, dt, fields in known_run(steps=tuple(float(i) for i in range(1, n + 1)), end=n + 1.0):
        if kind == "agent_hello":
            recs += [(kind, dt, {**fields, "rank": r, "world_size": 4}) for r in (2, 3)]
        elif kind == "step":
            recs += [(kind, dt + 0.01 * r, {**fields, "rank": r}) for r in (2, 3)]
        elif kind == "model":
            recs.append((kind, dt, {**fields, "rank": 2}))
        else:
            recs.append((kind, dt, fields))
    folder = write_run(tmp_path, recs)
    out = tmp_path / "series.csv"
    rc, _, err = tm(capsys, "export", "csv", "--dir", str(folder.parents[1]), "--out", str(out))
    assert rc == 0, err
    s = _by_series(_csv_rows(out))
    assert [int(r["step"]) for r in s["tokens"]] == list(range(1, n + 1))  # rank 2's steps
    # by hand: at rank 2's last step, rank 2 has fed 30 x 1000 tokens and rank 3 29 x 1000;
    # the two ranks not heard here (another node's) count as the mean heard rank: x 4 / 2
    assert float(s["tokens"][-1]["value"]) == (30 + 29) * 1000 * 4 / 2
    assert len(s["tokens_per_s"]) == n - 1 and len(s["samples_per_s"]) == n - 1


def test_a_training_code_series_named_as_an_export_series_is_said_apart(tmp_path, capsys):
    recs = known_run()
    recs += [("series", t, {"name": "tokens", "value": 7.0, "step": 1}) for t in (1.5, 2.5)]
    folder = write_run(tmp_path, recs)
    out = tmp_path / "series.csv"
    assert tm(capsys, "export", "csv", "--dir", str(folder.parents[1]), "--out", str(out))[0] == 0
    s = _by_series(_csv_rows(out))
    assert [float(r["value"]) for r in s["tokens"]] == [1000.0, 2000.0, 3000.0, 4000.0]
    assert [float(r["value"]) for r in s["tokens (training code)"]] == [7.0, 7.0]


def test_skipped_lines_are_said_and_a_name_utf8_cannot_hold_is_escaped(tmp_path, capsys):
    recs = [*known_run(), ("series", 3.5, {"name": "loss\udcff", "value": 0.5, "step": 3})]
    folder = write_run(tmp_path, recs)
    with open(folder / "run.jsonl", "ab") as f:  # a damaged line, as a full disk leaves one
        f.write(b'{"v":1,"k":"series","t":1700000003.6,"name":"train_loss","value":NaN}\n')
    out = tmp_path / "series.csv"
    rc, _, err = tm(capsys, "export", "csv", "--dir", str(folder.parents[1]), "--out", str(out))
    assert rc == 0
    assert "tm: export skipped 1 line(s) (1 series: not JSON)" in err
    s = _by_series(_csv_rows(out))
    assert [float(r["value"]) for r in s["loss\\udcff"]] == [0.5]  # the escape, as text


def test_the_series_and_passport_files_land_together_or_not_at_all(tmp_path, capsys):
    root = _run(tmp_path, 4)
    out = tmp_path / "s.csv"
    out.write_text("an earlier export\n")
    (tmp_path / "s-passport.csv").mkdir()  # the passport's place is taken by a folder
    rc, _, err = tm(capsys, "export", "csv", "--dir", root, "--out", str(out), "--passport")
    assert rc == 1 and "s-passport.csv" in err and ".part" not in err
    assert out.read_text() == "an earlier export\n"  # not replaced without its passport
    rc, _, err = tm(capsys, "export", "csv", "--dir", root, "--out", str(tmp_path / "no/s.csv"))
    assert rc == 1 and f"{tmp_path}/no/s.csv" in err and ".part" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == [".trainmeter", "s-passport.csv", "s.csv"]


def test_an_export_to_a_device_or_through_a_link_writes_there(tmp_path, capsys):
    import stat

    root = _run(tmp_path, 4)
    rc, _, err = tm(capsys, "export", "csv", "--dir", root, "--out", "/dev/null")
    assert rc == 0, err
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)  # written to, never renamed over
    target, link = tmp_path / "kept.csv", tmp_path / "link.csv"
    target.write_text("old\n")
    link.symlink_to(target)
    assert tm(capsys, "export", "csv", "--dir", root, "--out", str(link))[0] == 0
    assert link.is_symlink() and target.read_text().startswith("series,step,t,value")


def test_a_failed_export_leaves_the_earlier_file_and_no_part(tmp_path, capsys, monkeypatch):
    from trainmeter.exports.run import RunData

    root = _run(tmp_path, 4)
    out = tmp_path / "series.csv"
    out.write_text("an earlier export\n")

    def rows(self):
        yield from list(RunData.points(self))[:3]
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(RunData, "rows", rows)
    rc, _, err = tm(capsys, "export", "csv", "--dir", root, "--out", str(out))
    assert rc == 1 and "No space left on device" in err
    assert out.read_text() == "an earlier export\n"
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == ["series.csv"]


def _strict(text):
    def refuse(name):
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize(("dt", "params"), [(5e-324, 2112), (1e-300, 2**62)])
def test_rates_too_large_to_be_finite_are_no_figures_and_nothing_raises(
    tmp_path, capsys, dt, params
):
    # steps 5e-324 s apart: tokens/s is 16 / 5e-324, infinite; 1e-300 s apart: tokens/s is
    # finite (1.6e301) but MFU (x 6 x 2**62 FLOPs per token) is not. Times a log may hold.
    head = [{"k": "run_start", "t": 0.0, "id": "tiny", "name": "tiny", "argv": [],
             "version": "0.1.0", "opts": {"peak_flops": 1e9}},
            {"k": "model", "t": 0.0, "rank": 0, "name": "M", "params": params,
             "embedding_params": 1024, "token_embedding_params": 1024, "width": 16,
             "vocab": 64, "seq_len": 8}]  # fmt: skip
    steps = [{"k": "step", "t": dt * i, "step": i, "rank": 0, "tokens": 16, "samples": 2}
             for i in range(1, 4)]  # fmt: skip
    folder = tmp_path / ".trainmeter" / "runs" / "tiny"
    folder.mkdir(parents=True)
    lines = [json.dumps({"v": 1, **r, "n": n}) for n, r in enumerate(head + steps, 1)]
    (folder / "run.jsonl").write_text("\n".join(lines) + "\n")
    root = str(tmp_path / ".trainmeter")
    rc, out, err = tm(capsys, "replay", "tiny", "--json", "--dir", root)
    assert rc == 0, err
    snap = _strict(out)  # no Infinity: an overflowed figure is null
    assert all(v is None for v in (snap["mfu"] or {}).values())
    rc, out, err = tm(capsys, "passport", "tiny", "--dir", root)
    assert rc == 0, err
    mfu_row = next(line for line in out.splitlines() if line.startswith("| MFU |"))
    assert "inf" not in mfu_row  # no figure, and with its reason where tokens/s was finite
    assert ("too large to be a number" in mfu_row) == (params == 2**62), mfu_row
    assert tm(capsys, "ls", "--dir", root)[0] == 0
    out_csv = tmp_path / "series.csv"
    rc, _, err = tm(capsys, "export", "csv", "tiny", "--dir", root, "--out", str(out_csv))
    assert rc == 0, err
    values = [float(r["value"]) for r in _csv_rows(out_csv)]
    assert values and all(math.isfinite(v) for v in values)
    from trainmeter.supervisor import passport_files

    passport_files.write(folder, replay(folder / "run.jsonl").snapshot())  # as at a run's end
    assert _strict((folder / "passport.json").read_text())["run"]["id"] == "tiny"


def test_mlflow_run_reads_back_with_mlflow_client(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3: opt in to a file store
    from mlflow.tracking import MlflowClient

    root = _run(tmp_path, 50)
    store = tmp_path / "mlruns"
    rc, _, err = tm(capsys, "export", "mlflow", "--dir", root, "--out", str(store))
    assert rc == 0, err
    client = MlflowClient(tracking_uri=f"file:{store}")
    (run,) = client.search_runs([client.get_experiment_by_name("trainmeter").experiment_id])
    rid = run.info.run_id
    loss = client.get_metric_history(rid, "train_loss")
    assert sorted((m.step, m.value) for m in loss) == [(i, 1.0 / i) for i in range(1, 51)]
    mfu = client.get_metric_history(rid, "mfu/hf")
    assert len(mfu) == 49 and all(m.value == pytest.approx(MFU_HF) for m in mfu)
    assert run.data.metrics["passport/flops_spent/hf"] == 50 * 1000 * 5400
    assert run.data.metrics["passport/mfu_avg/hf"] == pytest.approx(MFU_HF)
    assert run.data.params["convention"] == "hf"
    assert run.data.params["conventions"] == "hf,megatron,titan,embeddings"
    assert run.info.status == "FINISHED" and run.info.run_name == "known"
    assert run.info.start_time == 1_700_000_000_000  # the training run's start (ms)
    assert {a.path for a in client.list_artifacts(rid)} == {"passport.md", "passport.json"}


def test_a_missing_tracker_package_says_what_to_install(tmp_path, capsys, monkeypatch):
    root = _run(tmp_path, 4)
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb now raises ImportError
    rc, out, err = tm(capsys, "export", "wandb", "--dir", root)
    assert rc == 2 and out == ""
    assert err == "tm: export wandb needs the wandb package: pip install wandb\n"


def test_an_unknown_target_or_run_is_one_clear_line(tmp_path, capsys):
    rc, _, err = tm(capsys, "export", "tensorboard", "--dir", str(tmp_path))
    assert rc == 2 and "invalid choice: 'tensorboard'" in err and err.count("\n") == 1
    rc, _, err = tm(capsys, "export", "csv", "nope", "--dir", str(tmp_path))
    assert rc == 1 and err.startswith("tm: no run matching 'nope'")


def _leet(path, *flags):
    """W&B's offline reader: ``wandb leet inspect --json`` prints a run's records as JSON."""
    cmd = [sys.executable, "-m", "wandb", "leet", "inspect", "--json", *flags, str(path)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=_env())
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.slow
def test_wandb_offline_run_reads_back_with_the_wandb_offline_reader(tmp_path):
    root = _run(tmp_path, 30)
    cmd = [sys.executable, "-m", "trainmeter.cli", "export", "wandb", "--dir", root,
           "--out", str(tmp_path / "wb")]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=_env())
    assert done.returncode == 0, done.stderr
    (offline,) = (tmp_path / "wb" / "wandb").glob("offline-run-*")
    history = [json.loads(x)["history"]["item"] for x in _leet(offline).splitlines()
               if '"type":"history"' in x]  # fmt: skip
    loss = [(h["step"], h["train_loss"]) for h in history if "train_loss" in h]
    assert loss == [(i, 1.0 / i) for i in range(1, 31)]  # every step, on the step axis
    mfu = [h["mfu/titan"] for h in history if "mfu/titan" in h]
    assert len(mfu) == 29 and all(v == pytest.approx(MFU_TITAN) for v in mfu)
    util = [(h["time_s"], h["gpu0/gpu_util"]) for h in history if "gpu0/gpu_util" in h]
    assert util == [(1.0, 0.25), (30.0, 0.75)]  # GPU counters on the time axis
    summary = json.loads(_leet(offline, "--summary"))
    assert summary["config"]["convention"] == "hf"
    assert summary["config"]["conventions"] == "hf,megatron,titan,embeddings"
    assert summary["summary"]["flops_spent/hf"] == 30 * 1000 * 5400
    assert summary["summary"]["mfu_avg/titan"] == pytest.approx(MFU_TITAN)
    assert summary["summary"]["tokens"] == 30_000 and summary["state"] == "finished"
