"""Send records from the training process to the supervisor without blocking the loop.

The hot path is ``put(item)``: one ``deque.append`` (atomic under the GIL, no lock). A named
daemon thread drains the queue every ``interval`` seconds (sooner while more than ``max_items``
arrive in one interval: queued tensors are held until read), encodes JSON lines and writes them
to the supervisor's Unix socket. If the socket fails, the sender warns once, tells the taps to
stop (``on_stop``) and drops records from then on: the training run never waits on trainmeter.

What the queue holds, in the order the training thread put it (``QueueReader.read``):

- a ``dict``: one record, sent as it is; one with ``await_step`` waits for the step it names,
  whose token count goes into its ``tokens`` (flop_count.py), and is sent right after it;
- a ``float`` ``t``: an optimizer step's time stamp (step_clock.py, from C), the step after
  the last one, which gets the tokens and samples of every root-model call queued since the
  previous step; ``(t, step, tokens, samples, seq_sq)`` is one with its number and more counts
  (the first step brings discovery's);
- ``(kind, start, seconds)``: a time span (spans.py);
- ``(t, loss)``: a training ``backward()`` call (backward.py: its loss, or a device slot
  holding it), read by the :class:`~trainmeter.agent.backward.Ledger`, and its 1-tuple
  markers (a closure step begins, ``GradScaler.step`` begins and ends, the loss decided);
- a tensor: a root-model call's first argument, counted here (``shape``, ``dtype``: metadata
  only) so that the training thread pays one ``append`` per call;
- ``[args, kwargs]``: any other root-model call, counted by the taps' ``count_call``;
- ``FORGET``: drop the calls queued since the last step (a notebook cell ended).

Steps and spans go out as column batches (``core.records.decode_wire``), one of each per flush.
"""

from __future__ import annotations

import json
import os
import socket
import threading
from collections import deque

from trainmeter.agent import guard
from trainmeter.agent.backward import Fallback, Ledger

MAX_QUEUE = 200_000  # items; ~20 s of a 5 kHz step rate before the oldest are dropped
MIN_INTERVAL = 0.005  # s: the shortest wait between flushes when items pile up
FORGET = ("forget",)  # the queue item that drops the calls queued since the last step


class _NoTensor:  # matches nothing until the torch taps call ``set_counter``
    pass


