"""The one door for every hook trainmeter adds to torch (the never-raise invariant, by
construction).

Every module and optimizer hook of the taps goes in through :class:`Door` and nowhere else, so
each one gets the same three guarantees:

- **It never raises into torch.** The installed callable runs the tap's function inside a
  ``try``; an exception warns once (``guard.failed`` with the hook's name), turns that hook dead
  (it returns at once from then on), removes it safely (below) and calls its ``on_fail`` with
  the exception (the owner goes quiet). A hook always returns None: it never changes a
  call's arguments or result.
- **It never mutates a dict torch is iterating.** ``Optimizer.profile_hook_step`` runs the pre-
  and post-step hooks with ``for hook in chain(a.values(), b.values())`` over live
  ``OrderedDict``s: an entry added or removed while that loop runs raises ``RuntimeError:
  OrderedDict mutated during iteration`` in the user's ``optimizer.step()`` (a hook that removed
  itself there crashed every loop that called ``.eval()`` before its first step). So the door
  adds or removes an optimizer hook only when no optimizer hook loop is running on this thread
  (:func:`in_optimizer_hooks`); otherwise the change waits in ``pending`` until the next safe
  point (``flush()``: called by the taps at their module hooks, at the clock optimizer's next
  step and when they start or stop). Module hook dicts are copied before torch iterates them
  (``(*_global_forward_pre_hooks.items(), ...)`` in ``Module._call_impl``), so module hooks
  are added and removed at once.
- **It leaves the user's own hooks' order alone.** An optimizer hook of ours goes first in its
  dict: a user's hook that removes itself while it is the last entry, which torch allows, stays
  the last entry whatever trainmeter adds.

Hot paths add no hook at all (the root's class ``__call__`` and the clock's C chain, see
torch_taps.py and step_clock.py); what goes through the door runs at discovery, at a run's first
steps, around the counted step, and while an evaluation phase is open.
"""

from __future__ import annotations

import linecache
import sys
from collections.abc import Callable

from trainmeter.agent import guard
from trainmeter.agent.classattr import restore, set_attr

OPTIMIZER_KINDS = ("optimizer_pre", "optimizer_post")
NAME_GLOBAL = "_has_any_global_hook"  # torch.nn.modules.module's: see Door._hide_from_compile
_GLOBAL_DICTS = (  # what that function looks at (torch/nn/modules/module.py)
    "_global_backward_pre_hooks",
    "_global_backward_hooks",
    "_global_forward_pre_hooks",
    "_global_forward_hooks",
    "_global_forward_hooks_always_called",
    "_global_forward_hooks_with_kwargs",
)
KINDS = ("forward_pre", "forward", *OPTIMIZER_KINDS)


class Hook:
    """One hook of ours in torch: ``remove()`` is safe from anywhere, at any time."""

    __slots__ = ("dead", "door", "fn", "handle", "kind", "name", "on_fail")

    def __init__(self, door: Door, kind: str, name: str, fn: Callable, on_fail) -> None:
        self.door, self.kind, self.name, self.fn, self.on_fail = door, kind, name, fn, on_fail
        self.dead = False
        self.handle = None  # torch's RemovableHandle once the hook is in its dict

    def remove(self) -> None:
        """Dead now (it returns at once if torch still calls it); out of torch's dict now or at
        the next safe point."""
        self.door.remove(self)


