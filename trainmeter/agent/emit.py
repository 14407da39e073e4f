"""``trainmeter.emit(**series)``: report scalars from a loop that logs to no tracker.

Values must already be host numbers: Python ``int``/``float``, NumPy scalars, or 0-d CPU
tensors. An accelerator tensor is skipped with one warning, since reading it would
synchronize the device (the no-device-sync invariant). A value or step that is not a usable number
is skipped and counted (``Sender.count``: the run's ``dropped`` record); emit itself never turns off
and never raises (the never-raise invariant).
"""

from __future__ import annotations

import math
import operator
import sys

from trainmeter.agent import guard, runtime

MAX_STEP = 2**53  # steps above this lose precision as JSON numbers in most readers

# drop reasons (docs/reliability.md)
BAD_STEP = "emit step not an integer"
STEP_RANGE = "emit step out of range"
VALUE_RANGE = "emit value out of range"
NOT_NUMBER = "emit value not a real number"
DEVICE_VALUE = "emit value on an accelerator"
INTERNAL = "emit internal error"


def emit(step: int | None = None, **series: object) -> None:
    """Record named scalar series at ``step``.

    Args:
        step: the optimizer step the values belong to (an integer 0 <= step <= 2**53; an
            integral float is taken); default: the steps completed so far in this process (so
            call it after ``optimizer.step()``). Any other step skips the whole call, counted.
        **series: name -> value, e.g. ``emit(train_loss=loss.item(), lr=sched.get_last_lr()[0])``.
            A value that is not a real number within float range is skipped and counted; an
            infinite or NaN value becomes a note.
    Returns:
        None. Outside a run (no ``tm``, no ``%%trainmeter``) it does nothing.
    """
    agent = None
    try:
        agent = runtime.current()
        if agent is None or not agent.armed:
            return
        at = agent.step if step is None else _step(step)
        if isinstance(at, str):  # a drop reason: the call's step is unusable
            _count(agent, at, len(series))
            return
        for name, value in series.items():
            _emit_one(agent, name, value, at)
    except Exception as exc:  # a bug here: say so once, skip this call, the next one runs
        guard.warn_once("emit", f"emit skipped a call after an internal error: {exc!r}")
        _count(agent, INTERNAL, 1)


def _emit_one(agent, name: object, value: object, at: int) -> None:
    number = _host_number(name, value)
    if isinstance(number, str):
        _count(agent, number, 1)
        return
    if not math.isfinite(number):
        agent.put("note", text=f"{name} is {number} at step {at}", source="emit")
        return
    agent.put("series", name=str(name), value=number, step=at)
    from trainmeter.core.catalog import role  # loaded at the first emit, not at import

    if role(str(name)) == "train_loss":
        agent.train_loss_reported()  # the run's train loss: backward's is not needed


def _step(step: object) -> int | str:
    """The step as an int, or the reason it is not usable."""
    if isinstance(step, bool):
        return BAD_STEP
    if isinstance(step, float):
        if not step.is_integer():  # inf, nan, 2.5
            return BAD_STEP
        step = int(step)
    try:
        n = operator.index(step)  # int, NumPy integers, 0-d integer tensors
    except Exception:
        return BAD_STEP
    return n if 0 <= n <= MAX_STEP else STEP_RANGE


def _host_number(name: object, value: object) -> float | str:
    """``value`` as a float, or the drop reason when it is not one."""
    if isinstance(value, bool):
        return NOT_NUMBER
    try:
        if isinstance(value, (int, float)):
            return float(value)
        kind = type(value).__module__.split(".")[0]
        if kind == "numpy" and getattr(value, "shape", None) == ():
            return _real(value.item())
        if kind == "torch" and hasattr(value, "device"):
            if value.device.type == "cpu" and value.dim() == 0:
                return _real(value.item())  # a CPU scalar: no device to synchronize
            guard.warn_once(
                "emit-device",
                f"emit({name}=...) got a {value.device.type} tensor; pass a Python number "
                "(trainmeter never reads accelerator tensors: that would synchronize the device)",
            )
            return DEVICE_VALUE
    except OverflowError:  # an int beyond float range (10**400)
        return VALUE_RANGE
    except (TypeError, ValueError):
        return NOT_NUMBER
    guard.warn_once(f"emit-type-{name}", f"emit({name}=...) skipped a {type(value).__name__}")
    return NOT_NUMBER


def _real(item: object) -> float | str:
    """A NumPy or tensor scalar's ``item()`` as a float: a long double beyond float range is
    out of range (``float()`` would make it inf); a complex or a string is not a number."""
    if isinstance(item, (int, float)) and not isinstance(item, bool):
        return float(item)
    if type(item).__name__ in ("longdouble", "float128", "float96"):
        if abs(item) > sys.float_info.max and abs(item) != math.inf:
            return VALUE_RANGE
        return float(item)
    return NOT_NUMBER  # a complex, a string, a 0-d object array


def _count(agent, reason: str, n: int) -> None:
    try:
        agent.sender.count(reason, n)
    except Exception:
        pass