class Sender:
    """Batching line-JSON sender over a Unix stream socket.

    Args:
        path: the supervisor's socket path.
        hello: first line sent on connect (``{"ctl": "agent", ...}``).
        interval: seconds between flushes of the background thread.
    """

    def __init__(self, path: str, hello: dict, interval: float = 0.1) -> None:
        self.path = path
        self.interval = interval
        self.queue: deque = deque(maxlen=MAX_QUEUE)
        self._hello = hello
        self.rank = int(hello.get("rank", 0))
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()  # one writer on the socket at a time
        self._stop = threading.Event()
        self._wake = threading.Event()
        self.max_items = MAX_QUEUE  # items per interval before the sender comes back sooner
        self.reader = QueueReader(self.rank)
        self.on_stop = lambda: None  # the taps' quiet(): the sender stopped
        self._sync_id = 0
        self._pid = os.getpid()
        self.drops: dict[str, int] = {}  # reason -> records dropped so far (cumulative)
        self._count_lock = threading.Lock()  # put (training thread) and the sender thread count
        self._start_thread()

    @property
    def alive(self) -> bool:
        return not guard.is_off("sender") and os.getpid() == self._pid

    @property
    def healthy(self) -> bool:
        """Connected, or still able to reconnect: on, in the process that made it, and its
        socket path exists (a supervisor may be listening there)."""
        try:
            return self.alive and (self._sock is not None or os.path.exists(self.path))
        except Exception:
            return False

    def retarget(self, path: str) -> None:
        """Point the sender at a new supervisor socket (a restarted notebook supervisor).

        What was queued for the old socket is dropped; the sender comes back on if it was off
        and connects lazily, sending its hello first. Never raises."""
        try:
            with self._lock:
                self._drop_socket()
                self.path = path
                self.queue.clear()
                guard.revive("sender")
                if not self._thread.is_alive() and not self._stop.is_set():
                    self._start_thread()
        except Exception as exc:
            guard.warn_once("sender-retarget", f"sender retarget failed: {exc!r}")

    def put(self, rec: dict) -> None:
        """Queue one record (hot path: never blocks, never raises)."""
        self.queue.append(rec)

    @property
    def put_step(self):
        """``put_step(item)``: the bare ``deque.append`` for the hot paths (steps, spans, root
        calls; the module docstring lists the items)."""
        return self.queue.append

    def count(self, reason: str, n: int = 1) -> None:
        """Count ``n`` records dropped for ``reason`` (a short phrase); sent as the agent's
        ``dropped`` record. Never raises."""
        with self._count_lock:
            self.drops[reason] = self.drops.get(reason, 0) + n

    def set_counter(self, tensor_type, int_dtypes, count_call, on_stop) -> None:
        """How queued root-model calls are counted, and what to call if the sender stops."""
        self.reader.tensor, self.reader.ints = tensor_type, int_dtypes
        self.reader.ledger.tensor = tensor_type
        self.reader.count_call = count_call
        self.on_stop = on_stop

    def flush(self) -> bool:
        """Write everything queued now, from the calling thread. False once the sender is off."""
        if not self.alive:
            self.queue.clear()
            return False
        try:
            with self._lock:
                self._write_queued()
            return True
        except Exception as exc:  # the supervisor went away, or a record would not encode
            self._stopped("sender", exc)
            return False

    def sync(self, timeout: float = 3.0) -> bool:
        """Flush, then wait until the supervisor has applied every record sent so far.

        The supervisor answers ``{"ctl": "sync", "id": n}`` with ``{"ack": n}`` on this
        connection after the lines before it, so a later control command sees them all.
        """
        if not self.flush():
            return False
        try:
            with self._lock:
                self._sync_id += 1
                sock = self._connect()
                sock.sendall(_line({"ctl": "sync", "id": self._sync_id}))
                sock.settimeout(timeout)
                try:
                    return self._read_ack(sock, self._sync_id)
                finally:
                    sock.settimeout(None)
        except Exception as exc:
            self._stopped("sender", exc)
            return False

    def close(self) -> None:
        """Final flush and close (atexit and unload); never raises."""
        self._stop.set()
        self._wake.set()
        self.flush()
        with self._lock:
            self._drop_socket()

    def forget_after_fork(self) -> None:
        """In a forked child (a DataLoader worker, a Hogwild trainer): never write to the
        parent's socket, and stop the taps, whose hot paths would queue into nothing."""
        self._pid = -1
        try:
            self.on_stop()
        except Exception:
            pass
        self.queue.clear()

    # -- internals ------------------------------------------------------------------------------
    def _start_thread(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="trainmeter-sender", daemon=True)
        self._thread.start()

    def _drop_socket(self) -> None:
        """Close the connection, if any (the caller holds ``_lock``)."""
        if self._sock is not None:
            try:
                self._sock.close()
            except OSError:
                pass
            self._sock = None

    def _stopped(self, name: str, exc: BaseException) -> None:
        """Off for good: warn once, stop the taps (nothing may pile up) and drop the queue."""
        guard.failed(name, exc)
        try:
            self.on_stop()
        except Exception:
            pass
        self.queue.clear()

    def _loop(self) -> None:
        wait = self.interval
        while not self._stop.is_set():
            self._wake.wait(wait)
            self._wake.clear()
            n = len(self.queue)
            if n and not self.flush():
                return
            wait = next_wait(self.interval, n, self.max_items)

    def _connect(self) -> socket.socket:
        if self._sock is None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(self.path)
            sock.sendall(_line(self._hello))
            self._sock = sock
        return self._sock

    def _write_queued(self) -> None:
        if not self.queue and not self.reader.pending(last=self._stop.is_set()):
            return
        steps, spans, records = self.reader.read(self.queue)
        if self._stop.is_set():  # the last flush: nothing waits any more
            records += self.reader.release_all()
        # who is sending comes first (a rank adopted from torch.distributed applies to the
        # steps beside it), then steps, then spans (decode_wire), then the other records
        hellos = [r for r in records if r.get("k") == "agent_hello"]
        records = [r for r in records if r.get("k") != "agent_hello"] if hellos else records
        chunks = [_line(r) for r in hellos]
        chunks += [_line(b) for b in (steps, spans) if b is not None]
        for rec in records:
            try:
                chunks.append(_line(rec))
            except (TypeError, ValueError):  # a value JSON cannot carry: drop that record only
                guard.warn_once("sender-encode", "dropped a record that JSON cannot encode")
        if chunks:
            self._connect().sendall(b"".join(chunks))

    @staticmethod
    def _read_ack(sock: socket.socket, want: int) -> bool:
        buf = b""
        while b"\n" not in buf:
            chunk = sock.recv(4096)
            if not chunk:
                raise ConnectionError("supervisor closed the connection")
            buf += chunk
        acks = [json.loads(raw).get("ack") for raw in buf.split(b"\n") if raw.strip()]
        return want in acks


