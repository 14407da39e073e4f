"""Tracker taps: the scalars a loop already sends to wandb, TensorBoard or MLflow become series.

Attached by the agent when the user's code imports the tracker (``importhook.when_imported``;
the agent never imports one itself). Each public call is wrapped once, on the object the user
calls through, and the wrapper:

1. calls the tracker's own function first and returns its result unchanged (an exception from
   the tracker propagates unchanged and records nothing);
2. then, guarded (``guard.py``: an internal error warns once and turns that tap off, invariant
   1), reads the values that are host numbers (Python ``int``/``float``, NumPy scalars, 0-d
   CPU tensors; never an accelerator tensor, the no-device-sync invariant) and queues one ``series``
   record per value through the agent's sender, the path ``emit()`` uses, with the tracker's own
   step when the call gave one, else the agent's optimizer step, and the name's ``role`` from
   :mod:`trainmeter.core.catalog`.

A tapped call made inside another tapped call (a writer subclass whose ``add_scalars`` calls
``add_scalar``, say) is not recorded twice: a thread-local flag marks the outer call.
``detach()`` puts every original back (unless something wrapped it after us: then our wrapper
stays and only passes through). docs/spec.md "Tracker taps" has the rules for names, steps
and values.

What is wrapped, and where the step comes from:

- wandb: ``wandb.Run.log`` (``wandb.init`` sets ``wandb.log`` to the run's bound ``log``);
  ``step=``.
- TensorBoard: ``torch.utils.tensorboard.SummaryWriter.add_scalar`` and ``add_scalars``;
  ``global_step``. tensorboardX: the same two on ``tensorboardX.SummaryWriter``.
- MLflow: ``mlflow.log_metric`` and ``log_metrics`` (in ``mlflow`` and in
  ``mlflow.tracking.fluent``); ``step``.
"""

from __future__ import annotations

import functools
import math
import sys
import threading
import types
from collections.abc import Callable

from trainmeter.agent import guard
from trainmeter.core.catalog import role as _role

# The modules whose import attaches a tap (runtime.install registers them with when_imported).
MODULES = ("wandb", "torch.utils.tensorboard", "tensorboardX", "mlflow")
MAX_NAMES = 256  # distinct series names taken from trackers per process (later names: one note)
_MARK = "__trainmeter_tap__"  # set on our wrappers: never wrap a wrapper of ours again


