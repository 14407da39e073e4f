"""Replay gives what the live view had: a real run watched by the live engine as its records
arrived (agent over the socket, a scripted GPU sampler at 10 Hz), then its log replayed, from
its first line and from its checkpoints (the cadence made small here, so the run writes many).

``tm``'s own run mode (``commands.run.run_command``) runs in this process with ``Live`` swapped for
a subclass that keeps what the live engine held: the final snapshot ``close_run`` returned,
the chart history, and after every ingested batch the engine's snapshot and the log's length.
"""

import math
import sys

import pytest
from conftest import EXAMPLE, ROOT, Clock

from trainmeter.commands import run
from trainmeter.core import checkpoint, engine, logread, records
from trainmeter.core.engine import replay
from trainmeter.jupyter.replay import load, series_table, text_table
from trainmeter.sources import open_backend
from trainmeter.supervisor import launcher
from trainmeter.supervisor import live as live_mod
from trainmeter.supervisor.live import Live
from trainmeter.supervisor.sampler import Sampler

pytestmark = pytest.mark.slow

STEPS = 20
CHECKED = 40  # live snapshots compared with a replay of the log so far (evenly spread)


class _Watched(Live):
    """``Live`` that keeps what its engine held (the test's window on the live view)."""

    last = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.checkpoints = []  # (log bytes written, snapshot at the newest record's time)
        self.final = None
        _Watched.last = self

    def ingest(self, recs):
        with self.cond:
            written = super().ingest(recs)
            if written:
                size = self.log_path.stat().st_size
                self.checkpoints.append((size, self.engine.snapshot(now=self.engine.last_t)))
            return written

    def close_run(self, status, exit_code=None):
        with self.cond:
            snap = super().close_run(status, exit_code)
            self.final = (snap, self.engine.timeline.full())
            return snap


def diff(live, replayed, path="") -> list[str]:
    """Every field where two snapshots differ, as ``path: live != replayed``; floats compare
    exactly (the same records folded by the same code in the same order)."""
    if isinstance(live, dict) and isinstance(replayed, dict):
        out = [f"{path}/{k}: missing on one side" for k in live.keys() ^ replayed.keys()]
        for k in live.keys() & replayed.keys():
            out += diff(live[k], replayed[k], f"{path}/{k}")
        return out
    if isinstance(live, list) and isinstance(replayed, list) and len(live) == len(replayed):
        pairs = enumerate(zip(live, replayed, strict=True))
        return [d for i, (a, b) in pairs for d in diff(a, b, f"{path}/{i}")]
    if type(live) is not type(replayed):
        return [f"{path}: {live!r} ({type(live).__name__}) != {replayed!r}"]
    if live == replayed or (isinstance(live, float) and math.isnan(live) and math.isnan(replayed)):
        return []
    return [f"{path}: {live!r} != {replayed!r}"]


def _often(mp):
    """Checkpoints at a small cadence: one whenever the log grew by its last one's size."""
    mp.setattr(live_mod, "CHECKPOINT_MIN_BYTES", 2048)
    mp.setattr(live_mod, "CHECKPOINT_GROWTH", 1)


def _checkpoints(data: bytes) -> int:
    return sum(x.startswith(logread.CHECKPOINT) for x in data.splitlines())


@pytest.fixture(scope="module")
def watched(tmp_path_factory, monkeypatch_module):
    work = tmp_path_factory.mktemp("replay")
    monkeypatch_module.chdir(work)
    _often(monkeypatch_module)
    monkeypatch_module.setenv("PYTHONPATH", str(ROOT))
    monkeypatch_module.setattr(launcher, "Live", _Watched)
    args = run.run_parser().parse_args(["--budget-tokens", "1M", "--", "x"])
    cmd = [sys.executable, str(EXAMPLE), "--steps", str(STEPS), "--eval-every", "10",
           "--batch-size", "4", "--seq-len", "32"]  # fmt: skip
    rc = run.run_command(cmd, "replay-test", run.run_opts(args), quiet=True,
                         root=str(work / ".trainmeter"), web=False,
                         gpu_backend="fake:h100x2", sample_hz=10.0)  # fmt: skip
    assert rc == 0
    return _Watched.last


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


def test_the_run_was_watched_with_everything_a_live_view_gets(watched):
    final, _ = watched.final
    assert final["step"] == STEPS and final["run"]["state"] == "finished"
    assert final["series"]["val_loss"]["step"] == 20  # eval every 10 steps: 10, 20
    assert final["hardware"]["gpus"][0]["sm_active"] is not None  # the fake H100's GPM
    assert final["energy_j"] > 0 and final["time_split"]["eval"] > 0
    assert len(watched.checkpoints) >= 10  # the engine was read many times while it ran
    assert _checkpoints(watched.log_path.read_bytes()) >= 4  # and written into the log


def test_replaying_the_log_gives_the_live_final_snapshot_field_by_field(watched):
    final, history = watched.final
    done = load(watched.log_path.parent)  # from the last checkpoint: the log's last line
    assert checkpoint.resume(watched.log_path, engine)[1].start == watched.log_path.stat().st_size
    # No field is excluded: once run_end is folded, no figure depends on the clock (the open
    # segment's elapsed time is the only one that does, and run_end closes it).
    assert diff(final, done.snapshot) == []
    assert diff(history, done.history) == []
    assert history["series"]["tokens_per_s"][0][-1] == STEPS  # the chart reached the last step


