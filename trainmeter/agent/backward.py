"""Training ``backward()`` calls: the train loss when nothing else reports one, and the step clock
of a loop that steps no ``torch.optim`` optimizer.

**The tap** (training thread). ``torch.autograd.backward`` is wrapped at module level: both
``loss.backward()`` (``Tensor.backward`` calls ``torch.autograd.backward``) and direct calls
go through it. The wrapper adds one Python frame per backward call and queues ``(t, loss)``
(``t`` = ``time.time()``, s since the epoch) on the sender's queue; it never reads a value:

- a CPU tensor is queued as it is; the sender thread reads its value (a host number: no
  device to synchronize, the no-device-sync invariant);
- a tensor on a CUDA device is copied with ``copy_(non_blocking=True)`` into a slot of a reused
  pinned host buffer, an event recorded after the copy, and the slot queued; the sender reads
  the slot only once ``event.query()`` says the copy is done (polled at each flush, never waited
  on), a step or two later. No device memory is allocated (``detach()`` is a view; the buffer is
  host memory, allocated once per dtype), no stream is synchronized; while a CUDA graph is being
  captured nothing is copied. A tensor on any other device is queued but never read.
- ``GradScaler.scale(loss)`` (AMP) returns ``loss * scale``: the wrapper of ``scale`` keeps the
  pair, and a backward of the scaled tensor reads the unscaled loss instead. ``GradScaler.step``
  is wrapped to mark where a step that AMP may skip (inf/NaN gradients) begins and ends.

**The ledger** (sender thread, :class:`Ledger`) reads those items in queue order, between the
optimizer step stamps (step_clock.py), and:

- sums the losses of a step's backward calls (micro-batches: ``(loss / k).backward()`` sums to
  the mean), except inside an optimizer step that takes a closure (LBFGS evaluates it several
  times; Lightning runs its last micro-batch there): only the first backward inside the step
  counts (the loss ``step(closure)`` returns), the ones before the step all count;
- drops the losses of a step that AMP skipped (no step stamp between ``GradScaler.step``'s
  begin and end);
- holds the losses until the clock's second step has said whether they are one model's loss:
  when a second optimizer steps outside backward between clock steps (a GAN's generator and
  discriminator), the sum mixes two losses, and none is recorded (the taps send a note);
- **the step clock without an optimizer**: until an optimizer step is seen, backward calls are
  kept as provisional steps. Once ``FALLBACK_CALLS`` backward calls, or ``FALLBACK_S`` seconds
  of them, have come with no optimizer step (or the process ends first), the training thread
  decides (:meth:`BackwardTap.watch`): the taps choose the root model from discovery and queue
  a :class:`Fallback` with each provisional step's token counts, and each backward call is a
  step from then on (``step_clock`` record, source ``backward``). An optimizer step seen later
  takes the clock back (``step_clock`` source ``optimizer``; its numbering restarts).

Losses go out as ``series`` records named ``LOSS_SERIES`` with role ``train_loss``. Once a
tracker, a framework or ``emit`` reports a train loss, theirs is the run's: the ledger sends no
more (those it held are dropped) and the taps stop the tap (once an optimizer clocks the steps).
Every entry point is guarded (the never-raise invariant).
"""

from __future__ import annotations

import math
import time
from collections import deque

from trainmeter.agent import guard
from trainmeter.agent.classattr import restore, set_attr

NAME = "backward tap"
LOSS_SERIES = "backward_loss"
# backward calls with no optimizer step before backward() is the clock, or seconds from the
# first one (with at least two calls): past the longest gradient accumulation of most loops
# (a first optimizer step that comes later makes the first steps wrong, and a note says so);
# a shorter loop with no optimizer is clocked when it ends (or its notebook cell does)
FALLBACK_CALLS = 256
FALLBACK_S = 60.0
# pinned host slots for device losses, reused once read: the sender frees them at each flush
# (every 0.1 s), so 4096 cover 40,000 steps/s (16 KiB of pinned memory a dtype). 64 lost 14 of
# 200 steps of a 1,500 steps/s loop on an H200 (benchmarks/gpu_check.py, the loss check)
SLOTS = 4096
RING_FULL = "loss not read: every pinned slot in flight"
IN_CAPTURE = "loss not read: CUDA graph capture"
STEP_BEGIN = ("step_begin",)  # an optimizer step with a closure begins (its pre-hook)
SCALER_STEP = ("scaler_step",)  # GradScaler.step begins ...
SCALER_DONE = ("scaler_done",)  # ... and returns
LOSS_ON = ("loss_on",)  # the clock's second step: the losses are one model's
LOSS_OFF = ("loss_off",)  # ... or not (two optimizers step apart)
NEW_RUN = ("new_run",)  # a new run in the same process (a notebook's --new): start over
SUPERSEDED = ("loss_superseded",)  # a tracker, framework or emit reported the train loss
PENDING = object()  # a device slot whose copy has not completed yet
_now = time.time


