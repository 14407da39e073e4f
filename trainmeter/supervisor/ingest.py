"""The supervisor's local socket: agents send records, the kernel sends commands, viewers
subscribe to snapshots.

A Unix stream socket in a private (0700) directory. Each connection's first line says what it
is: ``{"ctl": "agent", "pid", "rank", "world_size", ...}`` (then record lines, and
``{"ctl": "sync", "id": n}`` barriers answered with ``{"ack": n}``), ``{"ctl": "subscribe"}``
(then the server pushes ``{"snapshot": ..., "points": ...}`` lines at most ``SUBSCRIBE_HZ``
times a second), or ``{"ctl": "request", "cmd": ...}`` (one reply line, then close).

The socket is a boundary (docs/reliability.md "The socket"): whatever a same-user process
sends, the supervisor prints no traceback, holds at most ``MAX_LINE`` bytes of a line, and
counts what it refuses (``Live.count_drop``: a ``dropped`` record, source ``supervisor``):

- a line longer than ``MAX_LINE`` ("line too long"), read to its newline, never held whole;
- a record that is not valid ("malformed record"), or a control line that is not
  ("malformed control line");
- a kind only the supervisor writes ("kind not allowed from an agent": :data:`SUPERVISOR_KINDS`,
  and ``dropped`` with a source other than ``agent``);
- a record claiming another rank than its connection's hello ("rank differs from hello"),
  or a connection whose hello is outside the world ("hello rank outside the world": not
  ``0 <= rank < world_size``, or beyond ``$WORLD_SIZE`` of the job when it is set);
- a request that changes the run from any process but the one that launched the supervisor
  ("control request from another process", and ``{"ok": false, "error"}``).

A connection reading faster than ``RATE_BYTES`` or ``RATE_LINES`` a second is paused (the
socket's buffer fills and the sender waits or sheds, counting, on its side): nothing is
dropped for rate here. At most ``MAX_CONNECTIONS`` are served at once ("too many
connections"), so the socket holds at most ``MAX_CONNECTIONS x MAX_LINE`` bytes of lines.
"""

from __future__ import annotations

import json
import math
import os
import select
import selectors
import socket
import socketserver
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from trainmeter.core import strict_json
from trainmeter.core.records import RecordError, Steps, decode_batch, decode_wire
from trainmeter.supervisor.live import Live
from trainmeter.supervisor.store import job_world_size

SUBSCRIBE_HZ = 4.0  # snapshot pushes per second at most (iopub allows far more; people read ~4/s)
MAX_LINE = 1 << 20  # bytes of one line, its newline included
RATE_BYTES = 64 << 20  # per connection and second, at most (then it is paused, not cut)
RATE_LINES = 500_000  # per connection and second, at most
RATE_SLICE_S = 0.1  # the rate is held over slices this long
MAX_CONNECTIONS = 256  # served at once (each holds a thread and up to MAX_LINE bytes)
SUPERVISOR_KINDS = frozenset(
    ("run_start", "run_end", "segment_start", "segment_end", "gpu_devices", "gpu", "checkpoint")
)
READ_ONLY = frozenset(("ping", "snapshot"))  # requests any process may send; others: the launcher
NOTE_CHARS = 200  # of a refused line's reason quoted in a note


def private_socket_path() -> str:
    """A fresh socket path inside a new directory only this user can enter (mode 0700)."""
    return os.path.join(tempfile.mkdtemp(prefix="trainmeter-"), "supervisor.sock")


def peer_pid(sock: socket.socket) -> int | None:
    """The pid of the process at the other end of a Unix socket (Linux ``SO_PEERCRED``), or
    None where the platform does not say."""
    try:
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except (AttributeError, OSError):
        return None
    return struct.unpack("3i", creds)[0]


class PromptShutdown:
    """A ``socketserver`` server mixin (listed before the server class) whose
    :meth:`serve_forever` waits on its socket and on a pipe that :meth:`shutdown` writes to:
    no polling interval, so stopping takes no time where socketserver's own loop looks for a
    shutdown request every ``poll_interval`` (0.5 s by default). :meth:`accept_one` handles one
    connection; a subclass may wrap it."""

    def __init__(self, *args, **kwargs) -> None:
        self._stopping = False
        self._stopped = threading.Event()
        self._stopped.set()  # until serve_forever runs
        self._wake_r, self._wake_w = os.pipe()
        super().__init__(*args, **kwargs)  # a bind that fails calls server_close: pipe closed

    def serve_forever(self, poll_interval: float | None = None) -> None:
        """Accept connections until :meth:`shutdown` (``poll_interval``: ignored unless given;
        nothing here needs one)."""
        self._stopped.clear()
        try:
            if self._stopping:  # shut down before this thread began
                return
            with selectors.DefaultSelector() as sel:
                sel.register(self, selectors.EVENT_READ)
                sel.register(self._wake_r, selectors.EVENT_READ)
                while not self._stopping:
                    ready = sel.select(poll_interval)
                    if self._stopping:
                        break
                    if any(key.fileobj is self for key, _ in ready):
                        self.accept_one()
        finally:
            self._stopped.set()

    def accept_one(self) -> None:
        self._handle_request_noblock()

    def shutdown(self) -> None:
        """Stop :meth:`serve_forever` and wait until it has returned (at once: it is woken)."""
        self._stopping = True
        if self._wake_w >= 0:  # -1: closed already (server_close), the loop has ended
            os.write(self._wake_w, b"x")
        self._stopped.wait()

    def server_close(self) -> None:
        super().server_close()
        for fd in (self._wake_r, self._wake_w):
            if fd >= 0:
                os.close(fd)
        self._wake_r = self._wake_w = -1  # never written again: the number may be reused


