"""The notebook surface, in a real kernel (nbclient): the quickstart's widget updates while the
training cell runs, numerics are unchanged, errors look exactly as without trainmeter, and the
supervisor follows its kernel."""

import copy
import json
import os
import signal
import time
from pathlib import Path

import nbformat
import pytest
from conftest import ROOT, _env, run_cell
from nbclient import NotebookClient

pytestmark = pytest.mark.slow
QUICKSTART = ROOT / "notebooks" / "quickstart.ipynb"


class _Recorder(NotebookClient):
    """Records every widget state update with its kernel-side time, and each cell's reply."""

    def __init__(self, nb, **kw):
        super().__init__(nb, **kw)
        self.updates = []  # (header date, state dict)
        self.replies = {}  # cell index -> execute_reply header date
        self.on_cell_executed = self._executed

    def handle_comm_msg(self, outs, msg, cell_index):
        state = msg["content"].get("data", {}).get("state")
        if state:
            self.updates.append((msg["header"]["date"], cell_index, state))
        super().handle_comm_msg(outs, msg, cell_index)

    def _executed(self, cell, cell_index, execute_reply):
        self.replies[cell_index] = execute_reply["header"]["date"]


def _execute(nb, cwd, allow_errors=False):
    os.environ.update(_env())  # the kernel inherits PYTHONPATH with this checkout
    client = _Recorder(nb, timeout=600, kernel_name="python3", allow_errors=allow_errors,
                       resources={"metadata": {"path": str(cwd)}})  # fmt: skip
    client.execute()
    return client


def _text(cell):
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


def _loss_lines(cell):
    return [ln for ln in _text(cell).splitlines() if ln.startswith("step ")]


def _training_cell(nb):
    return next(i for i, c in enumerate(nb.cells) if c.source.startswith("%%trainmeter"))


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory):
    """The quickstart executed once, from a copy of notebooks/ (so ../examples resolves)."""
    work = tmp_path_factory.mktemp("nb")
    (work / "notebooks").mkdir()
    (work / "examples").symlink_to(ROOT / "examples")
    nb = nbformat.read(QUICKSTART, as_version=4)
    client = _execute(nb, work / "notebooks")
    return nb, client, work / "notebooks"


def test_the_widget_changes_at_least_five_times_while_the_training_cell_runs(quickstart):
    nb, client, _ = quickstart
    i = _training_cell(nb)
    finished = client.replies[i]
    steps_before = {
        s["snapshot"].get("step")
        for date, cell, s in client.updates
        if cell == i and s.get("snapshot") and date < finished
    }
    assert len(steps_before) >= 5, sorted(steps_before)


def test_the_final_widget_step_equals_the_loops(quickstart):
    nb, _, _ = quickstart
    i = _training_cell(nb)
    printed = _loss_lines(nb.cells[i])
    state = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    snaps = [m["state"]["snapshot"] for m in state.values() if m["state"].get("snapshot")]
    assert len(printed) == 60
    assert snaps[-1]["step"] == 60 and snaps[-1]["run"]["state"] == "finished"
    history = [m["state"]["history"] for m in state.values() if m["state"].get("history")][-1]
    assert history["series"]["train_loss"][0][-1] == 60


def test_the_cell_prints_one_summary_line_with_a_convention(quickstart):
    nb, _, _ = quickstart
    summary = [ln for ln in _text(nb.cells[_training_cell(nb)]).splitlines()
               if ln.startswith("trainmeter:")]  # fmt: skip
    assert len(summary) == 1
    assert "60 steps" in summary[0] and "FLOP/token [titan]" in summary[0]


def test_the_run_log_holds_one_step_record_per_optimizer_step(quickstart):
    _, _, cwd = quickstart
    (log,) = (cwd / ".trainmeter" / "runs").glob("*/run.jsonl")
    recs = [json.loads(x) for x in log.read_text().splitlines()]
    assert [r["step"] for r in recs if r["k"] == "step"] == list(range(1, 61))
    assert [r["k"] for r in recs].count("segment_start") == 1


def test_losses_are_identical_with_and_without_trainmeter(quickstart, tmp_path):
    nb, _, _ = quickstart
    plain = copy.deepcopy(nb)
    magic = ("%load_ext", "%trainmeter", "%%trainmeter")
    plain.cells = [c for c in plain.cells if c.cell_type == "code"]
    plain.cells = [c for c in plain.cells if not c.source.startswith(magic)]
    for cell in plain.cells:
        cell.outputs = []
    i = _training_cell(nb)
    plain.cells.append(copy.deepcopy(nb.cells[i]))
    plain.cells[-1].source = plain.cells[-1].source.split("\n", 1)[1]  # drop the magic line
    plain.cells[-1].outputs = []
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    _execute(plain, tmp_path / "notebooks")
    assert _loss_lines(plain.cells[-1]) == _loss_lines(nb.cells[i])
    assert len(_loss_lines(plain.cells[-1])) == 60