class BackwardTap:
    """Wraps ``torch.autograd.backward`` and ``GradScaler.scale``/``step`` (module doc).

    Args:
        agent: the agent (its sender's ``put_step``).
        torch: the user's imported torch module.
    """

    def __init__(self, agent, torch) -> None:
        self.torch = torch
        self.put = agent.sender.put_step
        self.count = agent.sender.count  # a device loss not copied: counted, never silent
        self.calls = 0  # backward calls seen (the training thread counts them)
        self.watching = True  # no optimizer step yet: may backward() be the clock?
        self.first_t: float | None = None  # the first backward call's time (s since epoch)
        self.on_fallback = lambda: None  # the taps: backward() is the clock (see watch)
        self.on_call = None  # while an evaluation phase is open: spans.backward_seen
        self.scaled: list = [None]  # (scaled tensor, loss) from the last GradScaler.scale
        self.ring: DeviceRing | None = None
        self.stamping = False  # the lean wrapper stamps arrivals (two ranks or more)
        self._saved: list[tuple] = []  # classattr saves (backward, scale, step)
        self.on = False

    def start(self) -> None:
        """Wrap the three functions (idempotent)."""
        if self.on:
            return
        autograd = self.torch.autograd
        self._saved.append(set_attr(autograd, "backward", self._wrap(autograd.backward)))
        scaler = getattr(getattr(self.torch, "amp", None), "GradScaler", None)
        if scaler is not None and callable(getattr(scaler, "scale", None)):
            self._saved.append(set_attr(scaler, "scale", _scale_wrapper(scaler.scale, self)))
            self._saved.append(set_attr(scaler, "step", _step_wrapper(scaler.step, self.put)))
        self.on = True

    def restart(self) -> None:
        """A new run: the watching wrapper again, no backward call seen."""
        self.stop()
        self.calls, self.watching, self.first_t = 0, True, None
        self.start()

    def stop(self) -> None:
        """Put every wrapped function back (any thread: attribute writes only)."""
        self.on = False
        saved, self._saved = self._saved, []
        for s in reversed(saved):
            try:
                restore(s)
            except Exception as exc:
                guard.failed(NAME, exc)

    def _wrap(self, orig):
        tap, put = self, self.put

        def backward(tensors, *args, **kwargs):
            if tap.on:
                try:
                    tap.calls += 1
                    t = _now()
                    put((t, tap.loss_of(tensors)))
                    if tap.watching:
                        tap.watch(t)
                    if tap.on_call is not None:
                        tap.on_call()
                except Exception as exc:
                    tap.on = False
                    guard.failed(NAME, exc)
            return orig(tensors, *args, **kwargs)

        backward.__wrapped__ = orig
        return backward

    def lean(self, stamp: bool | None = None) -> None:
        """An optimizer clocks the steps: no more watching; the wrapper that stays queues a
        CPU loss in one tuple and passes the call on with torch's own signature (no ``*args``
        repacking). ``stamp`` (default: ``torch.distributed`` is initialized with two ranks or
        more) puts the call's ``time.time()`` in the tuple, the step's arrival (docs/spec.md
        "Stragglers"), else 0.0. Measured in docs/performance.md and benchmarks/rank_lag.py."""
        if not self.on or not self._saved or not _signature_known(self.torch.autograd):
            return
        if stamp is None:
            stamp = _many_ranks(self.torch)
        self.stamping = stamp
        self._rewrap(self._lean, stamp)

    def stamp_only(self) -> bool:
        """Another source reports the train loss, but this rank's arrivals still time the
        job's stragglers (a stamping run: rank 0 logs to a tracker, the usual case): the
        wrapper that stays queues each call's time with no loss ``(t, None)`` (nothing copied
        off a device, no slot held). False when it could not (the caller stops the tap)."""
        if not self.on or not self._saved or not _signature_known(self.torch.autograd):
            return False
        self._rewrap(self._stamp)
        return True

    def _rewrap(self, make, *args) -> None:
        autograd = self.torch.autograd
        orig = autograd.backward.__wrapped__
        restore(self._saved[0])
        self._saved[0] = set_attr(autograd, "backward", make(orig, *args))

    def _stamp(self, orig):
        tap, put, now = self, self.put, _now

        def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False,
                     grad_variables=None, inputs=None):  # fmt: skip
            if tap.on:
                try:
                    put((now(), None))
                    if tap.on_call is not None:  # an evaluation phase is open (spans.py)
                        tap.on_call()
                except Exception as exc:
                    tap.on = False
                    guard.failed(NAME, exc)
            return orig(tensors, grad_tensors, retain_graph, create_graph, grad_variables, inputs)

        backward.__wrapped__ = orig
        return backward

    def _lean(self, orig, stamp: bool):
        tap, put, tensor, scaled, now = self, self.put, self.torch.Tensor, self.scaled, _now

        def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False,
                     grad_variables=None, inputs=None):  # fmt: skip
            if tap.on:
                try:
                    if type(tensors) is tensor and tensors.is_cpu and scaled[0] is None:
                        # the common case: a CPU loss, read later
                        put((now() if stamp else 0.0, tensors))
                    else:  # scaled (AMP), on a device, or a tensor subclass
                        put((now() if stamp else 0.0, tap.loss_of(tensors)))
                    if tap.on_call is not None:  # an evaluation phase is open (spans.py)
                        tap.on_call()
                except Exception as exc:
                    tap.on = False
                    guard.failed(NAME, exc)
            return orig(tensors, grad_tensors, retain_graph, create_graph, grad_variables, inputs)

        backward.__wrapped__ = orig
        return backward

    def loss_of(self, x):
        """What is queued for a backward of ``x``: the loss before ``GradScaler.scale`` when
        ``x`` is its scaled copy; a device tensor's ring slot (or None); else ``x`` itself."""
        pair = self.scaled[0]
        if pair is not None and pair[0] is x:
            x = pair[1]
        if type(x) is self.torch.Tensor and not x.is_cpu:  # a subclass (DTensor) is not copied
            return self.device_slot(x)
        return x

    def watch(self, t: float) -> None:
        """No optimizer has stepped yet: after ``FALLBACK_CALLS`` backward calls, or
        ``FALLBACK_S`` seconds of them, backward() is the clock (the taps' ``on_fallback``)."""
        if self.first_t is None:
            self.first_t = t
        if self.calls >= FALLBACK_CALLS or (self.calls >= 2 and t - self.first_t >= FALLBACK_S):
            self.watching = False
            self.on_fallback()

    def device_slot(self, x):
        """A ring slot holding a non-blocking copy of ``x`` (a CUDA tensor), or None."""
        if x.device.type != "cuda" or x.numel() != 1:
            return None
        if self.ring is None:
            self.ring = DeviceRing(self.torch)
        slot = self.ring.copy(x)
        if slot is None:
            self.count(IN_CAPTURE if self.ring.capturing else RING_FULL)
        return slot


