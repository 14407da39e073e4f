"""The supervisor's sampler (trainmeter/supervisor/sampler.py) with fake GPU backends and a real
``Live`` writing run logs in a temporary folder."""

import json
import threading
import time

import pytest
from conftest import Clock

from trainmeter.sources import HostSource, NoneBackend, open_backend
from trainmeter.sources.base import GPM_FIELDS
from trainmeter.supervisor.live import Live
from trainmeter.supervisor.sampler import DEFAULT_HZ, Sampler, start_sampler


def _live(tmp_path):
    live = Live(tmp_path / ".trainmeter")
    live.open_run("test", ["train.py"], {"dtype": "bf16"})
    return live


def _log(live) -> list[dict]:
    recs = [json.loads(x) for x in live.log_path.read_text().splitlines() if x.strip()]
    return [r for r in recs if r["k"] != "checkpoint"]  # checkpoints: state, not records


def _kinds(recs) -> list[str]:
    return [r["k"] for r in recs]


def _wait(predicate, timeout=5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


class Spy:
    """A backend wrapper that counts calls and can fail its n-th sample."""

    def __init__(self, inner, fail_at=None, close_error=False):
        self.inner, self.fail_at, self.close_error = inner, fail_at, close_error
        self.kind, self.reason = inner.kind, inner.reason
        self.samples = self.closes = 0

    def devices(self):
        return self.inner.devices()

    def sample(self):
        self.samples += 1
        if self.fail_at is not None and self.samples >= self.fail_at:
            raise RuntimeError("driver wedged")
        return self.inner.sample()

    def close(self):
        self.closes += 1
        self.inner.close()
        if self.close_error:
            raise OSError("close failed")


def test_the_default_rate_is_1_hz_and_rates_outside_1_to_10_are_refused(tmp_path):
    live = _live(tmp_path)
    assert DEFAULT_HZ == 1.0
    for hz in (0.5, 0, 10.5, 100, float("nan")):
        with pytest.raises(ValueError, match="1 to 10 Hz"):
            Sampler(live, NoneBackend("off"), hz=hz)
    for hz in (1, 4, 10):
        assert Sampler(live, NoneBackend("off"), hz=hz).period == pytest.approx(1 / hz)


def test_the_first_sample_reaches_the_log_within_a_second_of_start(tmp_path):
    live = _live(tmp_path)
    sampler = Sampler(live, open_backend("fake:h100x2"), HostSource(), hz=DEFAULT_HZ)
    t0 = time.monotonic()
    sampler.start()
    try:
        assert _wait(lambda: "gpu" in _kinds(_log(live)), timeout=1.0)
        assert time.monotonic() - t0 < 1.0
    finally:
        sampler.stop()
    kinds = _kinds(_log(live))
    assert kinds[:3] == ["run_start", "gpu_devices", "gpu"]
    snap = live.snapshot()
    assert snap["hardware"]["backend"] == "fake:h100x2" and len(snap["hardware"]["gpus"]) == 2


def test_every_run_starts_with_the_device_facts(tmp_path):
    clock = Clock()
    live = _live(tmp_path)
    sampler = Sampler(live, open_backend("fake:h100x2", clock=clock), clock=clock)
    for _ in range(3):
        clock.tick(1.0)
        assert sampler.tick()
    first = _log(live)
    live.open_run("second", ["train.py"], {})  # closes the first run
    clock.tick(1.0)
    assert sampler.tick()
    second = _log(live)
    assert _kinds(first) == ["run_start", "gpu_devices", "gpu", "gpu", "gpu"]
    assert _kinds(second) == ["run_start", "gpu_devices", "gpu"]
    (devices,) = [r for r in second if r["k"] == "gpu_devices"]
    assert devices["backend"] == "fake:h100x2" and devices["reason"] is None
    assert [d["name"] for d in devices["devices"]] == ["NVIDIA H100 80GB HBM3"] * 2
    live.close_run("ok")
    assert not sampler.tick()  # no run open: nothing written, nothing raised


def test_samples_are_compact_no_none_and_missing_only_when_it_changes(tmp_path):
    clock = Clock()
    live = _live(tmp_path)
    sampler = Sampler(live, open_backend("fake:a100", clock=clock), clock=clock)
    for _ in range(5):
        clock.tick(1.0)
        sampler.tick()
    gpus = [r["gpus"][0] for r in _log(live) if r["k"] == "gpu"]
    assert len(gpus) == 5
    for g in gpus:
        assert None not in g.values()
        assert not set(GPM_FIELDS) & set(g)  # no GPM on an A100: left out, not null
    # the A100's reasons never change: sent with the first sample only
    assert ["missing" in g for g in gpus] == [True, False, False, False, False]
    assert gpus[0]["missing"]["sm_active"].startswith("not on this GPU: needs Hopper")
    # and replay still shows them on the last sample
    (gpu,) = live.snapshot()["hardware"]["gpus"]
    assert gpu["sm_active"] is None and "needs Hopper" in gpu["missing"]["sm_active"]
    assert gpu["gpu_util"] is not None


def test_a_hopper_sends_missing_again_when_gpm_starts_answering(tmp_path):
    clock = Clock()
    live = _live(tmp_path)
    sampler = Sampler(live, open_backend("fake:h100", clock=clock), clock=clock)
    sampler.tick()  # same instant as the first GPM sample: < 100 ms, no GPM values yet
    for _ in range(3):
        clock.tick(1.0)
        sampler.tick()
    gpus = [r["gpus"][0] for r in _log(live) if r["k"] == "gpu"]
    assert "GPM needs 100 ms" in gpus[0]["missing"]["sm_active"]
    assert "missing" in gpus[1] and "sm_active" not in gpus[1]["missing"]  # changed: sent
    assert "missing" not in gpus[2] and "missing" not in gpus[3]  # unchanged: left out
    assert all(set(GPM_FIELDS) <= set(g) for g in gpus[1:])


def test_a_backend_that_raises_mid_run_gives_one_note_and_sampling_stops(tmp_path):
    live = _live(tmp_path)
    backend = Spy(open_backend("fake:h100"), fail_at=3)
    sampler = Sampler(live, backend, hz=10).start()
    assert _wait(lambda: not sampler._thread.is_alive(), timeout=5.0)
    calls = backend.samples
    time.sleep(0.3)  # three more periods at 10 Hz: no more calls
    assert backend.samples == calls == 3
    sampler.stop()  # still fine after the thread ended
    notes = [r["text"] for r in _log(live) if r["k"] == "note"]
    assert notes == ["hardware sampling stopped: RuntimeError: driver wedged"]
    assert len([r for r in _log(live) if r["k"] == "gpu"]) == 2
    assert backend.closes == 1


def test_stop_closes_the_backend_once_and_never_raises(tmp_path):
    live = _live(tmp_path)
    clock = Clock()
    fake = open_backend("fake:h100x2", clock=clock)
    nvml = fake.nvml
    sampler = Sampler(live, fake, HostSource(), hz=10, clock=clock).start()
    assert _wait(lambda: "gpu" in _kinds(_log(live)))
    sampler.stop()
    assert not sampler._thread.is_alive()
    assert nvml.calls["nvmlShutdown"] == 1 and nvml.frees == nvml.allocs == 4  # 2 per GPU
    failing = Spy(NoneBackend("off"), close_error=True)
    Sampler(live, failing).stop()  # a backend whose close raises: swallowed
    assert failing.closes == 1


def test_an_inactive_sampler_writes_nothing_and_marks_the_first_sample_after(tmp_path):
    clock = Clock()
    live = _live(tmp_path)
    on = threading.Event()
    on.set()
    sampler = Sampler(live, open_backend("fake:h100", clock=clock), clock=clock,
                      active=on.is_set)  # fmt: skip
    clock.tick(1.0)
    assert sampler.tick()
    on.clear()  # between notebook cells
    clock.tick(1.0)
    assert not sampler.tick()
    on.set()
    clock.tick(1.0)
    assert sampler.tick()
    clock.tick(1.0)
    assert sampler.tick()
    gpu = [r for r in _log(live) if r["k"] == "gpu"]
    assert [r.get("resume") for r in gpu] == [None, True, None]


def test_start_sampler_with_nvml_on_a_machine_without_it_notes_why_and_returns_none(tmp_path):
    probe = open_backend(None)
    probe.close()
    if not isinstance(probe, NoneBackend):
        pytest.skip("NVML loads on this machine")
    live = _live(tmp_path)
    assert start_sampler(live, "nvml", 1.0, tuple) is None
    notes = [r["text"] for r in _log(live) if r["k"] == "note"]
    assert len(notes) == 1 and notes[0].startswith("no GPU counters: no NVML")
    assert "gpu" not in _kinds(_log(live))


def test_a_reading_taken_as_the_cell_ended_is_dropped_whole(tmp_path):
    clock = Clock()
    live = _live(tmp_path)
    answers = iter([True, False])  # active when the tick began, not any more at the write

    sampler = Sampler(live, open_backend("fake:a100", clock=clock), clock=clock,
                      active=lambda: next(answers, True))  # fmt: skip
    assert not sampler.tick()
    assert _kinds(_log(live)) == ["run_start"]
    clock.tick(1.0)
    assert sampler.tick()
    # nothing of the dropped reading counts as sent: device facts first, reasons included
    recs = _log(live)
    assert _kinds(recs) == ["run_start", "gpu_devices", "gpu"]
    assert "needs Hopper" in recs[2]["gpus"][0]["missing"]["sm_active"]
    assert "resume" not in recs[2]  # the first sample of a run is not a resumption
