"""``tm view``: the replay notebook it writes runs in a real kernel (nbclient) and its widget
holds the run's final step; JupyterLab serves it; ``--web`` serves the page for the finished
run; without JupyterLab it says how to get it."""

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import nbformat
import pytest
from conftest import FIXTURES, _env, run_tm
from nbclient import NotebookClient

from trainmeter.commands import view

pytestmark = pytest.mark.slow

STEPS = 12
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A finished 12-step run of tiny_train (fake GPU counters) and its folder."""
    work = tmp_path_factory.mktemp("view")
    args = ["-q", "--gpu-backend", "fake:h100x1", "--sample-hz", "5", FIXTURES / "tiny_train.py",
            "--steps", str(STEPS), "--sleep", "0.1"]  # fmt: skip
    out = run_tm(args, work)
    assert out.returncode == 0, out.stderr
    (folder,) = (work / ".trainmeter" / "runs").glob("*")
    return work, folder


def _get(url, token=None):
    headers = {"Authorization": f"token {token}"} if token else {}
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as r:
        return r.status, r.read()


def _kill(pid):
    """Stop the JupyterLab that `tm view` started for this test (its pid, printed by tm)."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass


@pytest.fixture(scope="module")
def viewed(run):
    """`tm view RUN --no-browser`: its output, the notebook, and what JupyterLab served."""
    work, folder = run
    out = run_tm(["view", folder.name[:15], "--no-browser"], work, timeout=240)
    pid = re.search(r"JupyterLab \(pid (\d+)\)", out.stdout)
    try:
        assert out.returncode == 0, out.stdout + out.stderr
        url = re.search(r"serves it at (http://\S+)", out.stdout).group(1)
        base, token = url.split("/lab/")[0], url.split("token=")[1]
        served = json.loads(_get(f"{base}/api/contents/replay.ipynb?content=0", token)[1])
    finally:
        if pid:
            _kill(int(pid.group(1)))
    return out, folder / "replay.ipynb", served


@pytest.fixture(scope="module")
def executed(viewed):
    """The written notebook executed top to bottom by nbclient in a real kernel."""
    _, path, _ = viewed
    nb = nbformat.read(path, as_version=4)
    os.environ.update(_env())  # the kernel inherits PYTHONPATH with this checkout
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()  # fmt: skip
    return nb


def test_view_writes_the_notebook_into_the_run_folder_and_jupyterlab_serves_it(viewed, run):
    out, path, served = viewed
    assert f"wrote {path}" in out.stdout and "stop JupyterLab with: kill" in out.stdout
    assert "no browser" not in out.stdout  # --no-browser: the URL, and no word of a browser
    assert served["type"] == "notebook" and served["path"] == "replay.ipynb"
    nb = nbformat.read(path, as_version=4)
    params = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", ()))
    assert params.source.startswith(f"RUN = {str(run[1].resolve())!r}")


def test_the_notebook_executes_and_its_widget_holds_the_runs_final_step(executed, run):
    _, folder = run
    log = [json.loads(x) for x in (folder / "run.jsonl").read_text().splitlines()]
    last = max(r["step"] for r in log if r["k"] == "step")
    assert last == STEPS  # tiny_train steps 12 times
    state = executed.metadata["widgets"][WIDGET_STATE]["state"]
    (model,) = [m["state"] for m in state.values() if m["state"].get("snapshot")]
    assert model["snapshot"]["step"] == last and model["snapshot"]["run"]["state"] == "finished"
    assert model["history"]["series"]["train_loss"][0][-1] == last
    assert model["history"]["series"]["gpu0/sm_active"][0]  # the sampler's chart came back


def _stream(nb, marker):
    cell = next(c for c in nb.cells if marker in c.source)
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


def _rich(nb, marker):
    cell = next(c for c in nb.cells if marker in c.source)
    return "".join(o.get("data", {}).get("text/markdown", "") for o in cell.outputs)


def test_the_notebook_shows_the_summary_the_series_and_the_passport(executed):
    assert _stream(executed, "show_run").startswith(f"trainmeter: finished · {STEPS} steps")
    table = _stream(executed, "series_table").splitlines()  # no pandas here: the text table
    assert table[0].split() == ["step", "train_loss"] and table[-1] == f"({STEPS} rows)"
    passport = _rich(executed, "passport_markdown")
    # core.passport's table for this run (tiny_train is no transformer: no FLOPs/token)
    assert "Run passport: tiny_train" in passport and f"| steps | {STEPS} |" in passport


def test_without_jupyterlab_view_says_how_to_get_it_and_writes_nothing(run, monkeypatch, capsys):
    _, folder = run
    real = importlib.util.find_spec

    def find_spec(name, *args):  # as if JupyterLab were not installed
        return None if name == "jupyterlab" else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    before = sorted(p.name for p in folder.iterdir())
    assert view.main([str(folder)]) == 2
    assert 'pip install "trainmeter[lab]"' in capsys.readouterr().err
    assert sorted(p.name for p in folder.iterdir()) == before


def test_a_missing_run_exits_1_and_a_bad_flag_exits_2(run):
    work, _ = run
    missing = run_tm(["view", "nosuchrun", "--no-browser"], work)
    assert missing.returncode == 1 and missing.stderr.startswith("tm: no run matching 'nosuchrun'")
    typo = run_tm(["view", "--no-browse"], work)  # a prefix: refused, never taken for the flag
    assert typo.returncode == 2 and "(did you mean --no-browser?)" in typo.stderr


def test_view_web_serves_the_finished_run_until_ctrl_c(run):
    work, folder = run
    cmd = [sys.executable, "-m", "trainmeter.cli", "view", str(folder), "--web", "--no-browser",
           "--port", "0"]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=work, env=_env(), stdout=subprocess.PIPE, text=True)
    try:
        url = re.search(r"dashboard (http://\S+)", proc.stdout.readline()).group(1)
        state = json.loads(_get(url + "state")[1])
        events = _get(url + "events")[1].decode()  # a finished run: the whole state, then end
    finally:
        proc.send_signal(signal.SIGINT)
        rc = proc.wait(timeout=30)
    replayed = json.loads(run_tm(["replay", "--json", str(folder)], work).stdout)
    assert rc == 0
    assert state["snapshot"]["step"] == STEPS and state["snapshot"] == replayed
    assert state["history"]["series"]["train_loss"][0][-1] == STEPS
    kinds = re.findall(r"^event: (\w+)$", events, flags=re.M)
    assert kinds == ["full", "delta", "end"]


def test_the_template_in_notebooks_is_the_one_view_uses():
    root = Path(__file__).resolve().parents[2]
    assert view.template() == root / "notebooks" / "replay.ipynb"