class Server(PromptShutdown, socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """Serves one :class:`Live` on ``path``; stopped at once (:class:`PromptShutdown`).

    Args:
        path: socket path (its directory should be private).
        live: the run state the connections feed and read.
        commands: extra request handlers, ``name -> fn(request_dict) -> reply_dict``.
        controller: the pid whose requests may change the run (every command but
            :data:`READ_ONLY`): the kernel for a notebook's supervisor; default this process.
            Where the platform gives no peer pid, any process may.
    """

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, path: str, live: Live, commands: dict[str, Callable] | None = None,
                 controller: int | None = None) -> None:  # fmt: skip
        self.live = live
        self.commands = commands or {}
        self.controller = os.getpid() if controller is None else controller
        self.world = job_world_size(os.environ)
        self._said: set[str] = set()
        self._lock = threading.Lock()
        self._open = 0  # connections being served
        self._accepting = threading.Lock()  # held from a connection's accept to its count
        super().__init__(path, _Handler)
        os.chmod(path, 0o600)

    def serve_in_thread(self) -> threading.Thread:
        self._stopped.clear()  # before the thread runs: shutdown() waits for its loop
        t = threading.Thread(target=self.serve_forever, name="trainmeter-ingest", daemon=True)
        t.start()
        return t

    def accept_one(self) -> None:
        with self._accepting:  # see pending()
            super().accept_one()

    def pending(self) -> bool:
        """Whether a connection waits in the listening socket's backlog, not accepted yet
        (an agent that connected, sent its lines and exited before this loop woke): the
        end-of-run drain reads it too. Taken with the accept lock, so a connection is always
        either here or counted as opening (``Live.opening``)."""
        with self._accepting:
            try:
                return bool(select.select([self.socket], [], [], 0)[0])
            except (OSError, ValueError):  # closed
                return False

    def process_request(self, request, client_address) -> None:
        """Count the connection as opening before its thread starts, so the end-of-run
        drain (launcher._drain_agents) waits for an agent whose hello is not read yet.
        Past ``MAX_CONNECTIONS`` open at once, a new one is closed at once and counted."""
        with self._lock:
            full = self._open >= MAX_CONNECTIONS
            self._open += 0 if full else 1
        if full:
            note = f"refused a connection: {MAX_CONNECTIONS} are open"
            self.live.count_drop("too many connections", note=note)
            self.shutdown_request(request)
            return
        with self.live.cond:
            self.live.opening += 1
            self.live.cond.notify_all()
        super().process_request(request, client_address)

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._lock:
                self._open -= 1

    def handle_error(self, request, client_address) -> None:
        """A handler that raised: counted, one line on stderr per kind of error, no traceback
        in the training terminal (socketserver's default prints one)."""
        exc = sys.exc_info()[1]
        if isinstance(exc, (BrokenPipeError, ConnectionResetError, TimeoutError)):
            return  # the other end went away: nothing was lost on this side
        what = type(exc).__name__
        try:
            self.live.count_drop(
                f"handler error: {what}",
                note=f"a socket connection failed: {what}: {exc}"[:NOTE_CHARS],
            )
        except Exception:  # the run's log or engine is what failed: the line below still says it
            pass
        if what not in self._said:
            self._said.add(what)
            print(f"[trainmeter] a socket connection failed ({what}); counted, the run goes on",
                  file=sys.stderr)  # fmt: skip


