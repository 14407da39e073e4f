"""The run passport (core/passport.py) and its files at a run's close (supervisor/live.py).

The hand-computed figures of a whole run are in tests/integration/test_passport_cli.py (through
``tm passport --json``); here: unknowns, convention names, Markdown, the flat figures, the files.
"""

import json
import re

import pytest
from conftest import Clock

from trainmeter._version import __version__
from trainmeter.core import passport, passport_md, records
from trainmeter.core.engine import Engine, replay
from trainmeter.supervisor import passport_files
from trainmeter.supervisor.live import Live

CONVENTIONS = ("hf", "megatron", "titan", "embeddings")


def _snap(**over):
    """A finished run's snapshot by hand: 2 GPUs, a declared peak, titan shown first."""
    snap = {
        "run": {"id": "r1", "name": "demo", "state": "finished", "exit_code": 0,
                "started": 1_700_000_000.0, "ended": 1_700_003_600.0, "version": "0.1.0"},
        "step": 10, "tokens": 1000, "samples": 10, "elapsed_s": 3000.0,
        "tokens_per_s_avg": 0.5, "convention": "titan",
        "model": {"name": "gpt|tiny", "params": 2_000_000, "embedding_params": 500_000,
                  "layers": 2, "width": 8, "heads": 2, "vocab": 50, "seq_len": 4},
        "flops_per_token": {"hf": 9e6, "megatron": None, "titan": 9.5e6, "embeddings": 1.2e7},
        "flops_spent": {"hf": 9e9, "megatron": None, "titan": 9.5e9, "embeddings": 1.2e10},
        "mfu_avg": {"hf": 0.1, "megatron": None, "titan": 0.2, "embeddings": 0.3},
        "peak": {"flops": 1e12, "dtype": "bf16", "device": "unknown", "source": "declared",
                 "citation": "declared by the user", "verified": False},
        "gpus": 2, "gpu_hours": 2 * 3000 / 3600, "energy_j": 7.2e6, "dtype": "bf16",
        "hardware": None, "flops_per_token_counted": None, "notes": [],
    }  # fmt: skip
    snap.update(over)
    return snap


def test_known_figures_pass_through_with_units_changed_only():
    p = passport.build(_snap(), version="9.9")
    assert p["started"] == "2023-11-14T22:13:20Z"  # 1.7e9 s after the epoch (a known date)
    assert p["ended"] == "2023-11-14T23:13:20Z"  # one hour later
    assert p["wall_s"] == 3600.0 and p["duration_s"] == 3000.0
    assert p["model"]["params_without_embeddings"] == 1_500_000  # 2,000,000 - 500,000
    assert p["energy_kwh"] == pytest.approx(2.0)  # 7.2e6 J / 3.6e6 J per kWh
    assert p["mfu"] == {"convention": "titan", "value": 0.2, "average": "run",
                        "by_convention": {"hf": 0.1, "megatron": None, "titan": 0.2,
                                          "embeddings": 0.3}}  # fmt: skip
    assert p["trainmeter_version"] == "0.1.0" and p["written_by"] == "9.9"
    # no device named anywhere (the declared peak's "unknown" is no name): null, with why
    assert p["hardware"] == {"device": None, "count": 2, "devices": [], "device_nodes": None,
                             "backend": None, "text": None, "demonstration": None}  # fmt: skip
    # the core's reason (core/reasons.py), the words every surface shows
    assert p["unknown"]["hardware.device"] == (
        "not measured: the agent and the GPU sampler named no device"
    )


def test_unknown_figures_are_null_with_a_reason_and_never_filled_in():
    note = "no MFU: no dense peak is known for cpu; declare one with --peak"  # the engine's
    snap = _snap(model=None, flops_per_token={}, flops_spent={}, mfu_avg=None, peak=None,
                 energy_j=None, gpus=0, gpu_hours=None, dtype=None, tokens_per_s_avg=None,
                 notes=[note])  # fmt: skip
    snap["run"] = {**snap["run"], "ended": None}
    p = passport.build(snap)
    for key in ("energy_j", "energy_kwh", "gpu_hours", "dtype", "ended", "tokens_per_s_avg"):
        assert p[key] is None and p["unknown"][key], key
    assert p["model"] is None and "first training step" in p["unknown"]["model"]
    assert set(p["flops_per_token"]) == set(CONVENTIONS)
    assert all(v is None for v in p["flops_per_token"].values())
    assert p["mfu"]["value"] is None
    assert p["unknown"]["mfu.value"] == (
        "no MFU: no dense peak is known (no device seen yet); declare one with --peak"
    )
    md = passport_md.markdown(p)
    # a finished cell without run_end: the run is open (a notebook between cells), so "yet"
    assert "| ended | not yet: the run is open between notebook cells (no run_end record" in md
    assert "| energy | not measured yet: it comes from the GPUs' NVML energy counter" in md
    assert "None" not in md


