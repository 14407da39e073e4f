"""The zoo: short training programs written the way popular public code writes its loops, each
run plain and under ``tm``, checking that trainmeter never crashes or changes them and that
every figure it shows is the program's own hand count, or absent with a true reason.

A program is ``tests/zoo/<pattern>.py`` (not ``test_*.py``, not ``_*.py``: those are this
harness and the programs' shared helpers); the pattern id is the file's stem. Seeded, CPU only,
a few seconds each. Its LAST stdout line is ``ZOO {json}``: the figures it counted itself,
independently of trainmeter (keys in ``FIGURES`` below, all optional; ``losses`` needs
``loss_series``). Its module docstring may carry, one per line:

    tm-args: --device "H100 SXM" --dtype bf16   extra flags for tm
    launch: torchrun --nproc_per_node=2         run as ``LAUNCHER ARGS prog.py``, plain and
                                                under ``tm -- LAUNCHER ARGS prog.py``
    timeout: 240                                seconds per run (default 180)

For each program, the plain run and the ``tm -q --no-web`` run go side by side (two processes
at a time: CI has two cores), then:

1. the exit codes are the same and stdout is byte-identical;
2. no stderr line of the tm run mentions ``[trainmeter]`` or a warning (``Warning``) unless
   the plain run's stderr has the same line (numbers and the working folder masked);
3. the run log replays (``trainmeter.core.engine.replay``) and each ZOO figure matches it;
4. the pattern's entry in ``EXPECT`` holds (what is not on stdout): ``step_clock`` (snapshot
   ``step_clock``), ``peak`` (True: a peak is known; False: none), ``span_<kind>`` (True:
   ``time_split[kind] > 0``, e.g. ``span_eval``, ``span_checkpoint``), ``notes_include`` /
   ``notes_exclude`` (substrings of the snapshot's notes), ``absent`` ({figure: reason}: the
   figure is null or missing and a note holds the reason; a figure is a ``FIGURES`` name or a
   snapshot key, dotted for a nested one: ``model.ffn``).

Every problem found is listed in one failure message: pattern, figure, expected and got.
``EXPECT`` is a plain dict literal, one entry per pattern, sorted by name (so two people can
add entries without a conflict; a fast test checks the order and the names).
"""

import ast
import difflib
import json
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import _env, once_more_after_gloo_exit_abort

from trainmeter.core.engine import replay
from trainmeter.supervisor.store import run_folders

ZOO_DIR = Path(__file__).resolve().parent
PROGRAMS = sorted(p for p in ZOO_DIR.glob("*.py") if not p.name.startswith(("_", "test_")))
DEFAULT_TIMEOUT = 180  # seconds per run
# one intra-op thread per run: the two runs of a program go side by side on CI's two cores
# (oversubscribed OpenMP threads made a tiny program 2x slower here); the same for both runs
ENV = {"OMP_NUM_THREADS": "1"}

EXPECT = {
    "accelerate_accum": {"step_clock": "optimizer"},
    "bn_eval_first": {
        "notes_include": ["tokens: none: the model's inputs are not token ids"],
        "span_eval": False,
    },
    "checkpoint_every_n": {"span_checkpoint": True},
    "device_alias": {"peak": True},
    "eval_mode_training": {"span_eval": False},
    "frozen_teacher": {"span_eval": False},
    "fsdp2_gloo": {"notes_exclude": ["no attention was counted"]},
    "gan_two_optimizers": {
        "notes_include": ["train loss from backward(): not recorded: 2 optimizers step apart"],
        "step_clock": "optimizer",
    },
    "hf_gpt2_plain_loop": {
        "notes_exclude": ["no attention was counted"],
        "step_clock": "optimizer",
    },
    "hf_trainer_eval": {"notes_exclude": ["no attention was counted"], "span_eval": True},
    "hf_trainer_padding_accum": {
        "notes_exclude": ["no attention was counted"],
        "step_clock": "optimizer",
    },
    "inference_mode_eval": {"span_eval": True},
    "iterable_dataset_workers": {"span_data": True},
    "lbfgs_closure": {"step_clock": "optimizer"},
    "lightning_fit_val": {"span_eval": True, "step_clock": "optimizer"},
    "lightning_no_logger": {"span_eval": True, "step_clock": "optimizer"},
    "manual_sgd": {"step_clock": "backward", "absent": {"counted_flops": "no counted FLOPs"}},
    "optimizer_in_backward": {"step_clock": "optimizer"},
    "print_only_loss": {"span_eval": True},
    "scaler_clip": {"step_clock": "optimizer"},
    "schedulers": {"span_eval": True},
    "sdpa_gpt": {"peak": False, "absent": {"mfu": "no MFU: no dense peak is known for cpu"}},
    "torch_compile": {"absent": {"counted_flops": "torch.compile is in use"}},
}
OPTIONS = ("tm-args", "launch", "timeout")


