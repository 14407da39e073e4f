"""A log that always replays: thousands of mutated copies of a real run's log, each
read by every command's code path in-process (replay, snapshot, summary line, passport, the
export builders, the ``tm ls`` row), and a few through the real ``tm`` CLI; none raises.

The real log comes from one small ``tm`` run of the example GPT per session. Its record times
are moved a day back (re-encoded line by line, "n" kept), so a log without ``run_end`` is a
stopped supervisor's, not a live one's (engine.STALE_S).
"""

import json
import random
import sys
import time

import pytest
from conftest import EXAMPLE, run_tm

from trainmeter.commands.ls import ls_row
from trainmeter.core import passport as core_passport
from trainmeter.core import passport_md, records
from trainmeter.core.engine import replay, unclosed_text
from trainmeter.core.summary import summary_line
from trainmeter.exports import wandb
from trainmeter.exports.points import iter_points
from trainmeter.supervisor import passport_files
from trainmeter.supervisor.store import run_folders

pytestmark = pytest.mark.slow

VARIANTS = 5000
CLI_VARIANTS = 20
SEED = 15
DAY = 86_400.0


def _tm_log(work, *flags):
    """A ``tm`` run of the example GPT (6 steps) in ``work``: its log's lines, each record's
    time a day back (re-encoded; ``n`` kept)."""
    out = run_tm([*flags, "--", sys.executable, EXAMPLE, "--steps", "6"], work)
    assert out.returncode == 0, out.stderr
    lines = []
    for line in (run_folders(work / ".trainmeter")[-1] / "run.jsonl").read_bytes().splitlines():
        rec = json.loads(line)
        if rec["k"] == "checkpoint":  # the engine's state, not a record: not fuzzed
            continue
        rec["t"] -= DAY
        lines.append((json.dumps(rec, separators=(",", ":")) + "\n").encode())
    assert all("n" in json.loads(x) for x in lines)  # the supervisor stamps every line
    return lines


@pytest.fixture(scope="session")
def real_logs(tmp_path_factory):
    """Two real logs and a notebook-shaped copy of one: a CPU run (no GPUs: its gpu records
    hold only the host), one under the fake two-GPU backend (gpu_devices and gpu records with
    device entries to mutate), and the CPU run as two cells."""
    cpu = _tm_log(tmp_path_factory.mktemp("fuzz_cpu"))
    fake = _tm_log(tmp_path_factory.mktemp("fuzz_gpu"), "--gpu-backend", "fake:h100x2")
    kinds = {json.loads(x)["k"] for x in cpu}
    assert {"run_start", "step", "series", "gpu", "model", "run_end"} <= kinds
    assert any(b'"index":1' in x for x in fake if b'"k":"gpu"' in x)  # GPU 1's samples
    return [cpu, fake, _with_cells(cpu)]


def _with_cells(lines):
    """The CPU log as a notebook's would be, two cells: a segment_end and a segment_start
    (with options) between its steps, and the kinds a tm run rarely writes (tokens_counting, a
    dropped record), all made by records.make and numbered in order."""
    recs = [json.loads(x) for x in lines]
    mid = next(i for i, r in enumerate(recs) if r["k"] == "step" and r["step"] == 3)
    t = recs[mid]["t"]
    extra = [
        records.make("segment_end", t + 0.01, segment=1, status="ok"),
        records.make("segment_start", t + 0.02, segment=2, opts={"budget_tokens": 40_000}),
        records.make("tokens_counting", t + 0.03, counting="non-pad", rank=0, reason=None),
        records.make("dropped", t + 0.04, source="agent", counts={"unsent at exit": 3},
                     pid=1, rank=0),
    ]  # fmt: skip
    recs[mid + 1 : mid + 1] = extra
    for n, r in enumerate(recs, 1):
        r["n"] = n
    return [(json.dumps(r, separators=(",", ":")) + "\n").encode() for r in recs]


@pytest.fixture(scope="session")
def real_log(real_logs):
    """The CPU run's log (the specific tests pin figures of it)."""
    return real_logs[0]


# -- mutations ------------------------------------------------------------------------------