def _cells(*sources):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    return nb


def test_an_exception_in_the_cell_looks_exactly_as_without_trainmeter(tmp_path):
    body = "def f(x):\n    return 1 / x\n\nf(0)"
    nb = _cells("%load_ext trainmeter", "%load_ext trainmeter", f"%%trainmeter --no-widget\n{body}",
                body)  # fmt: skip
    _execute(nb, tmp_path, allow_errors=True)
    watched, plain = nb.cells[2].outputs, nb.cells[3].outputs
    err_w = [o for o in watched if o.output_type == "error"]
    err_p = [o for o in plain if o.output_type == "error"]
    assert len(err_w) == len(err_p) == 1
    assert err_w[0].ename == err_p[0].ename == "ZeroDivisionError"
    norm = [ln.replace("In[3]", "In[N]").replace("In[4]", "In[N]") for ln in err_w[0].traceback]
    assert norm == [ln.replace("In[4]", "In[N]") for ln in err_p[0].traceback]
    assert "already loaded" in _text(nb.cells[1])  # loading twice is harmless
    assert "trainmeter: failed" in _text(nb.cells[2])


def test_a_bad_flag_is_a_usage_error_and_runs_nothing(tmp_path):
    nb = _cells(
        "%load_ext trainmeter", "%%trainmeter --budget-tokens lots\nran = True", "'ran' in dir()"
    )
    _execute(nb, tmp_path, allow_errors=True)
    err = "".join(o.get("text", "") for o in nb.cells[1].outputs)  # IPython prints UsageError
    assert err.startswith("UsageError:") and "'lots'" in err
    assert nb.cells[2].outputs[0]["data"]["text/plain"] == "False"


def test_the_supervisor_closes_the_log_and_exits_when_the_kernel_shuts_down(tmp_path):
    nb = _cells(
        "%load_ext trainmeter",
        "from trainmeter.jupyter import extension\nextension.session().proc.pid",
        "%%trainmeter --no-widget\nimport trainmeter\ntrainmeter.emit(train_loss=1.0, step=1)",
    )
    _execute(nb, tmp_path)  # nbclient shuts the kernel down at the end
    sup = int(nb.cells[1].outputs[0]["data"]["text/plain"])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and Path(f"/proc/{sup}").exists():
        time.sleep(0.1)
    assert not Path(f"/proc/{sup}").exists(), "supervisor outlived its kernel"
    (log,) = (tmp_path / ".trainmeter" / "runs").glob("*/run.jsonl")
    recs = [json.loads(x) for x in log.read_text().splitlines()]
    recs = [r for r in recs if r["k"] != "checkpoint"]  # the run's last state, after run_end
    assert recs[-1]["k"] == "run_end"
    assert [r["value"] for r in recs if r["k"] == "series"] == [1.0]


