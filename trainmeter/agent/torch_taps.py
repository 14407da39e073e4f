"""Passive taps on torch: the optimizer step clock and tokens per step from batch shapes.

Attached by the agent when the user's code imports torch (never before). Costs per optimizer
step (see benchmarks/agent_overhead.py): one global optimizer post-step hook, and a count of
the root model's input tokens at each call. Both read Python metadata only (``numel``,
``shape``, ``dtype``): never a tensor's value, so never a device synchronization (invariant 8).

Discovery: until the first optimizer step, global module hooks note which modules run at the
top of the call stack with gradients enabled, and how many tokens each was fed. At that step
the root model is the top-level module sharing the most parameters with the optimizer; the
global hooks are removed.

Counting tokens at the root: a module forward pre-hook would do, but any hook sends the module
through ``Module._call_impl``'s slow path, which costs 7-9 us per call on a small CPU
(measured in docs/performance.md), more than the whole budget. So the root's *class* gets a
thin ``forward`` wrapper instead (``functools.wraps`` keeps the signature that HF Trainer
inspects). It counts only for that one instance (an ``id`` check), only in eager mode (under
``torch.compile`` tracing it steps aside), and is removed on detach. Instances are untouched:
pickling, ``deepcopy`` and ``type(model)`` are exactly as without trainmeter.
"""

from __future__ import annotations

import functools
import weakref
from time import time as _now
from typing import Any

from trainmeter.agent import guard
from trainmeter.agent.describe import describe
from trainmeter.agent.flop_count import FlopCount
from trainmeter.agent.pad_tokens import pad_counter
from trainmeter.agent.spans import Spans