class TrackerTaps:
    """The tracker side of one agent.

    Args:
        agent: the :class:`trainmeter.agent.runtime.Agent` (its ``step``, ``armed``, ``put``).
    """

    def __init__(self, agent) -> None:
        self.agent = agent
        self.off = False  # detached: wrappers left in place by someone else only pass through
        self._patches: list[tuple[object, str, object, Callable, bool]] = []
        self._roles: dict[str, str | None] = {}  # name -> role, for the names taken so far
        self._noted: set[str] = set()
        self._busy = threading.local()  # inside a tapped call on this thread

    # -- attach / detach --------------------------------------------------------------------
    def attach(self, module: types.ModuleType) -> None:
        """Wrap the logging calls of a tracker the user's code just imported."""
        name = module.__name__
        if name == "wandb":
            run = getattr(module, "Run", None)
            if run is None:  # older wandb: the class lives in wandb.sdk.wandb_run only
                run = getattr(sys.modules.get("wandb.sdk.wandb_run"), "Run", None)
            if run is not None:
                wrapper = self._wrap(run, "log", self._on_wandb_log, "wandb")
                self._rebind_wandb_log(module, wrapper)
        elif name in ("torch.utils.tensorboard", "tensorboardX"):
            source = "tensorboard" if name.startswith("torch") else "tensorboardX"
            writer = getattr(module, "SummaryWriter", None)
            if writer is not None:
                self._wrap(writer, "add_scalar", self._on_add_scalar, source)
                self._wrap(writer, "add_scalars", self._on_add_scalars, source)
        elif name == "mlflow":
            fluent = sys.modules.get("mlflow.tracking.fluent")
            for attr, record in (("log_metric", self._on_log_metric),
                                 ("log_metrics", self._on_log_metrics)):  # fmt: skip
                wrapper = self._wrap(module, attr, record, "mlflow")
                if wrapper is not None and fluent is not None:
                    original = getattr(wrapper, "__wrapped__", None)
                    if fluent.__dict__.get(attr) is original:
                        self._set(fluent, attr, wrapper, original)

    def detach(self) -> None:
        """Put every original back (where ours is still the attribute) and stop recording."""
        self.off = True
        for owner, attr, original, wrapper, had_own in reversed(self._patches):
            if getattr(owner, "__dict__", {}).get(attr) is not wrapper:
                continue  # wrapped again after us (or already gone): ours only passes through
            if had_own:
                setattr(owner, attr, original)
            else:
                delattr(owner, attr)
        self._patches = []

    def _wrap(self, owner: object, attr: str, record: Callable, source: str) -> Callable | None:
        """Put a wrapper on ``owner.attr``: the original, then ``record(source, args, kwargs)``."""
        original = getattr(owner, attr, None)
        if original is None or getattr(original, _MARK, False):
            return None  # not there (another version), or ours already: wrap once
        taps, busy, entry = self, self._busy, f"{source} tap"

        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            if taps.off or getattr(busy, "on", False):  # detached, or called by a tapped call
                return original(*args, **kwargs)
            busy.on = True
            try:
                result = original(*args, **kwargs)
            finally:
                busy.on = False
            if taps.agent.armed and not guard.is_off(entry):
                try:
                    record(source, args, kwargs)
                except Exception as exc:  # never-raise invariant: the user's call succeeded
                    guard.failed(entry, exc)
            return result

        setattr(wrapper, _MARK, True)
        self._set(owner, attr, wrapper, original)
        return wrapper

    def _set(self, owner: object, attr: str, wrapper: Callable, original: object) -> None:
        had_own = attr in getattr(owner, "__dict__", {})
        self._patches.append((owner, attr, original, wrapper, had_own))
        setattr(owner, attr, wrapper)

    def _rebind_wandb_log(self, wandb: types.ModuleType, wrapper: Callable | None) -> None:
        """``wandb.init`` sets ``wandb.log = run.log``: a run begun before the tap attached (a
        notebook loading trainmeter late) holds the unwrapped method; rebind it to ours."""
        bound = getattr(wandb, "log", None)
        if wrapper is None or not isinstance(bound, types.MethodType):
            return
        if bound.__func__ is getattr(wrapper, "__wrapped__", None):
            self._set(wandb, "log", types.MethodType(wrapper, bound.__self__), bound)

    # -- what each call means ---------------------------------------------------------------
    def _on_wandb_log(self, source: str, args: tuple, kwargs: dict) -> None:
        # Run.log(self, data, step=None, commit=None)
        data = args[1] if len(args) > 1 else kwargs.get("data")
        step = args[2] if len(args) > 2 else kwargs.get("step")
        if isinstance(data, dict):
            self._put_many(source, _flatten(data), step)

    def _on_add_scalar(self, source: str, args: tuple, kwargs: dict) -> None:
        # SummaryWriter.add_scalar(self, tag, scalar_value, global_step=None, ...)
        tag = args[1] if len(args) > 1 else kwargs.get("tag")
        value = args[2] if len(args) > 2 else kwargs.get("scalar_value")
        step = args[3] if len(args) > 3 else kwargs.get("global_step")
        if isinstance(tag, str):
            self._put(source, tag, value, self._step(step))

    def _on_add_scalars(self, source: str, args: tuple, kwargs: dict) -> None:
        # SummaryWriter.add_scalars(self, main_tag, tag_scalar_dict, global_step=None, ...):
        # TensorBoard draws one chart, main_tag, with a line per tag: named "main_tag/tag" here
        main = args[1] if len(args) > 1 else kwargs.get("main_tag")
        values = args[2] if len(args) > 2 else kwargs.get("tag_scalar_dict")
        step = args[3] if len(args) > 3 else kwargs.get("global_step")
        if isinstance(main, str) and isinstance(values, dict):
            self._put_many(source, {f"{main}/{k}": v for k, v in values.items()}, step)

    def _on_log_metric(self, source: str, args: tuple, kwargs: dict) -> None:
        # mlflow.log_metric(key, value, step=None, ...)
        key = args[0] if args else kwargs.get("key")
        value = args[1] if len(args) > 1 else kwargs.get("value")
        step = args[2] if len(args) > 2 else kwargs.get("step")
        if isinstance(key, str):
            self._put(source, key, value, self._step(step))

    def _on_log_metrics(self, source: str, args: tuple, kwargs: dict) -> None:
        # mlflow.log_metrics(metrics, step=None, ...)
        metrics = args[0] if args else kwargs.get("metrics")
        step = args[1] if len(args) > 1 else kwargs.get("step")
        if isinstance(metrics, dict):
            self._put_many(source, metrics, step)

    # -- records ----------------------------------------------------------------------------
    def _put_many(self, source: str, values: dict, step: object) -> None:
        at = self._step(step)
        for name, value in values.items():
            if isinstance(name, str):
                self._put(source, name, value, at)

    def _put(self, source: str, name: str, value: object, step: int) -> None:
        number = self._number(source, name, value)
        if number is None:
            return
        roles = self._roles
        if name not in roles:
            if len(roles) >= MAX_NAMES:
                text = f"{source}: series past the first {MAX_NAMES} names are not recorded"
                self._note_once("names", f"{text} (first left out: {name[:80]})")
                return
            roles[name] = _role(name)
        if not math.isfinite(number):
            self._note_once(f"nonfinite:{name}", f"{name} is {number} at step {step} ({source})")
            return
        kind = roles[name]
        if kind is None:
            self.agent.put("series", name=name, value=number, step=step, source=source)
        else:
            self.agent.put("series", name=name, value=number, step=step, source=source, role=kind)
            if kind == "train_loss":
                reported = getattr(self.agent, "train_loss_reported", None)
                if reported is not None:  # the run's train loss: backward's is not needed
                    reported()

    def _step(self, step: object) -> int:
        """The tracker's own step when the call gave an integral one, else the agent's."""
        at = _integral(step)
        return self.agent.step if at is None else at

    def _number(self, source: str, name: str, value: object) -> float | None:
        """A host number's value; None for anything else (images, histograms, strings, and
        accelerator tensors, which are never read: that would synchronize the device)."""
        if isinstance(value, bool):
            return None
        if isinstance(value, (int, float)):
            try:
                return float(value)
            except OverflowError:  # an int past float's range
                return None
        module = type(value).__module__
        if module == "numpy" or module.startswith("numpy."):
            kind = getattr(getattr(value, "dtype", None), "kind", "")
            if getattr(value, "shape", None) == () and kind in ("i", "u", "f"):
                return float(value)
            return None
        if module == "torch" or module.startswith("torch."):
            device = getattr(value, "device", None)
            if device is None:
                return None
            if device.type != "cpu":
                text = (f"{source}: {name} is a {device.type} tensor; trainmeter does not read "
                        "accelerator tensors (that would synchronize the device); log a Python "
                        "number to see it")  # fmt: skip
                self._note_once(f"device:{source}", text)
                return None
            if value.dim() == 0 and (value.dtype.is_floating_point or _is_int(value.dtype)):
                return float(value.item())  # a CPU scalar: nothing to synchronize
        return None

    def _note_once(self, key: str, text: str) -> None:
        if key not in self._noted:
            self._noted.add(key)
            self.agent.put("note", text=text, source="trackers")


