"""``tm passport``: a known run's figures against a hand computation, old and crashed runs, and
the passport a real ``tm`` run leaves in its folder."""

import json

import pytest
from conftest import FIXTURES, run_tm

from trainmeter import cli
from trainmeter.core import records
from trainmeter.supervisor import passport_files

T0 = 1_700_000_000.0  # 2023-11-14T22:13:20Z
RUN_ID = "20231114-221320-abcd"
MODEL = {  # 6 x (params - embedding params) = 6 x 900 = 5400 FLOP/token under hf
    "params": 1000, "embedding_params": 100, "token_embedding_params": 100, "layers": 2,
    "width": 8, "heads": 2, "seq_len": 4, "vocab": 50, "name": "toy", "device": "cuda",
    "gpus": 2, "device_name": "NVIDIA H100 80GB HBM3", "run_dtype": "bf16",
}  # fmt: skip
H100 = {"name": "NVIDIA H100 80GB HBM3"}


def _gpu(dt, mj0, mj1, util):
    """A sampler reading of both GPUs: energy counters (mJ), GPU-Util (a fraction)."""
    gpus = [{"index": i, "time_s": T0 + dt, "energy_mj": mj, "gpu_util": util}
            for i, mj in enumerate((mj0, mj1))]  # fmt: skip
    return ("gpu", dt, {"gpus": gpus, "host": None})


def known_run(steps=(1.0, 2.0, 4.0, 5.0), end=6.0, tokens=1000, samples=8):
    """(kind, seconds after T0, fields) of a run with hand-known figures: a declared peak of
    1 GFLOP/s per device, 2 GPUs, ``tokens`` and ``samples`` per step at the given times, one
    loss per step."""
    recs = [
        ("run_start", 0.0, {"id": RUN_ID, "name": "known", "argv": ["train.py"],
                            "version": "0.1.0", "opts": {"peak_flops": 1e9, "convention": "hf"}}),
        ("agent_hello", 0.1, {"pid": 11, "rank": 0, "world_size": 1}),
        ("model", 0.2, MODEL),
        ("gpu_devices", 0.3, {"backend": "nvml", "reason": None,
                              "devices": [{"index": 0, **H100}, {"index": 1, **H100}]}),
        _gpu(steps[0], 1000, 1000, 0.25),
    ]  # fmt: skip
    for i, t in enumerate(steps, 1):
        recs.append(("step", t, {"step": i, "rank": 0, "tokens": tokens, "samples": samples}))
        recs.append(("series", t, {"name": "train_loss", "value": 1.0 / i, "step": i}))
    recs.append(_gpu(steps[-1], 5000, 3000, 0.75))
    if end is not None:
        recs.append(("run_end", end, {"status": "ok", "exit_code": 0}))
    return recs


def write_run(root, recs, run_id=RUN_ID):
    """Write ``recs`` as the run log of ``root/.trainmeter/runs/<run_id>``; returns the folder."""
    folder = root / ".trainmeter" / "runs" / run_id
    folder.mkdir(parents=True)
    with open(folder / "run.jsonl", "wb") as f:
        for kind, dt, fields in recs:
            f.write(records.encode(records.make(kind, T0 + dt, **fields)))
    return folder