# Token tensors kept for the sender to count may outlive their step until the next flush
# (0.1 s); past this many bytes of them in the queue, a step's inputs are counted at once.
DEFER_BYTES = 16 << 20
MAX_INPUTS = 64  # forwards without an optimizer step before their inputs are counted at once
_TOKEN_KWARGS = ("input_ids", "idx", "tokens", "input", "x")


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
        self.tokens = 0  # since the last optimizer step (all micro-batches: grad accumulation)
        self.samples = 0
        self.seq_len: int | None = None
        self.clock_id: int | None = None  # id() of the optimizer that is the step clock
        self.off = False
        self._depth = 0
        self._roots: dict[int, list] = {}  # id -> [module, tokens, samples] before the first step
        self._handles: list = []
        self._patched: tuple | None = None  # (class, had its own forward, that forward)
        self._root = None  # weakref to the root model once found
        self._autocast: dict[str, Any] = {}
        self.inputs: list = []  # the root's token tensors since the last step, counted later
        self.max_deferred = 32  # steps; set from the first batch's size (DEFER_BYTES)
        self._push = agent.sender.put_step
        self._queue = agent.sender.queue
        agent.sender.count_inputs = self._count_inputs
        # time spans (data waits, checkpoints, eval, warm-up) start and stop with these taps
        self.spans = Spans(agent, torch, root=lambda: self._root() if self._root else None)
        self.pad = pad_counter(agent, torch)  # --pad-tokens skip, else None (pad_tokens.py)
        self.flop_count = FlopCount(self)  # one step's executed FLOPs per run (flop_count.py)

    # -- attach / detach --------------------------------------------------------------------
    def attach(self) -> None:
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self._step_handle = register_optimizer_step_post_hook(self._on_step)
        if self.agent.armed:  # a disarmed kernel agent discovers when a cell arms it
            self.rediscover()

    def rediscover(self) -> None:
        """Forget the root model and the clock optimizer; find them again (a new run)."""
        from torch.nn.modules import module as mm

        self.clock_id = None
        self._root = None
        self._autocast = {}
        self._roots.clear()
        self._depth = 0
        self._forget_counts()
        self._unwrap_forward()
        self._remove_global()
        self._handles = [
            mm.register_module_forward_pre_hook(self._g_pre),
            mm.register_module_forward_hook(self._g_post, with_kwargs=True, always_call=True),
        ]
        self._spans("start", True)
        self.flop_count.start(new_run=True)

    def new_segment(self) -> None:
        """A new %%trainmeter cell: the first optimizer to step in it becomes the clock."""
        self.clock_id = None
        self._forget_counts()
        root = self._root() if self._root is not None else None
        if root is None:
            self.rediscover()  # no root yet (or it is gone): discover at this cell's first step
        elif self._patched is None:
            self._wrap_forward(root)
        self._spans("start", False)
        self.flop_count.start()

    def pause(self) -> None:
        """Between notebook cells: count nothing, hold no tensor or module, add no hook."""
        self._unwrap_forward()
        self._remove_global()
        self._roots.clear()
        self._forget_counts()
        self._spans("stop")
        self.flop_count.stop()

    def _forget_counts(self) -> None:
        self.inputs = []
        self.tokens = self.samples = 0

    def detach(self) -> None:
        handle = getattr(self, "_step_handle", None)
        if handle is not None:
            handle.remove()
        self._unwrap_forward()
        self._remove_global()
        self._spans("close")
        self.flop_count.stop()

    def _spans(self, method: str, *args) -> None:
        try:
            getattr(self.spans, method)(*args)
        except Exception as exc:  # the spans fail alone: the step clock goes on
            guard.failed("span taps", exc)

    def _wrap_forward(self, root) -> None:
        """Count ``root``'s input tokens from a wrapper on its class's ``forward``.

        The hot path of the agent (once per forward): everything it needs is bound in the
        closure, since attribute and method lookups are what a cold call pays for.
        """
        self._unwrap_forward()
        cls = type(root)
        orig = cls.forward
        compiler = getattr(self.torch, "compiler", None)
        is_compiling = getattr(compiler, "is_compiling", None) or (lambda: False)
        grad_enabled, tensor = self.is_grad_enabled, self.tensor_type
        root_id, taps, pad = id(root), self, self.pad

        @functools.wraps(orig)
        def forward(module, *args, **kwargs):
            # eval under no_grad is not training tokens; under torch.compile tracing, step aside
            if id(module) == root_id and grad_enabled() and not taps.off and not is_compiling():
                try:
                    x = args[0] if args else taps._kw_tensor(kwargs)
                    if isinstance(x, tensor):
                        inputs = taps.inputs
                        # counted off the hot path (_count_inputs); (ids, mask) to skip pads
                        inputs.append(x if pad is None else (x, pad.mask(kwargs)))
                        if len(inputs) > MAX_INPUTS:  # forwards with no step: keep no more
                            taps._fold_inputs()
                except Exception as exc:
                    taps.off = True
                    guard.failed("forward hook", exc)
            return orig(module, *args, **kwargs)

        self._patched = (cls, "forward" in cls.__dict__, cls.__dict__.get("forward"))
        self._root = weakref.ref(root)
        cls.forward = forward

    def _unwrap_forward(self) -> None:
        if self._patched is not None:
            cls, had_own, own = self._patched
            if had_own:
                cls.forward = own
            else:
                del cls.forward
            self._patched = None

    def _remove_global(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []

    # -- hot path ---------------------------------------------------------------------------
    def _on_step(self, optimizer, args, kwargs) -> None:
        if self.off or not self.agent.armed:
            return
        try:
            if self.clock_id != id(optimizer):
                if self.clock_id is not None:
                    return  # another optimizer (a GAN's second one): not the clock
                self._first_step(optimizer)
            a = self.agent
            a.step += 1
            inputs, self.inputs = self.inputs, []
            if len(self._queue) > self.max_deferred:  # hold no more tensors: count them now
                tokens, samples = self._count_inputs(inputs)
                inputs = ()
                self.tokens, self.samples = self.tokens + tokens, self.samples + samples
            # A tuple, not a dict: the sender thread builds the record and counts the inputs'
            # tokens (metadata reads cost microseconds each here; see Sender.put_step).
            self._push((_now(), a.step, self.tokens, self.samples, inputs))
            self.tokens = self.samples = 0
        except Exception as exc:
            self.off = True
            guard.failed("optimizer step hook", exc)

    def _fold_inputs(self) -> None:
        inputs, self.inputs = self.inputs, []
        tokens, samples = self._count_inputs(inputs)
        self.tokens += tokens
        self.samples += samples

    def _count_inputs(self, inputs) -> tuple[int, int]:
        """(tokens, samples) of the root's inputs: metadata only (``numel``, ``shape``,
        ``dtype``), so safe from the sender thread and never a device sync."""
        tokens = samples = 0
        ints = self.int_dtypes
        for x in inputs:
            if type(x) is tuple:  # (token ids, attention_mask) under --pad-tokens skip
                tokens += self.pad.tokens(*x)
                samples += x[0].shape[0] if x[0].shape else 1
                continue
            shape = x.shape  # one call into C++; numel comes from the shape, not another call
            samples += shape[0] if shape else 1
            if x.dtype in ints:
                tokens += shape.numel()
        return tokens, samples

    def _count(self, args, kwargs) -> tuple[int, int]:
        """Tokens and samples of one call (discovery; the forward wrapper inlines the same)."""
        x = args[0] if args else self._kw_tensor(kwargs)
        if not isinstance(x, self.tensor_type):
            return 0, 0
        samples = x.shape[0] if x.dim() else 1
        tokens = x.numel() if x.dtype in self.int_dtypes else 0
        if tokens and self.pad is not None:
            tokens = self.pad.tokens(x, self.pad.mask(kwargs))
        self.tokens += tokens
        self.samples += samples
        if tokens and self.seq_len is None:
            self.seq_len = x.shape[-1]
        return tokens, samples

    def _kw_tensor(self, kwargs):
        for key in _TOKEN_KWARGS:
            value = kwargs.get(key) if kwargs else None
            if isinstance(value, self.tensor_type):
                return value
        return None

    # -- discovery (before the first optimizer step only) -----------------------------------
    def _g_pre(self, module, args) -> None:
        try:
            if self._depth == 0 and not self._autocast:
                self._autocast = self._autocast_state()
        except Exception as exc:
            guard.failed("model discovery", exc)
        self._depth += 1

    def _g_post(self, module, args, kwargs, output) -> None:
        self._depth = max(0, self._depth - 1)
        if self._depth or self.off:
            return
        try:
            if not self.is_grad_enabled():
                return
            before = (self.tokens, self.samples)
            tokens, samples = self._count(args, kwargs)
            self.tokens, self.samples = before  # counted per candidate until the root is known
            entry = self._roots.setdefault(id(module), [module, 0, 0])
            entry[1] += tokens
            entry[2] += samples
        except Exception as exc:
            self.off = True
            guard.failed("model discovery", exc)

    def _autocast_state(self) -> dict[str, Any]:
        torch, out = self.torch, {}
        for dev in ("cuda", "cpu"):
            if torch.is_autocast_enabled(dev):
                out[dev] = torch.get_autocast_dtype(dev)
        return out or {"none": None}

    def _first_step(self, optimizer) -> None:
        self.clock_id = id(optimizer)
        if not self._handles:
            return  # root already known (a later segment re-chose the clock only)
        self._remove_global()
        wanted = {id(p) for g in optimizer.param_groups for p in g["params"]}
        best = max(
            self._roots.values(),
            key=lambda e: sum(1 for p in e[0].parameters() if id(p) in wanted),
            default=None,
        )
        self._roots.clear()
        if best is None:
            return
        root, self.tokens, self.samples = best
        step_bytes = 8 * max(self.tokens, 1)  # int64 token ids of one optimizer step
        self.max_deferred = max(1, min(1024, DEFER_BYTES // step_bytes))
        self._wrap_forward(root)
        self.agent.put_model(self._model_fields(root))

    def _model_fields(self, root) -> dict[str, Any]:
        fields = describe(self.torch, root, self.seq_len)
        first = next(root.parameters(), None)
        device = first.device if first is not None else None
        fields["device"] = device.type if device is not None else "cpu"
        fields["dtype"] = str(first.dtype).removeprefix("torch.") if first is not None else None
        fields["run_dtype"] = self._run_dtype(first, fields["device"])
        fields["torch"] = self.torch.__version__
        fields["gpus"] = 1 if fields["device"] == "cuda" else 0
        if fields["device"] == "cuda":  # CUDA is already up (the params live there): no new context
            fields["device_name"] = self.torch.cuda.get_device_name(device)
        return fields

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