HOSTILE = [
    "12", "", [], {}, [1, [2]], {"a": {"b": 1}}, None, True, False, -1, 0, 2**64, -(2**63) - 1,
    1e308, -1e308, 5e-324, "NaN", [{}], [None], ["x"] * 40,
]  # fmt: skip
RAW = [b"1e400", b"-1e400", b"1" + b"0" * 400, b"NaN", b"Infinity", b"-Infinity", b"1e999999"]


def _paths(x, prefix=()):
    """Every (path, value) inside a decoded record."""
    if isinstance(x, dict):
        for k, v in x.items():
            yield (*prefix, k), v
            yield from _paths(v, (*prefix, k))
    elif isinstance(x, list):
        for i, v in enumerate(x[:8]):
            yield (*prefix, i), v
            yield from _paths(v, (*prefix, i))


def _set(rec, path, value):
    node = rec
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value


def _retyped(rng, line):
    """One field (top-level or nested) of a line's record given another type."""
    try:
        rec = json.loads(line)
    except (ValueError, RecursionError):  # an earlier mutation broke or deepened it
        return line
    paths = list(_paths(rec))
    if not paths:
        return line
    path, old = rng.choice(paths)
    pick = rng.random()
    if pick < 0.25 and isinstance(old, (int, float)) and not isinstance(old, bool):
        new = str(old)  # a string for a number
    elif pick < 0.4 and isinstance(old, dict):
        new = list(old.values())  # a list for an object
    elif pick < 0.5 and isinstance(old, list):
        new = {str(i): v for i, v in enumerate(old)}
    else:
        new = rng.choice(HOSTILE)
    _set(rec, path, new)
    return (json.dumps(rec) + "\n").encode()


def _raw_number(rng, line):
    """A number token of the line replaced by one JSON allows and floats cannot hold."""
    spots = [
        i for i in range(len(line) - 1) if line[i : i + 1] == b":" and line[i + 1 : i + 2].isdigit()
    ]
    if not spots:
        return line
    i = rng.choice(spots) + 1
    j = i
    while j < len(line) and line[j : j + 1] in b"0123456789.eE+-":
        j += 1
    return line[:i] + rng.choice(RAW) + line[j:]


def _deep(rng, line):
    depth = rng.choice((65, 1000, 10_000))
    open_, close = rng.choice(((b"[", b"]"), (b'{"a":', b"}")))
    value = open_ * depth + b"1" + close * depth
    if rng.random() < 0.5:
        return b'{"v":1,"k":"note","t":1,"text":' + value + b"}\n"
    return line.replace(b'"t":', b'"x":' + value + b',"t":', 1)


