"""Passive taps on torch: the optimizer step clock and tokens per step from batch shapes.

Attached by the agent when the user's code imports torch (never before). Costs per optimizer
step (see benchmarks/agent_overhead.py and docs/performance.md): a few bytecodes in the root
model's ``__call__``, and the step clock's chain of C calls (step_clock.py). Neither reads a
tensor's value, so never a device synchronization (the no-device-sync invariant); shapes are read
later, on the sender thread.

Discovery: until the first optimizer step, global module hooks (through the hook door,
hooks.py) note which modules run at the top of the call stack with gradients enabled, the
shapes each was fed, and the first sequence layer's input (an RNN, ``nn.MultiheadAttention``
or a transformer layer, with its ``batch_first``). At that step the root model is the top-level
module sharing the most parameters with the optimizer; its inputs' batch axis is the one whose
size is the sequence layer's batch (axis 1 for sequence-first inputs, ``batch_first=False``,
the default of torch's RNNs and ``nn.Transformer``; else axis 0); the global hooks are
removed.

Counting tokens at the root: a module forward pre-hook would do, but any hook sends the module
through ``Module._call_impl``'s slow path, which costs 7-11 us per call on a small CPU, more
than the whole budget; a wrapper on ``forward`` adds a Python frame (1.5-4 us here). So the
root's *class* gets its own ``__call__`` instead: torch's ``Module._wrapped_call_impl`` (two
lines, checked at patch time) with one more line that queues the call's first argument for the
sender thread. That replaces a frame rather than adding one. It counts only for that one
instance (an ``id`` check), only with gradients enabled, steps aside under ``torch.compile``
tracing, and is removed on detach. Instances are untouched: pickling, ``deepcopy``,
``type(model)`` and ``model.forward`` (which the HF Trainer inspects, and Accelerate replaces
per instance) are exactly as without trainmeter.
"""

from __future__ import annotations

import weakref
from typing import Any

from trainmeter.agent import guard
from trainmeter.agent.backward import (
    LOSS_OFF,
    LOSS_ON,
    NEW_RUN,
    STEP_BEGIN,
    SUPERSEDED,
    BackwardTap,
    Fallback,
)
from trainmeter.agent.classattr import restore, set_attr
from trainmeter.agent.compile_watch import CompileWatch
from trainmeter.agent.describe import describe
from trainmeter.agent.flop_count import FlopCount
from trainmeter.agent.hooks import Door
from trainmeter.agent.importhook import cancel, when_imported
from trainmeter.agent.pad_tokens import pad_counter
from trainmeter.agent.sender import FORGET
from trainmeter.agent.shapes import BatchAxes, PackedInput, count
from trainmeter.agent.spans import Spans
from trainmeter.agent.step_clock import StepClock, has_closure

# Token tensors wait on the sender's queue until its next flush (0.1 s); when more than about
# this many bytes of them arrive in one interval, the sender comes back sooner (Sender.max_items).
DEFER_BYTES = 16 << 20
MIN_QUEUED, MAX_QUEUED = 4, 50_000  # the sender's max_items, whatever the bytes
_TOKEN_KWARGS = ("input_ids", "idx", "tokens", "input", "x")
MAX_DISCOVERY_CALLS = 4096  # root-candidate calls whose shapes discovery keeps (per candidate)
DISCOVERY = "model discovery"  # hook names in warnings (guard.failed)
CLOSURE = "optimizer step hook"
_DYNAMO = "torch._dynamo"  # imported by torch.compile (and by the first optimizer step)


