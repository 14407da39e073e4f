"""core/logread.py: the one reader of a run log skips and counts what it cannot use, never
raising, and replay says what it skipped."""

import json
import random
import re

import pytest

from trainmeter.core import logread
from trainmeter.core.engine import replay
from trainmeter.core.records import RecordError
from trainmeter.core.summary import summary_line

T0 = 1_700_000_000.0


def _line(rec, n=None):
    rec = {"v": 1, "t": T0, **rec}
    if n is not None:
        rec["n"] = n
    return (json.dumps(rec) + "\n").encode()


START = {"k": "run_start", "id": "r1", "name": "demo", "argv": ["x.py"], "version": "1"}


def _step(i):
    return {"k": "step", "t": T0 + i, "step": i, "rank": 0, "tokens": 100, "samples": 1}


def _log(n_steps=3, numbered=True, end=True):
    recs = [START, *(_step(i) for i in range(1, n_steps + 1))]
    if end:
        recs.append({"k": "run_end", "t": T0 + n_steps + 1, "status": "ok", "exit_code": 0})
    return [_line(r, i + 1 if numbered else None) for i, r in enumerate(recs)]


def test_a_clean_log_reads_whole_with_nothing_counted():
    recs, reader = logread.read(_log())
    assert [r["k"] for r in recs] == ["run_start", "step", "step", "step", "run_end"]
    assert reader.skipped == {} and not reader.cut and reader.numbered


def test_deep_json_is_refused_before_it_is_parsed():
    deep = b'{"v":1,"k":"note","t":1,"text":' + b"[" * 10_000 + b"]" * 10_000 + b"}\n"
    assert logread.too_deep(deep)
    assert not logread.too_deep(b'{"text": "' + b"[" * 500 + b'"}')  # brackets in a string
    with pytest.raises(RecordError, match="nested deeper than 64"):
        logread.parse(deep)
    _, reader = logread.read([*_log(), deep])
    assert reader.skipped == {("note", "JSON nested deeper than 64"): 1}


BEYOND = [b"NaN", b"Infinity", b"-Infinity", b"1e400", b"-1e400", b"1E+309", b"1e0400",
          b"9" * 250 + b".5e99", b"1" + b"0" * 309 + b".0", b"-" + b"9" * 309 + b".0"]  # fmt: skip


@pytest.mark.parametrize("token", BEYOND)
def test_nan_infinity_and_numbers_beyond_a_float_are_refused(token):
    with pytest.raises(RecordError, match="not JSON"):
        logread.parse(b'{"v":1,"k":"series","t":1,"name":"x","value":' + token + b"}")


