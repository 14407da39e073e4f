"""Time spans, host-side: data-loader waits, checkpoint saves, evaluation phases, warm-up.

Started and stopped by the torch taps (``TorchTaps.attach``/``rediscover``/``new_segment`` start
them, ``pause``/``detach`` stop them), so like every tap they exist only once the user's code has
imported torch. Each span is timed on the host with ``time.perf_counter`` (its duration) and
``time.time`` (its start, comparable with the step records' stamps); nothing here reads a tensor
or synchronizes a device (the no-device-sync invariant), so what a span measures is host time:
docs/spec.md "Time spans" says what that can and cannot see on an asynchronous GPU.

- ``data``: time inside ``_BaseDataLoaderIter.__next__`` (every DataLoader iterator), wrapped at
  class level: one wrapper call per batch, about 1 us (docs/performance.md).
- ``checkpoint``: time inside ``torch.save``, ``safetensors.torch.save_file`` and
  ``torch.distributed.checkpoint.save`` / ``save_state_dict`` / ``async_save`` (the last two
  modules wrapped when the user's code imports them).
- ``eval``: from ``model.eval()`` on the root model (or on a module that holds it, such as a
  LightningModule; before the root is known, on any module) until the phase ends: at that
  module's ``train()``, or at the first forward with gradients on of that module or one inside
  it (Lightning 2.6 restores training mode by setting ``.training`` on every module, with no
  ``train()`` call). A phase that ends at a training forward is an evaluation only if a forward
  without gradients ran inside it; else it was training in eval mode (a frozen BatchNorm, a
  model trained in eval mode) and is dropped. A phase opened on a module that turns out not to
  hold the root (a frozen teacher) is dropped at the first optimizer step. While a phase is open,
  one global forward pre-hook watches the forwards (every module call takes torch's slow path
  during evaluation only). What is wrapped is ``nn.Module.train``, which ``eval()`` calls
  (Hugging Face's ``PreTrainedModel`` overrides both and still reaches it through ``super()``):
  the outermost call on the training thread counts, its nested calls on every submodule pass
  through (one frame each).
- ``warmup``: from the first forward pass with gradients enabled to the first optimizer step
  (the first step's compile, allocator warm-up, first batch). A loop with no optimizer (clocked
  by its ``backward()`` calls) has no warm-up span: its first step's time is "other".

Spans nest: a data wait inside an evaluation phase counts as data, and the phase's own span is
its time less the spans inside it, so every second lands in one bucket (the innermost).
Only the training thread is timed (the main thread until the first optimizer step, then the
thread that made it): a background thread that prefetches or saves overlaps training and is not
time the loop waited.

Each finished span is queued as a bare tuple ``(kind, start, seconds)`` (one ``deque.append``);
the sender thread sends a flush's spans as one ``spans`` column batch beside the ``steps``
batch (``core.records.decode_wire`` expands it into ``span`` records). Every entry point is
guarded (the never-raise invariant): an internal failure prints one line, sends one note, and turns
that span kind off for the rest of the process.
"""

from __future__ import annotations

import functools
import sys
import threading
import time

from trainmeter.agent import guard

KINDS = ("data", "checkpoint", "eval", "warmup")
ENTRY = {  # span kind -> the entry point's name in warnings (guard.failed)
    "data": "data-loader span",
    "checkpoint": "checkpoint span",
    "eval": "eval span",
    "warmup": "warm-up span",
}
# modules imported later by the user's code: (module, function names wrapped as checkpoints)
OPTIONAL = (
    ("safetensors.torch", ("save_file",)),
    ("torch.distributed.checkpoint", ("save", "save_state_dict", "async_save")),
)
_wall, _perf, _ident = time.time, time.perf_counter, threading.get_ident


