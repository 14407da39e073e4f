"""Framework taps: what the Hugging Face ``Trainer`` and Lightning log becomes series, with no
tracker configured.

Attached by the agent when the user's code imports the framework's module (the agent never
imports one itself). The machinery is the tracker taps' (:class:`~trainmeter.agent.trackers.
TrackerTaps`, subclassed here): each call is wrapped once, the framework's own function runs
first and its result is returned unchanged, and only then, guarded (an internal error warns
once and turns that tap off, the never-raise invariant), are host numbers read and queued as
``series`` records with their catalog role; ``detach()`` puts every original back.

What is wrapped, and why there:

- Hugging Face: ``transformers.trainer.Trainer.log(self, logs, start_time=None)``, the one
  call through which the Trainer hands every logged dict (``loss``, ``grad_norm``,
  ``learning_rate``, ``eval_loss``, the run's ``train_loss`` ...) to its callbacks. After it,
  the entry it appended to ``state.log_history`` is read: Python floats (the Trainer's own
  ``.item()``) and ``step`` = ``state.global_step``, the optimizer steps done. (Not ``logs``
  itself: callbacks may pop from it.)
- Lightning (``lightning.pytorch`` and ``pytorch_lightning``): ``_LoggerConnector.log_metrics
  (self, metrics, step=None)``, where Lightning hands the ``self.log`` values, already named
  (``train_loss``, ``train_loss_step``, ``val_loss``), reduced (epoch means) and filtered
  (``log_every_n_steps``), to its loggers. It is called with or without a logger. With one,
  Lightning itself turns the tensors into Python numbers there (``convert_tensors_to_scalars``,
  its own device sync): that module global is wrapped to keep a copy of its result, and those
  numbers are recorded. With no logger (``logger=False``) nothing converts them: 0-d CPU
  tensors are read (no device to synchronize), an accelerator tensor never (the no-device-sync
  invariant; one note says to give the Trainer a logger). Not ``LightningModule.log``: Lightning
  turns even a Python number into a tensor on the module's device there, ``on_step``/``on_epoch``
  decide later what a call means, and epoch means exist only at the connector. The step is the one
  Lightning gives its loggers: ``step=`` or a logged ``step`` metric, else
  ``fit_loop.epoch_loop._batches_that_stepped`` (= ``trainer.global_step`` as seen inside
  ``training_step``: the step *before* that batch's optimizer step).

- Both: the call that starts a training (HF ``Trainer.train``, Lightning ``Trainer.fit``), to
  tell the torch taps before it runs (``TorchTaps.new_training``): a second training in one
  process keeps the first one's optimizer alive in the framework's objects, so without it the
  step clock stayed with an optimizer that no longer steps.

Only the main process records (HF ``state.is_world_process_zero``, Lightning
``trainer.is_global_zero``), as the frameworks' own loggers do.

One value, one record: the framework and tracker taps share the thread-local "inside a tapped
call" flag, so a tracker call made inside a framework's (the Trainer's ``WandbCallback`` calling
``wandb.log``, Lightning's ``TensorBoardLogger`` calling ``add_scalar``) passes through
unrecorded, and the framework tap records the values once, under the framework's names (HF's
``loss``, not the ``train/loss`` its wandb callback writes) with source ``transformers`` or
``lightning``. docs/spec.md "Framework taps" has the rules.
"""

from __future__ import annotations

import functools
import threading
import types

from trainmeter.agent import guard
from trainmeter.agent.trackers import _MARK, TrackerTaps

_LIGHTNING = ("lightning.pytorch", "pytorch_lightning")
_CONNECTOR = "trainer.connectors.logger_connector.logger_connector"
_FIT = "trainer.trainer"  # Lightning's Trainer (its fit starts a training: _on_training_start)
HF_TRAINER = "transformers.trainer"
# The modules whose import attaches a tap (runtime.install registers them with when_imported).
MODULES = (HF_TRAINER, *(f"{package}.{_CONNECTOR}" for package in _LIGHTNING),
           *(f"{package}.{_FIT}" for package in _LIGHTNING))  # fmt: skip