def tm(capsys, *argv):
    """``tm ARGV`` in this process: (exit status, stdout, stderr); argparse's usage errors
    exit through SystemExit, as they do from the shell."""
    try:
        rc = cli.main(list(argv))
    except SystemExit as exc:
        rc = exc.code
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_passport_json_figures_match_a_hand_computation(tmp_path, capsys):
    write_run(tmp_path, known_run())
    rc, out, err = tm(capsys, "passport", "--json", "--dir", str(tmp_path / ".trainmeter"))
    assert rc == 0 and "rebuilt from its log" in err  # no passport.json: rebuilt from the log
    p = json.loads(out)
    assert p["run"] == {"id": RUN_ID, "name": "known", "state": "finished", "exit_code": 0}
    assert (p["started"], p["ended"]) == ("2023-11-14T22:13:20Z", "2023-11-14T22:13:26Z")
    assert p["duration_s"] == 6.0  # run_start at T0 to run_end at T0 + 6 s, one segment
    assert p["model"]["params"] == 1000 and p["model"]["params_without_embeddings"] == 900
    assert p["steps"] == 4 and p["tokens"] == 4000  # 4 steps x 1000 tokens x world size 1
    # FLOPs/token: hf 6 x 900 = 5400; titan 6 x 900 + 12 x 2 layers x 2 heads x 4 (head dim
    # 8 / 2) x 4 (seq) = 5400 + 768 = 6168; embeddings 6 x 1000 + 768 = 6768; megatron needs
    # the FFN size, which the model record lacks: null, with the reason
    fpt = {"hf": 5400.0, "megatron": None, "titan": 6168.0, "embeddings": 6768.0}
    assert p["flops_per_token"] == fpt
    assert "megatron" in p["unknown"]["flops_per_token.megatron"]
    # FLOPs spent = flops_per_token x tokens (4000), by convention
    assert p["flops_spent"] == {"hf": 21_600_000.0, "megatron": None, "titan": 24_672_000.0,
                                "embeddings": 27_072_000.0}  # fmt: skip
    # throughput: step 1 is untimed; steps 2-4 bring 3000 tokens over 5 - 1 = 4 s = 750/s
    assert p["tokens_per_s_avg"] == pytest.approx(750.0)
    assert p["gpus"] == 2  # 2 devices per process (the model record) x world size 1
    # MFU = 750 tokens/s x FLOP/token / (2 GPUs x 1e9 FLOP/s declared)
    mfu = p["mfu"]
    assert mfu["convention"] == "hf" and mfu["value"] == pytest.approx(750 * 5400 / 2e9)
    assert mfu["by_convention"]["titan"] == pytest.approx(750 * 6168 / 2e9)  # 0.002313
    assert mfu["by_convention"]["embeddings"] == pytest.approx(750 * 6768 / 2e9)  # 0.002538
    assert mfu["by_convention"]["megatron"] is None
    assert p["gpu_hours"] == pytest.approx(2 * 6 / 3600)  # 2 GPUs x 6 s
    # energy: GPU 0 went 1000 -> 5000 mJ (4 J), GPU 1 1000 -> 3000 mJ (2 J)
    assert p["energy_j"] == pytest.approx(6.0) and p["energy_kwh"] == pytest.approx(6 / 3.6e6)
    assert p["hardware"] == {"device": "NVIDIA H100 80GB HBM3", "count": 2,
                             "devices": [H100["name"]] * 2, "device_nodes": None,
                             "backend": "nvml", "text": "2 × NVIDIA H100 80GB HBM3",
                             "demonstration": None}  # fmt: skip
    assert p["dtype"] == "bf16" and p["peak"]["source"] == "declared"
    assert p["trainmeter_version"] == "0.1.0"


def test_passport_markdown_names_the_convention_of_every_flops_and_mfu_figure(tmp_path, capsys):
    write_run(tmp_path, known_run())
    rc, out, _ = tm(capsys, "passport", RUN_ID[:12], "--dir", str(tmp_path / ".trainmeter"))
    assert rc == 0 and out.startswith("# Run passport: known\n")
    rows = dict(line[2:-2].split(" | ", 1) for line in out.splitlines()[4:] if line[:2] == "| ")
    assert rows["FLOPs spent"].startswith("21.6 MFLOP [hf] · 24.7 MFLOP [titan] · 27.1 MFLOP "
                                          "[embeddings] · n/a [megatron] (megatron needs ffn, "
                                          "which the model record lacks)")  # fmt: skip
    assert rows["MFU"].startswith("0.20% [hf] · 0.23% [titan] · 0.25% [embeddings]")
    assert rows["energy"].startswith("0.00167 Wh (6.00 J")  # 6 J / 3600 J per Wh
    assert rows["hardware"] == "2 × NVIDIA H100 80GB HBM3 · counters: nvml"