class TorchTaps:
    """The torch side of one agent.

    Args:
        agent: the :class:`trainmeter.agent.runtime.Agent` that owns the sender and counters.
        torch: the imported torch module.
    """

    def __init__(self, agent, torch) -> None:
        self.agent = agent
        self.torch = torch
        self.tensor_type = torch.Tensor
        self.int_dtypes = (torch.int64, torch.int32)
        self.is_grad_enabled = torch.is_grad_enabled
        rnn = getattr(getattr(getattr(torch, "nn", None), "utils", None), "rnn", None)
        self.packed_type = getattr(rnn, "PackedSequence", None)  # a tuple: read apart
        self.off = False
        self.door = Door(torch)  # every torch hook of the taps goes through it (hooks.py)
        self.door.on_defer = self._flush_soon
        self.clock = StepClock(self, torch)  # one step record per clock-optimizer step
        self.axes = BatchAxes(torch)  # the inputs' batch and sequence axes (shapes.py)
        self.backward = BackwardTap(agent, torch)  # loss, and the clock with no optimizer
        self.backward.on_fallback = self._backward_clock
        self._cells: dict = {}  # the counting __call__'s "root_id" and "tracing" cells
        self._depth = 0
        self._roots: dict[int, list] = {}  # id -> [module, calls' input shapes, bytes, calls]
        self._handles: list = []  # discovery's hooks (hooks.Hook), until the first step
        self._closure = None  # the closure-step hook (hooks.Hook), see _closure_step
        self._superseded = False  # a train loss was reported (train_loss_reported)
        self._patched: tuple | None = None  # what classattr.restore needs
        self._root = None  # weakref to the root model once found
        self._root_params: tuple = (None, set())  # (weakref to the root, its parameters' ids)
        self._autocast: dict[str, Any] = {}
        # True once Dynamo may trace the root's __call__ (compile_watch.py)
        self._tracing = False
        self._compile_watch = CompileWatch(self._compiling)
        self._put = agent.sender.put_step
        # the sender thread counts the queued inputs, and stops the taps if it stops
        agent.sender.set_counter(self.tensor_type, self.int_dtypes, self.count_call, self.quiet)
        # time spans (data waits, checkpoints, eval, warm-up) start and stop with these taps
        self.spans = Spans(agent, torch, self.door,
                           root=lambda: self._root() if self._root else None)  # fmt: skip
        self.spans.backward_watch = lambda: self.backward.on
        self.spans.on_phase = self._phase
        self.pad = pad_counter(agent, torch)  # --pad-tokens skip, else None (pad_tokens.py)
        self.flop_count = FlopCount(self)  # one step's executed FLOPs per run (flop_count.py)

    # -- attach / detach --------------------------------------------------------------------
    @property
    def clock_id(self) -> int | None:
        """id() of the optimizer that is the step clock (None until one steps)."""
        return self.clock.clock_id

    def attach(self) -> None:
        when_imported(_DYNAMO, self._compile_watch.start)
        if self.agent.armed:  # a disarmed kernel agent discovers when a cell arms it
            self.rediscover()

    def rediscover(self) -> None:
        """Forget the root model and the clock optimizer; find them again (a new run)."""
        self.clock.watch()
        self._root = None
        self._autocast = {}
        self._roots.clear()
        self.axes.reset()
        self._depth = 0
        self._forget_counts()
        self._put(NEW_RUN)
        self._superseded = False
        self._unpatch()
        self._remove_global()
        self._watch_calls()
        door = self.door
        if self._closure is None:
            self._closure = door.add("optimizer_pre", self._closure_step, CLOSURE,
                                     on_fail=self.quiet)  # fmt: skip
        self._spans("start", True)
        self.flop_count.start(new_run=True)
        self._backward("restart")

    def new_segment(self) -> None:
        """A new %%trainmeter cell: the first optimizer to step in it becomes the clock."""
        self.clock.watch()
        self._forget_counts()
        root = self._root() if self._root is not None else None
        if root is None:
            self.rediscover()  # no root yet (or it is gone): discover at this cell's first step
            return
        if self._patched is None:
            self._patch_call(root)
        self.watch_for_model()  # the cell may train another model (first_step decides)
        if self._closure is None:
            self._closure = self.door.add("optimizer_pre", self._closure_step, CLOSURE,
                                          on_fail=self.quiet)  # fmt: skip
        self._spans("start", False)
        self.flop_count.start()
        self._backward("start")

    def pause(self) -> None:
        """Between notebook cells: count nothing, hold no tensor or module, add no hook."""
        self.clock.stop()
        self._unpatch()
        self._remove_global()
        self._roots.clear()
        self._forget_counts()
        self._spans("stop")
        self.flop_count.stop()
        self._backward("stop")
        self._closure = None
        self.door.remove_all()
        self.door.flush()

    def quiet(self, *_exc) -> None:
        """Count and clock nothing more (the sender stopped, or a hook failed): safe from any
        thread, since it only sets a flag, writes a closure cell, takes one key out of the
        clock optimizer's ``__dict__``, puts ``torch.autograd.backward`` back and makes the
        door's hooks dead (their removal waits for a safe point)."""
        self.off = True
        self.clock.quiet()
        self._stop_counting()
        self.backward.stop()
        for hook in list(self.door.hooks):
            hook.dead = True

    def _stop_counting(self) -> None:
        """The counting ``__call__`` counts no more (any thread: one cell write)."""
        cell = self._cells.get("root_id")
        if cell is not None:
            cell.cell_contents = None

    def _compiling(self) -> None:
        """Dynamo begins its first compile (compile_watch.py): the call asks from now on."""
        self._tracing = True
        cell = self._cells.get("tracing")
        if cell is not None:
            cell.cell_contents = True

    def _forget_counts(self) -> None:
        """Drop the root calls queued since the last step (the sender reads FORGET in order)."""
        self._put(FORGET)

    def _flush_soon(self) -> None:
        """The door holds a change until a point outside torch's hook loops: the clock
        optimizer's next step gives one (step_clock.py ``at_next_step``)."""
        self.clock.at_next_step(self.door.flush)

    def detach(self) -> None:
        cancel(_DYNAMO, self._compile_watch.start)
        self._compile_watch.stop()
        self.clock.stop()
        self._unpatch()
        self._remove_global()
        self._spans("close")
        self.flop_count.stop()
        self._backward("stop")
        self._closure = None
        self.door.close()

    def _spans(self, method: str, *args) -> None:
        try:
            getattr(self.spans, method)(*args)
        except Exception as exc:  # the spans fail alone: the step clock goes on
            guard.failed("span taps", exc)

    def _phase(self, is_open: bool) -> None:
        """An evaluation phase opened (the backward tap tells the spans of a backward) or
        closed."""
        self.backward.on_call = self.spans.backward_seen if is_open else None

    def _backward(self, method: str) -> None:
        try:
            getattr(self.backward, method)()
        except Exception as exc:  # the loss from backward() fails alone
            guard.failed("backward tap", exc)

    def train_loss_reported(self) -> None:
        """A tracker, a framework or emit() reported a train loss: it is the run's, so no loss
        from backward() goes out any more, and the tap stops once an optimizer clocks the
        steps (before, it may be the clock), unless it stamps the arrivals of a run of two
        ranks or more: then it stays, stamping only (rank 0 logging to a tracker had stopped
        the job's straggler timing)."""
        if self._superseded:
            return
        self._superseded = True
        self._put(SUPERSEDED)
        if self.agent.step > 0 and self.backward.on:
            self._loss_elsewhere()

    def _loss_elsewhere(self) -> None:
        """The backward tap, its loss superseded: stamping only in a stamping run, else off."""
        try:
            if self.backward.stamping and self.backward.stamp_only():
                return
        except Exception as exc:  # the loss from backward() fails alone
            guard.failed("backward tap", exc)
        self._backward("stop")

    # -- the root's __call__ ----------------------------------------------------------------
    def _patch_call(self, root) -> None:
        """Queue ``root``'s call inputs from its class's ``__call__`` (the module docstring
        says why there, and not a hook or a ``forward`` wrapper)."""
        self._unpatch()
        cls = type(root)
        compiler = getattr(self.torch, "compiler", None)
        call = _counting_call(
            id(root), self._put, self.is_grad_enabled, self.tensor_type,
            tracing=self._tracing,
            is_compiling=getattr(compiler, "is_compiling", None) or (lambda: False),
            plain=self.pad is None,  # --pad-tokens skip needs the keywords (attention_mask)
            inner=None if _is_torchs_call(cls.__call__) else cls.__call__,
        )  # fmt: skip
        self._root = weakref.ref(root)
        names = call.__code__.co_freevars
        self._cells = {n: c for n, c in zip(names, call.__closure__, strict=True)}
        self._patched = set_attr(cls, "__call__", call)

    def _unpatch(self) -> None:
        self._stop_counting()
        restore(self._patched)
        self._patched = None
        self._cells = {}

    def _remove_global(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []

    def trains_root(self, optimizer) -> bool:
        """Whether every parameter ``optimizer`` steps is the root model's: a second optimizer
        of the same model (modded-nanoGPT's Muon beside Adam, a separate optimizer for the
        embeddings), whose steps leave the loss one model's, unlike a GAN's second model."""
        root = self._root() if self._root is not None else None
        if root is None:
            return False
        if self._root_params[0] is not self._root:  # once per root: its weakref and ids only
            self._root_params = (self._root, {id(p) for p in root.parameters()})
        ids = self._root_params[1]
        return all(id(p) in ids for g in optimizer.param_groups for p in g["params"])

    def _same_root(self, modules) -> bool:
        """Whether one of ``modules`` (what a later clock trains) is the root already counted
        by its patched call (``watch_for_model``). If not, and a root was chosen before, what
        it queued since the last step is forgotten: it is not the new model's step."""
        known = self._root() if self._root is not None else None
        if known is not None and self._patched is not None and any(m is known for m in modules):
            return True
        if self._root is not None:
            self._forget_counts()
        return False

    def _watch_calls(self) -> None:
        """Discovery's hooks: every top-level module call is a root candidate until the
        clock's first step (``first_step``) or the backward clock (``_backward_clock``)."""
        self._roots.clear()
        self._depth = 0
        door = self.door
        self._handles = [
            door.add("forward_pre", self._g_pre, DISCOVERY, on_fail=self.quiet),
            door.add("forward", self._g_post, DISCOVERY, on_fail=self.quiet),
        ]

    def new_training(self) -> None:
        """A framework starts a training (Lightning's ``fit``, the HF Trainer's ``train``;
        frameworks.py): after the first, the next optimizer to step becomes the clock, as at a
        notebook cell's start, and discovery watches for another model. The first keeps the
        usual discovery. Called outside any optimizer step."""
        if self.off or self.clock.clock_id is None:
            return
        self.clock.watch()
        self.watch_for_model()

    def watch_for_model(self) -> None:
        """The root is known, and the next optimizer to step may train another model: the
        clock optimizer was freed (a second training in one script, a sweep's next Trainer)
        or a notebook cell began. Discovery watches the calls again; ``first_step`` keeps the
        root when that optimizer trains it, else takes the model it trains (any thread: the
        door adds the hooks at a safe point)."""
        if self.off or self._handles or self._root is None:
            return
        self.axes.layer = None  # seen again; the axis the root's calls are counted on stays
        self._autocast = {}
        self._watch_calls()

    # -- counting (on the sender thread) ------------------------------------------------------
    def count_call(self, args, kwargs) -> tuple[int, int, int]:
        """(tokens, samples, seq_sq) of one root call: metadata only (``shape``, ``dtype``), so
        safe from the sender thread and never a device sync; ``--pad-tokens skip`` counts the
        attention mask's nonzero positions where it may (pad_tokens.py)."""
        return self._count(self._input(args, kwargs), _keywords(args, kwargs))

    def _count(self, x, kwargs) -> tuple[int, int, int]:
        """(tokens, samples, seq_sq) of a call whose token tensor is ``x`` (None: not a
        tensor), along the batch axis found at discovery (shapes.py)."""
        if x is None:
            return 0, 0, 0
        counts = count(x.shape, x.dtype in self.int_dtypes, self.axes.axis)
        if counts[0] and self.pad is not None:
            return self._non_pad(x, self.pad.mask(kwargs), counts)
        return counts

    def _non_pad(self, x, mask, counts: tuple) -> tuple[int, int, int]:
        """``--pad-tokens skip``: (tokens, samples, seq_sq) with the mask's non-pad tokens,
        each still of its padded sequence's length."""
        tokens, samples, _ = counts
        kept = self.pad.tokens(x, mask)
        return kept, samples, kept * (tokens // samples if samples else 0)

    def _input(self, args, kwargs):
        """The call's token tensor: the first positional argument; in a batch passed whole
        (``model(batch)``), the dict's first ``_TOKEN_KWARGS`` key that holds a tensor, or the
        list's or tuple's first item; with no positional argument, the first of the
        ``_TOKEN_KWARGS`` keywords that holds a tensor, else the first keyword holding an
        integer tensor (token ids under another name); else None."""
        tensor = self.tensor_type
        if args:
            first = args[0]
            if isinstance(first, tensor):
                return first
            if isinstance(first, dict):
                kwargs = first
            elif self.packed_type is not None and isinstance(first, self.packed_type):
                return PackedInput(first)  # sequences packed: its data's first axis is no batch
            elif isinstance(first, (list, tuple)) and first:
                return first[0] if isinstance(first[0], tensor) else None
            else:
                return None
        if not kwargs:
            return None
        named = (kwargs.get(key) for key in _TOKEN_KWARGS)
        found = next((v for v in named if isinstance(v, tensor)), None)
        if found is None:  # other names (fairseq's src_tokens): the first integer tensor
            ints = self.int_dtypes
            found = next((v for v in kwargs.values()
                          if isinstance(v, tensor) and v.dtype in ints), None)  # fmt: skip
        return found

    # -- discovery (before the first optimizer step only; hooks guarded by the door) ---------
    def _g_pre(self, module, args) -> None:
        self._depth += 1
        if self._depth == 1 and not self._autocast:
            self._autocast = self._autocast_state()
        self.axes.see(module, args)

    def _g_post(self, module, args, kwargs, output) -> None:
        self._depth = max(0, self._depth - 1)
        if self._depth or self.off or not self.is_grad_enabled():
            return
        x = self._input(args, kwargs)
        entry = self._roots.setdefault(id(module), [module, [], 0, 0])
        if x is not None and len(entry[1]) < MAX_DISCOVERY_CALLS:
            mask = self.pad.mask(_keywords(args, kwargs)) if self.pad is not None else None
            keep = x if mask is not None else None  # read at the first step (pad_tokens.py)
            entry[1].append((x.shape, x.dtype in self.int_dtypes, keep, mask, self.backward.calls))
        entry[2] += x.element_size() * x.numel() if x is not None else 0
        entry[3] += 1

    def _closure_step(self, optimizer, args, kwargs) -> None:
        """Optimizer pre-hook while the clock is chosen, and kept for a clock stepped with a
        closure (LBFGS, Lightning): marks where its step begins (backward.py: only the first
        backward inside such a step is its loss)."""
        if self.clock_id is not None and id(optimizer) != self.clock_id:
            return
        if has_closure(args, kwargs):
            self._put(STEP_BEGIN)

    def _autocast_state(self) -> dict[str, Any]:
        torch, out = self.torch, {}
        for dev in ("cuda", "cpu"):
            if torch.is_autocast_enabled(dev):
                out[dev] = torch.get_autocast_dtype(dev)
        return out or {"none": None}

    def first_step(self, optimizer, args=(), kwargs=None) -> tuple[int, int, int]:
        """The clock's first step (step_clock.py): the root is the top-level module sharing
        the most parameters with ``optimizer``; returns discovery's (tokens, samples, seq_sq)
        for it. Warm-up ends here (spans.py), and the rank is read from ``torch.distributed``.
        A later clock (``watch_for_model``) keeps a root it trains, whose patched call counted
        the step ((0, 0, 0) here), and otherwise takes the model it trains as the new root."""
        self._spans("first_step")
        self._distributed_rank()
        self.backward.watching = False  # an optimizer clocks the steps
        self._backward("lean")
        if self._superseded and self.backward.on:  # a train loss came before the first step
            self._loss_elsewhere()
        if not has_closure(args, kwargs) and self._closure is not None:
            self._closure.remove()  # a plain step: no marker needed (the door waits to remove)
            self._closure = None
        if not self._handles:
            return 0, 0, 0  # root already known (a later segment re-chose the clock only)
        self._remove_global()
        wanted = {id(p) for g in optimizer.param_groups for p in g["params"]}
        trained = []  # (shared parameters, entry) of the candidates the optimizer trains
        for entry in self._roots.values():
            shared = sum(1 for p in entry[0].parameters() if id(p) in wanted)
            if shared:
                trained.append((shared, entry))
        self._roots.clear()
        if not trained:
            return 0, 0, 0
        trained.sort(key=lambda se: -se[0])
        best = trained[0][1]
        # the tokens are counted where token ids go in: the root, or, when the model is
        # several top-level modules (char-rnn's embedding, LSTM and head), the one fed ids
        fed = next((e for _, e in trained if any(ids for _, ids, *_ in e[1])), best)
        root, calls, nbytes, n = fed
        if self._same_root(e[0] for _, e in trained):
            return 0, 0, 0  # its patched call counted the step
        if self._root is not None:  # another model than the one chosen before
            self.flop_count.start(new_run=True)  # its FLOPs are counted again
        (counts,) = self._discovered(calls)
        per_call = max(8, nbytes // max(n, 1))  # bytes a queued input holds on to
        self.agent.sender.max_items = max(MIN_QUEUED, min(MAX_QUEUED, DEFER_BYTES // per_call))
        self._patch_call(root)
        model = best[0] if len(trained) == 1 else _together([e[0] for _, e in trained], self.torch)
        self.agent.put_model(self._model_fields(model, calls))
        return counts

    def _distributed_rank(self) -> None:
        """A process group set up by hand (``mp.spawn``, ``init_process_group(rank=...)``)
        gives no ``RANK`` variable: take the rank and world size from it (local calls, no
        communication)."""
        dist = getattr(self.torch, "distributed", None)
        if dist is None or not dist.is_available() or not dist.is_initialized():
            return
        rank, world = dist.get_rank(), dist.get_world_size()
        adopt = getattr(self.agent, "adopt_rank", None)
        known = (self.agent.rank, getattr(self.agent, "world_size", 1))
        if adopt is not None and (rank, world) != known:
            adopt(rank, world)

    def _discovered(self, calls: list, steps: int = 1) -> list[tuple[int, int, int]]:
        """Discovery's counts for the root's calls, along the batch axis their first shape
        gives (shapes.py), which the sender uses from now on: one (tokens, samples, seq_sq) per
        step, the calls made before the (i + 1)-th backward() in step i (all in the last one
        when ``steps`` is 1: the optimizer's first step)."""
        axis = self.axes.decide(calls[0][0]) if calls else 0
        self.agent.sender.reader.batch_axis = axis
        out = [[0, 0, 0] for _ in range(steps)]
        for shape, ids, x, mask, before in calls:
            tok, smp, sq = count(shape, ids, axis)
            if tok and mask is not None:
                tok, smp, sq = self._non_pad(x, mask, (tok, smp, sq))
            row = out[min(before, steps - 1)]
            row[0], row[1], row[2] = row[0] + tok, row[1] + smp, row[2] + sq
        return [tuple(r) for r in out]

    def _backward_clock(self) -> None:
        """No optimizer has stepped in the first backward() calls (backward.py ``watch``):
        those calls are the steps. The root is the top-level module with the most trainable
        parameters; each step gets the tokens discovery saw before its backward()."""
        calls = self.backward.calls
        if not self._handles or self.off:  # the root is known already (or the taps are off)
            self._put(Fallback([]))
            return
        self._remove_global()
        self._spans("first_step", False)
        if self._closure is not None:
            self._closure.remove()
            self._closure = None
        best = max(self._roots.values(), key=_trainable, default=None)
        self._roots.clear()
        if best is None or self._same_root([best[0]]):
            self._put(Fallback([]))  # no model, or the root's own calls are counted
            return
        root, shapes = best[0], best[1]
        counts = self._discovered(shapes, max(calls, 1))
        self._patch_call(root)
        self.agent.put_model(self._model_fields(root, shapes))
        self._put(Fallback(counts))

    def finish(self) -> None:
        """The process ends (or a notebook cell): a loop that stepped no optimizer in fewer
        backward() calls than the fallback waits for is clocked by them all the same, and a
        run shorter than the clock's watch decides its losses with what it saw."""
        if self.off:
            return
        if self.backward.watching and self.backward.calls:
            self.backward.watching = False
            self._backward_clock()
        if self.clock.clock_id is not None:
            self.clock.decide()

    def _model_fields(self, root, calls: list) -> dict[str, Any]:
        seq_len = None
        ids = [shape for shape, is_ids, *_ in calls if is_ids]
        if ids:  # the first training batch's positions per sample (its sequence length)
            tokens, samples, _ = count(ids[0], True, self.axes.axis)
            seq_len = tokens // samples if samples else None
        fields = describe(self.torch, root, seq_len)
        fields["batch_axis"] = self.axes.axis
        first = next(root.parameters(), None)
        device = first.device if first is not None else None
        fields["device"] = device.type if device is not None else "cpu"
        if device is not None and device.index is not None:  # a device is (host, type, index)
            fields["device_index"] = device.index
        fields["dtype"] = str(first.dtype).removeprefix("torch.") if first is not None else None
        fields["run_dtype"] = self._run_dtype(first, fields["device"])
        fields["torch"] = self.torch.__version__
        fields["gpus"] = 1 if fields["device"] == "cuda" else 0
        if fields["device"] == "cuda":  # CUDA is already up (the params live there): no new context
            fields["device_name"] = self.torch.cuda.get_device_name(device)
        return fields

    def second_step(self) -> None:
        """The clock's second step (step_clock.py): the counted step is armed, and what waited
        for a safe point is done."""
        self.flop_count.second_step()
        self.door.flush()

    def losses_decided(self, others: set) -> None:
        """The clock has watched its first steps (step_clock.py ``decide``): the losses from
        backward() are one model's, or not when another optimizer stepped apart from the clock
        (a GAN's: its losses are mixed in)."""
        self._put(LOSS_OFF if others else LOSS_ON)
        if others:
            text = (f"train loss from backward(): not recorded: {len(others) + 1} optimizers "
                    "step apart in each step (two models, as in a GAN), so the values "
                    "backward() was called on are not one loss; report them with "
                    "trainmeter.emit(name=value)")  # fmt: skip
            self.agent.put("note", source="trainmeter", text=text)
        self.door.flush()

    def _run_dtype(self, param, device: str) -> str | None:
        """The matmuls' dtype: autocast's if on, else the parameters' (the peak lookup key)."""
        torch = self.torch
        dtype = self._autocast.get(device) or (param.dtype if param is not None else None)
        names = {torch.bfloat16: "bf16", torch.float16: "fp16"}
        if dtype in names:
            return names[dtype]
        if dtype == torch.float32:
            tf32 = device == "cuda" and torch.get_float32_matmul_precision() != "highest"
            return "tf32" if tf32 else "fp32"
        return None


def _together(modules: list, torch):
    """Top-level modules the optimizer trains together, as one module for ``describe`` (its
    parameters counted once, named ``A+B+C``)."""
    holder = torch.nn.Module()
    for i, m in enumerate(modules):
        holder.add_module(f"part{i}", m)
    holder.__class__ = type("+".join(type(m).__name__ for m in modules), (torch.nn.Module,), {})
    return holder


def _trainable(entry: list) -> int:
    """Trainable parameters of a discovery candidate (``[module, ...]``)."""
    return sum(p.numel() for p in entry[0].parameters() if p.requires_grad)


def _keywords(args, kwargs):
    """Where a call's keyword inputs are: a batch dict passed whole (``model(batch)``), else
    the call's keywords (``attention_mask`` for ``--pad-tokens skip``)."""
    if args and isinstance(args[0], dict):
        return args[0]
    return kwargs


# -- the root class's __call__ ----------------------------------------------------------------
def _is_torchs_call(call) -> bool:
    """True when ``call`` is torch's own ``Module._wrapped_call_impl`` as written in torch 2.x
    (``_compiled_call_impl`` if set, else ``_call_impl``), which ``_counting_call`` repeats."""
    from torch.nn import Module

    own = getattr(Module, "_wrapped_call_impl", None)
    code = getattr(own, "__code__", None)
    names = ("_compiled_call_impl", "_call_impl")
    return call is own and code is not None and code.co_names == names


def _counting_call(root_id, put, grad_enabled, tensor, tracing, is_compiling, plain, inner):
    """The root class's ``__call__``: queue the call's inputs for the sender thread when
    ``id(self)`` is ``root_id``, then run the call as before. Under Dynamo tracing it queues
    nothing: it asks ``is_compiling()`` once ``tracing`` says Dynamo has begun to compile in
    this process (compile_watch.py). The taps stop it, or make it ask, by writing the
    closure's ``root_id`` or ``tracing`` cell (None; True).

    The common case (``inner`` None: torch's ``Module._wrapped_call_impl``, which
    ``_is_torchs_call`` checked, repeated in place, so no Python frame is added; ``plain``: no
    ``--pad-tokens skip``) queues a positional tensor as it is. The hot path of the agent (once
    per root call): everything it needs is a closure cell, each touched object a likely cache
    miss in a real step, so the fewest objects (docs/performance.md).
    """
    if inner is not None or not plain:
        return _general_call(root_id, put, grad_enabled, tracing, is_compiling, inner)

    def __call__(self, *args, **kwargs):
        nonlocal root_id
        try:
            # eval under no_grad is not training tokens; under torch.compile tracing, step aside
            if id(self) == root_id and grad_enabled() and not (tracing and is_compiling()):
                x = args[0] if args else None
                put(x if type(x) is tensor else [args, kwargs])  # counted by the sender thread
        except Exception as exc:
            root_id = None
            guard.failed("forward hook", exc)
        if self._compiled_call_impl is not None:
            return self._compiled_call_impl(*args, **kwargs)
        return self._call_impl(*args, **kwargs)

    return __call__


def _general_call(root_id, put, grad_enabled, tracing, is_compiling, inner):
    """``_counting_call`` for a class with its own ``__call__`` (``inner``, called after) or
    under ``--pad-tokens skip`` (the keywords hold the attention mask): queues ``[args,
    kwargs]``."""

    def __call__(self, *args, **kwargs):
        nonlocal root_id
        try:
            if id(self) == root_id and grad_enabled() and not (tracing and is_compiling()):
                put([args, kwargs])
        except Exception as exc:
            root_id = None
            guard.failed("forward hook", exc)
        if inner is not None:
            return inner(self, *args, **kwargs)
        if self._compiled_call_impl is not None:
            return self._compiled_call_impl(*args, **kwargs)
        return self._call_impl(*args, **kwargs)

    return __call__
