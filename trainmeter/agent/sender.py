"""Send records from the training process to the supervisor without blocking the loop.

The hot path is ``put(record)``: one ``deque.append`` (atomic under the GIL, no lock). A named
daemon thread drains the queue every ``interval`` seconds, encodes JSON lines and writes them to
the supervisor's Unix socket. If the socket fails, the sender warns once and drops records from
then on: the training run never waits on trainmeter.
"""

from __future__ import annotations

import json
import os
import socket
import threading
from collections import deque

from trainmeter.agent import guard

MAX_QUEUE = 200_000  # records; ~40 s of a 5 kHz step rate before the oldest are dropped


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
        self._sync_id = 0
        self._pid = os.getpid()
        self._thread = threading.Thread(target=self._loop, name="trainmeter-sender", daemon=True)
        self._thread.start()

    @property
    def alive(self) -> bool:
        return not guard.is_off("sender") and os.getpid() == self._pid

    def put(self, rec: dict) -> None:
        """Queue one record (hot path: never blocks, never raises)."""
        self.queue.append(rec)

    @property
    def put_step(self):
        """``put_step((t, step, tokens, samples, inputs))``: the cheapest enqueue, for the step
        hook. The sender thread adds ``count_inputs(inputs)`` (the torch taps' metadata count of
        the step's input tensors) and sends a flush's steps as one ``steps`` batch (see
        ``core.records.decode_wire``), which the supervisor expands into step records. A
        3-tuple ``(kind, start, seconds)`` on the same queue is a time span (``spans.py``),
        sent as one ``spans`` batch right after the steps."""
        return self.queue.append

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
            guard.failed("sender", exc)
            self.queue.clear()
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
            guard.failed("sender", exc)
            return False

    def close(self) -> None:
        """Final flush and close (atexit and unload); never raises."""
        self._stop.set()
        self.flush()
        with self._lock:
            if self._sock is not None:
                try:
                    self._sock.close()
                except OSError:
                    pass
                self._sock = None

    def forget_after_fork(self) -> None:
        """In a forked child (a DataLoader worker): never write to the parent's socket."""
        self._pid = -1
        self.queue.clear()

    # -- internals ------------------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            if self.queue and not self.flush():
                return

    def _connect(self) -> socket.socket:
        if self._sock is None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(self.path)
            sock.sendall(_line(self._hello))
            self._sock = sock
        return self._sock

    def _write_queued(self) -> None:
        if not self.queue:
            return
        steps, spans, chunks = [], [], []
        pop = self.queue.popleft
        while self.queue:
            item = pop()
            if type(item) is tuple:  # a step (5 fields) or a span (3): batched as columns below
                (steps if len(item) == 5 else spans).append(item)
                continue
            try:
                chunks.append(_line(item))
            except (TypeError, ValueError):  # a value JSON cannot carry: drop that record only
                guard.warn_once("sender-encode", "dropped a record that JSON cannot encode")
        if steps:
            chunks.insert(0, _line(self._steps_batch(steps)))
        if spans:  # after the steps: core.records.decode_wire says why the order matters
            name, t, dur = zip(*spans, strict=True)
            batch = {"v": 1, "k": "spans", "rank": self.rank, "name": name, "t": t,
                     "dur": [round(d, 7) for d in dur]}  # fmt: skip
            chunks.insert(1 if steps else 0, _line(batch))
        self._connect().sendall(b"".join(chunks))

    def _steps_batch(self, steps: list[tuple]) -> dict:
        """One ``steps`` wire batch (``core.records.decode_wire``) from queued step tuples.

        Times go as whole microseconds after the first (``t0``, ``dt_us``): an int encodes in
        a fraction of a float's time, and this runs on the training process's GIL.
        """
        count, t0 = self.count_inputs, steps[0][0]
        dt, step, tokens, samples = [], [], [], []
        for t, n, tok, smp, inputs in steps:
            if inputs:  # the root model's input tensors, counted here off the hot path
                more_tok, more_smp = count(inputs)
                tok, smp = tok + more_tok, smp + more_smp
            dt.append(int((t - t0) * 1e6 + 0.5))
            step.append(n)
            tokens.append(tok)
            samples.append(smp)
        return {"v": 1, "k": "steps", "rank": self.rank, "t0": t0, "dt_us": dt, "step": step,
                "tokens": tokens, "samples": samples}  # fmt: skip

    @staticmethod
    def count_inputs(inputs) -> tuple[int, int]:
        """Replaced by the torch taps when they attach."""
        return 0, 0

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


def _line(obj: dict) -> bytes:
    return (json.dumps(obj, separators=(",", ":"), allow_nan=False) + "\n").encode()
