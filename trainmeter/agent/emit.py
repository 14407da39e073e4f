"""``trainmeter.emit(**series)``: report scalars from a loop that logs to no tracker.

Values must already be host numbers: Python ``int``/``float``, NumPy scalars, or 0-d CPU
tensors. An accelerator tensor is skipped with one warning, since reading it would
synchronize the device (invariant 8). Never raises (invariant 1).
"""

from __future__ import annotations

import math

from trainmeter.agent import guard, runtime


def emit(step: int | None = None, **series: object) -> None:
    """Record named scalar series at ``step``.

    Args:
        step: the optimizer step the values belong to; default: the steps completed so far
            in this process (so call it after ``optimizer.step()``).
        **series: name -> value, e.g. ``emit(train_loss=loss.item(), lr=sched.get_last_lr()[0])``.
    Returns:
        None. Outside a run (no ``tm``, no ``%%trainmeter``) it does nothing.
    """
    if guard.is_off("emit"):
        return
    try:
        agent = runtime.current()
        if agent is None or not agent.armed:
            return
        at = agent.step if step is None else int(step)
        for name, value in series.items():
            number = _host_number(name, value)
            if number is None:
                continue
            if not math.isfinite(number):
                agent.put("note", text=f"{name} is {number} at step {at}", source="emit")
                continue
            agent.put("series", name=str(name), value=number, step=at)
            from trainmeter.core.catalog import role  # loaded at the first emit, not at import

            if role(str(name)) == "train_loss":
                agent.train_loss_reported()  # the run's train loss: backward's is not needed
    except Exception as exc:
        guard.failed("emit", exc)


def _host_number(name: str, value: object) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    kind = type(value).__module__.split(".")[0]
    if kind == "numpy" and getattr(value, "shape", None) == ():
        return float(value.item())
    if kind == "torch" and hasattr(value, "device"):
        if value.device.type == "cpu" and value.dim() == 0:
            return float(value.item())  # a CPU scalar: no device to synchronize
        guard.warn_once(
            "emit-device",
            f"emit({name}=...) got a {value.device.type} tensor; pass a Python number "
            "(trainmeter never reads accelerator tensors: that would synchronize the device)",
        )
        return None
    guard.warn_once(f"emit-type-{name}", f"emit({name}=...) skipped a {type(value).__name__}")
    return None
