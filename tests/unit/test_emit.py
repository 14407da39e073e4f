"""``emit()``: a value or step it cannot use is skipped and counted, never the end of emit."""

import math

import pytest

from trainmeter.agent import emit as emit_mod
from trainmeter.agent import guard, runtime


class _Sender:
    def __init__(self):
        self.drops = {}

    def count(self, reason, n=1):
        self.drops[reason] = self.drops.get(reason, 0) + n


class _Agent:
    armed, step = True, 7

    def __init__(self):
        self.sender = _Sender()
        self.recs = []

    def put(self, kind, **fields):
        self.recs.append((kind, fields))

    def train_loss_reported(self):
        pass

    def series(self):
        return [(f["name"], f["value"], f["step"]) for k, f in self.recs if k == "series"]


@pytest.fixture
def agent(monkeypatch, fresh_guard):
    a = _Agent()
    monkeypatch.setattr(runtime, "_agent", a)
    return a


@pytest.mark.parametrize(
    "value, reason",
    [
        (10**400, "emit value out of range"),  # float(10**400) raises OverflowError
        (-(10**400), "emit value out of range"),
        (1 + 2j, "emit value not a real number"),
        ("0.5", "emit value not a real number"),
        (None, "emit value not a real number"),
        (True, "emit value not a real number"),
    ],
)
def test_a_bad_value_is_skipped_counted_and_later_emits_arrive(agent, value, reason):
    emit_mod.emit(step=1, bad=value, good=0.5)  # the call's other value still goes out
    emit_mod.emit(step=2, loss=1.25)
    emit_mod.emit(lr=3e-4)  # default step: the agent's (7)
    assert agent.series() == [("good", 0.5, 1), ("loss", 1.25, 2), ("lr", 3e-4, 7)]
    assert agent.sender.drops == {reason: 1}
    assert not guard.is_off("emit")


@pytest.mark.parametrize(
    "step, reason",
    [
        ("abc", "emit step not an integer"),
        ("5", "emit step not an integer"),
        (float("inf"), "emit step not an integer"),
        (float("nan"), "emit step not an integer"),
        (2.5, "emit step not an integer"),
        (True, "emit step not an integer"),
        (10**400, "emit step out of range"),
        (-1, "emit step out of range"),
        (2**53 + 1, "emit step out of range"),
    ],
)
def test_a_bad_step_skips_the_call_counts_its_values_and_later_emits_arrive(agent, step, reason):
    emit_mod.emit(step=step, a=1.0, b=2.0)
    emit_mod.emit(step=3, a=4.0)
    assert agent.series() == [("a", 4.0, 3)]
    assert agent.sender.drops == {reason: 2}  # both values of the bad call


def test_integral_float_and_numpy_steps_are_taken(agent):
    np = pytest.importorskip("numpy")
    emit_mod.emit(step=4.0, a=1)
    emit_mod.emit(step=np.int64(5), a=np.float32(0.5))
    emit_mod.emit(step=2**53, a=2)
    assert agent.series() == [("a", 1.0, 4), ("a", 0.5, 5), ("a", 2.0, 2**53)]
    assert agent.sender.drops == {}


def test_numpy_complex_and_huge_longdouble_are_counted(agent):
    np = pytest.importorskip("numpy")
    emit_mod.emit(step=1, c=np.complex128(1 + 1j), big=np.longdouble("1e4000"), ok=np.int64(3))
    assert agent.series() == [("ok", 3.0, 1)]
    # 1e4000 fits an x86 80-bit long double (item() keeps it one), not a float64
    assert agent.sender.drops == {"emit value not a real number": 1, "emit value out of range": 1}


def test_infinite_value_is_a_note_not_a_series(agent):
    emit_mod.emit(step=1, loss=math.inf)
    assert agent.recs == [("note", {"text": "loss is inf at step 1", "source": "emit"})]


def test_an_internal_error_skips_that_call_only(agent, monkeypatch):
    real = emit_mod._host_number
    calls = []

    def flaky(name, value):
        calls.append(name)
        if len(calls) == 1:
            raise RuntimeError("boom")
        return real(name, value)

    monkeypatch.setattr(emit_mod, "_host_number", flaky)
    emit_mod.emit(step=1, a=1.0)
    emit_mod.emit(step=2, a=2.0)
    assert agent.series() == [("a", 2.0, 2)]
    assert agent.sender.drops == {"emit internal error": 1}
    assert not guard.is_off("emit")