def test_an_attached_run_says_no_agent_was_inside_where_an_agent_figure_is_missing():
    snap = _snap(model=None, flops_per_token={}, flops_spent={}, tokens_per_s_avg=None,
                 process={"pid": 4242})  # fmt: skip
    p = passport.build(snap)
    attached = ("no agent: tm attach watched process 4242 from outside, so there are no steps, "
                "tokens, loss, FLOPs or MFU")  # fmt: skip
    for key in ("model", "flops_per_token.titan", "tokens_per_s_avg"):
        assert p["unknown"][key] == attached, key
    assert passport.WHY_NO_MODEL not in p["unknown"].values()


def test_every_flops_and_mfu_figure_names_its_convention_shown_one_first():
    md = passport_md.markdown(passport.build(_snap()))
    rows = {line.split(" | ")[0][2:]: line for line in md.splitlines() if line.startswith("| ")}
    for row in ("FLOPs spent", "FLOPs per token", "MFU"):
        named = re.findall(r"\[([a-z, ]+)\]", rows[row])  # "[hf]", "[megatron, titan]"
        assert sorted(c for group in named for c in group.split(", ")) == sorted(CONVENTIONS)
    assert rows["FLOPs spent"].split(" | ")[1].startswith("9.50 GFLOP [titan]")
    assert rows["MFU"].split(" | ")[1].startswith("20.0% [titan] · 10.0% [hf]")
    assert "no MFU [megatron] (" in rows["MFU"]


def test_a_convention_without_a_figure_names_exactly_the_fields_the_model_lacks():
    # a GPT-2-like record with every shape field but the FFN width (what describe() gave for
    # HF GPT-2 before it counted Conv1D): only megatron lacks a figure, and only ffn is named
    eng = Engine()
    model = {"params": 1000, "embedding_params": 100, "token_embedding_params": 100,
             "layers": 2, "width": 8, "heads": 2, "seq_len": 4, "vocab": 50}  # fmt: skip
    eng.apply(records.make("model", 1.0, **model))
    snap = eng.snapshot()
    assert snap["flops_per_token"]["megatron"] is None
    assert snap["flops_per_token_missing"] == {"megatron": ["ffn"]}  # the others have figures
    p = passport.build(snap)
    assert p["unknown"]["flops_per_token.megatron"] == (
        "n/a: megatron needs ffn, which the model record lacks"
    )  # the snapshot's reasons["flops_per_token/megatron"], which the dashboard shows as given
    assert snap["reasons"]["flops_per_token/megatron"] == p["unknown"]["flops_per_token.megatron"]
    assert "flops_per_token.titan" not in p["unknown"]
    assert passport.why_missing("titan", ["layers", "seq_len"]) == (
        "titan needs layers, seq_len, which the model record lacks"
    )
    # no model at all: the engine lists nothing, the passport says no model was seen
    assert Engine().snapshot()["flops_per_token_missing"] == {}


def test_markdown_keeps_a_name_from_training_code_inside_its_table_cell():
    md = passport_md.markdown(passport.build(_snap()))
    assert "gpt\\|tiny" in md  # the pipe is escaped: the table keeps two columns
    rows = [line for line in md.splitlines() if line.startswith("|")]
    assert all(row.count("|") - row.count("\\|") == 3 for row in rows)  # two cells a row


def test_flat_figures_carry_their_convention_and_leave_unknowns_out():
    config, summary = passport.flat(passport.build(_snap()))
    assert config["convention"] == "titan"
    assert config["conventions"] == "hf,megatron,titan,embeddings"
    assert summary["flops_spent/hf"] == 9e9 and summary["mfu_avg/embeddings"] == 0.3
    assert summary["flops_per_token/titan"] == 9.5e6
    assert "flops_spent/megatron" not in summary and "mfu_avg/megatron" not in summary
    named = [k for k in summary if k.startswith(("mfu", "flops_spent", "flops_per_token/"))]
    assert len(named) == 9 and all(k.split("/")[1] in CONVENTIONS for k in named)  # 3 x 3 known


