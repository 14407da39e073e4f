"""docs/spec.md's snapshot tables against a real snapshot: every key the engine's snapshot has
is in one of the tables (``| key | meaning | unit | computed by |``), every key a table names
is in the snapshot, and every function the "computed by" column names exists under
``trainmeter/core/`` (``engine.Engine._gpus``: ``Engine._gpus`` of ``core/engine.py``)."""

import importlib
import re
from pathlib import Path

import pytest

from trainmeter.core import records
from trainmeter.core.engine import Engine

SPEC = Path(__file__).resolve().parents[2] / "docs" / "spec.md"
HEADER = "| key | meaning | unit | computed by |"


def _rows() -> list[tuple[list[str], list[str]]]:
    """(keys, functions) of every row of the snapshot tables, each a list of the backticked
    names in its first and last cell."""
    lines = SPEC.read_text().splitlines()
    rows = []
    for i, line in enumerate(lines):
        if line.strip() != HEADER:
            continue
        for row in lines[i + 2 :]:
            if not row.startswith("|"):
                break
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", row.strip())[1:-1]]
            assert len(cells) == 4, f"a row of {len(cells)} cells: {row[:80]}"
            rows.append((re.findall(r"`([^`]+)`", cells[0]), re.findall(r"`([^`]+)`", cells[3])))
    return rows


def _snapshot_keys() -> set[str]:
    """The keys of real snapshots: a bare engine's, and one of a two-rank run with a model,
    steps, a span, a series, the sampler's readings and a run end."""
    eng = Engine()
    keys = set(eng.snapshot())
    recs = [
        {"k": "run_start", "t": 100.0, "id": "r", "name": "n", "argv": [], "version": "0",
         "opts": {"peak_flops": 1e12, "budget_tokens": 1000}},
        {"k": "agent_hello", "t": 100.1, "pid": 1, "rank": 0, "world_size": 2, "host": "h"},
        {"k": "agent_hello", "t": 100.1, "pid": 2, "rank": 1, "world_size": 2, "host": "h"},
        {"k": "model", "t": 100.2, "params": 1000, "embedding_params": 100,
         "token_embedding_params": 100, "layers": 2, "width": 8, "heads": 2, "seq_len": 4,
         "vocab": 50, "device": "cpu", "rank": 0},
        {"k": "gpu_devices", "t": 100.3, "backend": "none", "reason": "none", "devices": []},
        {"k": "span", "t": 100.4, "name": "data", "rank": 0, "dur": 0.1},
        *({"k": "step", "t": 101.0 + s, "step": s + 1, "rank": r, "tokens": 40, "samples": 2}
          for s in range(4) for r in (0, 1)),
        {"k": "series", "t": 104.5, "name": "train_loss", "value": 1.5, "step": 4},
        {"k": "gpu", "t": 104.6, "gpus": [], "host": {"time_s": 104.6, "cpu_util": 0.5}},
        {"k": "run_end", "t": 105.0, "status": "ok", "exit_code": 0},
    ]  # fmt: skip
    for rec in recs:
        eng.apply(records.validate({"v": 1, **rec}))
    snap = eng.snapshot()
    assert snap["step"] == 4 and snap["rank_counts"] is not None  # the run was folded
    return keys | set(snap)


def _resolve(name: str):
    """``module.attr...`` under trainmeter.core, or None when any part is missing."""
    module, *attrs = name.split(".")
    try:
        obj = importlib.import_module(f"trainmeter.core.{module}")
    except ImportError:
        return None
    for attr in attrs:
        obj = getattr(obj, attr, None)
        if obj is None:
            return None
    return obj


def test_the_snapshot_tables_have_a_computed_by_column():
    rows = _rows()
    assert len(rows) > 40  # the four tables: Snapshot, for the dashboard, stragglers, counts
    assert all(keys for keys, _ in rows), "a row with no key"
    assert [keys for keys, funcs in rows if not funcs] == [], "a row that names no function"


def test_every_snapshot_key_is_in_the_tables_and_every_table_key_in_the_snapshot():
    documented = {k.split(".")[0] for keys, _ in _rows() for k in keys}
    keys = _snapshot_keys()
    assert sorted(keys - documented) == [], "snapshot keys missing from docs/spec.md's tables"
    assert sorted(documented - keys) == [], "keys in docs/spec.md's tables the snapshot lacks"


@pytest.mark.parametrize("name", sorted({f for _, funcs in _rows() for f in funcs}))
def test_every_function_named_exists(name):
    assert callable(_resolve(name)) or isinstance(_resolve(name), property), name


def test_the_checks_above_can_fail():
    """A name that is not there is not found (a module, or a method of a class that is)."""
    assert _resolve("engine.Engine._no_such_method") is None
    assert _resolve("no_such_module.f") is None
    assert callable(_resolve("engine.Engine._gpus"))
