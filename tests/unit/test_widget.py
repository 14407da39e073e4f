"""The widget's Python side: one version on both sides, the bundle, the traits and the message."""

from __future__ import annotations

import importlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from trainmeter._version import __version__

ROOT = Path(__file__).resolve().parents[2]
STATIC = ROOT / "trainmeter" / "static"

SNAPSHOT = {
    "v": 1,
    "run": {"id": "20261130-091500-ab12", "name": "train_gpt", "state": "running", "segment": 1},
    "step": 40,
    "tokens": 163840,
    "tokens_per_s": None,
    "flops_per_token": {"hf": 4.7e6, "titan": 5.3e6},
    "convention": "titan",
    "series": {"train_loss": {"step": 40, "value": 2.31, "ema": 2.35}},
    "notes": ["no MFU: no peak is known for this device (cpu); declare one with --peak"],
}
HISTORY = {
    "seq": 7,
    "series": {"train_loss": [[1, 2, 3], [3.1, 2.9, 2.8]], "val_loss": [[3], [2.95]]},
}


def _npm(*args: str) -> None:
    subprocess.run([shutil.which("npm") or "npm", *args], cwd=ROOT, check=True, timeout=600)


@pytest.fixture(scope="session")
def widget_module():
    """trainmeter.jupyter.widget with the bundle in place: built here when missing (CI has npm)."""
    if not ((STATIC / "widget.js").is_file() and (STATIC / "widget.css").is_file()):
        if shutil.which("npm") is None:
            pytest.skip(
                "the front-end bundle is not built and npm is not installed (npm run build)"
            )
        if not (ROOT / "node_modules").is_dir():
            _npm("ci")
        _npm("run", "build")
    module = importlib.import_module("trainmeter.jupyter.widget")
    if "_esm" not in module.TrainmeterWidget.__dict__:  # imported before the bundle existed
        module = importlib.reload(module)
    return module


def test_package_json_version_is_the_python_version():
    package = json.loads((ROOT / "package.json").read_text())
    assert package["version"] == __version__


def test_widget_constructs_from_the_bundle_and_carries_the_version(widget_module):
    widget = widget_module.TrainmeterWidget()
    state = widget.get_state()
    assert state["version"] == __version__
    assert "export" in state["_esm"] and state["_esm"] == (STATIC / "widget.js").read_text()
    assert state["_css"] == (STATIC / "widget.css").read_text()
    assert state["snapshot"] == {} and state["history"] == {}


def test_snapshot_and_history_round_trip_through_the_synced_state(widget_module):
    widget = widget_module.TrainmeterWidget()
    widget.update(SNAPSHOT)
    widget.set_history(HISTORY)
    state = widget.get_state()
    # What goes over the wire is plain JSON and comes back unchanged.
    wire = json.loads(json.dumps({"snapshot": state["snapshot"], "history": state["history"]}))
    assert wire == {"snapshot": SNAPSHOT, "history": HISTORY}

    other = widget_module.TrainmeterWidget()
    other.set_state(wire)
    assert other.snapshot == SNAPSHOT
    assert other.history == HISTORY


def test_updating_a_mutated_snapshot_still_syncs(widget_module):
    widget = widget_module.TrainmeterWidget()
    snap = json.loads(json.dumps(SNAPSHOT))
    widget.update(snap)
    changes = []
    widget.observe(changes.append, names="snapshot")
    snap["series"]["train_loss"]["value"] = 2.2  # the caller reuses and mutates its dict
    widget.update(snap)
    assert len(changes) == 1
    assert widget.snapshot["series"]["train_loss"]["value"] == 2.2


def test_push_points_sends_one_points_message(widget_module, monkeypatch):
    widget = widget_module.TrainmeterWidget()
    sent = []
    monkeypatch.setattr(widget.comm, "send", lambda data=None, buffers=None, **_: sent.append(data))
    widget.push_points(9, {"train_loss": [[4, 5], [2.7, 2.6]]})
    assert sent == [
        {
            "method": "custom",
            "content": {"type": "points", "seq": 9, "series": {"train_loss": [[4, 5], [2.7, 2.6]]}},
        }
    ]


def test_a_missing_bundle_gives_a_clear_error_at_construction(widget_module, monkeypatch):
    monkeypatch.delattr(widget_module.TrainmeterWidget, "_esm")
    with pytest.raises(widget_module.BundleMissingError, match="npm run build"):
        widget_module.TrainmeterWidget()


def test_the_front_end_unit_tests_pass():
    """js/tests (format, store, efficiency helpers) under Node's own test runner."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    proc = subprocess.run(
        [node, "--test", "js/tests/"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
