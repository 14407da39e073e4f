"""Send records from the training process to the supervisor without blocking the loop.

The hot path is ``put_step(item)``: one ``deque.append`` (atomic under the GIL, no lock, no
check) for steps, spans and root-model calls; steps are never shed. ``put(rec)`` (emit() and
the tracker taps' series, notes, model facts) checks one flag first: under pressure (more than
``SHED_QUEUE`` items queued or ``SHED_BYTES`` waiting for the socket) a series keeps at most
``SHED_RATE`` points per name per second (1 beyond ``SLOW_BYTES`` waiting), each point shed
counted ("series shed under load"): every series keeps points through the whole run.

A named daemon thread drains the queue every ``interval`` seconds (sooner while more than
``max_items`` arrive in one interval: queued tensors are held until read), encodes JSON lines
into an outbound buffer (:class:`Outbound`: series, spans and notes are refused beyond
``MAX_OUT_BYTES`` (32 MiB), the rest beyond ``HARD_OUT_BYTES`` (256 MiB: a supervisor paused
for good), counted "outbound buffer full"; series go after the rest of their flush, in chunks
of ``LOW_CHUNK`` bytes) and writes it to the supervisor's Unix socket without blocking: a
paused supervisor never holds the thread, which keeps reading the queue. Steps the buffer
cannot take are never refused: they are merged into one :class:`StepAggregate` (constant
memory: their count, the last one's number and time, their summed counts), sent as one step
row that says how many steps it stands for (``agg``, core/records.py ``decode_wire``) as soon as
the buffer has room, and at close. A socket that fails is dropped, what was buffered is counted
("supervisor gone") and the sender reconnects with backoff (0.1 s doubling to 5 s, its hello
first on each connection); the taps stay on. Only an internal error turns the sender off.

Every count goes out as a ``dropped`` record (source "agent", cumulative, with pid and rank)
at most every ``DROP_EVERY`` seconds when it changed, and at close, which has a deadline of
``CLOSE_DEADLINE_S`` in all (about ``CLOSE_STALL_S`` when the socket takes nothing that long:
a paused supervisor; its queued series are then counted, not encoded): what is unsent then
is counted ("unsent at exit") and one stderr line says how many records were not sent. Close
also leaves the final counts, as a ``dropped`` record, in a file beside the socket
(``core.records.EXIT_FILE``, written to a temporary name and renamed, so it is whole or
absent): a supervisor that was paused when the process exited logs them from there at the
run's end (supervisor/exit_counts.py).

What the queue holds, in the order the training thread put it (``QueueReader.read``):

- a ``dict``: one record, sent as it is; one with ``await_step`` waits for the step it names,
  whose token and sample counts go into its ``tokens`` and ``samples`` (flop_count.py), and is
  sent right after it;
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
import select
import socket
import sys
import threading
import time
from collections import deque

from trainmeter.agent import guard
from trainmeter.agent.backward import Fallback, Ledger

MIN_INTERVAL = 0.005  # s: the shortest wait between flushes when items pile up
FORGET = ("forget",)  # the queue item that drops the calls queued since the last step
MAX_OUT_BYTES = 32 * 2**20  # outbound buffer: series and notes beyond it are dropped
HARD_OUT_BYTES = 256 * 2**20  # beyond it every line is dropped (a supervisor paused for good)
SHED_QUEUE = 50_000  # items queued above which series are held to SHED_RATE per name
SHED_BYTES = 2**20  # outbound bytes above which series are held to SHED_RATE per name
SHED_RATE = 10  # series points kept per name per second under pressure
SLOW_BYTES = 4 * 2**20  # outbound bytes above which series are held to 1 point per name per s
DROP_EVERY = 0.5  # s: at most two dropped records a second
CLOSE_DEADLINE_S = 1.0  # close(): everything, the final dropped record included
CLOSE_STALL_S = 0.2  # close() gives up on a socket that takes nothing for this long
BACKOFF_MIN_S, BACKOFF_MAX_S = 0.1, 5.0  # reconnect waits, doubling
WRITE_MAX = 1 << 20  # bytes handed to one send()
MAX_LAST = 10_000  # series names whose newest shed point close() sends
LOW_CHUNK = 64 * 1024  # bytes of series joined into one buffer entry
LOW_KINDS = ("series",)  # sent after the rest of a flush; dropped first when the buffer is full

# drop reasons (docs/reliability.md)
SHED = "series shed under load"
FULL = "outbound buffer full"
GONE = "supervisor gone"
UNSENT = "unsent at exit"
UNENCODABLE = "record JSON cannot encode"


class _NoTensor:  # matches nothing until the torch taps call ``set_counter``
    pass


class Sender:
    """Batching line-JSON sender over a Unix stream socket (the module docstring says how).

    Args:
        path: the supervisor's socket path.
        hello: first line sent on each connection (``{"ctl": "agent", ...}``).
        interval: seconds between flushes of the background thread.
    """

    def __init__(self, path: str, hello: dict, interval: float = 0.1) -> None:
        self.path = path
        self.interval = interval
        self.queue: deque = deque()  # unbounded: what bounds it is shedding and the reader
        self._hello = hello
        self.rank = int(hello.get("rank", 0))
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()  # one user of the socket and the outbound buffer
        self._stop = threading.Event()
        self._wake = threading.Event()
        self.max_items = 200_000  # items per interval before the sender comes back sooner
        self.reader = QueueReader(self.rank)
        self.out = Outbound(self.count)
        self.agg: StepAggregate | None = None  # steps the full buffer could not take, merged
        self.on_stop = lambda: None  # the taps' quiet(): the sender stopped for good
        self.shedding = False  # under pressure: put() holds series to shed_rate per name
        self.shed_rate = SHED_RATE
        self._sync_id = self._acked = 0
        self._rbuf = b""  # the supervisor's replies (acks), up to their newline
        self._retry_at, self._backoff = 0.0, BACKOFF_MIN_S
        self._pid = os.getpid()
        self.drops: dict[str, int] = {}  # reason -> records dropped so far (cumulative)
        self._count_lock = threading.Lock()  # put (training thread) and the sender thread count
        self._rate: dict[object, int] = {}  # series name -> points kept in this second
        self._rate_sec = 0
        self._last_shed: dict[object, dict] = {}  # series name -> its newest point shed
        self._sent_drops: dict[str, int] = {}  # the counts of the last dropped record queued
        self._drops_at = 0.0
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

        What was queued or buffered for the old socket is dropped and counted ("supervisor
        gone", in the new run's counts); the sender comes back on if it was off and connects
        at once, sending its hello first. Never raises."""
        try:
            with self._lock:
                self._drop_socket()
                self.path = path
                with self._count_lock:
                    self.drops, self._sent_drops, self._last_shed = {}, {}, {}
                self._discard(GONE)
                self._retry_at, self._backoff = 0.0, BACKOFF_MIN_S
                guard.revive("sender")
                if not self._thread.is_alive() and not self._stop.is_set():
                    self._start_thread()
        except Exception as exc:
            guard.warn_once("sender-retarget", f"sender retarget failed: {exc!r}")

    def set_rank(self, rank: int, world_size: int) -> None:
        """The rank ``torch.distributed`` gave this process (``Agent.adopt_rank``): records and
        batches carry it from now on, and so does the hello of every later connection (the
        supervisor fixes a connection's rank by its hello: a reconnect that said the old one
        would have every record refused)."""
        self.rank = self.reader.rank = self.reader.ledger.rank = rank
        self._hello = {**self._hello, "rank": rank, "world_size": world_size}

    def put(self, rec: dict) -> None:
        """Queue one record (never blocks, never raises); a series point beyond its rate is
        shed and counted while the sender is under pressure."""
        pressed = self.shedding or len(self.queue) > SHED_QUEUE
        if pressed and rec.get("k") == "series" and self._shed(rec):
            return
        self.queue.append(rec)

    @property
    def put_step(self):
        """``put_step(item)``: the bare ``deque.append`` for the hot paths (steps, spans, root
        calls; the module docstring lists the items)."""
        return self.queue.append

    def count(self, reason: str, n: int = 1) -> None:
        """Count ``n`` records dropped for ``reason`` (a short phrase); sent as the agent's
        ``dropped`` record. Never raises."""
        if n:
            with self._count_lock:
                self.drops[reason] = self.drops.get(reason, 0) + n

    def set_counter(self, tensor_type, int_dtypes, count_call, on_stop) -> None:
        """How queued root-model calls are counted, and what to call if the sender stops."""
        self.reader.tensor, self.reader.ints = tensor_type, int_dtypes
        self.reader.ledger.tensor = tensor_type
        self.reader.count_call = count_call
        self.on_stop = on_stop

    def flush(self) -> bool:
        """Encode everything queued now and write what the socket takes without blocking, from
        the calling thread. False once the sender is off."""
        if not self.alive:
            self.queue.clear()
            return False
        try:
            with self._lock:
                self._write_queued()
            return True
        except Exception as exc:  # an internal error (a socket's failure is handled inside)
            self._stopped("sender", exc)
            return False

    def sync(self, timeout: float = 3.0) -> bool:
        """Flush, then wait at most ``timeout`` seconds until the supervisor has applied every
        record sent so far; False when it did not answer in time (the sender stays on, a late
        answer is taken by the next sync) or the socket failed.

        The supervisor answers ``{"ctl": "sync", "id": n}`` with ``{"ack": n}`` on this
        connection after the lines before it, so a later control command sees them all.
        """
        if not self.flush():
            return False
        deadline = time.monotonic() + timeout
        try:
            with self._lock:
                self._sync_id += 1
                want = self._sync_id
                self.out.add(_line({"ctl": "sync", "id": want}), 0, low=True, force=True)
            while True:
                with self._lock:
                    self._write()
                    sock = self._sock
                    if sock is None:
                        return False
                    if self._read_acks(sock) >= want:
                        return True
                    writing = self.out.nbytes > 0
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                _wait_on(sock, read=True, write=writing, timeout=min(left, 0.05))
        except Exception as exc:
            self._stopped("sender", exc)
            return False

    def close(self) -> None:
        """Final flush and close (atexit and unload), within ``CLOSE_DEADLINE_S``; never
        raises. What is unsent at the deadline is counted, the final ``dropped`` record is
        attempted, and one stderr line says how many records were not sent when some were
        unsent or that record did not go out (else the run's summary line says it)."""
        self._stop.set()
        self._wake.set()
        try:
            self._close(time.monotonic() + CLOSE_DEADLINE_S)
        except Exception as exc:  # an internal error in the last flush is said, like any other
            guard.failed("sender", exc)

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
        self._rbuf = b""
        self._acked = self._sync_id  # an ack still on its way is for this connection only

    def _stopped(self, name: str, exc: BaseException) -> None:
        """Off for good (an internal error): warn once, stop the taps, drop the queue."""
        guard.failed(name, exc)
        try:
            self.on_stop()
        except Exception:
            pass
        self.queue.clear()

    def _gone(self, exc: BaseException) -> None:
        """The socket failed: drop it, count what it did not take, retry after the backoff
        (the caller holds ``_lock``). The taps stay on."""
        guard.warn_once(
            "sender-gone",
            f"lost the supervisor's socket ({type(exc).__name__}: {exc}); reconnecting, "
            "what it could not take is counted",
        )
        self._drop_socket()
        self.count(GONE, self.out.clear() + self._take_agg())
        self._sent_drops = {}  # the counts go out again on the next connection
        self._retry_at = time.monotonic() + self._backoff
        self._backoff = min(BACKOFF_MAX_S, self._backoff * 2)

    def _discard(self, reason: str) -> None:
        """Drop everything queued and buffered, counted under ``reason`` (holding ``_lock``)."""
        self.count(reason, self._read_all() + self.out.clear() + self._take_agg())

    def _read_all(self) -> int:
        """Read everything queued and waiting, unsent; returns how many records that was."""
        steps, spans, records = self.reader.read(self.queue)
        records += self.reader.release_all()
        return len(records) + sum(
            len(b["step"] if b is steps else b["name"]) for b in (steps, spans) if b is not None
        )

    def _loop(self) -> None:
        wait = self.interval
        while not self._stop.is_set():
            sock = self._sock
            if sock is not None and self.out.nbytes:
                _wait_on(sock, read=False, write=True, timeout=wait)  # writable, or the wait
            else:
                self._wake.wait(wait)
                self._wake.clear()
            if self._stop.is_set():  # close() does the last flush
                return
            n = len(self.queue)
            if not self.flush():
                return
            wait = next_wait(self.interval, n, self.max_items)

    def _connect(self) -> socket.socket:
        """The connection, opened if needed (non-blocking), its hello first in the buffer."""
        if self._sock is None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.setblocking(False)
                sock.connect(self.path)  # a full listen backlog raises BlockingIOError
            except BaseException:
                sock.close()
                raise
            self.out.first(_line(self._hello))
            self._sock = sock
        return self._sock

    def _write_queued(self) -> None:
        """Queue -> outbound buffer -> socket, never blocking (the caller holds ``_lock``)."""
        self._encode()
        self._queue_drops(force=False)
        self._write()
        if self.agg is not None and self._send_agg():  # merged steps: once the buffer has room
            self._write()
        self.shedding = self.out.nbytes > SHED_BYTES or len(self.queue) > SHED_QUEUE
        self.shed_rate = SHED_RATE if self.out.nbytes <= SLOW_BYTES else 1

    def _write(self) -> None:
        """Write what the socket takes now; a failure is :meth:`_gone`."""
        if not self.out.nbytes or (self._sock is None and time.monotonic() < self._retry_at):
            return
        try:
            sock = self._connect()
            self.out.write(sock)
            self._backoff = BACKOFF_MIN_S
        except OSError as exc:
            self._gone(exc)

    def _encode(self, skip_low: bool = False) -> None:
        """Queue -> outbound buffer (``skip_low``: series counted unsent, not encoded)."""
        if not self.queue and not self.reader.pending(last=self._stop.is_set()):
            return
        steps, spans, records = self.reader.read(self.queue)
        if self._stop.is_set():  # the last flush: nothing waits any more
            records += self.reader.release_all()
        # who is sending comes first (a rank adopted from torch.distributed applies to the
        # steps beside it), then steps, then spans (decode_wire), then the other records
        out = self.out
        for rec in records:
            if rec.get("k") == "agent_hello":
                out.add(_line(rec), 1)
        if steps is not None:
            self._add_steps(steps)
        if spans is not None:
            out.add(_line(spans), len(spans["name"]), limit=MAX_OUT_BYTES)  # shed like series
        low, size = [], 0
        for rec in records:
            kind = rec.get("k")
            if kind == "agent_hello":
                continue
            if skip_low and kind in LOW_KINDS:
                self.count(UNSENT)
                continue
            try:
                line = _line(rec)
            except (TypeError, ValueError):  # a value JSON cannot carry: drop that record only
                self.count(UNENCODABLE)
                continue
            if kind in LOW_KINDS:
                low.append(line)
                size += len(line)
                if size >= LOW_CHUNK:  # a step batch waits behind one chunk at most
                    out.add(b"".join(low), 1, low=True)
                    low, size = [], 0
            else:  # a note keeps its place, but is refused beyond MAX_OUT_BYTES like a series
                out.add(line, 1, limit=MAX_OUT_BYTES if kind == "note" else HARD_OUT_BYTES)
        if low:
            out.add(b"".join(low), 1, low=True)

    def _add_steps(self, steps: dict) -> None:
        """Buffer a steps batch, or merge it into :attr:`agg` when the buffer cannot take it
        (past ``HARD_OUT_BYTES``), or when merged steps still wait: they are older, and steps
        reach the supervisor in order. Steps are never refused."""
        if self.agg is not None and not self._send_agg():
            self.agg.merge(steps, self.count)
            return
        line = _line(steps)
        if self.out.fits(len(line)):
            self.out.add(line, len(steps["step"]))
        else:
            self.agg = StepAggregate(steps)

    def _send_agg(self, force: bool = False) -> bool:
        """Buffer the merged steps as one row if the buffer has room (``force``: at close,
        whatever it holds; the row is a few hundred bytes); True when they were."""
        line = _line(self.agg.batch())
        if not force and not self.out.fits(len(line)):
            return False
        self.out.add(line, self.agg.k, force=True)  # a line that stands for its k steps
        self.agg = None
        return True

    def _take_agg(self) -> int:
        """Drop the merged steps (their supervisor is gone); returns how many steps they were."""
        agg, self.agg = self.agg, None
        return agg.k if agg is not None else 0

    def _queue_drops(self, force: bool, final: bool = False) -> None:
        """Queue a ``dropped`` record if the counts changed, at most every ``DROP_EVERY`` s
        (``force``: now). ``final`` (close()): the last one, sent even when nothing changed and
        marked ``final``, so the supervisor knows this process closed its agent (one that ended
        by ``os._exit`` or SIGKILL sends none, and what it had not sent is lost: a note says so)."""
        now = time.monotonic()
        if not force and now - self._drops_at < DROP_EVERY:
            return
        with self._count_lock:
            counts = dict(self.drops)
        if counts == self._sent_drops and not final:
            return
        self.out.add(_line(self._dropped(counts, final)), 0, force=True)
        self._sent_drops, self._drops_at = counts, now

    def _dropped(self, counts: dict, final: bool) -> dict:
        """The agent's ``dropped`` record of ``counts`` (``final``: its close's last)."""
        rec = {"v": 1, "k": "dropped", "t": time.time(), "source": "agent", "counts": counts,
               "pid": os.getpid(), "rank": self.rank}  # fmt: skip
        if final:
            rec["final"] = True
        return rec

    def _shed(self, rec: dict) -> bool:
        """Whether this series point is beyond its name's ``shed_rate`` this second (counted;
        the newest shed point of each name is kept for close(): a run's last values)."""
        name = rec.get("name")
        with self._count_lock:
            sec = int(time.monotonic())
            if sec != self._rate_sec:
                self._rate, self._rate_sec = {}, sec
            try:
                kept = self._rate.get(name, 0)
            except TypeError:  # an unhashable name: the reader will send or count it
                return False
            if kept < self.shed_rate:
                self._rate[name] = kept + 1
                self._last_shed.pop(name, None)
                return False
            self.drops[SHED] = self.drops.get(SHED, 0) + 1
            if len(self._last_shed) < MAX_LAST or name in self._last_shed:
                self._last_shed[name] = rec
            return True

    def _read_acks(self, sock: socket.socket) -> int:
        """The highest sync id the supervisor acknowledged on this connection (reads what has
        arrived without blocking; a closed connection raises ConnectionError)."""
        while True:
            try:
                chunk = sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                break
            if not chunk:
                raise ConnectionError("supervisor closed the connection")
            self._rbuf += chunk
        *lines, self._rbuf = self._rbuf.split(b"\n")
        for raw in lines:
            try:
                ack = json.loads(raw).get("ack")
            except (ValueError, AttributeError):
                continue
            if isinstance(ack, int) and not isinstance(ack, bool):
                self._acked = max(self._acked, ack)
        return self._acked

    def _close(self, deadline: float) -> None:
        if not self.alive:
            return
        if not self._lock.acquire(timeout=max(0.0, deadline - time.monotonic() - 0.3)):
            _say("the final flush could not start in time; the run log may miss its end")
            return
        try:
            self._retry_at = 0.0  # one more try to connect, whatever the backoff
            # what is buffered, for at most CLOSE_STALL_S: does the socket take anything?
            stalled = self._drain(min(deadline - 0.25, time.monotonic() + CLOSE_STALL_S))
            if self.out.nbytes > SHED_BYTES:  # a backlog: the newest series go instead of it
                self.count(UNSENT, self.out.drop_low())
            if not stalled:  # each series' newest shed point: the run's last values
                with self._count_lock:
                    last, self._last_shed = self._last_shed, {}
                    if last:
                        self.drops[SHED] -= len(last)  # counted when shed; sent now
                self.queue.extend(last.values())
            # a paused supervisor: encoding the queued series would only cost time
            self._encode(skip_low=stalled)
            if self.agg is not None:  # the merged steps: cut below with the rest if unsent
                self._send_agg(force=True)
            if not stalled:
                self._retry_at = 0.0  # no supervisor: the queue is counted "supervisor gone"
                self._drain(deadline - 0.25)
            unsent = self.out.cut()  # all but the rest of a line half written
            self.count(UNSENT, unsent)
            self._queue_drops(force=True, final=True)
            left = self._leave_counts()  # for a supervisor that reads nothing now
            self._drain(deadline)  # a supervisor just resumed reads it
            # written to a socket still connected: a failed connect also empties the buffer
            # (counted "supervisor gone"), and that is no delivery
            delivered = self.out.nbytes == 0 and self._sock is not None
            self.out.clear()  # counted above: a later connection must not begin mid-line
            self._drop_socket()
        finally:
            self._lock.release()
        with self._count_lock:
            total = sum(self.drops.values())
            by = ", ".join(f"{n:,} {why}" for why, n in self.drops.items())
        if total and (unsent or not delivered):  # else the summary line says what was dropped
            where = ("in the run log" if delivered else
                     "left for the supervisor, which logs it at the run's end" if left else
                     "the run log does not have this count")  # fmt: skip
            _say(f"{total:,} records were not sent to the supervisor ({by or 'none'}; {where})")

    def _leave_counts(self) -> bool:
        """Write the final counts (a ``dropped`` record, as the socket would carry it) to
        ``EXIT_FILE`` in the socket's folder, the supervisor's private one: a temporary name,
        then ``os.replace``, so the supervisor reads it whole or not at all. Nothing when no
        count is above zero, or no supervisor is connected now (one that is gone reads
        nothing, and the folder may be anyone's). True when written; never raises (a folder
        already removed, a full disk: False)."""
        with self._count_lock:
            counts = dict(self.drops)
        if not any(counts.values()) or self._sock is None or not os.path.exists(self.path):
            return False
        rec = self._dropped(counts, final=True)
        from trainmeter.core.records import EXIT_FILE  # here: the agent's boot never needs it

        path = os.path.join(os.path.dirname(self.path), EXIT_FILE.format(pid=os.getpid()))
        tmp = f"{path}.tmp"
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
            fd = os.open(tmp, flags, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(_line(rec))
            os.replace(tmp, path)
            return True
        except Exception:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            return False

    def _drain(self, until: float) -> bool:
        """Write until the buffer is empty, the socket is gone, ``until``, or the socket took
        nothing for ``CLOSE_STALL_S`` (a paused supervisor) (holding ``_lock``). True when it
        stopped for the stall."""
        moved = time.monotonic()
        while self.out.nbytes:
            before = self.out.nbytes
            self._write()
            now = time.monotonic()
            if self.out.nbytes < before:
                moved = now
            sock = self._sock
            if sock is None or not self.out.nbytes:
                return False
            if now >= moved + CLOSE_STALL_S:
                return True
            if now >= until:
                return False
            _wait_on(sock, read=False, write=True, timeout=min(until, moved + CLOSE_STALL_S) - now)
        return False


class Outbound:
    """Encoded lines waiting for the socket: hellos, steps, spans and other records first, then
    series and notes (``low``). Each entry is ``(data, per_line)``: its lines, each standing
    for ``per_line`` records (a steps batch is one line of many steps; a hello or a sync none).

    Args:
        count: ``count(reason, n)``, called for what :meth:`add` refuses.
    """

    def __init__(self, count) -> None:
        self.count = count
        self.hi: deque = deque()
        self.lo: deque = deque()
        self.nbytes = 0  # bytes not written yet
        self.head: bytes | None = None  # the entry being written, from ``offset``
        self.head_per_line = 0
        self.offset = 0

    def add(self, data: bytes, per_line: int, low: bool = False, force: bool = False,
            limit: int | None = None) -> None:  # fmt: skip
        """Buffer ``data`` (whole lines) unless the buffer would pass ``limit`` bytes (default:
        ``MAX_OUT_BYTES`` for ``low`` lines, ``HARD_OUT_BYTES`` for others): then its records
        are counted "outbound buffer full" (``force``: never refused, for sync and dropped)."""
        limit = limit or (MAX_OUT_BYTES if low else HARD_OUT_BYTES)
        if not force and self.nbytes + len(data) > limit:
            self.count(FULL, data.count(b"\n") * per_line)
            return
        (self.lo if low else self.hi).append((data, per_line))
        self.nbytes += len(data)

    def fits(self, nbytes: int) -> bool:
        """Whether ``nbytes`` more stay within ``HARD_OUT_BYTES`` (what :meth:`add` takes of a
        line that is not ``low``)."""
        return self.nbytes + nbytes <= HARD_OUT_BYTES

    def first(self, data: bytes) -> None:
        """Buffer ``data`` before everything not begun (a new connection's hello)."""
        self.hi.appendleft((data, 0))
        self.nbytes += len(data)

    def write(self, sock) -> None:
        """Send until the socket would block or all is written; a failure raises OSError."""
        while self.nbytes:
            if self.head is None:
                data, self.head_per_line = (self.hi or self.lo).popleft()
                self.head, self.offset = data, 0
            try:
                n = sock.send(memoryview(self.head)[self.offset : self.offset + WRITE_MAX])
            except (BlockingIOError, InterruptedError):
                return
            self.offset += n
            self.nbytes -= n
            if self.offset >= len(self.head):
                self.head = None

    def clear(self) -> int:
        """Drop everything; returns the records of the lines not wholly written."""
        n = self._head_records(self.offset)
        n += sum(d.count(b"\n") * k for q in (self.hi, self.lo) for d, k in q)
        self.hi.clear()
        self.lo.clear()
        self.head, self.nbytes = None, 0
        return n

    def drop_low(self) -> int:
        """Drop the series not begun (the low entries); returns the records dropped."""
        n = sum(d.count(b"\n") * k for d, k in self.lo)
        self.nbytes -= sum(len(d) for d, _ in self.lo)
        self.lo.clear()
        return n

    def cut(self) -> int:
        """Drop all but the rest of a line half written (the supervisor reads it whole);
        returns the records dropped."""
        keep = b""
        if self.head is not None and self.offset:
            end = self.head.find(b"\n", self.offset) + 1
            keep = self.head[self.offset : end]
            self.offset = end
        n = self.clear()
        if keep:
            self.head, self.head_per_line, self.offset, self.nbytes = keep, 0, 0, len(keep)
        return n

    def _head_records(self, offset: int) -> int:
        if self.head is None:
            return 0
        return self.head.count(b"\n", offset) * self.head_per_line


class StepAggregate:
    """Steps the outbound buffer could not take, merged in constant memory: how many, the last
    one's number and time stamp, and their summed tokens, samples and ``seq_sq``; sent as one
    row of a steps batch whose ``agg`` column says how many steps it stands for
    (core/records.py ``decode_wire``; the engine counts them all and takes the interval up to
    the row as their time together, docs/spec.md "Run log"). Arrivals (``arr_us``) are not
    kept: the row has none.

    Args:
        steps: the first steps batch merged (``QueueReader.read``'s).
    """

    __slots__ = ("k", "rank", "samples", "seq_sq", "step", "t", "tokens")

    def __init__(self, steps: dict) -> None:
        self._start(steps)

    def _start(self, steps: dict) -> None:
        self.rank = steps["rank"]
        self.k = self.tokens = self.samples = self.seq_sq = 0  # k: the steps merged
        self.step, self.t = 0, 0.0  # the last one's number and time stamp (s since the epoch)
        self._add(steps)

    def merge(self, steps: dict, count) -> None:
        """Add a later batch. One of another rank (``torch.distributed`` gave the process its
        rank meanwhile) cannot be merged with these: they are dropped and counted
        ``count(FULL, k)`` ("outbound buffer full"), and the batch starts the merge anew."""
        if steps["rank"] != self.rank:
            count(FULL, self.k)
            self._start(steps)
            return
        self._add(steps)

    def _add(self, steps: dict) -> None:
        n = steps["step"]
        if not n:
            return
        self.k += len(n)
        self.step = n[-1]
        self.t = steps["t0"] + steps["dt_us"][-1] / 1e6
        self.tokens += sum(x or 0 for x in steps["tokens"])
        self.samples += sum(x or 0 for x in steps["samples"])
        self.seq_sq += sum(x or 0 for x in steps.get("seq_sq") or ())

    def batch(self) -> dict:
        """The merged steps as a steps batch of one row."""
        return {"v": 1, "k": "steps", "rank": self.rank, "t0": self.t, "dt_us": [0],
                "step": [self.step], "tokens": [self.tokens], "samples": [self.samples],
                "seq_sq": [self.seq_sq], "agg": [self.k]}  # fmt: skip


def _wait_on(sock, read: bool, write: bool, timeout: float) -> None:
    """Wait at most ``timeout`` s for ``sock`` to be readable/writable; never raises."""
    try:
        select.select([sock] if read else [], [sock] if write else [], [], max(0.0, timeout))
    except (OSError, ValueError):  # closed by another thread meanwhile
        time.sleep(min(timeout, 0.01))


def _say(text: str) -> None:
    try:
        print(f"[trainmeter] {text}", file=sys.stderr)
    except Exception:
        pass


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
        engine's token-weighted mean sequence length. ``arr_us`` is each optimizer step's
        arrival, its last training ``backward()`` call: whole microseconds from it to the
        step's own time, null when none was stamped (docs/spec.md "Stragglers"); the batch
        has the column when one step has an arrival.
        """
        tensor, ints, count_call, led = self.tensor, self.ints, self.count_call, self.ledger
        bax = self.batch_axis
        tok, smp, sq, t0, last = self.tokens, self.samples, self.seq_sq, None, self.step
        dt, step, tokens, samples, seq_sq, spans, records = [], [], [], [], [], [], []
        arr, arr_us = getattr(self, "arrival", None), []  # the last backward's time stamp
        pop = queue.popleft

        def add(t, n, more_tok, more_smp, more_sq):  # one step into the batch's columns
            nonlocal t0, arr
            if t0 is None:
                t0 = t
            dt.append(int((t - t0) * 1e6 + 0.5))
            arr_us.append(arr and int((t - arr) * 1e6 + 0.5))  # None: none (never 0.0)
            arr = None
            step.append(n)
            tokens.append(more_tok)
            samples.append(more_smp)
            seq_sq.append(more_sq)
            if self.waiting:
                self._release(n, more_tok, more_smp, records)
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
                    arr = item[0] or None  # 0.0: not stamped
                    if what == "step":  # the backward clock: this call is a step
                        arr = None  # its own time: no arrival apart from the step
                        last += 1
                        add(item[0], last, tok, smp, sq)
                    if what in ("step", "kept"):  # counted now, or kept with the call
                        tok = smp = sq = 0
                elif item == FORGET:
                    tok = smp = sq = 0
                    arr = None
                else:
                    led.marker(item)
            elif kind is list:  # [args, kwargs] of a root call
                more_tok, more_smp, more_sq = count_call(*item)
                tok, smp, sq = tok + more_tok, smp + more_smp, sq + more_sq
            elif kind is dict:
                (self.waiting if item.pop("await_step", False) else records).append(item)
            elif kind is Fallback:  # backward() is the clock from now on (backward.py)
                arr = None
                last = led.fall_back(item, last, add, records)
            elif isinstance(item, tensor):  # a tensor subclass
                more_tok, more_smp, more_sq = count_call((item,), None)
                tok, smp, sq = tok + more_tok, smp + more_smp, sq + more_sq
        led.poll(records)
        self.tokens, self.samples, self.seq_sq, self.step = tok, smp, sq, last
        self.arrival = arr  # a backward whose step comes in the next flush
        batch = None
        if step:
            batch = {"v": 1, "k": "steps", "rank": self.rank, "t0": t0, "dt_us": dt,
                     "step": step, "tokens": tokens, "samples": samples,
                     "seq_sq": seq_sq}  # fmt: skip
            if arr_us.count(None) < len(arr_us):
                batch["arr_us"] = arr_us
        return batch, self._spans(spans), records

    def _release(self, step: int, tokens: int, samples: int, records: list[dict]) -> None:
        """Send the records that waited for ``step`` (or an earlier one) with its tokens and
        samples (null for an earlier step's record, or a count of 0)."""
        for rec in list(self.waiting):
            if rec.get("step", 0) <= step:
                own = rec.get("step") == step
                rec["tokens"] = tokens if own and tokens else None
                rec["samples"] = samples if own and samples else None
                records.append(rec)
                self.waiting.remove(rec)

    def pending(self, last: bool) -> bool:
        """Whether something waits to go out with no item queued: device losses whose copies
        may have completed, or, at the last flush, records and losses still held."""
        led = self.ledger
        return bool(led.pending or (last and (self.waiting or led.held)))

    def release_all(self) -> list[dict]:
        """The run ends: the records still waiting for their step (sent without tokens or
        samples), and
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
