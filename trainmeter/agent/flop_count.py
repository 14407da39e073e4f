"""Counted FLOPs: one real training step under torch's ``FlopCounterMode`` (docs/spec.md
"Counted FLOPs").

Once per run, the clock optimizer's ``COUNT_STEP``-th step runs under
``torch.utils.flop_counter.FlopCounterMode(display=False)``: the mode is entered at the step's
first module call on the training thread (the root model's first training forward, or a module
outside the root called before it: a frozen teacher, a VAE encoding the images a diffusion model
is trained on; docs/spec.md "Counted FLOPs" says when not) and left at that step's optimizer
pre-hook (or later, as the next paragraph says), so it sees the step's forwards (every
micro-batch) and backwards, and not the optimizer's own update.
The result (FLOP of the step, and the step's tokens and samples from the agent's own count,
which the sender writes in when it reads that step: ``await_step``) goes out as one
``flops_counted`` record; the engine divides them (FLOPs per token, and per sample for any
model: images, audio, tabular rows). It sits beside the named conventions, never in their place (the
named-convention invariant).

Why the third step: the root model is known only at the first optimizer step (torch_taps'
discovery), and the first steps are not yet typical (lazy modules, the optimizer's state, AMP
loss scaling skipping steps, recompilation on a second shape); the third is the first real step
after both. The FLOPs of a step do not depend on warm-up, but the mode slows the step it
watches (Python runs at every op), so that cost is better paid once things settle.

Cost and safety. No hook until the clock's second step (the clock tells the count,
``second_step``); from then until the counted step ends, one global module pre-hook (every
module call takes torch's slow path for that one step), and while counting a module forward
hook and the optimizer's pre- and post-hooks; then nothing. Every hook goes through the taps'
hook door (hooks.py), which removes an optimizer hook only outside torch's hook loops. The
window's end moves for a step with a closure (after the step), for an optimizer stepped inside
backward (at the end of that backward), and a root forward without gradients inside it is not
counted (docs/spec.md "Counted FLOPs"). The mode computes FLOPs from shapes on the host as ops
are dispatched; it never reads a tensor's value, so on CUDA it adds no synchronization (the
counted step only runs slower on the host). Numerics are unchanged: the ops run as they would,
and the per-module tracker (global module hooks, extra autograd hooks) is replaced by a null
one, since only the total is kept. An error in a FLOPs formula is caught inside the dispatch
and ends counting; any other error turns the counter off (``guard``); the user's loop never
sees either.

Not counted when ``torch.compile`` is in use (a compiled model or module, or any frame Dynamo
compiled in this process): Dynamo skips compiled code while a dispatch mode is active, so the
step would run eagerly, with other numerics, or its compiled part would go uncounted.

Attention on CPU: torch 2.13's registry has formulas for the CUDA SDPA kernels (flash,
efficient, cuDNN) but not for the CPU one (``_scaled_dot_product_flash_attention_for_cpu`` and
its backward), so a CPU step would miss attention entirely. These two ops are mapped onto torch's
own formulas for ``_scaled_dot_product_flash_attention`` (same argument order), and the record
lists what was mapped. torch counts the full T x T square even for causal attention, and the
backward counts flash attention's recompute of the scores.

Recurrent kernels torch has no formula for (oneDNN's LSTM layer on CPU, cuDNN's and MIOpen's
RNN) get one from ``flop_formulas``, which also sees every op counted: it decides the record's
``attention`` (``sdpa``, ``matmul`` or ``none counted``) and lists in ``not_counted`` the work
no formula counts.
"""

from __future__ import annotations

import sys
import threading

from trainmeter.agent import flop_formulas, guard
from trainmeter.agent.step_clock import has_closure, inside_backward

NAME = "counted FLOPs"
COUNT_STEP = 3  # the clock optimizer's step that is counted (module docstring says why)
MAX_FORWARDS = 64  # root forwards in the counted step past which it is abandoned (no step came)
MAX_OPS = 32  # op names kept in the record's breakdown
# CPU kernels torch's registry lacks -> the CUDA kernel whose formula applies unchanged
_SAME_FORMULA = (
    ("_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention"),
    ("_scaled_dot_product_flash_attention_for_cpu_backward",
     "_scaled_dot_product_flash_attention_backward"),
)  # fmt: skip


class _GlobalOnly:
    """Stands in for FlopCounterMode's ModuleTracker: every count goes to "Global", and no
    module or autograd hook is added."""

    parents = frozenset({"Global"})

    def __enter__(self):
        return self

    def __exit__(self, *args) -> None:
        return None