class Spans:
    """The span taps of one agent.

    Args:
        agent: the agent (``armed``, ``sender.queue``; ``put`` for a note when a tap fails).
        torch: the imported torch module.
        root: returns the root model once the torch taps know it, else None.
    """

    def __init__(self, agent, torch, door, root=lambda: None) -> None:
        self.agent = agent
        self.torch = torch
        self.door = door  # every hook through the taps' door (hooks.py)
        self.backward_watch = lambda: False  # the taps: does the backward tap call backward_seen?
        self.on_phase = lambda is_open: None  # the taps: a phase opened or closed
        self.root = root
        self.grad_enabled = torch.is_grad_enabled
        self.off = dict.fromkeys(KINDS, False)
        self.active = False
        self.thread = threading.main_thread().ident  # the training thread (see module doc)
        self._push = agent.sender.put_step  # the hot-path append, as the step clock uses
        self._stack: list[list] = []  # open spans, innermost last: [child seconds, kind]
        self._patches: list[tuple] = []  # (owner, name, original, wrapper, had own)
        self._waiting: set[str] = set()  # optional modules with an import callback pending
        self._eval: _Phase | None = None  # the open evaluation phase (see _train_called)
        self._apart: tuple = (None, set())  # (id of the root, ids of modules not holding it)
        self._warm = None  # (frame, start, perf start) between first forward and first step
        self._warm_pre = None  # the warm-up's forward pre-hook (hooks.Hook)
        self._warm_done = False

    # -- start / stop ---------------------------------------------------------------------------
    def start(self, new_run: bool = True) -> None:
        """Wrap the span entry points (a run or a notebook cell began); idempotent."""
        if new_run:
            self._drop_open()
            self._warm_done = False
            self.thread = threading.main_thread().ident
        if not self.active:
            self.active = True
            torch = self.torch  # the user's torch: its loaded modules are used, never imported
            dataloader = sys.modules[torch.utils.data.DataLoader.__module__]
            self._wrap(dataloader._BaseDataLoaderIter, "__next__", self._data_wrapper)
            self._wrap(torch.nn.Module, "train", self._train_wrapper)
            ser = torch.serialization
            save = self._wrap(torch, "save", self._call_wrapper)
            if getattr(ser, "save", None) is getattr(save, "__wrapped__", None):
                self._wrap(ser, "save", lambda _orig: save)  # the same function, one wrapper
            self._patch_optional()
        self._warm_arm()

    def stop(self) -> None:
        """Unwrap everything and drop open spans (between notebook cells, detach)."""
        self.active = False
        self._drop_open()
        self._remove_warm_hooks()
        for owner, name, orig, wrapper, had_own in reversed(self._patches):
            try:
                # restore only what is still ours; a wrapper that another library wrapped in
                # turn stays in place, inactive (the wrappers check `active`)
                if owner.__dict__.get(name) is wrapper:
                    if had_own:
                        setattr(owner, name, orig)
                    else:
                        delattr(owner, name)
            except Exception as exc:
                guard.failed("span taps shutdown", exc)
        self._patches = []

    def close(self) -> None:
        """``stop`` and forget pending import callbacks (the agent is uninstalled)."""
        from trainmeter.agent.importhook import cancel

        self.stop()
        for name in self._waiting:
            cancel(name, self._on_import)
        self._waiting.clear()

    def _wrap(self, owner, name: str, make):
        orig = getattr(owner, name, None)
        if orig is None or any(p[0] is owner and p[1] == name for p in self._patches):
            return None
        wrapper = make(orig)
        had_own = name in vars(owner)
        setattr(owner, name, wrapper)
        self._patches.append((owner, name, orig, wrapper, had_own))
        return wrapper

    def _patch_optional(self) -> None:
        """Wrap the optional savers whose modules are loaded; wait for the others."""
        from trainmeter.agent.importhook import when_imported

        for name, _funcs in OPTIONAL:
            module = sys.modules.get(name)
            if module is None:
                if name not in self._waiting:
                    self._waiting.add(name)
                    when_imported(name, self._on_import)
            elif not _initializing(module):
                self._wrap_savers(module)
            # else its body is still running (its import started torch's): wrapped at the
            # first optimizer step, when _patch_optional runs again

    def _on_import(self, module) -> None:
        """The import hook's callback: ``module``'s body has run."""
        self._waiting.discard(module.__name__)
        if self.active:
            self._wrap_savers(module)

    def _wrap_savers(self, module) -> None:
        for func in dict(OPTIONAL).get(module.__name__, ()):
            self._wrap(module, func, self._call_wrapper)

    # -- the wrappers (hot path: the data-loader one runs once per batch) -----------------------
    def _data_wrapper(self, orig):
        """``__next__`` of every DataLoader iterator. The hot path of the span taps (once per
        batch): what it needs is bound in the closure, and a span that is innermost (always,
        unless a loader iterates another loader) is closed inline rather than by ``_end``."""
        spans, agent, stack, off, push = self, self.agent, self._stack, self.off, self._push

        @functools.wraps(orig)
        def __next__(it):
            if off["data"] or not (agent.armed and spans.active) or _ident() != spans.thread:
                return orig(it)
            frame = [0.0, "data"]
            stack.append(frame)
            t0, p0 = _wall(), _perf()
            try:
                return orig(it)
            finally:
                seconds = _perf() - p0
                try:
                    if stack and stack[-1] is frame:
                        stack.pop()
                        if stack:
                            stack[-1][0] += seconds
                        push(("data", t0, max(0.0, seconds - frame[0])))
                    else:
                        spans._end("data", t0, seconds, frame)
                except Exception as exc:
                    spans._fail("data", exc)

        return __next__

    def _call_wrapper(self, orig):
        """A checkpoint saver: its call is one ``checkpoint`` span (``dcp.save`` calling
        ``torch.save`` is still one)."""
        spans, agent, stack, off = self, self.agent, self._stack, self.off

        @functools.wraps(orig)
        def save(*args, **kwargs):
            if off["checkpoint"] or not (agent.armed and spans.active) or _ident() != spans.thread:
                return orig(*args, **kwargs)
            if stack and stack[-1][1] == "checkpoint":  # a saver inside a saver: one span
                return orig(*args, **kwargs)
            frame = [0.0, "checkpoint"]
            stack.append(frame)
            t0, p0 = _wall(), _perf()
            try:
                return orig(*args, **kwargs)
            finally:
                p1 = _perf()
                try:
                    spans._end("checkpoint", t0, p1 - p0, frame)
                except Exception as exc:
                    spans._fail("checkpoint", exc)

        return save

    def _train_wrapper(self, orig):
        """``nn.Module.train(mode)``, which ``eval()`` calls (so does a class that overrides
        both, as Hugging Face's ``PreTrainedModel`` does): the outermost call on the training
        thread opens an evaluation phase (``mode`` false) or ends the open one on its module
        (``mode`` true); the nested calls on every submodule pass straight through."""
        spans, agent, off, busy = self, self.agent, self.off, [False]

        @functools.wraps(orig)
        def train(module, mode=True):
            idle = busy[0] or off["eval"] or not (agent.armed and spans.active)
            if idle or _ident() != spans.thread:
                return orig(module, mode)
            busy[0] = True
            try:
                try:
                    spans._train_called(module, mode)
                except Exception as exc:
                    spans._fail("eval", exc)
                return orig(module, mode)
            finally:
                busy[0] = False

        return train

    # -- spans ----------------------------------------------------------------------------------
    def _end(self, kind: str, t0: float, seconds: float, frame: list) -> None:
        """Close ``frame``: queue its own time (less the spans inside it), charge its whole
        time to the span it sits in."""
        stack = self._stack
        if stack and stack[-1] is frame:
            stack.pop()
        elif not _unstack(stack, frame):
            return  # dropped meanwhile (a new run, or the notebook cell ended)
        if stack:
            stack[-1][0] += seconds
        self._push((kind, t0, max(0.0, seconds - frame[0])))

    def _fail(self, kind: str, exc: BaseException) -> None:
        """Turn span kind ``kind`` off for good: one warning, one note, nothing left open."""
        guard.failed(ENTRY.get(kind, "span"), exc)
        self._disable(kind)

    def _disable(self, kind: str) -> None:
        """Span kind ``kind`` off for good, nothing of it left open, one note (the warning is
        the caller's: ``_fail``, or the hook door for a hook that raised)."""
        try:
            self.off[kind] = True
            self._stack[:] = [f for f in self._stack if f[1] != kind]
            if kind == "eval":
                self._eval_close(emit=False)
            elif kind == "warmup":
                self._warm = None
                self._remove_warm_hooks()
        except Exception:
            pass
        try:
            text = (f"time split: {kind} spans are no longer measured (an internal error); "
                    "their time counts as compute or other")  # fmt: skip
            self.agent.put("note", source="trainmeter", text=text)
        except Exception:
            pass

    def _drop_open(self) -> None:
        try:
            self._eval_close(emit=False)
        except Exception as exc:
            self._fail("eval", exc)
        self._warm = None
        self._stack.clear()

    # -- evaluation phases ----------------------------------------------------------------------
    def _train_called(self, module, mode) -> None:
        """``module.train(mode)``: ``mode`` false opens a phase when ``module`` is or holds the
        root model (any module before the root is known); true ends the phase on it."""
        phase = self._eval
        if mode:
            if phase is not None and phase.module is module:
                self._eval_close(emit=True)
            return
        if phase is not None:
            return
        root = self.root()
        if root is not None:
            if self._apart[0] != id(root):
                self._apart = (id(root), set())  # modules seen not to hold this root
            if id(module) in self._apart[1]:
                return
            if not _holds(module, root):
                self._apart[1].add(id(module))  # a frozen teacher's eval() every step: once
                return
        frame = [0.0, "eval"]
        phase = _Phase(frame, module)
        self._eval = phase
        self._stack.append(frame)
        self.on_phase(True)
        phase.hook = self.door.add("forward_pre", self._eval_forward, ENTRY["eval"],
                                   on_fail=lambda _exc: self._disable("eval"))  # fmt: skip

    def _eval_forward(self, module, args) -> None:
        """While a phase is open: a forward of the phase's module (or one inside it) without
        gradients makes it an evaluation; one with gradients in training mode ends it (the
        mode was set back without ``train()``). A forward with gradients in eval mode (a
        validation written without ``no_grad``, or training in eval mode) leaves it open when
        the backward tap can tell the two apart: a ``backward()`` then ends it as training
        (:meth:`backward_seen`), ``train()`` as an evaluation."""
        phase = self._eval
        if phase is None or _ident() != self.thread or id(module) not in phase.inside():
            return
        if not self.grad_enabled():
            phase.evaluated = True
        elif module.training or not self.backward_watch():
            self._eval_close(emit=phase.evaluated)
        else:
            phase.graded = True  # a forward with gradients in eval mode: see backward_seen

    def backward_seen(self) -> None:
        """A training ``backward()`` while a phase is open (the backward tap calls it): the
        phase was training in eval mode unless a forward without gradients ran in it."""
        phase = self._eval
        if phase is not None and phase.graded and _ident() == self.thread:
            try:  # its module ran with gradients: this backward is its training (else another
                self._eval_close(emit=phase.evaluated)  # module's, a frozen teacher's student)
            except Exception as exc:
                self._fail("eval", exc)

    def _eval_close(self, emit: bool) -> None:
        phase, self._eval = self._eval, None
        if phase is None:
            return
        self.on_phase(False)
        seconds = _perf() - phase.p0
        if phase.hook is not None:
            phase.hook.remove()
        if emit:
            self._end("eval", phase.t0, seconds, phase.frame)
        else:
            _unstack(self._stack, phase.frame)

    # -- warm-up: first training forward to first optimizer step --------------------------------
    def _warm_arm(self) -> None:
        if self._warm_done or self.off["warmup"] or self._warm_pre is not None or self._warm:
            return
        self._warm_pre = self.door.add("forward_pre", self._warm_forward, ENTRY["warmup"],
                                       on_fail=lambda _exc: self._disable("warmup"))  # fmt: skip

    def _warm_forward(self, module, args) -> None:
        """A global forward pre-hook that lives until the first forward with gradients on."""
        if self._warm is not None or not self.grad_enabled() or not self.agent.armed:
            return
        self._remove_warm_hooks()
        frame = [0.0, "warmup"]
        self._stack.append(frame)
        self._warm = (frame, _wall(), _perf())

    def first_step(self, warm: bool = True) -> None:
        """The clock optimizer's first step in a run or a notebook cell (step_clock.py calls it
        through the taps): warm-up ends, and an evaluation phase on a module that does not hold
        the root just found (a frozen teacher) is dropped. ``warm`` False: backward() became
        the clock, many steps after the first, so the open warm-up span is dropped."""
        try:
            p1 = _perf()
            self._remove_warm_hooks()
            if not self._warm_done:
                self._warm_done = True
                self.thread = _ident()  # the training thread from now on
            if self._warm is not None:
                (frame, t0, p0), self._warm = self._warm, None
                if warm:
                    self._end("warmup", t0, p1 - p0, frame)
                else:
                    _unstack(self._stack, frame)
            if self.active:
                self._patch_optional()  # a saver module whose import started torch
        except Exception as exc:
            self._fail("warmup", exc)
        try:
            root, phase = self.root(), self._eval
            if phase is not None and (root is None or not _holds(phase.module, root)):
                self._eval_close(emit=False)
        except Exception as exc:
            self._fail("eval", exc)

    def _remove_warm_hooks(self) -> None:
        hook, self._warm_pre = self._warm_pre, None
        if hook is not None:
            hook.remove()


