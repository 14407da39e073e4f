"""The supervisor's local socket: agents send records, the kernel sends commands, viewers
subscribe to snapshots.

A Unix stream socket in a private (0700) directory. Each connection's first line says what it
is: ``{"ctl": "agent", ...}`` (then record lines, and ``{"ctl": "sync", "id": n}`` barriers
answered with ``{"ack": n}``), ``{"ctl": "subscribe"}`` (then the server pushes
``{"snapshot": ..., "points": ...}`` lines at most ``SUBSCRIBE_HZ`` times a second), or
``{"ctl": "request", "cmd": ...}`` (one reply line, then close). A malformed record is counted
and noted once per connection; it never stops the connection.
"""

from __future__ import annotations

import json
import os
import socketserver
import tempfile
import threading
from collections.abc import Callable
from typing import Any

from trainmeter.core.records import RecordError, decode_wire
from trainmeter.supervisor.live import Live

SUBSCRIBE_HZ = 4.0  # snapshot pushes per second at most (iopub allows far more; people read ~4/s)
MAX_LINE = 1 << 20


def private_socket_path() -> str:
    """A fresh socket path inside a new directory only this user can enter (mode 0700)."""
    return os.path.join(tempfile.mkdtemp(prefix="trainmeter-"), "supervisor.sock")


class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """Serves one :class:`Live` on ``path``.

    Args:
        path: socket path (its directory should be private).
        live: the run state the connections feed and read.
        commands: extra request handlers, ``name -> fn(request_dict) -> reply_dict``.
    """

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, path: str, live: Live, commands: dict[str, Callable] | None = None):
        self.live = live
        self.commands = commands or {}
        super().__init__(path, _Handler)
        os.chmod(path, 0o600)

    def serve_in_thread(self) -> threading.Thread:
        t = threading.Thread(target=self.serve_forever, name="trainmeter-ingest", daemon=True)
        t.start()
        return t


class _Handler(socketserver.StreamRequestHandler):
    server: Server

    def handle(self) -> None:
        first = self._read_json()
        if not isinstance(first, dict):
            return
        kind = first.get("ctl")
        try:
            if kind == "agent":
                self._agent(first)
            elif kind == "subscribe":
                self._subscribe(float(first.get("hz") or SUBSCRIBE_HZ))
            elif kind == "request":
                self._send(self._request(first))
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _read_json(self) -> Any:
        line = self.rfile.readline(MAX_LINE)
        if not line:
            return None
        try:
            return json.loads(line)
        except ValueError:
            return None

    def _send(self, obj: dict) -> None:
        self.wfile.write((json.dumps(obj, separators=(",", ":")) + "\n").encode())
        self.wfile.flush()

    def _agent(self, hello: dict) -> None:
        live = self.server.live
        with live.cond:
            live.agents_connected += 1
            live.agents_seen += 1
        try:
            self._agent_lines(live, hello)
        finally:
            with live.cond:
                live.agents_connected -= 1

    def _agent_lines(self, live: Live, hello: dict) -> None:
        bad = 0
        for line in self.rfile:
            if line.startswith(b'{"ctl"'):
                msg = json.loads(line)
                if msg.get("ctl") == "sync":
                    self._send({"ack": msg.get("id")})
                continue
            try:
                live.ingest(decode_wire(line))
            except RecordError as exc:
                bad += 1
                if bad == 1:
                    live.note(f"dropped a malformed record from pid {hello.get('pid')}: {exc}")

    def _subscribe(self, hz: float) -> None:
        live, version, seq, run_id = self.server.live, -1, -1, None
        period = 1.0 / max(0.1, min(hz, 20.0))
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
        handler = self.server.commands.get(cmd)
        if handler is None:
            return {"ok": False, "error": f"unknown command {cmd!r}"}
        try:
            return {"ok": True, **(handler(msg) or {})}
        except Exception as exc:  # a bad request must not take the supervisor down
            return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