class FlopCount:
    """Counts one step's executed FLOPs for a :class:`trainmeter.agent.torch_taps.TorchTaps`.

    Args:
        taps: the torch taps (root model, clock optimizer, token count, agent).
    """

    def __init__(self, taps) -> None:
        self.taps = taps
        self.done = False  # counted (or refused) in this run
        self.state = "off"  # off | wait | armed | counting | in step | closing | finished
        self._hooks: dict = {}  # name -> hooks.Hook (through the taps' door)
        self._counter = None
        self.mapped: list[str] = []  # ops given a formula torch lacks (_SAME_FORMULA, RECURRENT)
        self._extras: flop_formulas.Extras | None = None  # recurrent formulas, attention verdict
        self._forwards = 0
        self._aside = 0  # root forwards without gradients running now (not counted)
        self._thread = None  # the thread that entered the mode (only it may leave it)
        self._armed_on = None  # the thread the clock armed the count on
        self._inside: set[int] = set()  # ids of the root's modules, taken when armed
        self._first = None  # the module outside the root that opened the count, if one did
        self._root_only = False  # only the root's training forward may open it now
        self._error: BaseException | None = None

    # -- called by the taps (never from inside a hook of torch's) ----------------------------
    def start(self, new_run: bool = False) -> None:
        """Wait for the ``COUNT_STEP``-th step of this run (a no-op once counted): the clock
        calls :meth:`second_step`, which arms the count."""
        try:
            if new_run:
                self.stop()
                self.done = False
            if self.done or self.state != "off" or guard.is_off(NAME):
                return
            self.state = "wait"
        except Exception as exc:
            self._fail(exc)

    def second_step(self) -> None:
        """The clock optimizer's step ``COUNT_STEP - 1`` is done: arm the count for the next
        one (a global module pre-hook until the count is over), or say why not."""
        if self.state != "wait" or guard.is_off(NAME):
            return
        try:
            reason = self._refusal()
            if reason:
                self._finish(reason)
                return
            self.state = "armed"
            self._first, self._root_only = None, False
            self._armed_on = threading.get_ident()  # the training thread: the step's own
            root = self.taps._root() if self.taps._root is not None else None
            self._inside = {id(m) for m in root.modules()} if root is not None else set()
            self._add("fwd", "forward_pre", self._on_forward)
        except Exception as exc:
            self._fail(exc)

    def stop(self) -> None:
        """Drop a count in progress and every hook (a cell ended, or the agent detaches)."""
        try:
            self._leave_mode()
        except Exception as exc:
            guard.failed(NAME, exc)
        self._remove_hooks()
        self.state = "off"

    def _add(self, key: str, kind: str, fn) -> None:
        self._hooks[key] = self.taps.door.add(kind, fn, NAME, on_fail=self._failed_hook)

    def _remove_hooks(self) -> None:
        hooks, self._hooks = self._hooks, {}
        for hook in hooks.values():
            hook.remove()  # the door waits for a safe point where torch is iterating them

    # -- hooks (each guarded by the door) ---------------------------------------------------
    def _on_forward(self, module, args) -> None:
        """Global module pre-hook: enter the mode at the step's first module call (the root's
        first training forward, or a module called before it, :meth:`_before_root`); leave
        it at the first module call after a count that ended inside backward; set aside root
        forwards without gradients (an evaluation inside the step); remove every hook once the
        count is over."""
        taps = self.taps
        taps.door.flush()
        if self.state in ("finished", "closing"):
            self._close_late()
            return
        root = taps._root() if taps._root is not None else None
        if module is not root:
            if self.state == "armed" and not self._root_only and self._before_root(module, root):
                self._enter(first=module)
            elif module is self._first and self._forwards == 0 and self.state == "counting":
                self._reopen_at_root()
            return
        if not taps.torch.is_grad_enabled():
            if self.state in ("counting", "in step"):
                self._aside += 1  # back to 0 at its end (_after_forward)
            return
        if self.state == "armed":
            if threading.get_ident() == self._armed_on:  # not a forward on another thread
                self._enter()
        elif self.state in ("counting", "in step"):
            self._forwards += 1
            if self._forwards > MAX_FORWARDS:
                self._finish(f"no optimizer step after {MAX_FORWARDS} forwards")

    def _before_root(self, module, root) -> bool:
        """Whether a module call that is not the root's starts the counted step: a module
        outside the root (a frozen teacher, a VAE or text encoder run before the model they
        feed, under ``no_grad`` or not), called on the training thread while the root is in
        training mode (an evaluation after the second step has the root in ``eval()``), not
        under ``inference_mode`` (a dispatch mode entered inside it no longer sees the ops
        that follow it: the student's forward would go half uncounted)."""
        torch = self.taps.torch
        return (root is not None and root.training and id(module) not in self._inside
                and threading.get_ident() == self._armed_on
                and not torch.is_inference_mode_enabled())  # fmt: skip

    def _reopen_at_root(self) -> None:
        """The module that opened the count is called again before the root's first training
        forward: it is not the step's (an EMA copy evaluated in a loop after the second step,
        the root left in training mode), so the count is dropped and waits for the root's
        training forward, as when no module comes before it."""
        if not self._leave_mode():
            return  # another mode inside ours: the count goes on
        for key in ("pre", "post", "end"):
            hook = self._hooks.pop(key, None)
            if hook is not None:
                hook.remove()
        self._first, self._root_only, self.state = None, True, "armed"

    def _after_forward(self, module, args, kwargs, output) -> None:
        """Global module forward hook while counting: a set-aside root forward has ended."""
        if self._aside and not self.taps.torch.is_grad_enabled():
            root = self.taps._root() if self.taps._root is not None else None
            if module is root:
                self._aside -= 1

    def _before_step(self, optimizer, args, kwargs) -> None:
        """Optimizer pre-hook of the counted step: leave the mode and send the count, or, when
        the optimizer steps inside backward (fused into post-accumulate-grad hooks), at the
        end of that backward."""
        if self.state != "counting" or id(optimizer) != self.taps.clock_id:
            return
        if has_closure(args, kwargs):
            self.state = "in step"  # the closure runs forwards and backwards inside the step:
            return  # the count ends after it (_after_step)
        if inside_backward(self.taps.torch):
            self.state = "closing"
            engine = getattr(getattr(self.taps.torch.autograd, "Variable", None),
                             "_execution_engine", None)  # fmt: skip
            queue = getattr(engine, "queue_callback", None)
            if queue is not None:
                queue(self._backward_done)
            return  # else at the first module call after it (_on_forward)
        self._conclude()

    def _after_step(self, optimizer, args, kwargs) -> None:
        """Optimizer post-hook of a counted step that took a closure (LBFGS, Lightning): the
        closure's forwards and backwards ran inside the step, so the count ends here."""
        if self.state == "in step" and id(optimizer) == self.taps.clock_id:
            self._conclude()

    def _backward_done(self) -> None:
        """End of the backward the counted step's optimizer ran in (autograd's callback)."""
        try:
            if self.state == "closing" and threading.get_ident() == self._thread:
                self._conclude()
        except Exception as exc:
            self._fail(exc)

    def _close_late(self) -> None:
        """A count that ended inside backward (``closing``), or one whose mode another mode
        held (``finished``): leave the mode now that ours is innermost; then no hook is left."""
        if self.state == "closing":
            self._conclude()
        elif self._leave_mode():
            self._remove_hooks()
            self.state = "off"

    def _conclude(self) -> None:
        """Leave the mode and send the count (or say why not)."""
        counter, error = self._counter, self._error
        if not self._leave_mode():
            self._finish("another dispatch mode was still active at the optimizer step")
            return
        if error is not None:
            raise error
        if self.taps.off:  # the token count stopped during the step
            self._finish("the token count stopped during the step")
            return
        self._send(counter)
        self._finish(None)

    # -- the count --------------------------------------------------------------------------
    def _enter(self, first=None) -> None:
        """Enter the mode at the root's training forward (the step's first forward of the
        root), or at ``first``, a module outside the root called before it."""
        from torch.utils.flop_counter import FlopCounterMode

        torch = self.taps.torch
        counter = FlopCounterMode(display=False)
        registry = getattr(counter, "flop_registry", None)
        known = isinstance(registry, dict) and all(
            hasattr(counter, a) for a in ("mod_tracker", "mode", "get_flop_counts")
        )
        if not known or not callable(getattr(counter, "_count_flops", None)):
            self._finish("this torch's FlopCounterMode is not the one trainmeter was built for")
            return
        self.mapped = _map_cpu_attention(torch.ops.aten, registry)
        self._extras = flop_formulas.Extras(torch, registry)
        self.mapped += self._extras.register()
        counter.mod_tracker = _GlobalOnly()
        counter._count_flops = self._guarded(counter._count_flops)
        self._add("pre", "optimizer_pre", self._before_step)
        self._add("post", "optimizer_post", self._after_step)
        self._add("end", "forward", self._after_forward)
        self._forwards, self._aside, self._error = int(first is None), 0, None
        self._inside, self._first = set(), first
        self._thread = threading.get_ident()
        counter.__enter__()
        # a forward inside the step itself (a closure: Lightning, LBFGS) has passed the step's
        # pre-hook already: the count ends after that step (_after_step)
        self._counter = counter
        self.state = "in step" if self.taps.door.inside_step() else "counting"

    def _guarded(self, count):
        """``FlopCounterMode._count_flops`` that never raises into the op being dispatched: the
        first error is kept (ending the count) and the op's output passes through. Each op is
        also shown to the extras (attention verdict, ops no formula counts)."""
        extras = self._extras

        def count_flops(func_packet, out, args, kwargs):
            if self._error is None and not self._aside:  # a no-grad root forward: not the step's
                try:
                    if extras is not None:
                        extras.see(func_packet, args)
                    return count(func_packet, out, args, kwargs)
                except Exception as exc:
                    self._error = exc
            return out

        return count_flops

    def _leave_mode(self) -> bool:
        """Exit the mode if it is the innermost one (else False: try again later)."""
        counter = self._counter
        if counter is None:
            return True
        from torch.utils._python_dispatch import _get_current_dispatch_mode

        if _get_current_dispatch_mode() is not counter.mode:
            return False
        self._counter = None
        counter.__exit__(None, None, None)
        return True

    def _send(self, counter) -> None:
        taps = self.taps
        by_op = counter.get_flop_counts().get("Global", {})
        ops = {str(k): int(v) for k, v in list(by_op.items())[:MAX_OPS]}
        extras = self._extras
        attention = extras.attention(by_op) if extras is not None else "none counted"
        missed = list(extras.not_counted) if extras is not None else []
        put = getattr(taps.agent, "put", None)
        if put is not None:
            put("flops_counted", rank=getattr(taps.agent, "rank", 0), step=taps.agent.step + 1,
                flops=int(counter.get_total_flops()), tokens=None, samples=None,
                attention=attention, mapped=self.mapped, not_counted=missed, ops=ops,
                await_step=True)  # fmt: skip

    def _refusal(self) -> str | None:
        taps = self.taps
        root = taps._root() if taps._root is not None else None
        if root is None:
            return "no root model was found"
        if _compiled(root):
            return ("torch.compile is in use: under a dispatch mode, compiled code would run "
                    "eagerly (other numerics) or go uncounted")  # fmt: skip
        return None

    def _finish(self, reason: str | None) -> None:
        """The count is over (``reason``: why there is none). The hooks go now, or, while the
        mode is still entered (another mode inside it), once it could be left."""
        self.done, self.state = True, "finished"
        self._inside, self._first = set(), None
        if reason:
            self._note(f"not counted: {reason}")
        if self._counter is None:
            self._remove_hooks()
            self.state = "off"  # nothing of ours left in torch
        elif "fwd" not in self._hooks:
            self._add("fwd", "forward_pre", self._on_forward)

    def _fail(self, exc: BaseException) -> None:
        guard.failed(NAME, exc)
        self._failed_hook(exc)

    def _failed_hook(self, exc: BaseException) -> None:
        """A hook of the count raised ``exc`` (the door warned): no count this run, one note,
        the mode left where it can be."""
        self._note(f"stopped after an internal error: {type(exc).__name__}: {exc}")
        try:
            self._finish(None)
        except Exception:
            self.state = "finished"

    def _note(self, text: str) -> None:
        put = getattr(self.taps.agent, "put", None)
        if put is not None:
            put("note", text=f"{NAME}: {text}", source="trainmeter")


def _compiled(root) -> bool:
    """Whether ``root`` or a module in it is compiled, or Dynamo has compiled any frame in this
    process (its counters exist only once ``torch._dynamo`` is loaded)."""
    if hasattr(root, "_orig_mod"):  # torch.compile(model) returns an OptimizedModule
        return True
    if any(getattr(m, "_compiled_call_impl", None) is not None for m in root.modules()):
        return True  # Module.compile()
    counters = getattr(sys.modules.get("torch._dynamo.utils"), "counters", None)
    return bool(counters and counters.get("frames", {}).get("ok"))


def _map_cpu_attention(aten, registry: dict) -> list[str]:
    """Give the CPU attention ops torch's own formula for the same computation on CUDA;
    returns the names mapped (none when this torch already counts them)."""
    mapped = []
    for op, same in _SAME_FORMULA:
        src, dst = getattr(aten, op, None), getattr(aten, same, None)
        if src is not None and src not in registry and dst in registry:
            registry[src] = registry[dst]
            mapped.append(op)
    return mapped
