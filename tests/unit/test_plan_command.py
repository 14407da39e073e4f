"""``tm plan`` (trainmeter/commands/plan.py through trainmeter/cli.py): what it prints, its JSON,
its one-line errors, and that it writes nothing. Figures are the hand-derived ones of
tests/unit/test_plan.py."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainmeter.cli import main
from trainmeter.core import flops, plan, presets

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "hf"
LLAMA = ["llama3-8b", "--tokens", "20B", "--gpu", "h100-sxm", "--gpus", "8"]
DOCUMENTED_FIELDS = [
    "model", "params", "params_without_embeddings", "embedding_params", "tokens", "convention",
    "flops_per_token", "training_flops", "gpu", "dtype", "peak_flops", "peak_source", "gpus",
    "mfu", "mfu_source", "tokens_per_s", "wall_s", "gpu_hours", "board_power_w", "energy_kwh",
    "price_per_gpu_hour", "cost",
]  # fmt: skip


def _tm(capsys, *argv):
    rc = main(["plan", *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def _exit(capsys, *argv):
    """A parser error: SystemExit(2) with one line on stderr."""
    with pytest.raises(SystemExit) as info:
        main(["plan", *argv])
    out = capsys.readouterr()
    return info.value.code, out.out, out.err


def _json(capsys, *argv):
    rc, out, err = _tm(capsys, *argv, "--json")
    assert rc == 0, err
    return json.loads(out)


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("tm plan: ")
    return lines[0]


# --- what it prints --------------------------------------------------------------------------


def test_text_report_names_every_convention_with_the_default_first(capsys):
    rc, out, err = _tm(capsys, *LLAMA)
    assert rc == 0 and err == ""
    assert "8,030,261,248 total" in out and "7,504,924,672 without embeddings" in out
    assert "20,000,000,000 tokens" in out
    assert "8 x H100 SXM" in out and "989.5 TFLOP/s" in out and "700 W" in out
    assert "0.40 assumed (default" in out
    table = out.split("\n\n")[1].splitlines()
    assert table[0].split()[:3] == ["convention", "FLOP/token", "training"]
    assert [row.split()[0] for row in table[1:]] == ["titan", "hf", "megatron", "embeddings"]
    assert "(default)" in table[1]
    # titan: 57.91 GFLOP/token, 1.158e21 FLOP, 54.67 k tokens/s, 365,806 s = 4 d 06 h,
    # 813 GPU-hours, 569 kWh (tests/unit/test_plan.py)
    assert table[1].split()[2:] == ["57.91", "G", "1.158e21", "54.67", "k", "4", "d", "06", "h",
                                    "813", "569"]  # fmt: skip
    assert "cost" not in out  # no --price, no cost


def test_a_price_adds_the_cost_column(capsys):
    rc, out, _ = _tm(capsys, *LLAMA, "--price", "2.49")
    assert rc == 0
    table = out.split("\n\n")[1].splitlines()
    assert table[0].split()[-2:] == ["cost", "$"]
    assert table[1].split()[-1] == "2,024.13"  # 812.903 GPU-hours x 2.49
    assert "$2.49 per GPU-hour" in out


def test_json_has_the_documented_fields_and_plan_runs_numbers(capsys):
    data = _json(capsys, *LLAMA, "--price", "2.49", "--mfu", "0.5")
    assert list(data) == DOCUMENTED_FIELDS  # docs/spec.md "Planning a run": the --json table
    model = data["model"]
    assert (model["name"], model["source"], model["overrides"]) == ("llama3-8b", "preset", [])
    assert (model["layers"], model["kv_heads"], model["head_dim"], model["gated_mlp"]) == (
        32, 8, 128, True)  # fmt: skip
    expected = plan.plan_run(presets.preset("llama3-8b").arch.shape(), 20 * 10**9, "h100-sxm",
                             8, mfu=0.5, price=2.49).as_dict()  # fmt: skip
    assert {k: v for k, v in data.items() if k != "model"} == expected
    assert data["convention"] == flops.DEFAULT_CONVENTION
    assert data["flops_per_token"]["titan"] == 57_914_449_920
    assert data["mfu_source"] == "declared" and data["price_per_gpu_hour"] == 2.49


def test_a_real_config_json_plans_as_its_preset(capsys):
    for folder, name in (("Meta-Llama-3-8B", "llama3-8b"), ("gpt2", "gpt2-124m")):
        by_file = _json(capsys, str(DATA / folder / "config.json"), "--tokens", "1B",
                        "--gpu", "a100-80gb")  # fmt: skip
        by_name = _json(capsys, name, "--tokens", "1B", "--gpu", "a100-80gb")
        assert by_file["model"]["source"] == "config"
        strip = ("name", "source", "title")
        assert {k: v for k, v in by_file["model"].items() if k not in strip} == {
            k: v for k, v in by_name["model"].items() if k not in strip
        }
        assert {k: v for k, v in by_file.items() if k != "model"} == {
            k: v for k, v in by_name.items() if k != "model"
        }


def test_explicit_shape_flags_give_the_reference_model(capsys):
    data = _json(capsys, "--layers", "18", "--width", "2048", "--heads", "16", "--vocab",
                 "32000", "--context", "1024", "--tokens", "20B", "--gpu", "h100-sxm")  # fmt: skip
    assert data["model"]["source"] == "flags" and data["model"]["ffn"] == 4 * 2048
    assert data["params"] == 1_037_117_440
    assert data["flops_per_token"] == flops.all_conventions(flops.reference_model())


def test_context_replaces_the_sequence_length(capsys):
    # titan attention term scales with T: 12 x 32 x 32 x 128 x 4096 = 6,442,450,944;
    # 45,029,548,032 + 6,442,450,944 = 51,471,998,976
    data = _json(capsys, "llama3-8b", "--context", "4096", "--tokens", "1B", "--gpu", "h200")
    assert data["model"]["context"] == 4096 and data["model"]["overrides"] == ["context"]
    assert data["flops_per_token"]["titan"] == 51_471_998_976
    assert data["params"] == 8_030_261_248  # rotary: no table grows with the context


def test_a_declared_peak_plans_an_unknown_gpu_without_energy(capsys):
    data = _json(capsys, "gpt2", "--tokens", "1B", "--gpu", "gaudi3", "--peak", "1835T")
    assert (data["gpu"], data["peak_flops"], data["peak_source"]) == ("gaudi3", 1835e12,
                                                                       "declared")  # fmt: skip
    assert data["board_power_w"] is None and set(data["energy_kwh"].values()) == {None}


def test_plan_is_a_subcommand_and_has_help(capsys):
    code, out, _ = _exit(capsys, "--help")
    assert code == 0 and "--tokens" in out and "--price" in out and "llama3-8b" in out


# --- errors: one line, non-zero --------------------------------------------------------------


def test_a_config_missing_a_field_names_it(capsys, tmp_path):
    config = json.loads((DATA / "Meta-Llama-3-8B" / "config.json").read_text())
    del config["num_key_value_heads"]  # optional: kv heads = heads
    del config["intermediate_size"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    rc, out, err = _tm(capsys, str(tmp_path), "--tokens", "1B", "--gpu", "h100-sxm")
    assert rc == 2 and out == ""
    assert "missing field intermediate_size" in _one_line(err)


def test_an_unknown_gpu_says_to_pass_peak(capsys):
    rc, _, err = _tm(capsys, "gpt2", "--tokens", "1B", "--gpu", "h100")
    line = _one_line(err)
    assert rc == 2 and "unknown GPU 'h100'" in line and "--peak" in line
    assert "h100-sxm" in line  # the variants it may mean


@pytest.mark.parametrize("tokens", [["--tokens", "0"], ["--tokens", "-5B"], ["--tokens=-1"]])
def test_a_zero_or_negative_token_budget_says_so(capsys, tokens):
    code, _, err = _exit(capsys, "gpt2", *tokens, "--gpu", "h100-sxm")
    assert code == 2 and "token budget must be > 0" in _one_line(err)


def test_a_flag_typo_suggests_the_closest_flag(capsys):
    code, _, err = _exit(capsys, "gpt2", "--tokenz", "1B", "--gpu", "h100-sxm")
    assert code == 2 and "(did you mean --tokens?)" in _one_line(err)
    code, _, err = _exit(capsys, "gpt2", "--tokens", "1B", "--gpu", "h100-sxm", "--gpuss", "8")
    assert code == 2 and "(did you mean --gpus?)" in _one_line(err)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--tokens", "1B", "--gpu", "h100-sxm"], "no model"),
        (["llama3", "--tokens", "1B", "--gpu", "h100-sxm"], "did you mean llama3-8b?"),
        (["gpt2", "--gpu", "h100-sxm"], "no token budget"),
        (["gpt2", "--tokens", "1B"], "no GPU"),
        (["gpt2", "--tokens", "1B", "--gpu", "a100-80gb", "--dtype", "fp8"], "no dense fp8"),
        (["gpt2", "--tokens", "1B", "--gpu", "h100-sxm", "--context", "2048"], "position table"),
        (["--layers", "2", "--width", "64", "--tokens", "1B", "--gpu", "t4"], "missing --heads"),
    ],
)
def test_other_mistakes_are_one_plain_line(capsys, argv, message):
    rc, out, err = _tm(capsys, *argv)
    assert rc == 2 and out == "" and message in _one_line(err)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--mfu", "40"], "did you mean 0.4"),
        (["--gpus", "0"], "GPU count"),
        (["--price", "-2"], "price per GPU-hour"),
        (["--peak", "312"], "did you mean 312T"),
        (["--dtype", "int8"], "unknown dtype"),
        (["--context", "8k"], "whole number"),
    ],
)
def test_bad_values_are_named(capsys, argv, message):
    code, _, err = _exit(capsys, "gpt2", "--tokens", "1B", "--gpu", "h100-sxm", *argv)
    assert code == 2 and message in _one_line(err)


def test_forty_percent_is_read_as_a_fraction(capsys):
    assert _json(capsys, "gpt2", "--tokens", "1B", "--gpu", "t4", "--dtype", "fp16",
                 "--mfu", "40%")["mfu"] == 0.40  # fmt: skip


# --- the price is never written --------------------------------------------------------------


def _tree(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def test_a_plan_with_a_price_creates_no_file(tmp_path):
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(ROOT), env.get("PYTHONPATH")] if p)
    env["HOME"], env["TMPDIR"] = str(home), str(tmp_path / "tmp")
    for var, sub in (("CONFIG", ".config"), ("CACHE", ".cache"), ("DATA", ".local"),
                     ("STATE", ".state")):  # fmt: skip
        env[f"XDG_{var}_HOME"] = str(home / sub)
    (tmp_path / "tmp").mkdir()
    before = _tree(tmp_path)
    cmd = [sys.executable, "-m", "trainmeter.cli", "plan", *LLAMA, "--price", "2.49"]
    for extra in ([], ["--json"]):
        done = subprocess.run([*cmd, *extra], cwd=work, env=env, capture_output=True, text=True,
                              timeout=60)  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert "2,024.13" in done.stdout or "2024.128" in done.stdout  # the cost was shown...
    assert (
        _tree(tmp_path) == before
    )  # ...and nothing was written: not here, not in HOME, not in TMP


def test_an_abbreviated_flag_is_a_typo_named_like_every_other_commands(capsys):
    """``tm plan`` shares the commands' parser (commands/args.py): ``--tok`` is not taken for
    ``--tokens`` (it was: plan had a parser of its own that guessed)."""
    code, out, err = _exit(capsys, "gpt2", "--tok", "1e9", "--gpu", "h100-sxm")
    assert code == 2 and out == ""
    assert err == "tm plan: unrecognized arguments: --tok 1e9 (did you mean --tokens?)\n"