def _many_ranks(torch) -> bool:
    """``torch.distributed`` is initialized with a world of two or more (never raises)."""
    try:
        dist = torch.distributed
        return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
    except Exception:
        return False


def _signature_known(autograd) -> bool:
    """``torch.autograd.backward`` takes the parameters the lean wrapper passes on."""
    import inspect

    try:
        names = tuple(inspect.signature(autograd.backward.__wrapped__).parameters)
    except (TypeError, ValueError, AttributeError):
        return False
    return names == _BACKWARD_PARAMETERS


_BACKWARD_PARAMETERS = ("tensors", "grad_tensors", "retain_graph", "create_graph",
                        "grad_variables", "inputs")  # torch 2.x  # fmt: skip


def _scale_wrapper(orig, tap: BackwardTap):
    def scale(self, outputs):
        out = orig(self, outputs)
        if tap.on and out is not outputs:
            tap.scaled[0] = (out, outputs)  # one pair: the next backward of `out` reads `outputs`
        return out

    scale.__wrapped__ = orig
    return scale


def _step_wrapper(orig, put):
    def step(self, optimizer, *args, **kwargs):
        put(SCALER_STEP)
        try:
            return orig(self, optimizer, *args, **kwargs)
        finally:
            put(SCALER_DONE)

    step.__wrapped__ = orig
    return step


class Fallback:
    """Queued when backward() becomes the clock: ``counts[i]``, the (tokens, samples, seq_sq)
    discovery saw fed to the root before the (i + 1)-th backward call."""

    __slots__ = ("counts",)

    def __init__(self, counts: list[tuple[int, int, int]]) -> None:
        self.counts = counts