def _bad_utf8(rng, line):
    i = rng.randrange(len(line))
    return line[:i] + rng.choice((b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x00")) + line[i:]


def _long(rng, line):
    pad = b"a" * rng.choice((1 << 20, (1 << 20) + 200_000))
    return line.replace(b'"v":1,', b'"v":1,"pad":"' + pad + b'",', 1)


def mutate(rng, lines):
    """A copy of ``lines`` with one to three mutations."""
    out = list(lines)
    for _ in range(rng.randint(1, 3)):
        op = rng.random()
        i = rng.randrange(len(out)) if out else 0
        if not out:
            out.append(b"{}\n")
        elif op < 0.12:  # truncated at a random byte
            data = b"".join(out)
            out = data[: rng.randrange(len(data) + 1)].splitlines(keepends=True)
        elif op < 0.24:  # duplicated lines
            out[i:i] = [out[i]] * rng.randint(1, 3)
        elif op < 0.34:  # deleted lines
            del out[i : i + rng.randint(1, 4)]
        elif op < 0.38:  # swapped lines
            j = rng.randrange(len(out))
            out[i], out[j] = out[j], out[i]
        elif op < 0.62:
            out[i] = _retyped(rng, out[i])
        elif op < 0.72:
            out[i] = _raw_number(rng, out[i])
        elif op < 0.8:
            out.insert(i, _deep(rng, out[i]))
        elif op < 0.88:
            out[i] = _bad_utf8(rng, out[i])
        elif op < 0.885:
            out[i] = _long(rng, out[i])
        else:  # a byte flipped
            line = bytearray(out[i])
            line[rng.randrange(len(line))] = rng.randrange(256)
            out[i] = bytes(line)
    return out


# -- what every command runs ----------------------------------------------------------------


def read_everything(lines, folder, files=True):
    """What tm replay, tm ls, tm passport and tm export do with a log, in-process; ``files``:
    also through a run folder, as ``tm ls`` and ``tm passport`` open it (the same reader: done
    for one variant in ten, to keep the test's time)."""
    snap = replay(lines).snapshot()
    # replay counts an apply that raised instead of raising: none may (validate() is deep)
    assert not any("apply failed" in r for r in (snap["log"] or {}).get("by", {}))
    json.dumps(snap, allow_nan=False)  # the page's JSON and tm replay --json
    summary_line(snap)
    p = core_passport.build(snap, version="0")
    passport_md.markdown(p)
    core_passport.flat(p)
    points = list(iter_points(lines, p))  # tm export's series (csv, mlflow, wandb)
    list(wandb.rows(points))
    if files:
        (folder / "run.jsonl").write_bytes(b"".join(lines))
        assert run_folders(folder.parent.parent) == [folder]  # tm ls's order: the first line
        ls_row(folder, now=time.time())
        passport_files.rebuild(folder, version="0")
    return snap


def test_thousands_of_mutated_real_logs_never_make_a_reader_raise(real_logs, tmp_path):
    rng = random.Random(SEED)
    folder = tmp_path / ".trainmeter" / "runs" / "20240101-000000-fuzz"
    folder.mkdir(parents=True)
    states, skipped, t0 = set(), 0, time.monotonic()
    for k in range(VARIANTS):
        lines = mutate(rng, real_logs[k % 3])
        try:
            snap = read_everything(lines, folder, files=k % 10 == 0)
        except Exception as exc:  # say which variant, so it can be replayed by hand
            raise AssertionError(f"variant {k} (seed {SEED}) raised {exc!r}") from exc
        states.add(snap["run"]["state"])
        skipped += bool(snap["log"])
    # the mutations reach the reader's every outcome: finished runs, cut ones, skipped lines
    assert {"finished", "ended"} <= states
    assert skipped > VARIANTS // 2
    print(f"{VARIANTS} variants in {time.monotonic() - t0:.1f} s")


def test_mutated_logs_through_the_real_cli_print_no_traceback(real_logs, tmp_path):
    rng = random.Random(SEED + 1)
    runs = tmp_path / ".trainmeter" / "runs"
    for k in range(CLI_VARIANTS):
        folder = runs / f"20240101-0000{k:02d}-fuzz"
        folder.mkdir(parents=True)
        (folder / "run.jsonl").write_bytes(b"".join(mutate(rng, real_logs[k % 3])))
    real_log = real_logs[0]
    bad = runs / "20240101-000099-fuzz"
    bad.mkdir()
    (bad / "run.jsonl").write_bytes(b"[" * 10_000 + b"\n" + b"".join(real_log[1:]))
    listed = run_tm(["ls", "--dir", tmp_path / ".trainmeter"], tmp_path)
    assert "Traceback" not in listed.stderr and listed.returncode == 0, listed.stderr
    assert len(listed.stdout.splitlines()) == CLI_VARIANTS + 1
    # six folders (the deep first line among them) through each command: 18 runs of tm and
    # the ls above, about 20 (the interpreter's start dominates the time)
    for folder in [*sorted(runs.iterdir())[:5], bad]:
        for args in (["passport", folder], ["export", "csv", folder], ["replay", folder]):
            out = run_tm(args, tmp_path)
            assert "Traceback" not in out.stderr, (args, out.stderr)
            assert out.returncode == 0, (args, out.stderr)


def test_an_unreadable_log_is_one_line_and_exit_1(tmp_path):
    folder = tmp_path / ".trainmeter" / "runs" / "20240101-000000-fuzz"
    folder.mkdir(parents=True)
    # a log that opens and fails on read (EIO): /proc/self/mem at offset 0 is never mapped
    (folder / "run.jsonl").symlink_to("/proc/self/mem")
    for args in (["replay", folder], ["ls", "--dir", tmp_path / ".trainmeter"],
                 ["passport", folder], ["export", "csv", folder]):  # fmt: skip
        out = run_tm(args, tmp_path)
        assert out.returncode == 1, (args, out.stdout, out.stderr)
        assert "Traceback" not in out.stderr
        assert len(out.stderr.strip().splitlines()) == 1, (args, out.stderr)
        assert "run.jsonl" in out.stderr or "mem" in out.stderr, (args, out.stderr)


# -- the bad lines the issue names ------------------------------------------------------------


def _with(real_log, *extra):
    """The real log with ``extra`` lines before its run_end."""
    return [*real_log[:-1], *extra, real_log[-1]]


def _snap(lines):
    return replay(lines).snapshot()


def test_the_lines_the_issue_names_are_skipped_and_counted_by_kind(real_log):
    base = _snap(real_log)
    start = json.loads(real_log[0])
    gpu = {"v": 1, "k": "gpu", "t": start["t"] + 1, "gpus": [{"index": 0, "energy_mj": "12"}]}
    lines = _with(
        real_log,
        b'{"v":1,"k":"note","t":1,"text":' + b"[" * 10_000 + b"]" * 10_000 + b"}\n",
        (json.dumps({**start, "k": "segment_start", "segment": 2, "opts": [1]}) + "\n").encode(),
        (json.dumps(gpu) + "\n").encode(),
        (json.dumps({**gpu, "gpus": [{"index": [0]}]}) + "\n").encode(),
    )
    snap = _snap(lines)
    by = snap["log"]["by"]
    assert by == {
        "note: JSON nested deeper than 64": 1,
        "segment_start: 'opts' must be an object": 1,
        "gpu: 'energy_mj' must be a finite number >= 0 or null, got str": 1,
        "gpu: 'index' must be an int >= 0, got [0]": 1,
    }
    assert snap["step"] == base["step"] == 6 and snap["tokens"] == base["tokens"]
    assert snap["run"]["state"] == "finished"


def test_duplicated_lines_are_counted_and_not_double_counted(real_log):
    steps = [x for x in real_log if b'"k":"step"' in x]
    lines = _with(real_log, *steps)  # every step line twice
    snap = _snap(lines)
    assert snap["tokens"] == _snap(real_log)["tokens"] == 6 * 2048  # 6 steps x 16 x 128, by hand
    assert snap["log"]["by"] == {"step: duplicate line": 6}
    assert "replay skipped 6 line(s) (6 step: duplicate line)" in summary_line(snap)


def test_a_log_cut_short_says_ended_without_a_close(real_log, tmp_path):
    data = b"".join(real_log[:-1])
    cut = data[: len(data) - 7]  # the last record's line cut mid-way, no run_end
    last_whole = json.loads(cut.splitlines()[-2])["t"]
    snap = _snap(cut.splitlines(keepends=True))
    assert snap["run"]["state"] == "ended" and snap["log"]["cut"]
    assert snap["run"]["state_text"] == unclosed_text(last_whole)
    assert summary_line(snap).startswith(f"trainmeter: {unclosed_text(last_whole)} · ")
    folder = tmp_path / ".trainmeter" / "runs" / "20240101-000000-fuzz"
    folder.mkdir(parents=True)
    (folder / "run.jsonl").write_bytes(cut)
    listed = run_tm(["ls", "--dir", tmp_path / ".trainmeter"], tmp_path)
    assert unclosed_text(last_whole) in listed.stdout, listed.stdout
    assert "last line cut short" in listed.stdout


def test_tm_merge_of_mutated_node_logs_refuses_or_merges_never_raises(real_log, tmp_path):
    from trainmeter.commands import merge

    rng, merged = random.Random(SEED + 2), 0
    for k in range(100):
        folders = []
        for j in range(2):
            folder = tmp_path / f"n{k}-{j}"
            folder.mkdir()
            (folder / "run.jsonl").write_bytes(b"".join(mutate(rng, real_log)))
            folders.append(folder)
        try:
            out, _ = merge.merge(folders, tmp_path / f"m{k}", force=True)
        except merge.MergeError:  # a node log without its run_start: refused in one line
            continue
        merged += 1
        json.dumps(replay(out / "run.jsonl").snapshot(), allow_nan=False)
    assert merged > 50  # most pairs still hold a run_start each