class Door:
    """Adds and removes the taps' torch hooks (the module docstring says how and why).

    Args:
        torch: the user's imported torch module (its hook registries are read from it).
    """

    def __init__(self, torch) -> None:
        self.torch = torch
        self.pending: list[tuple[str, Hook]] = []  # ("add" | "remove", hook), in order
        self.hooks: list[Hook] = []  # live hooks (added or waiting to be)
        self.funcs: set[str] = set()  # names of every function ever added (tests read it)
        self.on_defer = None  # called when a change waits: the owner finds a safe point soon
        self.ids: set[int] = set()  # torch's handle ids of every module hook of ours
        self._loop_code = _hook_loop_code(torch)
        self._saved = None  # the classattr save of torch's _has_any_global_hook

    # -- adding -------------------------------------------------------------------------------
    def add(self, kind: str, fn: Callable, name: str, on_fail=None) -> Hook:
        """Install ``fn`` as a hook of ``kind`` (``forward_pre``: ``fn(module, args)``;
        ``forward``: ``fn(module, args, kwargs, output)``, always called; ``optimizer_pre`` /
        ``optimizer_post``: ``fn(optimizer, args, kwargs)``), guarded; returns its :class:`Hook`.

        Raises: ValueError for an unknown kind (a bug of ours, raised where the taps attach,
        inside their own guard).
        """
        if kind not in KINDS:
            raise ValueError(f"unknown hook kind {kind!r}; known: {', '.join(KINDS)}")
        hook = Hook(self, kind, name, fn, on_fail)
        self.funcs.add(getattr(fn, "__name__", type(fn).__name__))
        self.hooks.append(hook)
        if kind in OPTIMIZER_KINDS and not self.safe():
            self._defer("add", hook)
        else:
            self._install(hook)
        return hook

    def _install(self, hook: Hook) -> None:
        torch, call = self.torch, _guarded(hook)
        if hook.kind in ("forward_pre", "forward"):
            registry = sys.modules[torch.nn.Module.__module__]
            if hook.kind == "forward_pre":
                hook.handle = registry.register_module_forward_pre_hook(call)
            else:
                hook.handle = registry.register_module_forward_hook(
                    call, with_kwargs=True, always_call=True
                )
            self.ids.add(hook.handle.id)
            self._hide_from_compile(registry)
        else:
            registry = sys.modules[torch.optim.Optimizer.__module__]
            register = (registry.register_optimizer_step_pre_hook if hook.kind == "optimizer_pre"
                        else registry.register_optimizer_step_post_hook)  # fmt: skip
            hook.handle = register(call)
            _first(hook.handle)

    # -- removing -----------------------------------------------------------------------------
    def remove(self, hook: Hook) -> None:
        """``hook`` dead at once; out of torch's dict now, or at the next safe point."""
        hook.dead = True
        if hook in self.hooks:
            self.hooks.remove(hook)
        if hook.handle is None:  # never installed (its add is still pending): drop the add
            self.pending = [(op, h) for op, h in self.pending if h is not hook]
        elif hook.kind in OPTIMIZER_KINDS and not self.safe():
            self._defer("remove", hook)
        else:
            _remove(hook)

    def _defer(self, op: str, hook: Hook) -> None:
        self.pending.append((op, hook))
        if self.on_defer is not None:
            try:
                self.on_defer()
            except Exception as exc:
                guard.failed(hook.name, exc)

    def remove_all(self) -> None:
        """Every hook of ours dead, and out of torch where that is safe now (the rest at the
        next ``flush``)."""
        for hook in list(self.hooks):
            self.remove(hook)

    def flush(self) -> None:
        """Carry out the changes that waited for a safe point, if this is one; never raises."""
        if not self.pending or not self.safe():
            return
        pending, self.pending = self.pending, []
        for op, hook in pending:
            try:
                if op == "remove":
                    _remove(hook)
                elif not hook.dead:
                    self._install(hook)
            except Exception as exc:  # a torch without the registry: that hook only
                hook.dead = True
                guard.failed(hook.name, exc)

    def _hide_from_compile(self, registry) -> None:
        """``torch.compile(module)`` warns when any global module hook exists (its
        ``OptimizedModule.__call__`` asks ``module._has_any_global_hook()``, used for nothing
        else), so the agent's own discovery hooks made a user see a warning about hooks they
        never added. The question is answered without ours; a hook of the user's still warns."""
        if self._saved is not None or not callable(getattr(registry, NAME_GLOBAL, None)):
            return
        names, ids = _GLOBAL_DICTS, self.ids

        def _has_any_global_hook() -> bool:
            return any(k not in ids for n in names for k in getattr(registry, n, {}))

        self._saved = set_attr(registry, NAME_GLOBAL, _has_any_global_hook)

    def close(self) -> None:
        """Every hook of ours out (where safe now), torch's global-hook question back."""
        self.remove_all()
        self.flush()
        saved, self._saved = self._saved, None
        restore(saved)

    def inside_step(self) -> bool:
        """Whether this thread is inside an optimizer's ``step()`` (a closure running)."""
        return next(_step_frames(self._loop_code), None) is not None

    def safe(self) -> bool:
        """Whether an optimizer hook dict may change now (no hook loop runs on this thread)."""
        return not in_optimizer_hooks(self._loop_code)


def _guarded(hook: Hook):
    """The callable torch holds for ``hook``: the tap's function inside the guard."""
    fn = hook.fn

    forward = hook.kind == "forward"

    def trainmeter_hook(*args):
        if hook.dead:
            return None
        try:
            if forward and len(args) == 3:
                # a forward that raised: torch calls always-called hooks as (module, args,
                # result), without the kwargs they were registered for (module.py, torch 2.x)
                args = (args[0], args[1], {}, None)
            fn(*args)
        except Exception as exc:
            hook.dead = True
            guard.failed(hook.name, exc)
            try:
                hook.door.remove(hook)
                if hook.on_fail is not None:
                    hook.on_fail(exc)
            except Exception as more:
                guard.failed(hook.name, more)
        return None  # never a replacement for the call's arguments or output

    trainmeter_hook.hook = hook  # what torch holds, traced back to ours (tests read it)
    return trainmeter_hook


def _remove(hook: Hook) -> None:
    handle, hook.handle = hook.handle, None
    if handle is not None:
        handle.remove()


def _first(handle) -> None:
    """Move a just-registered hook to the front of its dict (module docstring: why)."""
    ref = getattr(handle, "hooks_dict_ref", None)
    hooks = ref() if callable(ref) else None
    if hooks is not None and hasattr(hooks, "move_to_end"):
        hooks.move_to_end(handle.id, last=False)


def _hook_loop_code(torch):
    """The code object of torch's optimizer step wrapper (``profile_hook_step``'s inner
    function), whose frames run the hook loops; None if this torch has none."""
    wrap = getattr(getattr(getattr(torch, "optim", None), "Optimizer", None),
                   "profile_hook_step", None)  # fmt: skip
    try:
        return wrap(lambda *a, **k: None).__code__ if wrap is not None else None
    except Exception:
        return None


def _step_frames(code):
    """The frames of torch's step wrapper (``code``) on this thread's stack, innermost first
    (none when ``code`` is None: another torch)."""
    frame = sys._getframe(1)
    while frame is not None and code is not None:
        if frame.f_code is code:
            yield frame
        frame = frame.f_back


def in_optimizer_hooks(code) -> bool:
    """Whether this thread is inside an optimizer hook loop: a frame of torch's step wrapper
    (``code``) stopped on a line that calls a hook (``pre_hook(...)``/``post_hook(...)``),
    rather than on the step itself or its ``_optimizer_step_code()``. With no source line to
    read, a wrapper frame counts as inside (the change waits: always safe). With no wrapper
    code known (another torch), never inside.
    """
    for frame in _step_frames(code):
        line = linecache.getline(code.co_filename, frame.f_lineno)
        if not line or "hook(" in line:
            return True
    return False