class DeviceRing:
    """Pinned host slots for device losses: copied without blocking, read once complete.

    Args:
        torch: the user's torch (CUDA is already initialized: the loss lives there).
        slots: how many copies may be in flight; when all are, or while a CUDA graph is
            captured (``capturing``), a loss is not copied (counted in ``dropped``; the tap
            counts it in the run's ``dropped`` record too).
    """

    def __init__(self, torch, slots: int = SLOTS) -> None:
        self.torch = torch
        self.free: deque[int] = deque(range(slots))  # training thread pops, sender appends
        self.events = [torch.cuda.Event() for _ in range(slots)]
        self.buffers: dict = {}  # dtype -> pinned host tensor of `slots` elements
        self.slots = slots
        self.dropped = 0
        self.capturing = False  # the last refusal was a graph capture (else: no free slot)

    def copy(self, x):
        """Queue ``x``'s value into a free slot: ``(ring, index, dtype)``, or None."""
        cuda = self.torch.cuda
        self.capturing = cuda.is_current_stream_capturing()
        if self.capturing or not self.free:
            self.dropped += 1
            return None
        buffer = self.buffers.get(x.dtype)
        if buffer is None:
            buffer = self.torch.empty(self.slots, dtype=x.dtype, pin_memory=True)
            self.buffers[x.dtype] = buffer
        i = self.free.popleft()
        buffer[i].copy_(x.detach().reshape(()), non_blocking=True)
        self.events[i].record()
        return (self, i, x.dtype)

    def read(self, slot):
        """The slot's value (float) once its copy has completed, else ``PENDING``."""
        _, i, dtype = slot
        if not self.events[i].query():
            return PENDING
        value = float(self.buffers[dtype][i])  # pinned host memory: no device involved
        self.free.append(i)
        return value