def test_after_kill_9_of_the_kernel_the_supervisor_still_closes_the_log(tmp_path):
    import subprocess
    import sys

    code = (
        "from IPython.testing.globalipapp import start_ipython\n"
        "ip = start_ipython()\n"
        "ip.run_line_magic('load_ext', 'trainmeter')\n"
        "from trainmeter.jupyter import extension\n"
        "print('SUPERVISOR', extension.session().proc.pid, flush=True)\n"
        "ip.run_cell('%%trainmeter --no-widget\\nimport time\\ntime.sleep(60)')\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, env=_env(),
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    line = ""
    while not line.startswith("SUPERVISOR"):
        line = proc.stdout.readline()
    sup = int(line.split()[1])
    time.sleep(1.0)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and Path(f"/proc/{sup}").exists():
        time.sleep(0.1)
    assert not Path(f"/proc/{sup}").exists(), "supervisor outlived its killed kernel"
    (log,) = (tmp_path / ".trainmeter" / "runs").glob("*/run.jsonl")
    recs = [json.loads(x) for x in log.read_text().splitlines()]
    last = [r for r in recs if r["k"] != "checkpoint"][-1]  # a checkpoint follows run_end
    assert last["k"] == "run_end" and last["status"] == "error"
    assert recs[-1]["k"] == "checkpoint"


def _kernel():
    from jupyter_client.manager import start_new_kernel

    os.environ.update(_env())
    return start_new_kernel(kernel_name="python3")


def test_the_stop_button_ends_the_segment_as_interrupted_and_the_next_cell_continues(tmp_path):
    km, kc = _kernel()
    try:
        run_cell(kc, f"import os; os.chdir({str(tmp_path)!r})\n%load_ext trainmeter")
        msg_id = kc.execute("%%trainmeter --no-widget\nimport time\nfor i in range(600):\n"
                            "    time.sleep(0.1)")  # fmt: skip
        time.sleep(2.0)
        km.interrupt_kernel()
        reply = kc.get_shell_msg(timeout=30)
        assert reply["parent_header"]["msg_id"] == msg_id
        assert reply["content"]["status"] == "error"
        assert reply["content"]["ename"] == "KeyboardInterrupt"
        content, text = run_cell(kc, "%%trainmeter --no-widget\nx = 1")
        assert content["status"] == "ok" and text.startswith("trainmeter: finished")
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    (log,) = (tmp_path / ".trainmeter" / "runs").glob("*/run.jsonl")
    ends = [json.loads(x) for x in log.read_text().splitlines()]
    assert [r["status"] for r in ends if r["k"] == "segment_end"] == ["interrupted", "ok"]


def test_unload_stops_the_supervisor_and_reload_starts_a_fresh_one(tmp_path):
    km, kc = _kernel()
    try:
        pid = "from trainmeter.jupyter import extension\nprint(extension.session().proc.pid)"
        run_cell(kc, f"import os; os.chdir({str(tmp_path)!r})\n%load_ext trainmeter")
        first = int(run_cell(kc, pid)[1])
        run_cell(kc, "%reload_ext trainmeter")
        second = int(run_cell(kc, pid)[1])
        assert second != first and not Path(f"/proc/{first}").exists()
        run_cell(kc, "%unload_ext trainmeter")
        time.sleep(0.5)
        assert not Path(f"/proc/{second}").exists()
        content, _ = run_cell(kc, "%%trainmeter\nx = 1")
        assert content["status"] == "error"  # unloaded: the magic asks to load it again
        assert "%load_ext trainmeter" in content["evalue"]
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def test_torch_imported_first_and_plain_cells_between_are_not_counted(tmp_path):
    km, kc = _kernel()
    setup = (
        "import torch\ntorch.manual_seed(0)\n"
        "m = torch.nn.Sequential(torch.nn.Embedding(9, 4), torch.nn.Linear(4, 9))\n"
        "opt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "def train(n):\n"
        "    for _ in range(n):\n"
        "        m(torch.zeros(2, 3, dtype=torch.long)).sum().backward()\n"
        "        opt.step(); opt.zero_grad()\n"
    )
    try:
        run_cell(kc, f"import os; os.chdir({str(tmp_path)!r})\n{setup}")
        run_cell(kc, "%load_ext trainmeter")
        run_cell(kc, "train(3)")  # not under %%trainmeter: not part of any run
        assert run_cell(kc, "%%trainmeter --no-widget\ntrain(4)")[0]["status"] == "ok"
        run_cell(kc, "train(5)")
        assert run_cell(kc, "%%trainmeter --no-widget\ntrain(2)")[0]["status"] == "ok"
        run_cell(kc, "%trainmeter stop")
        shown = (
            "w = trainmeter.show(str(find_run(None)))\nprint(w.snapshot['step'], w.history['seq'])"
        )
        content, text = run_cell(
            kc, f"import trainmeter\nfrom trainmeter.supervisor.store import find_run\n{shown}"
        )
        assert content["status"] == "ok" and text.split()[0] == "6"  # a finished run, from its log
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    (log,) = (tmp_path / ".trainmeter" / "runs").glob("*/run.jsonl")
    steps = [json.loads(x) for x in log.read_text().splitlines() if '"k":"step"' in x]
    assert [s["step"] for s in steps] == [1, 2, 3, 4, 5, 6]  # 4 + 2, the plain cells left out
    assert [s["tokens"] for s in steps] == [6] * 6  # 2 x 3 each, by hand


def test_a_broken_widget_never_stops_the_training_cell(tmp_path):
    km, kc = _kernel()
    try:
        run_cell(kc, f"import os; os.chdir({str(tmp_path)!r})\n%load_ext trainmeter")
        run_cell(kc, "from trainmeter.jupyter import widget\n"
                 "def broken(**kw):\n    raise FileNotFoundError('bundle missing')\n"
                 "widget.TrainmeterWidget = broken")  # fmt: skip
        content, text = run_cell(kc, "%%trainmeter\nprint('trained')")
        assert content["status"] == "ok"
        assert "trained" in text and "trainmeter: finished" in text
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