def test_every_snapshot_the_live_engine_had_is_the_replay_of_the_log_so_far(watched):
    """At each ingested batch, the live engine's snapshot equals the replay of the log's lines
    up to then, both taken at the newest record's time. Clock-dependent while the run runs
    (and so pinned here): ``elapsed_s`` (the open segment counts up to now), ``gpu_hours`` and
    ``time_split.other`` (both from ``elapsed_s``); the live page shows them at the wall
    clock."""
    data = watched.log_path.read_bytes()
    every = max(1, len(watched.checkpoints) // CHECKED)
    for size, live_snap in [*watched.checkpoints[::every], watched.checkpoints[-1]]:
        lines = data[:size].splitlines()
        newest = max(r["t"] for r in logread.LogReader(lines))  # the run is running
        snap = replay(lines, now=newest).snapshot()
        assert diff(live_snap, snap) == [], f"after {size} bytes of the log"


def test_every_snapshot_the_live_engine_had_is_the_replay_from_the_last_checkpoint(
    watched, tmp_path
):
    """As above, the log so far read as ``tm ls`` and ``tm replay`` read it: from its last
    checkpoint on. Every ingested batch is compared; most start from a checkpoint."""
    data = watched.log_path.read_bytes()
    cut = tmp_path / "run.jsonl"
    resumed = 0
    for size, live_snap in watched.checkpoints:
        cut.write_bytes(data[:size])
        newest = max(r["t"] for r in logread.LogReader(cut))
        resumed += checkpoint.resume(cut, engine)[0] is not None
        snap = replay(cut, now=newest).snapshot()
        assert diff(live_snap, snap) == [], f"after {size} bytes of the log"
    assert resumed > len(watched.checkpoints) // 2


def test_the_series_table_has_every_reported_value_by_step(watched):
    table = series_table(watched.log_path.parent)
    assert table["step"] == list(range(1, STEPS + 1))
    assert len(table["train_loss"]) == STEPS and None not in table["train_loss"]
    # val_loss at steps 10 and 20 only, as the loop printed it (--eval-every 10)
    val = [s for s, v in zip(table["step"], table["val_loss"], strict=True) if v is not None]
    assert val == [10, 20]
    text = text_table(table, last=3).splitlines()
    assert text[0].split() == ["step", "train_loss", "val_loss"]
    assert text[-1] == "(the last 3 of 20 rows)"
    assert text[1].split()[0] == "18" and text[1].split()[2] == "-"  # no val_loss at step 18
    assert float(text[3].split()[2]) == pytest.approx(table["val_loss"][-1], rel=1e-5)


MODEL = {"params": 1000, "embedding_params": 100, "token_embedding_params": 100, "layers": 2,
         "width": 8, "heads": 2, "seq_len": 4, "vocab": 50, "device": "cpu"}  # fmt: skip


def _send(live, clock, kind, **fields):
    """One agent record as the socket delivers it (JSON on the wire, then validated)."""
    live.ingest([records.decode(records.encode(records.make(kind, clock(), **fields)))])


def _cell(live, clock, sampler, first_step, steps):
    """A %%trainmeter cell: two ranks step every 0.5 s, rank 0 logs a loss, the sampler reads
    the fake GPU every second, rank 0 waits on data inside each step."""
    live.segment_start("nb", {"budget_tokens": 10_000}, new=False)
    for step in range(first_step, first_step + steps):
        clock.tick(0.5)
        _send(live, clock, "span", name="data", rank=0, dur=0.1)
        for rank in (0, 1):
            _send(live, clock, "step", step=step, rank=rank, tokens=32, samples=4)
        _send(live, clock, "series", name="train_loss", value=1.0 / step, step=step)
        if step % 2 == 0:
            sampler.tick()
    live.segment_end("ok")


def test_a_notebook_run_with_pauses_between_cells_replays_to_the_live_snapshot(
    tmp_path, monkeypatch
):
    """Cells, the gaps between them (not counted), the sampler's pause and resume: the live
    engine's final snapshot and chart history equal the replay's, field by field, from the
    log's last checkpoint and from its first line."""
    _often(monkeypatch)
    clock = Clock()
    live = _Watched(tmp_path, clock=clock)
    backend = open_backend("fake:h100x1", clock=clock)
    sampler = Sampler(live, backend, None, clock=clock, active=lambda: live.segment_open)
    live.open_run("nb", ["%%trainmeter"], {})
    _send(live, clock, "agent_hello", pid=7, rank=0, world_size=2)
    _send(live, clock, "model", **MODEL)
    _cell(live, clock, sampler, 1, 6)
    clock.tick(120.0)  # a pause between cells: not training time, no samples
    sampler.tick()
    _cell(live, clock, sampler, 7, 4)
    live.close_run("ok")
    final, history = live.final
    assert final["step"] == 10 and final["elapsed_s"] == pytest.approx(5.0)  # 10 x 0.5 s
    assert final["time_split"]["data"] == pytest.approx(1.0)  # 10 x 0.1 s, by hand
    assert len(history["series"]["gpu0/gpu_util"][0]) == 5  # at steps 2, 4, 6, 8, 10
    assert _checkpoints(live.log_path.read_bytes()) >= 2  # one mid-run, one after run_end
    done = load(live.log_path.parent)
    assert diff(final, done.snapshot) == []
    assert diff(history, done.history) == []
    full = replay(live.log_path, full=True)
    snap = full.snapshot()
    snap["run"]["log"] = final["run"]["log"]  # where the log is: said by Live and by load()
    assert diff(final, snap) == [] and diff(history, full.timeline.full()) == []