# -- files at the run's close ----------------------------------------------------------------
def _closed_run(tmp_path, monkeypatch=None, fail=None):
    if fail is not None:
        monkeypatch.setattr(passport_files, "write", fail)
    clock = Clock()
    live = Live(root=tmp_path, clock=clock)
    live.open_run("demo", ["train.py"], {"peak_flops": 1e12})
    model = {"params": 1000, "embedding_params": 100, "token_embedding_params": 100}
    recs = [records.make("model", clock.t, **model)]
    for step in (1, 2, 3):
        clock.tick(1.0)
        recs.append(records.make("step", clock.t, step=step, rank=0, tokens=10))
    live.ingest(recs)
    clock.tick(1.0)
    live.close_run("ok", 0)
    return live.log_path.parent


def test_closing_a_run_writes_the_passport_that_replay_of_its_log_gives(tmp_path):
    folder = _closed_run(tmp_path)
    written = json.loads((folder / "passport.json").read_text())
    with open(folder / "run.jsonl", "rb") as f:
        assert written == passport.build(replay(f).snapshot(), version=__version__)
    assert written["tokens"] == 30 and written["flops_spent"]["hf"] == 30 * 5400  # 6 x 900
    assert (folder / "passport.md").read_text() == passport_md.markdown(written)


def test_a_passport_that_cannot_be_written_is_noted_and_the_log_still_closes(
    tmp_path, monkeypatch, capsys
):
    def refuse(folder, snap):
        raise OSError(28, "No space left on device")

    folder = _closed_run(tmp_path, monkeypatch, refuse)
    assert not (folder / "passport.json").exists()
    lines = [json.loads(x) for x in (folder / "run.jsonl").read_text().splitlines()]
    lines = [r for r in lines if r["k"] != "checkpoint"]
    assert [r["k"] for r in lines[-2:]] == ["run_end", "note"]
    assert "passport not written: OSError" in lines[-1]["text"]
    assert "passport not written" in capsys.readouterr().err
    rebuilt, was_rebuilt = passport_files.load(folder)  # tm passport still has one to show
    assert was_rebuilt and rebuilt["tokens"] == 30


def test_a_one_rank_run_has_no_ranks_section():
    p = passport.build(_snap(ranks={"0": 10}))
    assert p["ranks"] is None
    assert "## Ranks" not in passport_md.markdown(p)


def test_the_ranks_section_carries_each_ranks_own_figures_and_the_stragglers_cost_in_words():
    """The snapshot's per-rank keys (docs/spec.md "Stragglers") pass through unchanged; the
    Markdown says who holds the job up, by how much and why (38.1 ms = 0.0381 s x 1000)."""
    split = {"compute": 60.0, "data": 25.5, "checkpoint": 0.0, "eval": 0.0, "wait": 0.0,
             "startup": 12.0, "other": 2.0}  # fmt: skip
    cause = "rank 1: data loader (+38.1 ms/step data wait over the median rank)"
    snap = _snap(ranks={"0": 10, "1": 10}, rank_step_time_s={"0": 0.3, "1": 0.3},
                 rank_lag_s={"0": 0.0, "1": 0.0381}, straggler_cost_s={"0": 0.0, "1": 0.0381},
                 straggler_share={"0": 0.0, "1": 0.127}, rank_time_split={"0": None, "1": split},
                 stragglers=[1], straggler_rule={"1": "lag"},
                 straggler_cause={"1": cause})  # fmt: skip
    p = passport.build(snap)
    one = p["ranks"]["by_rank"]["1"]
    assert p["ranks"]["count"] == 2 and p["ranks"]["stragglers"] == [1]
    assert (one["steps"], one["lag_s"], one["job_wait_s"], one["job_wait_share"]) == (
        10, 0.0381, 0.0381, 0.127)  # fmt: skip
    assert one["time_split"] == split and one["cause"] == cause and one["rule"] == "lag"
    assert (
        p["ranks"]["by_rank"]["0"]["time_split"] is None
        and p["ranks"]["by_rank"]["0"]["rule"] is None
    )
    md = passport_md.markdown(p)
    assert ("- rank 1 (flagged by arrival lag): the job waits 38.1 ms per step on it (12.7% of "
            f"step time); cause: {cause}") in md  # fmt: skip
    assert (
        "| 1 | 10 | 300 ms | 38.1 ms | 38.1 ms | 1 min 00 s | 25.5 s | 0 ms | 0 ms | 0 ms | 12.0 s "
        "| 2.0 s |" in md
    )
    assert "| 0 | 10 | 300 ms | 0 ms | 0 ms | – | – | – | – | – | – |" in md
    _, summary = passport.flat(p)
    assert summary["stragglers"] == 1 and summary["straggler_job_wait_s/rank1"] == 0.0381