class _Phase:
    """An open evaluation phase: its span frame and times, the module ``train(False)`` was
    called on, its forward hook, and whether a forward without gradients ran in it."""

    def __init__(self, frame: list, module) -> None:
        self.frame, self.t0, self.p0 = frame, _wall(), _perf()
        self.module = module
        self.hook = None
        self.evaluated = False
        self.graded = False  # a forward with gradients of its module ran in eval mode
        self._inside: set[int] | None = None

    def inside(self) -> set[int]:
        """ids of the phase's module and every module in it (found once, at the first call)."""
        if self._inside is None:
            self._inside = {id(m) for m in self.module.modules()}
        return self._inside


def _unstack(stack: list, frame: list) -> bool:
    """Remove ``frame`` (this very list, not an equal one) from ``stack``; False if absent."""
    for i, f in enumerate(stack):
        if f is frame:
            del stack[i]
            return True
    return False


def _holds(module, root) -> bool:
    """``module`` is the root model, holds it (a LightningModule around it, DDP's ``module``,
    ``torch.compile``'s ``_orig_mod``), or is held by it as its wrapper's target."""
    if module is root:
        return True
    for a, b in ((module, root), (root, module)):
        for attr in ("module", "_orig_mod"):
            if vars(a).get("_modules", {}).get(attr) is b:
                return True
    return any(m is root for m in module.modules())


def _initializing(module) -> bool:
    """The module is still executing its body (an import of it started torch's)."""
    return bool(getattr(getattr(module, "__spec__", None), "_initializing", False))