# -- what trainmeter shows, by the ZOO line's figure names -----------------------------------
def _model(snap) -> dict:
    return snap.get("model") or {}


def _counted(log) -> dict:
    return next((r for r in log if r["k"] == "flops_counted" and r.get("rank", 0) == 0), {})


def _series(log, name) -> list[tuple[int, float]]:
    """(step, value) of the series records named ``name``, in step order."""
    pts = [(r["step"], r["value"]) for r in log if r["k"] == "series" and r["name"] == name]
    return sorted(pts, key=lambda p: p[0])


FIGURES = {
    "steps": lambda snap, log, zoo: snap.get("step"),
    "tokens": lambda snap, log, zoo: snap.get("tokens"),
    "samples": lambda snap, log, zoo: snap.get("samples"),
    "seq_len": lambda snap, log, zoo: _model(snap).get("seq_len"),
    "seq_len_mean": lambda snap, log, zoo: snap.get("seq_len_mean"),
    "params": lambda snap, log, zoo: _model(snap).get("params"),
    "losses": lambda snap, log, zoo: _series(log, zoo.get("loss_series")) or None,
    "loss_series": lambda snap, log, zoo: zoo.get("loss_series"),  # names which series
    "loss_first_step": lambda snap, log, zoo: zoo.get("loss_first_step"),  # ... from which step
    "counted_flops": lambda snap, log, zoo: _counted(log).get("flops"),
    "attention": lambda snap, log, zoo: _counted(log).get("attention"),
    # the model record's fields the program knows from its own config: {field: value}
    "model": lambda snap, log, zoo: _model(snap),
}


# -- running -----------------------------------------------------------------------------------
def options(prog: Path) -> dict:
    """The docstring's ``tm-args``, ``launch`` (lists of words) and ``timeout`` (s)."""
    doc = ast.get_docstring(ast.parse(prog.read_text())) or ""
    opts = {"tm-args": [], "launch": [], "timeout": DEFAULT_TIMEOUT}
    for line in doc.splitlines():
        key, sep, value = line.strip().partition(":")
        if sep and key in OPTIONS:
            opts[key] = float(value) if key == "timeout" else shlex.split(value)
    return opts


def _launcher(words: list[str]) -> list[str]:
    """A launcher's words as ``python ...`` arguments: its console script in this venv
    (``torchrun`` is ``python .venv/bin/torchrun``), the same with and without tm."""
    if not words:
        return []
    script = Path(sys.executable).parent / words[0]
    found = str(script) if script.exists() else shutil.which(words[0])
    assert found, f"launcher {words[0]!r} not found next to {sys.executable} or on PATH"
    return [found, *words[1:]]