def test_no_straggler_and_not_evaluated_are_told_apart():
    both = {"ranks": {"0": 3, "1": 3}}
    assert "Stragglers: none." in passport_md.markdown(passport.build(_snap(**both, stragglers=[])))
    md = passport_md.markdown(passport.build(_snap(**both, stragglers=None)))
    assert "Stragglers: not evaluated" in md


def _image_run():
    """A CNN fed 16 images a step (no token ids) at 100, 100.5, 101, 102 s, a declared peak of
    1 TFLOP/s; step 3 counted: 43,450,368 FLOP over its 16 images (tests/unit/test_engine.py
    ``_images``). By hand: 64 samples, 16 a step; steps 2-4 timed, 48 images over 2 s = 24/s;
    2,715,648 FLOP/sample; HFU [counted] 24 x 2,715,648 / 1e12 = 6.5175552e-5."""
    eng = Engine()
    start = {"id": "r", "name": "cnn", "argv": [], "version": "0", "opts": {"peak_flops": 1e12}}
    model = {"params": 11642, "embedding_params": 0, "token_embedding_params": 0,
             "device": "cpu", "name": "Net"}  # fmt: skip
    counted = {"step": 3, "rank": 0, "flops": 43_450_368, "tokens": None, "samples": 16,
               "attention": "none counted"}  # fmt: skip
    recs = [("run_start", 99.0, start),
            ("agent_hello", 99.1, {"pid": 1, "rank": 0, "world_size": 1}),
            ("model", 99.2, model)]  # fmt: skip
    for i, t in enumerate((100.0, 100.5, 101.0, 102.0), 1):
        recs.append(("step", t, {"step": i, "rank": 0, "tokens": None, "samples": 16}))
    recs += [("flops_counted", 101.0, counted), ("run_end", 103.0, {"status": "ok"})]
    for kind, t, fields in recs:
        eng.apply(records.make(kind, t, **fields))
    return eng.snapshot()


def test_a_run_without_tokens_has_samples_flops_per_sample_and_hfu_counted_not_zeros():
    p = passport.build(_image_run())
    assert (p["samples"], p["samples_per_step"], p["tokens"]) == (64, 16, 0)
    assert p["samples_per_s_avg"] == pytest.approx(24.0)
    assert p["tokens_per_s_avg"] is None and "not token ids" in p["unknown"]["tokens_per_s_avg"]
    assert p["flops_per_sample_counted"] == 2_715_648.0
    assert p["hfu_counted"] == {"label": "HFU [counted]", "value": pytest.approx(6.5175552e-5),
                                "average": "run", "per": "sample"}  # fmt: skip
    assert p["mfu"]["value"] is None
    assert "no named convention describes this model" in p["unknown"]["mfu.value"]
    assert all(v is None for v in p["flops_spent"].values())  # none, never 0 FLOP [hf]
    rows = {line.split(" | ")[0][2:]: line.split(" | ")[1].removesuffix(" |")
            for line in passport_md.markdown(p).splitlines() if line.startswith("| ")}  # fmt: skip
    assert rows["samples"] == "64 (16 per step)"
    why = "the model's inputs are not token ids (an image or feature batch), so no tokens, "
    assert rows["tokens"] == f"none ({why}tokens/s or FLOPs per token apply)"
    assert rows["throughput"].startswith("24.0 samples/s (mean over the timed steps")
    assert "not token ids" in rows["throughput"].split(" · tokens/s ")[1]
    assert rows["FLOPs per sample, counted"].startswith("2.72 MFLOP/sample (executed")
    assert rows["HFU"].startswith("0.0065% [counted] (executed FLOPs per sample")
    config, summary = passport.flat(p)
    assert config["hfu_counted_per"] == "sample"
    assert summary["hfu_counted_avg"] == pytest.approx(6.5175552e-5)
    assert summary["samples_per_s_avg"] == pytest.approx(24.0)
    assert summary["flops_per_sample_counted"] == 2_715_648.0 and summary["samples_per_step"] == 16
    assert not [k for k in summary if k.startswith(("mfu_avg/", "flops_spent/"))]  # unknown