class FrameworkTaps(TrackerTaps):
    """The framework side of one agent.

    Args:
        agent: the :class:`trainmeter.agent.runtime.Agent` (its ``step``, ``armed``, ``put``,
            ``tracker_taps``; the tracker taps are created here if the loop has imported no
            tracker yet, so that both share one "inside a tapped call" flag).
    """

    def __init__(self, agent) -> None:
        super().__init__(agent)
        trackers = getattr(agent, "tracker_taps", None)
        if trackers is None:
            trackers = agent.tracker_taps = TrackerTaps(agent)
        self._busy = trackers._busy  # a tracker call inside a framework call is the framework's
        self._converted = threading.local()  # Lightning's own numbers for the call in progress

    def attach(self, module: types.ModuleType) -> None:
        """Wrap the logging call of a framework module the user's code just imported."""
        name = module.__name__
        if name == HF_TRAINER:
            trainer = getattr(module, "Trainer", None)
            if trainer is not None:
                self._wrap(trainer, "log", self._on_trainer_log, "transformers")
                self._before(trainer, "train", "transformers")
        elif name.endswith(_FIT):
            trainer = getattr(module, "Trainer", None)
            if trainer is not None:
                self._before(trainer, "fit", "lightning")
        elif name.endswith(_CONNECTOR):
            connector = getattr(module, "_LoggerConnector", None)
            wrapped = connector is not None and self._wrap(
                connector, "log_metrics", self._on_lightning_log, "lightning"
            )
            if wrapped:  # Lightning's own numbers, where it makes them for its loggers
                self._watch_conversion(module)

    def _before(self, owner: object, attr: str, source: str) -> None:
        """Put a wrapper on ``owner.attr`` (HF ``Trainer.train``, Lightning ``Trainer.fit``)
        that tells the torch taps a training starts before the original runs: a second one in
        one process (a sweep, a fit to continue, another model) keeps its first optimizer alive
        in the framework's objects, so the clock would stay with an optimizer that no longer
        steps (torch_taps.py ``new_training``)."""
        original = getattr(owner, attr, None)
        if original is None or getattr(original, _MARK, False):
            return
        taps, entry = self, f"{source} tap"

        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            if not taps.off and taps.agent.armed and not guard.is_off(entry):
                try:
                    torch_taps = getattr(taps.agent, "torch_taps", None)
                    if torch_taps is not None:
                        torch_taps.new_training()
                except Exception as exc:  # never-raise invariant: the training still starts
                    guard.failed(entry, exc)
            return original(*args, **kwargs)

        setattr(wrapper, _MARK, True)
        self._set(owner, attr, wrapper, original)

    def _watch_conversion(self, module: types.ModuleType) -> None:
        """Keep a copy of what Lightning's ``convert_tensors_to_scalars`` returns inside a
        tapped ``log_metrics``: the numbers Lightning itself read off the tensors."""
        original = getattr(module, "convert_tensors_to_scalars", None)
        if not callable(original) or getattr(original, _MARK, False):
            return
        busy, converted = self._busy, self._converted

        @functools.wraps(original)
        def convert(*args, **kwargs):
            result = original(*args, **kwargs)
            if getattr(busy, "on", False) and args and isinstance(result, dict):
                try:  # keyed by the metrics dict: a copy from an unrecorded call is never used
                    converted.last = (args[0], dict(result))
                except Exception as exc:  # the never-raise invariant
                    guard.failed("lightning tap", exc)
            return result

        setattr(convert, _MARK, True)
        self._set(module, "convert_tensors_to_scalars", convert, original)

    # -- what each call means ---------------------------------------------------------------
    def _on_trainer_log(self, source: str, args: tuple, kwargs: dict) -> None:
        # Trainer.log(self, logs, start_time=None) appends {**logs, "step": global_step} to
        # state.log_history, then hands logs to the callbacks (which may pop from it, as the
        # progress callback pops total_flos): the history entry is what the Trainer logged
        state = getattr(args[0], "state", None)
        if not getattr(state, "is_world_process_zero", True):
            return
        history = getattr(state, "log_history", None)
        entry = history[-1] if isinstance(history, list) and history else None
        if isinstance(entry, dict) and "step" in entry:
            values = {k: v for k, v in entry.items() if k != "step"}
            self._put_many(source, values, entry["step"])

    def _on_lightning_log(self, source: str, args: tuple, kwargs: dict) -> None:
        # _LoggerConnector.log_metrics(self, metrics, step=None)
        metrics = args[1] if len(args) > 1 else kwargs.get("metrics")
        step = args[2] if len(args) > 2 else kwargs.get("step")
        last = self._converted.__dict__.pop("last", None)
        trainer = getattr(args[0], "trainer", None)
        if not isinstance(metrics, dict) or not getattr(trainer, "is_global_zero", True):
            return
        values = last[1] if last is not None and last[0] is metrics else None
        if values is None:  # no logger converted them: host values only
            values = {k: v for k, v in metrics.items() if not self._on_device(k, v)}
        if step is None:  # Lightning: a logged "step" metric, else the batches that stepped
            logged = self._number(source, "step", values.get("step"))
            loop = getattr(getattr(trainer, "fit_loop", None), "epoch_loop", None)
            stepped = getattr(loop, "_batches_that_stepped", None)
            step = int(logged) if logged is not None else stepped
        names = [k for k in metrics if k != "step" and k in values]  # not the "epoch" it adds
        self._put_many(source, {k: values[k] for k in names}, step)

    def _on_device(self, name: object, value: object) -> bool:
        """True for a tensor off the CPU (never read; one note says why and what to do)."""
        module = type(value).__module__
        if not (module == "torch" or module.startswith("torch.")):
            return False
        device = getattr(value, "device", None)
        if device is None or device.type == "cpu":
            return False
        text = (f"lightning: {name} is a {device.type} tensor and no Lightning logger turned it "
                "into a number; trainmeter does not read accelerator tensors (that would "
                "synchronize the device): give the Trainer a logger (logger=True, its default) "
                "to see it")  # fmt: skip
        self._note_once("device:lightning", text)
        return True