def _run(cmd: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess:
    """``cmd`` in its own session (conftest's environment), once more after torch's gloo
    exit abort (conftest); on timeout its whole process group is killed (tm's child and a
    launcher's workers too) and TimeoutError raised."""
    return once_more_after_gloo_exit_abort(lambda: _run_once(cmd, cwd, timeout))


def _run_once(cmd: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess:
    cwd.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(cmd, cwd=cwd, env=_env(ENV), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise TimeoutError(f"{' '.join(cmd)} ran past {timeout:.0f} s") from None
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def run_both(prog: Path, opts: dict, root: Path):
    """(plain run, tm run), side by side, each in its own working folder."""
    target = [*_launcher(opts["launch"]), str(prog)]
    plain_cmd = [sys.executable, *target]
    tm_cmd = [sys.executable, "-m", "trainmeter.cli", "-q", "--no-web", *opts["tm-args"]]
    tm_cmd += ["--", sys.executable, *target]
    timeout = opts["timeout"]
    with ThreadPoolExecutor(max_workers=2) as pool:
        plain = pool.submit(_run, plain_cmd, root / "plain", timeout)
        watched = pool.submit(_run, tm_cmd, root / "tm", timeout)
        return plain.result(), watched.result()


# -- checking ----------------------------------------------------------------------------------
def zoo_line(stdout: str) -> dict:
    """The figures of the last stdout line, ``ZOO {json}``."""
    lines = stdout.splitlines()
    assert lines and lines[-1].startswith("ZOO "), f"last stdout line is not ZOO: {lines[-1:]}"
    return json.loads(lines[-1][4:])


def _masked(text: str, root: Path) -> set[str]:
    text = text.replace(str(root / "plain"), "<cwd>").replace(str(root / "tm"), "<cwd>")
    return {re.sub(r"\d+", "N", line) for line in text.splitlines()}


def stream_problems(plain, watched, root: Path) -> list[str]:
    """Checks 1 and 2: exit codes, stdout, trainmeter's and warnings' lines on stderr."""
    out = []
    if plain.returncode != watched.returncode:
        out.append(f"exit code: expected {plain.returncode} (plain), got {watched.returncode} "
                   f"under tm\n  tm stderr tail:\n{_tail(watched.stderr)}"
                   f"\n  plain stderr tail:\n{_tail(plain.stderr)}")  # fmt: skip
    if plain.stdout != watched.stdout:
        diff = difflib.unified_diff(plain.stdout.splitlines(), watched.stdout.splitlines(),
                                    "plain", "tm", lineterm="", n=1)  # fmt: skip
        out.append("stdout differs under tm:\n    " + "\n    ".join(list(diff)[:30]))
    seen = _masked(plain.stderr, root)
    for line in watched.stderr.splitlines():
        flagged = "[trainmeter]" in line or "Warning" in line
        if flagged and not _masked(line, root) <= seen:
            out.append(f"stderr under tm (not in the plain run): {line}")
    return out


def _tail(text: str, n: int = 15) -> str:
    return "\n".join("    " + line for line in text.splitlines()[-n:])


def _close(expected, got, rel: float) -> bool:
    if isinstance(expected, float) or isinstance(got, float):
        return isinstance(got, int | float) and math.isclose(got, expected, rel_tol=rel)
    return got == expected


def figure_problems(zoo: dict, snap: dict, log: list[dict]) -> list[str]:
    """Check 3: each figure of the ZOO line against the replayed run."""
    out = [f"ZOO line: unknown figure {k!r} (known: {sorted(FIGURES)})"
           for k in zoo if k not in FIGURES]  # fmt: skip
    for name, expected in zoo.items():
        if name not in FIGURES or name in ("loss_series", "loss_first_step"):
            continue
        got = FIGURES[name](snap, log, zoo)
        if name == "losses":
            first = zoo.get("loss_first_step", 1)
            out += _loss_problems(expected, zoo.get("loss_series"), got or [], first)
        elif name == "model":
            out += [f"model.{k}: expected {v!r}, got {got.get(k)!r}"
                    for k, v in expected.items() if got.get(k) != v]  # fmt: skip
        elif not _close(expected, got, 1e-9 if name == "seq_len_mean" else 0.0):
            out.append(f"{name}: expected {expected!r}, got {got!r}")
    return out


def _loss_problems(expected: list, series, got: list, first: int = 1) -> list[str]:
    """The series ``series`` holds the expected losses at steps first..first+N-1 (rel 1e-6;
    ``first`` is the ZOO line's ``loss_first_step``, default 1: a framework such as Lightning
    gives its loggers its own step numbers, and the series keeps them)."""
    if not series:
        return ["losses: the ZOO line gives no loss_series"]
    steps = [s for s, _ in got]
    if steps != list(range(first, first + len(expected))):
        return [f"losses: expected series {series!r} at steps {first}..{first + len(expected) - 1}"
                f", got steps {steps[:40]}"]  # fmt: skip
    for i, (want, (_, have)) in enumerate(zip(expected, got, strict=True), start=first):
        if not math.isclose(have, want, rel_tol=1e-6):
            return [f"losses: {series!r} at step {i}: expected {want!r}, got {have!r}"]
    return []


def _lookup(snap: dict, log: list[dict], figure: str):
    """A figure by its ZOO name, else a snapshot key (dotted: nested)."""
    if figure in FIGURES:
        got = FIGURES[figure](snap, log, {})
        return (got or None) if figure in ("model", "losses") else got
    value = snap
    for part in figure.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def expect_problems(expect: dict, snap: dict, log: list[dict]) -> list[str]:
    """Check 4: the pattern's EXPECT entry."""
    out, notes = [], snap.get("notes") or []
    text = "\n".join(notes)
    for key, want in expect.items():
        if key == "step_clock" and snap.get("step_clock") != want:
            out.append(f"step_clock: expected {want!r}, got {snap.get('step_clock')!r}")
        elif key == "peak" and (snap.get("peak") is not None) != want:
            out.append(f"peak: expected {'a peak' if want else 'none'}, got {snap.get('peak')!r}")
        elif key.startswith("span_"):
            got = (snap.get("time_split") or {}).get(key[5:])
            if bool(got and got > 0) != want:
                out.append(f"{key}: expected time_split[{key[5:]!r}] "
                           f"{'> 0' if want else 'absent or 0'}, got {got!r}")  # fmt: skip
        elif key == "notes_include":
            out += [f"notes: expected one to include {s!r}" for s in want if s not in text]
        elif key == "notes_exclude":
            out += [f"notes: expected none to include {s!r}" for s in want if s in text]
        elif key == "absent":
            for figure, reason in want.items():
                got = _lookup(snap, log, figure)
                if got is not None:
                    out.append(f"{figure}: expected absent ({reason!r}), got {got!r}")
                if reason not in text:
                    out.append(f"{figure}: expected a note with the reason {reason!r}")
    return out


def _known_expect_key(key: str) -> bool:
    return key in ("step_clock", "peak", "notes_include", "notes_exclude", "absent") or (
        key.startswith("span_") and len(key) > 5
    )


# -- the tests ---------------------------------------------------------------------------------
def test_every_expect_entry_names_a_program_and_the_entries_are_sorted():
    names = {p.stem for p in PROGRAMS}
    assert list(EXPECT) == sorted(EXPECT), "keep EXPECT sorted by pattern name"
    assert set(EXPECT) <= names, f"EXPECT entries with no program: {set(EXPECT) - names}"
    bad = {(n, k) for n, e in EXPECT.items() for k in e if not _known_expect_key(k)}
    assert not bad, f"unknown EXPECT keys: {sorted(bad)}"


@pytest.mark.slow
@pytest.mark.parametrize("prog", PROGRAMS, ids=[p.stem for p in PROGRAMS])
def test_zoo(prog: Path, tmp_path: Path):
    name = prog.stem
    try:
        plain, watched = run_both(prog, options(prog), tmp_path)
    except TimeoutError as exc:
        pytest.fail(f"{name}: {exc}", pytrace=False)
    if plain.returncode != 0:
        pytest.fail(f"{name}: the program fails without tm:\n{_tail(plain.stderr)}", pytrace=False)
    try:
        zoo = zoo_line(plain.stdout)
    except (AssertionError, ValueError) as exc:
        pytest.fail(f"{name}: the program's ZOO line: {exc}", pytrace=False)
    problems = stream_problems(plain, watched, tmp_path)
    runs = run_folders(tmp_path / "tm" / ".trainmeter")
    if not runs:
        pytest.fail(f"{name}:\n  " + "\n  ".join([*problems, "no run log under tm"]), pytrace=False)
    lines = (runs[-1] / "run.jsonl").read_text().splitlines()
    snap = replay(lines).snapshot()
    log = [json.loads(line) for line in lines if line.strip()]
    log = [r for r in log if r["k"] != "checkpoint"]  # checkpoints: state, not records
    problems += figure_problems(zoo, snap, log)
    problems += expect_problems(EXPECT.get(name, {}), snap, log)
    notes = "\n    ".join(snap.get("notes") or ["(none)"])
    if problems:
        message = f"{name}:\n  " + "\n  ".join(problems) + f"\n  notes:\n    {notes}"
        pytest.fail(message, pytrace=False)
