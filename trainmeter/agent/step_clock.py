"""The step clock: one record per optimizer step of the clock optimizer, for the torch taps.

Which optimizer is the clock: the first one to step in a run (or in a notebook cell), seen by a
global optimizer post-step hook (``register_optimizer_step_post_hook``). From then on the clock
does not need that hook: torch's step wrapper (``Optimizer.profile_hook_step``) already calls
``self._optimizer_step_code()`` after every step and before the post-hooks (an empty method,
there for the profiler's Python tracer). The clock optimizer *instance* gets its own
``_optimizer_step_code`` in its ``__dict__``, which Python finds before the class's method and
calls with no arguments: a chain of C callables,

    map(queue.append, starmap(time.time, steps)).__next__

so that a step runs no Python bytecode at all: ``steps``, the agent's step count, is
``itertools.repeat((), N)``, whose remaining length counts the steps taken; ``starmap`` calls
``time.time()`` on each ``()`` it yields, and ``map`` appends the time stamp to the sender's
queue (a bare float: "the step after the last one"). A hook or a Python method is one more
frame, 1-2 us on a small CPU; a ``zip`` with a step-number iterator, which builds a tuple and
an int each step, costs 0.7 us more than this chain (docs/performance.md).

Only that one optimizer is clocked (a GAN's second optimizer of the same class is not), and
pickling, ``deepcopy`` and ``state_dict`` never see the attribute (``Optimizer.__getstate__``
keeps three keys).

The global hook is removed the first time the instance's method runs (not from inside the hook:
torch is iterating the hooks then); if it never runs (a torch that no longer calls it), the
hook goes on clocking the steps itself. While a torch profiler records, the method also calls
torch's own ``_optimizer_step_code``, so the profiler sees every optimizer step as without
trainmeter: the profiler's start and stop functions are wrapped to swap the method. Nothing
here reads a tensor (invariant 8); the C chain cannot raise, and a failure anywhere else stops
the clock with one warning (invariant 1).
"""

from __future__ import annotations

import itertools
import operator
import weakref
from time import time as _now

from trainmeter.agent import guard
from trainmeter.agent.classattr import restore, set_attr

NAME = "optimizer step hook"  # the entry point's name in warnings (guard.failed)
METHOD = "_optimizer_step_code"
LAST_STEP = 1 << 62  # a step count's length: never reached
_PROFILER_SWITCHES = ("_run_on_profiler_start", "_run_on_profiler_stop")


def new_step_count():
    """A fresh count of optimizer steps: an iterator that each step advances by one (from C,
    in the clock's chain); :func:`steps_taken` reads it."""
    return itertools.repeat((), LAST_STEP)


def steps_taken(count) -> int:
    """How many steps ``count`` (from :func:`new_step_count`) has counted, without advancing
    it (from its remaining length, ``operator.length_hint``)."""
    return LAST_STEP - operator.length_hint(count)


def ticker(put, steps):
    """The clock's method: a no-argument C callable that advances ``steps`` by one and puts
    ``time.time()`` (s since the epoch) with ``put``; nothing in it can raise or end."""
    return map(put, itertools.starmap(_now, steps)).__next__