def _flatten(data: dict, prefix: str = "", depth: int = 0) -> dict:
    """wandb's nested dicts, named as wandb shows them (``{"a": {"b": 1}}`` -> ``a.b``)."""
    out = {}
    for key, value in data.items():
        if not isinstance(key, str):
            continue
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            if depth < 4:
                out.update(_flatten(value, name + ".", depth + 1))
        else:
            out[name] = value
    return out


def _is_int(dtype) -> bool:  # a torch.dtype (typing is not imported at the agent's boot)
    return not dtype.is_floating_point and not dtype.is_complex and str(dtype) != "torch.bool"


def _integral(step: object) -> int | None:
    """An integral step as ``int`` (Python, NumPy, a 0-d CPU tensor); None otherwise."""
    if step is None or isinstance(step, bool):
        return None
    if isinstance(step, int):
        return step
    if isinstance(step, float):
        return int(step) if step.is_integer() else None
    module = type(step).__module__
    if module == "numpy" or module.startswith("numpy."):
        if getattr(step, "shape", None) != ():
            return None
        kind = getattr(getattr(step, "dtype", None), "kind", "")
        if kind in ("i", "u") or (kind == "f" and float(step).is_integer()):
            return int(step)
        return None
    if module == "torch" or module.startswith("torch."):
        device = getattr(step, "device", None)
        cpu = device is not None and device.type == "cpu"
        if cpu and step.dim() == 0 and _is_int(step.dtype):
            return int(step.item())
    return None