class _Handler(socketserver.StreamRequestHandler):
    server: Server

    def handle(self) -> None:
        self._slice = (time.monotonic(), 0, 0)  # start, bytes, lines of the rate's slice
        live = self.server.live
        try:
            head = next(self._lines(), b"")
            first = _json(head)
            if isinstance(first, dict) and first.get("ctl") == "agent":
                with live.cond:  # an agent from now on, before it stops opening
                    live.agents_connected += 1
                    live.agents_seen += 1
        finally:
            with live.cond:
                live.opening -= 1
                live.cond.notify_all()  # the end-of-run drain waits on it
        kind = first.get("ctl") if isinstance(first, dict) else None
        if kind not in ("agent", "subscribe", "request"):
            if head.strip():  # a connection that sent nothing (a port check) is no loss
                live.count_drop("malformed first line",
                                note="closed a connection whose first line is not a hello, a "
                                     "subscribe or a request")  # fmt: skip
            return
        try:
            if kind == "agent":
                self._agent(first)
            elif kind == "subscribe":
                self._subscribe(_hz(first.get("hz")))
            elif kind == "request":
                self._send(self._request(first))
        except (BrokenPipeError, ConnectionResetError):
            pass

    # -- lines in -------------------------------------------------------------------------------
    def _lines(self) -> Iterator[bytes]:
        """Each line of at most ``MAX_LINE`` bytes; a longer one is read to its newline a
        ``MAX_LINE`` at a time, counted, and skipped. Holds the connection's rate."""
        rfile, live = self.rfile, self.server.live
        while True:
            line = rfile.readline(MAX_LINE)
            if not line:
                return
            self._pace(len(line))
            live.lines_in += 1
            if len(line) == MAX_LINE and not line.endswith(b"\n"):
                while len(line) == MAX_LINE and not line.endswith(b"\n"):
                    line = rfile.readline(MAX_LINE)
                    self._pace(len(line))
                    live.lines_in += 1  # progress, for the drain: bytes still arrive
                live.count_drop("line too long", note=f"a line over {MAX_LINE} bytes was dropped")
                continue
            yield line

    def _pace(self, nbytes: int) -> None:
        """Hold the rate: once a slice's bytes or lines are used up, wait out the slice."""
        start, b, n = self._slice
        b, n = b + nbytes, n + 1
        if b >= RATE_BYTES * RATE_SLICE_S or n >= RATE_LINES * RATE_SLICE_S:
            rest = RATE_SLICE_S - (time.monotonic() - start)
            if rest > 0:
                time.sleep(rest)  # backpressure: the socket's buffer fills, the sender waits
            start, b, n = time.monotonic(), 0, 0
        self._slice = (start, b, n)

    def _send(self, obj: dict) -> None:
        # strict: a figure that overflowed is null, as on the page (core/strict_json.py)
        self.wfile.write((strict_json.dumps(obj, separators=(",", ":")) + "\n").encode())
        self.wfile.flush()

    # -- agents ---------------------------------------------------------------------------------
    def _agent(self, hello: dict) -> None:
        live = self.server.live
        peer = peer_pid(self.request)
        with live.cond:
            live.agent_peers.append(peer)
        try:  # counted in agents_connected by handle()
            who = _Agent(hello, self.server.world)
            if who.refused:
                self._refuse_all(hello)
            else:
                self._agent_lines(live, who)
        finally:
            with live.cond:
                live.agents_connected -= 1
                live.agent_peers.remove(peer)
                live.cond.notify_all()  # every line of it read: the drain may end now

    def _refuse_all(self, hello: dict) -> None:
        live = self.server.live
        cap = f" (the job's $WORLD_SIZE is {self.server.world})" if self.server.world else ""
        note = (f"refused an agent whose hello says rank {hello.get('rank')!r} of "
                f"{hello.get('world_size')!r}{cap}"[:NOTE_CHARS])  # fmt: skip
        for line in self._lines():
            if line.startswith(b'{"ctl"'):
                self._control(live, line)  # a sync is answered: the agent is never held
            else:
                live.count_drop("hello rank outside the world", _records_in(line), note=note)

    def _agent_lines(self, live: Live, who: _Agent) -> None:
        for line in self._lines():
            if line.startswith(b'{"ctl"'):
                self._control(live, line)
                continue
            if live.cutting:  # the run is closing: count what is left, never apply it
                live.count_drop("cut at end of run", _records_in(line))
                continue
            try:
                recs = decode_batch(line)  # a steps batch stays columns (records.Steps)
            except (RecordError, RecursionError) as exc:  # RecursionError: JSON nested too deep
                live.count_drop("malformed record",
                                note=f"dropped a malformed record from pid {who.pid}: "
                                     f"{exc}"[:NOTE_CHARS])  # fmt: skip
                continue
            why = who.refuse(recs)
            if why is not None:
                live.count_drop(why, len(recs), note=f"pid {who.pid}: {why}"[:NOTE_CHARS])
                continue
            live.ingest(recs)

    def _control(self, live: Live, line: bytes) -> None:
        msg = _json(line)
        if isinstance(msg, dict) and msg.get("ctl") == "sync" and _is_int(msg.get("id")):
            self._send({"ack": msg["id"]})
        else:
            live.count_drop("malformed control line")

    # -- viewers and requests -------------------------------------------------------------------
    def _subscribe(self, hz: float) -> None:
        live, version, seq, run_id = self.server.live, -1, -1, None
        period = 1.0 / hz
        while not live.closed:
            now_version = live.wait_change(version, timeout=1.0)
            if now_version == version:
                continue
            if live.run_id != run_id:  # a new run: its timeline starts over, send it whole
                run_id, seq = live.run_id, -1
            update = live.update(seq)  # snapshot and points under one lock: they agree
            self._send(update)
            version, seq = now_version, update["points"]["seq"]
            threading.Event().wait(period)

    def _request(self, msg: dict) -> dict:
        cmd = msg.get("cmd")
        handler = self.server.commands.get(cmd) if isinstance(cmd, str) else None
        if handler is None:
            self.server.live.count_drop("unknown request",
                                        note=f"refused the request {str(cmd)[:40]!r}")  # fmt: skip
            return {"ok": False, "error": f"unknown command {str(cmd)[:40]!r}"}
        if cmd not in READ_ONLY and not self._from_controller():
            self.server.live.count_drop(
                "control request from another process",
                note=f"refused {cmd!r} from process {peer_pid(self.request)}: only the "
                     f"process that started the supervisor may change the run",
            )  # fmt: skip
            return {"ok": False, "error": f"{cmd!r} is accepted only from the process that "
                                          "started this supervisor"}  # fmt: skip
        try:
            return {"ok": True, **(handler(msg) or {})}
        except Exception as exc:  # a bad request must not take the supervisor down
            return {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:NOTE_CHARS]}

    def _from_controller(self) -> bool:
        pid = peer_pid(self.request)
        return pid is None or pid == self.server.controller


