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

The global hook (added through the taps' hook door, hooks.py) watches the clock's first
``WATCH_STEPS`` steps for a second optimizer stepping apart (it decides whether the losses from
backward() are one model's), then goes at a point outside torch's hook loops; the instance's
method clocks the steps from the second on. If the method never runs (a torch that no longer
calls it), the hook stays and clocks the steps itself. The clock's first two steps run Python
(the hook, then the first method) and tell the taps (``taps.first_step``, ``taps.second_step``):
discovery ends, warm-up ends, the counted step is armed, all without a hook of their own. Later,
:meth:`StepClock.at_next_step` puts a one-shot Python method in for one step, where changes
that must wait for a point outside torch's hook loops are carried out.

While a torch profiler records, the method also calls torch's own ``_optimizer_step_code``,
so the profiler sees every optimizer step as without
trainmeter: the profiler's start and stop functions are wrapped to swap the method. Nothing
here reads a tensor (the no-device-sync invariant); the C chain cannot raise, and a failure anywhere
else stops the clock with one warning (the never-raise invariant).
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
WATCH_STEPS = 8  # clock steps the global hook watches for a second optimizer (_on_step)
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
    samples, seq_sq)`` at its first step, with discovery's counts).

    Args:
        taps: the :class:`trainmeter.agent.torch_taps.TorchTaps` it clocks for: ``first_step``
            (choose the root; returns discovery's (tokens, samples, seq_sq)), ``second_step``,
            ``door`` (the hook door, hooks.py), ``off``, ``quiet`` and
            the agent, with its sender and its step count (``agent.steps``).
        torch: the imported torch module.
    """

    def __init__(self, taps, torch) -> None:
        self.taps = taps
        self.torch = torch
        self.clock_id: int | None = None  # id() of the clock optimizer, once chosen
        self._hook = None  # the global post-step hook (hooks.Hook), until the method takes over
        self._seen = 0  # clock steps the hook has seen in this segment
        self._last = 0  # the step count when the hook last ran
        self._decided = False  # the losses from backward() are decided (decide)
        self.others_outside: set[int] = set()  # other optimizers stepped between clock steps
        self._clocked = None  # weakref to the clock optimizer while its instance has our method
        self._method = None  # the method it has now (first, the C chain, or the profiled one)
        self._tick = None  # the C chain for this clock
        self._switches: list[tuple] = []  # classattr saves of the wrapped profiler functions
        self._once = False  # a one-shot method from at_next_step is waiting
        self._first = None  # the method that takes over from the hook, until it has run
        self._gone = None  # weakref.finalize on the clock optimizer (_clock_gone)
        self._freed_at: int | None = None  # steps taken when the clock optimizer was freed

    # -- start / stop (never called from inside an optimizer step) ------------------------------
    def watch(self) -> None:
        """The next optimizer to step becomes the clock (a run or a notebook cell begins)."""
        self._uninstall()
        self.clock_id = None
        self._freed_at = None
        self._seen = 0
        self._decided = False
        self.others_outside = set()
        if self._hook is None:
            door = self.taps.door
            self._hook = door.add("optimizer_post", self._on_step, NAME, on_fail=self.taps.quiet)

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
        """The global post-step hook (guarded by the door: an error quiets the taps). It lives
        for the clock's first ``WATCH_STEPS`` steps: long enough to see a second optimizer
        that steps apart from the clock (a GAN's generator, stepped once per several critic
        steps), which decides whether the losses from backward() are one model's."""
        taps = self.taps
        if taps.off or not taps.agent.armed:
            return
        if self.clock_id is None:
            if self._freed_at is not None:  # said only now: a freed one at exit is no news
                n = self._freed_at
                text = (f"step clock: the optimizer that clocked steps 1-{n} was freed; "
                        f"another clocks them from step {n + 1} on")  # fmt: skip
                taps.agent.put("note", source="trainmeter", text=text)
                self._freed_at = None
            counts = taps.first_step(optimizer, args, kwargs)
            self.clock_id = id(optimizer)
            self._seen = 1
            self._install(optimizer)
            self._push(*counts)
        elif id(optimizer) == self.clock_id:
            self._seen += 1
            if steps_taken(taps.agent.steps) == self._last:  # the method did not clock it
                if self._seen == 2:
                    taps.second_step()
                self._push(0, 0, 0)
            if self._seen >= WATCH_STEPS:
                self.decide()
        elif not inside_backward(self.torch) and not taps.trains_root(optimizer):
            self.others_outside.add(id(optimizer))  # a second model's (a GAN's), not fused
        self._last = steps_taken(taps.agent.steps)

    def decide(self) -> None:
        """Enough clock steps seen (or the run ends): the losses are one model's unless
        another optimizer stepped apart; the hook goes (at a safe point: the door waits)."""
        if not self._decided:
            self._decided = True
            self.taps.losses_decided(self.others_outside)
        if self._method is not None:  # the method clocks: the hook is no longer needed (also
            self._remove_hook()  # after a freed clock's successor has run its watch)

    def _push(self, tokens: int, samples: int, seq_sq: int) -> None:
        agent = self.taps.agent
        next(agent.steps)
        agent.sender.put_step((_now(), steps_taken(agent.steps), tokens, samples, seq_sq))

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
        self._gone = weakref.finalize(optimizer, self._clock_gone, id(optimizer))
        self._gone.atexit = False
        self._wrap_profiler()

        def first() -> None:  # the method runs (the hook stays until decide())
            try:
                if not self.taps.off:
                    self.taps.second_step()
                self._refresh()
            except Exception as exc:
                self.taps.quiet()
                guard.failed(NAME, exc)
            method = self._method  # the one _refresh chose (still first if the taps are off)
            if method is not None and method is not first:
                method()

        self._first = first
        self._set(optimizer, first)

    def at_next_step(self, fn) -> bool:
        """Run ``fn()`` once, at the clock optimizer's next step, from its
        ``_optimizer_step_code`` (after the step, outside torch's hook loops), then clock that
        step as usual. False when there is no clock method to borrow (no clock yet, the hook
        clocks, or the first method is still waiting: it flushes the taps' door itself)."""
        optimizer = self._clocked() if self._clocked is not None else None
        method = self._method
        if optimizer is None or method is None or method is self._first:
            return False  # no method of ours, or the first one still waits (it flushes)
        if self._once:
            return True  # one is waiting already: it flushes everything pending

        def once() -> None:
            try:
                self._once = False
                self._refresh()  # back to the chain (or the profiled method) first
                fn()
            except Exception as exc:
                self.taps.quiet()
                guard.failed(NAME, exc)
            method = self._method
            if method is not None and method is not once:
                method()

        self._once = True
        self._set(optimizer, once)
        return True

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

    def _clock_gone(self, clock_id: int) -> None:
        """The clock optimizer was freed (a fine-tune that builds a new optimizer after
        unfreezing, a restart with a new learning rate): the next optimizer to step becomes
        the clock, and the step count goes on."""
        try:
            if self.clock_id != clock_id or self.taps.off:
                return
            self.clock_id, self._clocked, self._method, self._tick = None, None, None, None
            self._seen = 0
            if self._hook is None:
                door = self.taps.door
                self._hook = door.add("optimizer_post", self._on_step, NAME,
                                      on_fail=self.taps.quiet)  # fmt: skip
            self._freed_at = steps_taken(self.taps.agent.steps)  # noted if another steps
            self.taps.watch_for_model()  # the next one may train another model
        except Exception as exc:
            self.taps.quiet()
            guard.failed(NAME, exc)

    def _uninstall(self) -> None:
        gone = getattr(self, "_gone", None)
        if gone is not None:
            gone.detach()
            self._gone = None
        self._take_method()
        self._clocked = self._method = self._tick = None
        self._once = False
        for saved in reversed(self._switches):
            restore(saved)
        self._switches = []

    def _remove_hook(self) -> None:
        hook, self._hook = self._hook, None
        if hook is not None:
            hook.remove()

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


def has_closure(args: tuple, kwargs: dict | None) -> bool:
    """Whether an optimizer step hook's ``(optimizer, *step args)`` / kwargs pass a closure
    (``step(closure)``: LBFGS, Lightning), whose forwards and backwards run inside the step."""
    return callable(args[1] if len(args) > 1 else (kwargs or {}).get("closure"))


def inside_backward(torch) -> bool:
    """Whether autograd is running a backward on this thread now (an optimizer stepped from a
    post-accumulate-grad hook: fused into backward)."""
    task = getattr(getattr(torch, "_C", None), "_current_graph_task_id", None)
    return task is not None and task() != -1


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