class Ledger:
    """The sender thread's side (module docstring): backward items in, losses and, for a loop
    with no optimizer, steps out.

    Args:
        tensor: the user's ``torch.Tensor`` (a CPU tensor's value is read with ``item()``).
    """

    def __init__(self, tensor=None, rank: int = 0) -> None:
        self.tensor = tensor
        self.rank = rank
        self.clock = "unknown"  # unknown | optimizer | backward
        self.early: list[tuple] = []  # provisional steps: (t, loss, tokens, samples, seq_sq)
        self.losses: list = []  # this step's values (floats or device slots)
        self.inside = False  # after STEP_BEGIN: inside a closure step
        self.taken = False  # ... and its first backward is counted
        self.scaler_open = self.scaler_stamped = False
        # hold (until LOSS_ON/OFF) | on | off; only rank 0 records (as the frameworks' own
        # loggers do): every rank's loss at the same step would be one series twice
        self.state = "hold" if rank == 0 else "off"
        self.held: list[tuple] = []  # (step, t, values) while holding
        self.pending: list[tuple] = []  # (step, t, values) with device copies in flight
        self.nonfinite = 0

    # -- items, in queue order ----------------------------------------------------------------
    def marker(self, item: tuple) -> None:
        if item == STEP_BEGIN:
            self.inside, self.taken = True, False
        elif item == SCALER_STEP:
            self.scaler_open, self.scaler_stamped = True, False
        elif item == SCALER_DONE:
            if self.scaler_open and not self.scaler_stamped and self.clock != "backward":
                self.losses = []  # AMP skipped this step: its losses belong to no step
                self.early = [(t, None, *counts) for t, _, *counts in self.early]
            self.scaler_open = False
        elif item == LOSS_ON:
            self._release("on")
        elif item == LOSS_OFF:
            self._release("off")
        elif item == NEW_RUN:
            self.__init__(self.tensor, self.rank)
        elif item == SUPERSEDED:  # theirs is the run's train loss: none of ours goes out
            self.state, self.held, self.pending, self.losses = "off", [], [], []

    def backward(self, item: tuple, tokens: int, samples: int, seq_sq: int) -> str:
        """A backward call ``(t, loss)`` and the root calls' counts queued before it. Returns
        ``"step"`` (the backward clock: it is a step), ``"kept"`` (no clock yet: kept with
        its counts as a provisional step), ``"loss"`` (the optimizer clock: its loss joins
        the step's) or ``"ignored"`` (a later evaluation inside a closure step)."""
        if self.inside:
            if self.taken:
                return "ignored"
            self.taken = True
        t, value = item
        if self.clock == "backward":
            self.losses = [value]
            return "step"
        if self.clock == "unknown":
            self.early.append((t, value, tokens, samples, seq_sq))
            return "kept"
        self.losses.append(value)
        return "loss"

    def fall_back(self, item: Fallback, last: int, add, records: list) -> int:
        """Each kept backward call becomes a step (``add(t, step, tokens, samples, seq_sq)``,
        with the counts ``item`` gives for it from discovery, and its loss); returns the last
        step number."""
        if self.clock != "unknown" or not self.early:
            return last
        self.clock = "backward"
        if self.state == "hold":
            self.state = "on"  # one loss per step, nothing to mix up
        records.append(_clock_record(self.early[0][0], "backward", self.rank))
        early, self.early = self.early, []
        for i, (t, value, tok, smp, sq) in enumerate(early):
            more = item.counts[i] if i < len(item.counts) else (0, 0, 0)
            last += 1
            self.losses = [value]
            add(t, last, tok + more[0], smp + more[1], sq + more[2])
        return last

    def optimizer_step(self, t: float, n: int, tokens: int, samples: int, seq_sq: int,
                       records: list) -> tuple[int, int, int]:  # fmt: skip
        """An optimizer step stamp: the clock is the optimizer's from now on. Kept backward
        calls fold back into this step (their counts and losses); returns its counts."""
        self.scaler_stamped = True
        self.inside = self.taken = False
        if self.clock != "optimizer":
            if self.clock == "backward":
                text = (f"step clock: an optimizer stepped after backward() calls were counted "
                        f"as steps; steps are the optimizer's from step {n} on")  # fmt: skip
                records.append({"v": 1, "k": "note", "t": t, "text": text, "source": "trainmeter"})
            self.clock = "optimizer"
            records.append(_clock_record(t, "optimizer", self.rank))
            for _, value, tok, smp, sq in self.early:
                tokens, samples, seq_sq = tokens + tok, samples + smp, seq_sq + sq
                if value is not None:  # None: a step AMP skipped
                    self.losses.append(value)
            self.early = []
        return tokens, samples, seq_sq

    def take_losses(self, step: int, t: float, out: list) -> None:
        """The step ``step`` ended: its losses go to ``out`` as a series record (now, once
        its device copies complete, or once the loss state is decided), in step order."""
        values, self.losses = self.losses, []
        if not values:
            return
        if self.state == "hold":
            self.held.append((step, t, values))
        elif self.state == "on":
            self.pending.append((step, t, values))
            self.poll(out)

    def poll(self, out: list) -> None:
        """Emit, in step order, the steps whose device copies have completed (the first one
        still in flight holds back those after it)."""
        pending, self.pending = self.pending, []
        for i, entry in enumerate(pending):
            if not self._resolve(entry, out):
                self.pending = pending[i:]
                return

    def release_all(self, out: list) -> None:
        """The run ends: held losses go out (nothing said otherwise), pending ones if ready."""
        if self.state == "hold":
            self._release("on")
        self.poll(out)  # (a copy still in flight now is lost: the process is ending)

    def _release(self, state: str) -> None:
        """Decide the held losses (``on``: they go out; ``off``: dropped); ``off`` is final."""
        if self.state == "off":
            return
        held, self.held, self.state = self.held, [], state
        if state == "on":
            self.pending += held

    def _resolve(self, entry: tuple, out: list) -> bool:
        """One step's series record into ``out``; False while a device copy is in flight."""
        step, t, values = entry
        total = 0.0
        for j, v in enumerate(values):
            x = self._value(v)
            if x is PENDING:
                return False
            values[j] = x  # read once: a device slot is free again after its read
            if x is None:
                return True  # an unreadable value: that step has no loss
            total += x
        if not math.isfinite(total):
            self.nonfinite += 1
            return True
        out.append({"v": 1, "k": "series", "t": t, "name": LOSS_SERIES, "value": total,
                    "step": step, "role": "train_loss", "source": "backward"})  # fmt: skip
        return True

    def _value(self, v):
        if isinstance(v, tuple) and len(v) == 3 and isinstance(v[0], DeviceRing):
            return v[0].read(v)
        tensor = self.tensor
        if tensor is not None and isinstance(v, tensor):
            if not v.is_cpu or v.numel() != 1:
                return None
            return float(v.detach().reshape(()).item())  # a CPU value: no device to sync
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
        if isinstance(v, (list, tuple)) and v and len(v) <= 64:  # backward([l1, l2]): their sum
            parts = [self._value(x) for x in v]
            if all(isinstance(x, float) for x in parts):
                return sum(parts)
        return None


def _clock_record(t: float, source: str, rank: int) -> dict:
    """What clocks this rank's steps from now on: ``optimizer`` or ``backward``."""
    return {"v": 1, "k": "step_clock", "t": t, "source": source, "rank": rank}