class StepClock:
    """Queues the time stamp ``t`` of each step of the clock optimizer (``(t, step, tokens,
    samples)`` at its first step, with discovery's counts).

    Args:
        taps: the :class:`trainmeter.agent.torch_taps.TorchTaps` it clocks for: ``first_step``
            (choose the root; returns discovery's (tokens, samples)), ``off``, ``quiet`` and
            the agent, with its sender and its step count (``agent.steps``).
        torch: the imported torch module.
    """

    def __init__(self, taps, torch) -> None:
        self.taps = taps
        self.torch = torch
        self.clock_id: int | None = None  # id() of the clock optimizer, once chosen
        self._hook = None  # the global post-step hook's handle, until the method takes over
        self._clocked = None  # weakref to the clock optimizer while its instance has our method
        self._method = None  # the method it has now (first, the C chain, or the profiled one)
        self._tick = None  # the C chain for this clock
        self._switches: list[tuple] = []  # classattr saves of the wrapped profiler functions

    # -- start / stop (never called from inside an optimizer step) ------------------------------
    def watch(self) -> None:
        """The next optimizer to step becomes the clock (a run or a notebook cell begins)."""
        self._uninstall()
        self.clock_id = None
        if self._hook is None:
            from torch.optim.optimizer import register_optimizer_step_post_hook

            self._hook = register_optimizer_step_post_hook(self._on_step)

    def stop(self) -> None:
        """Clock nothing and leave torch as it was (a cell ended, or the agent detaches)."""
        self._uninstall()
        self._remove_hook()

    def quiet(self) -> None:
        """Clock nothing more; safe from any thread (the hook reads ``taps.off``, and the
        method leaves the optimizer's ``__dict__`` in one step)."""
        self._take_method()

    # -- the global hook: the first step, or every step if the method is never called ----------
    def _on_step(self, optimizer, args, kwargs) -> None:
        taps = self.taps
        if taps.off or not taps.agent.armed:
            return
        try:
            if self.clock_id is None:
                tokens, samples = taps.first_step(optimizer)
                self.clock_id = id(optimizer)
                self._install(optimizer)
                self._push(tokens, samples)
            elif id(optimizer) == self.clock_id:
                self._push(0, 0)  # the method was not called: this hook clocks instead
        except Exception as exc:
            taps.quiet()
            guard.failed(NAME, exc)

    def _push(self, tokens: int, samples: int) -> None:
        agent = self.taps.agent
        next(agent.steps)
        agent.sender.put_step((_now(), steps_taken(agent.steps), tokens, samples))

    # -- the clock optimizer's own method ---------------------------------------------------------
    def _install(self, optimizer) -> None:
        """Give ``optimizer`` the method that takes over from the hook at its next step (the
        module docstring says why there). One with a method of its own (someone else's patch
        on the instance, or a subclass's override) is left alone: the hook clocks it."""
        self._uninstall()
        torchs = getattr(getattr(self.torch.optim, "Optimizer", None), METHOD, None)
        own = getattr(optimizer, "__dict__", None)  # None: slots only, nowhere to put it
        if own is None or METHOD in own or getattr(type(optimizer), METHOD, None) is not torchs:
            return
        self._tick = ticker(self.taps.agent.sender.put_step, self.taps.agent.steps)
        self._clocked = weakref.ref(optimizer)
        self._wrap_profiler()

        def first() -> None:  # the method runs: the global hook is no longer needed
            try:
                self._remove_hook()
                self._refresh()
            except Exception as exc:
                self.taps.quiet()
                guard.failed(NAME, exc)
            method = self._method  # the one _refresh chose (still first if the taps are off)
            if method is not None and method is not first:
                method()

        self._set(optimizer, first)

    def _refresh(self) -> None:
        """Give the clock optimizer the method for now: the C chain, or while a profiler
        records, one that also runs torch's own method."""
        optimizer = self._clocked() if self._clocked is not None else None
        if optimizer is None or self.taps.off:
            return
        if not self._switches or self._profiling():
            self._set(optimizer, _profiled(self._tick, optimizer))
        else:
            self._set(optimizer, self._tick)

    def _set(self, optimizer, method) -> None:
        vars(optimizer)[METHOD] = method
        self._method = method

    def _take_method(self) -> None:
        """Remove our method from the clock optimizer, if it is still ours (any thread)."""
        optimizer = self._clocked() if self._clocked is not None else None
        if optimizer is not None and vars(optimizer).get(METHOD) is self._method:
            vars(optimizer).pop(METHOD, None)

    def _uninstall(self) -> None:
        self._take_method()
        self._clocked = self._method = self._tick = None
        for saved in reversed(self._switches):
            restore(saved)
        self._switches = []

    def _remove_hook(self) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None

    # -- the profiler ---------------------------------------------------------------------------
    def _profiler_module(self):
        return getattr(getattr(self.torch, "autograd", None), "profiler", None)

    def _profiling(self) -> bool:
        """Whether a torch profiler records now (its ``_is_profiler_enabled`` flag); True when
        unknown, so torch's own method always runs."""
        return bool(getattr(self._profiler_module(), "_is_profiler_enabled", True))

    def _wrap_profiler(self) -> None:
        """Wrap ``torch.autograd.profiler``'s start and stop functions (called by every torch
        profiler as it starts and stops) to swap the clock's method. Without them the clock
        keeps the profiled method throughout."""
        profiler = self._profiler_module()
        if profiler is None or not all(hasattr(profiler, n) for n in _PROFILER_SWITCHES):
            return
        for name in _PROFILER_SWITCHES:
            self._switches.append(set_attr(profiler, name, _then(getattr(profiler, name), self)))


def _then(switch, clock: StepClock):
    """The profiler's ``switch`` (start or stop), then the clock's method swapped to match."""

    def switched(*args, **kwargs):
        out = switch(*args, **kwargs)
        try:
            clock._refresh()
        except Exception as exc:
            clock.taps.quiet()
            guard.failed(NAME, exc)
        return out

    return switched


def _profiled(tick, optimizer):
    """The clock's method while a profiler records: the step, then torch's own
    ``_optimizer_step_code`` for ``optimizer`` (which the profiler's Python tracer watches)."""
    own = getattr(type(optimizer), METHOD)
    ref = weakref.ref(optimizer)

    def _optimizer_step_code() -> None:
        tick()
        live = ref()
        if live is not None:
            own(live)

    return _optimizer_step_code