def next_wait(interval: float, items: int, max_items: int) -> float:
    """Seconds until the next flush: ``interval``, shortened in proportion when more than
    ``max_items`` arrived in the last one (never below ``MIN_INTERVAL``), so the tensors the
    queue holds stay near ``max_items`` without a check on the training thread."""
    if items <= max_items:
        return interval
    return max(MIN_INTERVAL, interval * max_items / items)


def _line(obj: dict) -> bytes:
    return (json.dumps(obj, separators=(",", ":"), allow_nan=False) + "\n").encode()


class QueueReader:
    """Drains the sender's queue into wire batches (the items are in the module docstring).

    Root-model calls queued after the last step of one flush are carried into the next. The
    tensor count is inlined (it runs once per call on the training process's GIL). Backward
    calls go to the :class:`~trainmeter.agent.backward.Ledger` (losses, and the step clock of a
    loop with no optimizer).

    Args:
        rank: the process's rank, written into every batch.
    """

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.tokens = self.samples = self.seq_sq = 0  # calls queued since the last step
        self.step = 0  # the last step read (a bare time stamp is the one after it)
        self.waiting: list[dict] = []  # records with ``await_step``, until their step is read
        self.tensor: type = _NoTensor
        self.ints: tuple = ()
        self.batch_axis = 0  # the token tensor's batch axis (1 for sequence-first inputs)
        self.count_call = _no_count
        self.ledger = Ledger(rank=rank)

    def read(self, queue: deque) -> tuple[dict | None, dict | None, list[dict]]:
        """(steps batch or None, spans batch or None, records) from everything queued now.

        A steps batch's times are whole microseconds after the first (``t0``, ``dt_us``): an
        int encodes in a fraction of a float's time. ``seq_sq`` is each step's sum over its
        sequences of the squared sequence length (tokens x their sequence's length): the
        engine's token-weighted mean sequence length.
        """
        tensor, ints, count_call, led = self.tensor, self.ints, self.count_call, self.ledger
        bax = self.batch_axis
        tok, smp, sq, t0, last = self.tokens, self.samples, self.seq_sq, None, self.step
        dt, step, tokens, samples, seq_sq, spans, records = [], [], [], [], [], [], []
        pop = queue.popleft

        def add(t, n, more_tok, more_smp, more_sq):  # one step into the batch's columns
            nonlocal t0
            if t0 is None:
                t0 = t
            dt.append(int((t - t0) * 1e6 + 0.5))
            step.append(n)
            tokens.append(more_tok)
            samples.append(more_smp)
            seq_sq.append(more_sq)
            if self.waiting:
                self._release(n, more_tok, records)
            led.take_losses(n, t, records)

        while queue:
            item = pop()
            kind = type(item)
            if kind is tensor:  # a root call's first argument: shapes.count, inlined (hot)
                shape = item.shape  # one call into C++; numel comes from the shape
                b = shape[bax] if len(shape) > bax else 1
                smp += b
                if item.dtype in ints:
                    n = shape.numel()
                    tok += n
                    sq += n * (n // b) if b else 0
            elif kind is float or (kind is tuple and len(item) == 5):
                if kind is float:  # the clock's time stamp: the step after the last one
                    t, last, more_tok, more_smp, more_sq = item, last + 1, 0, 0, 0
                else:
                    t, last, more_tok, more_smp, more_sq = item
                tok, smp, sq = led.optimizer_step(t, last, tok, smp, sq, records)
                add(t, last, tok + more_tok, smp + more_smp, sq + more_sq)
                tok = smp = sq = 0
            elif kind is tuple:
                if len(item) == 3:
                    spans.append(item)
                elif len(item) == 2:  # a training backward(): (t, loss)
                    what = led.backward(item, tok, smp, sq)
                    if what == "step":  # the backward clock: this call is a step
                        last += 1
                        add(item[0], last, tok, smp, sq)
                    if what in ("step", "kept"):  # counted now, or kept with the call
                        tok = smp = sq = 0
                elif item == FORGET:
                    tok = smp = sq = 0
                else:
                    led.marker(item)
            elif kind is list:  # [args, kwargs] of a root call
                more_tok, more_smp, more_sq = count_call(*item)
                tok, smp, sq = tok + more_tok, smp + more_smp, sq + more_sq
            elif kind is dict:
                (self.waiting if item.pop("await_step", False) else records).append(item)
            elif kind is Fallback:  # backward() is the clock from now on (backward.py)
                last = led.fall_back(item, last, add, records)
            elif isinstance(item, tensor):  # a tensor subclass
                more_tok, more_smp, more_sq = count_call((item,), None)
                tok, smp, sq = tok + more_tok, smp + more_smp, sq + more_sq
        led.poll(records)
        self.tokens, self.samples, self.seq_sq, self.step = tok, smp, sq, last
        batch = None
        if step:
            batch = {"v": 1, "k": "steps", "rank": self.rank, "t0": t0, "dt_us": dt,
                     "step": step, "tokens": tokens, "samples": samples,
                     "seq_sq": seq_sq}  # fmt: skip
        return batch, self._spans(spans), records

    def _release(self, step: int, tokens: int, records: list[dict]) -> None:
        """Send the records that waited for ``step`` (or an earlier one) with its tokens."""
        for rec in list(self.waiting):
            if rec.get("step", 0) <= step:
                rec["tokens"] = tokens if rec.get("step") == step and tokens else None
                records.append(rec)
                self.waiting.remove(rec)

    def pending(self, last: bool) -> bool:
        """Whether something waits to go out with no item queued: device losses whose copies
        may have completed, or, at the last flush, records and losses still held."""
        led = self.ledger
        return bool(led.pending or (last and (self.waiting or led.held)))

    def release_all(self) -> list[dict]:
        """The run ends: the records still waiting for their step (sent without tokens), and
        the losses the ledger still holds."""
        out, self.waiting = self.waiting, []
        self.ledger.release_all(out)
        return out

    def _spans(self, spans: list[tuple]) -> dict | None:
        if not spans:
            return None
        name, t, dur = zip(*spans, strict=True)
        return {"v": 1, "k": "spans", "rank": self.rank, "name": name, "t": t,
                "dur": [round(d, 7) for d in dur]}  # fmt: skip


def _no_count(args, kwargs) -> tuple[int, int, int]:
    return 0, 0, 0