def test_the_overflow_search_finds_what_its_regular_expression_finds():
    # the rule as a regular expression (the reference), against the three substring searches
    rule = re.compile(rb"[0-9]{200}|[eE][+-]?[0-9]{3}")
    rng = random.Random(0)
    alphabet = b'0123456789eE+-.,{}":a '
    for _ in range(20_000):
        text = bytes(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        if rng.random() < 0.05:  # runs of digits about 200 long, of mixed digits
            text += bytes(rng.choice(b"0123456789") for _ in range(rng.randint(195, 205))) + text
        assert logread._may_overflow(text) == bool(rule.search(text)), text


def test_an_unreadable_line_is_counted_once_not_again_as_missing():
    lines = _log(4)
    lines[2] = lines[2].replace(b'"tokens": 100', b'"tokens": NaN')  # n 3: damaged in place
    _, reader = logread.read(lines)
    assert reader.skipped == {("step", "not JSON"): 1}  # not also 1 "missing lines"
    # a damaged line that names a number far ahead is not trusted: the lines after it read on
    lines = _log(4)
    lines[2] = lines[2][:-3] + b"999999}\n"  # n 3 -> 999999, and cut short
    lines[2] = lines[2].replace(b'"tokens": 100', b'"tokens": NaN')
    _, reader = logread.read(lines)
    assert reader.skipped == {("step", "not JSON"): 1, ("line", "missing lines"): 1}
    # one missing before it comes (out of order) fills its place: counted once
    lines = _log(4)
    late = lines.pop(2).replace(b'"tokens": 100', b'"tokens": NaN')
    lines.insert(4, late)
    _, reader = logread.read(lines)
    assert reader.skipped == {("step", "not JSON"): 1}


def test_a_long_line_is_skipped_while_read_and_counted(tmp_path):
    path = tmp_path / "run.jsonl"
    big = b'{"v":1,"k":"note","t":1,"text":"' + b"a" * (2 * logread.MAX_LINE) + b'"}\n'
    path.write_bytes(b"".join([_log()[0], big, *_log()[1:]]))
    recs, reader = logread.read(path)
    assert len(recs) == 5
    assert reader.skipped == {("line", "line over 1 MiB"): 1}


def test_invalid_utf8_and_bad_records_are_counted_by_kind_and_reason():
    lines = _log()
    lines.insert(1, b'{"v":1,"k":"note","t":1,"text":"\xff"}\n')
    lines.insert(1, _line({**START, "opts": [1, 2]}))
    _, reader = logread.read(lines)
    assert reader.skipped[("note", "not UTF-8")] == 1  # the kind read from the line's head
    assert reader.skipped[("run_start", "'opts' must be an object")] == 1  # kind said once


def test_duplicated_lines_are_skipped_and_counted_and_tokens_are_not_double_counted():
    lines = _log()
    doubled = [lines[0], lines[1], lines[1], lines[2], lines[2], *lines[3:]]
    eng = replay(doubled)
    snap = eng.snapshot()
    assert snap["tokens"] == 300  # 3 steps x 100 tokens, by hand: the repeats not counted
    assert snap["log"]["by"] == {"step: duplicate line": 2}
    assert "replay skipped 2 line(s) (2 step: duplicate line)" in summary_line(snap)


def test_missing_lines_are_counted_by_the_gap_in_n():
    lines = _log(5)
    del lines[2:4]  # n = 3 and 4
    snap = replay(lines).snapshot()
    assert snap["log"]["by"] == {"missing lines": 2}
    assert snap["step"] == 5


def test_a_log_without_n_replays_as_before():
    snap = replay(_log(numbered=False)).snapshot()
    assert snap["log"] is None and snap["tokens"] == 300 and snap["run"]["state"] == "finished"
    twice = _log(numbered=False)
    snap = replay([*twice, *twice[1:2]]).snapshot()  # no n: a repeat cannot be told
    assert snap["tokens"] == 400


def test_a_log_cut_mid_line_says_ended_without_a_close():
    data = b"".join(_log(4, end=False))
    cut = data[: len(data) - 20]
    snap = replay(cut.splitlines(keepends=True)).snapshot()
    assert snap["step"] == 3
    assert snap["log"]["cut"] is True and snap["log"]["by"] == {"last line cut short": 1}
    run = snap["run"]
    assert run["state"] == "ended"
    assert run["state_text"].startswith("ended without a close (supervisor stopped at ")
    import time

    hms = time.strftime("%H:%M:%S", time.localtime(T0 + 3))  # the last whole record's time
    assert run["state_text"] == f"ended without a close (supervisor stopped at {hms})"
    assert summary_line(snap).startswith(f"trainmeter: {run['state_text']} · 3 steps")


def test_a_log_still_being_written_is_running_when_its_last_record_is_recent():
    lines = _log(2, end=False)
    assert replay(lines, now=T0 + 10).snapshot()["run"]["state"] == "running"
    assert replay(lines, now=T0 + 100).snapshot()["run"]["state"] == "ended"  # 98 s > STALE_S


def test_an_unreadable_path_raises_oserror(tmp_path):
    with pytest.raises(OSError):
        logread.read(tmp_path / "nope.jsonl")


def test_swapped_lines_are_neither_missing_nor_duplicates():
    lines = _log(4)
    lines[2], lines[3] = lines[3], lines[2]  # n = 4 before n = 3
    recs, reader = logread.read(lines)
    assert len(recs) == 6 and reader.skipped == {}


def test_a_second_writer_numbering_from_1_again_is_not_a_repeat():
    first = _log(2, end=False)
    again = [_line({**START, "id": "r2"}, 1), _line(_step(9), 2)]  # another run_start line
    recs, reader = logread.read([*first, *again])
    assert len(recs) == 5 and reader.skipped == {}
    recs, reader = logread.read([*first, first[0]])  # the same first line again: a repeat
    assert reader.skipped == {("run_start", "duplicate line"): 1}


def _parsed(line, loads=None):
    """parse()'s record, or its error's reason (the reason a reader counts)."""
    try:
        return logread.parse(line, loads)
    except RecordError as exc:
        return f"refused: {exc}"


AWKWARD = [
    b"-1", b"1e-400", b"123456789012345678901234567890", b"-9223372036854775809",
    b"18446744073709551615", b"9223372036854775807", b"0.1234567890123456789012", b"1E+5",
    b"-0.0", b"5e-324", b"1.7976931348623157e308", b"2.5e-08", b"NaN", b"1e400", b"true",
    b'"x"', b"null", b"[1,2]", b'{"a":1}',
]  # fmt: skip


@pytest.mark.parametrize("value", AWKWARD)
def test_the_fast_parser_reads_a_line_as_json_does(value):
    orjson = pytest.importorskip("orjson")  # the test extra installs it: the fast path runs
    line = b'{"v":1,"k":"series","t":1,"name":"x","value":' + value + b',"step":' + value + b"}"
    assert _parsed(line, orjson.loads) == _parsed(line)
    assert _parsed(line + b"\n", orjson.loads) == _parsed(line + b"\n")


def test_the_fast_parser_reads_random_and_damaged_lines_as_json_does():
    orjson = pytest.importorskip("orjson")
    rng = random.Random(3)
    texts = [b"\xff", b"\\ud800", "é".encode(), b"\x01", b'"', b"\\u0000", b"\xef\xbb\xbf"]
    same = 0
    for _ in range(5000):
        value = rng.choice([
            repr(rng.uniform(-1e20, 1e20)).encode(), str(rng.randint(-(2**70), 2**70)).encode(),
            b'"' + rng.choice(texts) + b'"', b"%se%d" % (repr(rng.random()).encode(),
                                                         rng.randint(-330, 330)),
        ])  # fmt: skip
        line = b'{"v":1,"k":"series","t":%s,"name":"n","value":%s}\n' % (
            repr(rng.uniform(0, 2e9)).encode(),
            value,
        )
        if rng.random() < 0.1:  # cut short, or a byte dropped
            k = rng.randrange(len(line))
            line = line[:k] + line[k + 1 :] if rng.random() < 0.5 else line[:k]
        got, want = _parsed(line, orjson.loads), _parsed(line)
        assert got == want and type(got) is type(want), line
        if isinstance(want, dict):
            same += type(got["value"]) is type(want["value"])
    assert same > 1000  # many lines were read whole both ways


def _batches(lines, loads=None):
    """What ``batches()`` yields, as comparable values (a Steps batch as its columns)."""
    out = []
    for item in logread.LogReader(lines, loads=loads).batches():
        if isinstance(item, dict):
            out.append(item)
        else:
            cols = (item.rank, item.t, item.step, item.tokens, item.samples, item.seq_sq)
            out.append((cols, [[type(x) for x in col] for col in cols[1:] if col]))
    return out


@pytest.mark.parametrize("seed", range(4))
def test_step_lines_read_by_the_fast_parser_are_the_same_numbers(tmp_path, seed):
    orjson = pytest.importorskip("orjson")
    rng = random.Random(seed)
    lines, n, step = [_line(START, 1)], 2, 1
    for _ in range(300):
        t = rng.choice([T0 + rng.random() * 1e4, rng.random() * 1e-5, float(rng.randint(1, 99))])
        if seed in (1, 2) and rng.random() < 0.02:
            step = rng.randint(10**18, 10**21)  # 19 digits and more: read one at a time
        rec = {
            "v": 1,
            "k": "step",
            "t": t,
            "step": step,
            "rank": 0,
            "tokens": rng.choice([None, 64]),
            "samples": 2,
        }  # the supervisor's order
        if seed != 3 or rng.random() > 0.01:  # some without n: read by json, one by one
            rec["n"] = n
        lines.append((json.dumps(rec, separators=(",", ":")) + "\n").encode())
        n, step = n + 1, step + 1
    path = tmp_path / "run.jsonl"  # read from a file: in blocks, step lines cut by a pattern
    path.write_bytes(b"".join(lines))
    assert _batches(path, orjson.loads) == _batches(path)
    steps = [x[0][2] for x in _batches(path) if not isinstance(x, dict)]  # step batches read
    assert steps and (seed not in (1, 2) or max(map(max, steps)) > 2**64)
