"""The step clock: one record per optimizer step of the clock optimizer, for the torch taps.

Which optimizer is the clock: the first one to step in a run (or in a notebook cell), seen by a
global optimizer post-step hook (``register_optimizer_step_post_hook``). From then on the clock
does not need that hook: torch's step wrapper (``Optimizer.profile_hook_step``) already calls
an empty method, ``Optimizer._optimizer_step_code``, after every step and before the post-hooks
(it is there for the profiler's Python tracer). The clock optimizer's *class* gets its own
``_optimizer_step_code`` that queues the step, so a step costs a few bytecodes and no extra
Python frame (a hook is one more frame, about 1 us on a small CPU: docs/performance.md). The
global hook is removed the first time that method runs (not from inside the hook: torch is
iterating the hooks then); if it never runs (a torch that no longer calls it), the hook goes on
clocking the steps itself.

The method calls torch's own ``_optimizer_step_code`` while a profiler is on, so the profiler
sees every optimizer step as without trainmeter. Other optimizers of the same class pass
through (an ``id`` check); the class is restored when the clock stops. Nothing here reads a
tensor (invariant 8), and a failure stops the clock with one warning (invariant 1).
"""

from __future__ import annotations

from time import time as _now

from trainmeter.agent import guard
from trainmeter.agent.classattr import restore, set_attr

NAME = "optimizer step hook"  # the entry point's name in warnings (guard.failed)


class StepClock:
    """Queues ``(t, step, tokens, samples)`` for each step of the clock optimizer.

    Args:
        taps: the :class:`trainmeter.agent.torch_taps.TorchTaps` it clocks for: ``first_step``
            (choose the root; returns discovery's (tokens, samples)), ``off``,
            and the agent with its sender.
        torch: the imported torch module.
    """

    def __init__(self, taps, torch) -> None:
        self.taps = taps
        self.torch = torch
        self.clock_id: int | None = None  # id() of the clock optimizer, once chosen
        self.fast: list = [None]  # the clock's id while the step method may clock it
        self._hook = None  # the global post-step hook's handle, until the method takes over
        self._patched: tuple | None = None  # what classattr.restore needs

    # -- start / stop (never called from inside an optimizer step) ------------------------------
    def watch(self) -> None:
        """The next optimizer to step becomes the clock (a run or a notebook cell begins)."""
        self._unpatch()
        self.clock_id, self.fast[0] = None, None
        if self._hook is None:
            from torch.optim.optimizer import register_optimizer_step_post_hook

            self._hook = register_optimizer_step_post_hook(self._on_step)

    def stop(self) -> None:
        """Clock nothing and leave torch as it was (a cell ended, or the agent detaches)."""
        self.fast[0] = None
        self._unpatch()
        self._remove_hook()

    def quiet(self) -> None:
        """Clock nothing more; safe from any thread (it only clears a flag)."""
        self.fast[0] = None

    # -- the global hook: the first step, or every step if the method is never called ----------
    def _on_step(self, optimizer, args, kwargs) -> None:
        taps = self.taps
        if taps.off or not taps.agent.armed:
            return
        try:
            if self.clock_id is None:
                tokens, samples = taps.first_step(optimizer)
                self.clock_id = id(optimizer)
                self._patch(type(optimizer))
                self.fast[0] = self.clock_id
                self._push(tokens, samples)
            elif id(optimizer) == self.fast[0]:
                self._push(0, 0)  # the step method was not called: this hook clocks instead
        except Exception as exc:
            taps.quiet()
            guard.failed(NAME, exc)

    def _push(self, tokens: int, samples: int) -> None:
        agent = self.taps.agent
        agent.step += 1
        agent.sender.put_step((_now(), agent.step, tokens, samples))

    # -- the clock optimizer's class --------------------------------------------------------------
    def _patch(self, cls) -> None:
        """Give ``cls`` the clocking ``_optimizer_step_code`` (the module docstring says why)."""
        self._unpatch()
        own = cls._optimizer_step_code
        step = _clocking_method(self.taps, self.fast, own, self._profiler_module())

        def first(optimizer) -> None:  # the method runs: the global hook is no longer needed
            try:
                cls._optimizer_step_code = step
                self._remove_hook()
            except Exception as exc:
                self.taps.quiet()
                guard.failed(NAME, exc)
            step(optimizer)

        self._patched = set_attr(cls, "_optimizer_step_code", first)

    def _unpatch(self) -> None:
        restore(self._patched)
        self._patched = None

    def _remove_hook(self) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None

    def _profiler_module(self):
        """What says whether a torch profiler records now: ``torch.autograd.profiler``, whose
        ``_is_profiler_enabled`` flag its context managers set (a read, not a call)."""
        profiler = getattr(getattr(self.torch, "autograd", None), "profiler", None)
        if profiler is None or not hasattr(profiler, "_is_profiler_enabled"):
            return _AlwaysOn  # unknown: torch's own method always runs
        return profiler


class _AlwaysOn:
    _is_profiler_enabled = True


def _clocking_method(taps, fast: list, own, profiler):
    """The clock optimizer class's ``_optimizer_step_code``: queue the step when ``self`` is
    the clock (``fast[0]``), then run torch's own method while ``profiler`` records.

    The hot path of the step clock (once per optimizer step): everything it needs is bound in
    the closure.
    """
    agent = taps.agent
    sender = agent.sender
    put = sender.put_step

    def _optimizer_step_code(self) -> None:
        if id(self) == fast[0]:
            try:
                agent.step += 1
                put(_now())  # a bare time stamp: the step after the last one (Sender docs)
            except Exception as exc:
                taps.quiet()
                guard.failed(NAME, exc)
        if profiler._is_profiler_enabled:
            own(self)

    return _optimizer_step_code