def test_a_written_passport_is_read_back_as_it_is(tmp_path, capsys):
    folder = write_run(tmp_path, known_run())
    tm(capsys, "passport", "--json", "--dir", str(tmp_path / ".trainmeter"))
    _, out, _ = tm(capsys, "passport", "--json", "--dir", str(tmp_path / ".trainmeter"))
    p = json.loads(out)
    p["tokens"] = 123  # a figure only the file has: proves it is read, not rebuilt
    (folder / "passport.json").write_text(json.dumps(p))
    rc, out, err = tm(capsys, "passport", "--json", "--dir", str(tmp_path / ".trainmeter"))
    assert rc == 0 and err == "" and json.loads(out)["tokens"] == 123


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda p: p.pop("wording"), "lacks wording"),  # closed before the reasons' revision
        (lambda p: p.update(wording=0), "written in other words for missing figures"),
        (lambda p: p.update(written_by="0.0.1"), "written by trainmeter 0.0.1, not 0.1.0"),
        (lambda p: p.pop("unknown"), "lacks unknown"),
    ],
)
def test_a_passport_another_version_or_older_words_wrote_is_rebuilt_and_says_so(
    tmp_path, capsys, change, said
):
    """A run closed before a change of words shows the words the page shows (the page replays
    the log): the stored passport is rebuilt, and stderr says which it shows and why."""
    folder = write_run(tmp_path, known_run(steps=(1.0,)))  # one step: no timed step
    _, out, _ = tm(capsys, "passport", "--json", "--dir", str(tmp_path / ".trainmeter"))
    p = json.loads(out)
    p["unknown"]["tokens_per_s_avg"] = "not measured yet: old words"  # what an older one said
    change(p)
    (folder / "passport.json").write_text(json.dumps(p))
    rc, out, err = tm(capsys, "passport", "--dir", str(tmp_path / ".trainmeter"))
    assert rc == 0 and said in err and "rebuilt from its log" in err, err
    assert "old words" not in out and " yet" not in out  # the run has ended: this version's words
    assert "| throughput | not measured: the run had no two steps in one segment" in out


def test_a_stale_passport_whose_log_cannot_be_read_is_shown_as_written_and_says_so(
    tmp_path, capsys
):
    folder = write_run(tmp_path, known_run())
    _, out, _ = tm(capsys, "passport", "--json", "--dir", str(tmp_path / ".trainmeter"))
    p = json.loads(out)
    p["written_by"] = "0.0.1"
    (folder / "passport.json").write_text(json.dumps(p))
    (folder / "run.jsonl").unlink()  # (tm passport finds a run by its log: read the folder)
    shown, said = passport_files.load(folder)
    assert shown == p  # the stored one, as written
    assert "written by trainmeter 0.0.1" in said and "shown as written" in said, said


def test_a_crashed_run_gets_a_passport_with_no_end_and_says_why(tmp_path, capsys):
    write_run(tmp_path, known_run(end=None))
    rc, out, _ = tm(capsys, "passport", "--dir", str(tmp_path / ".trainmeter"))
    assert rc == 0
    # the snapshot's reason (core/reasons.py), as the page says it
    assert (
        "| ended | unknown: no run_end record (the supervisor stopped without closing the log) |"
    ) in out
    assert "| tokens | 4,000 |" in out  # what the log has is still there


def test_no_run_exits_1_with_one_line(tmp_path, capsys):
    rc, out, err = tm(capsys, "passport", "--dir", str(tmp_path / ".trainmeter"))
    assert rc == 1 and out == "" and err.startswith("tm: no runs under") and err.count("\n") == 1


@pytest.mark.slow
def test_a_tm_run_leaves_its_passport_beside_its_log(workdir):
    out = run_tm(["-q", "--no-web", FIXTURES / "tiny_train.py", "--steps", "6"], workdir)
    assert out.returncode == 0, out.stderr
    (folder,) = (workdir / ".trainmeter" / "runs").iterdir()
    written = json.loads((folder / "passport.json").read_text())
    assert (folder / "passport.md").read_text().startswith("# Run passport: tiny_train\n")
    # tiny_train: Embedding(50, 16) = 800, Linear(16, 16) = 272, Linear(16, 50) = 850
    assert written["model"]["params"] == 1922
    assert written["model"]["params_without_embeddings"] == 1122  # 1922 - 800
    assert written["tokens"] == 6 * 4 * 8  # 6 steps x batch 4 x sequence 8
    assert written["flops_spent"]["hf"] == 6 * 1122 * 192  # 6 x non-embedding params x tokens
    assert written["run"]["state"] == "finished" and written["ended"] is not None
    printed = run_tm(["passport", "--json"], workdir)
    assert printed.returncode == 0 and json.loads(printed.stdout) == written