class _Agent:
    """One agent connection: its pid and rank, fixed by its hello (one re-hello allowed, from
    rank 0 of a world of 1 to the rank ``torch.distributed`` gave it: agent/runtime.py
    ``adopt_rank``)."""

    def __init__(self, hello: dict, world: int | None) -> None:
        self.world_cap = world
        self.pid = hello.get("pid")
        self.rank, self.world = hello.get("rank", 0), hello.get("world_size", 1)
        self.refused = not self._valid(self.rank, self.world)
        self.adopted = False

    def _valid(self, rank: Any, world: Any) -> bool:
        if not (_is_int(rank) and _is_int(world) and 0 <= rank < world):
            return False
        cap = self.world_cap
        return cap is None or world <= cap

    def refuse(self, recs: list[dict] | Steps) -> str | None:
        """Why ``recs`` (one line's records) may not come from this connection, or None.
        A batch (more than one record) is one rank's steps or spans: its first says."""
        if isinstance(recs, Steps):  # one rank's steps (validated: an int rank)
            return None if recs.rank == self.rank else "rank differs from hello"
        rec = recs[0] if recs else {}
        kind = rec.get("k")
        if kind in SUPERVISOR_KINDS or (kind == "dropped" and rec.get("source") != "agent"):
            return "kind not allowed from an agent"
        if kind == "agent_hello":
            return self._rehello(rec)
        if kind == "dropped" and rec.get("pid") not in (None, self.pid):
            return "pid differs from hello"
        rank = rec.get("rank")
        if rank is not None and rank != self.rank:
            return "rank differs from hello"
        return None

    def _rehello(self, rec: dict) -> str | None:
        if rec["pid"] != self.pid:
            return "pid differs from hello"
        rank, world = rec["rank"], rec["world_size"]
        if (rank, world) == (self.rank, self.world):
            return None
        if (self.rank, self.world) != (0, 1) or self.adopted or not self._valid(rank, world):
            return "rank differs from hello"
        self.rank, self.world, self.adopted = rank, world, True
        return None


def _records_in(line: bytes) -> int:
    """Records one agent line holds (a batch's rows), 1 when it does not parse."""
    try:
        return len(decode_wire(line)) or 1
    except (RecordError, RecursionError):
        return 1


def _json(line: bytes) -> Any:
    try:
        return json.loads(line)
    except (ValueError, RecursionError):
        return None


def _is_int(x: Any) -> bool:
    return type(x) is int


def _hz(value: Any) -> float:
    """A subscriber's asked rate, within 0.1 to 20 a second (``SUBSCRIBE_HZ`` when unusable)."""
    try:
        hz = float(value or SUBSCRIBE_HZ)
    except (TypeError, ValueError, OverflowError):
        hz = SUBSCRIBE_HZ
    return max(0.1, min(hz, 20.0)) if math.isfinite(hz) else SUBSCRIBE_HZ
