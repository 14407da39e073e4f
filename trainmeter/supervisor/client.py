"""Talk to a running supervisor over its socket: one-shot requests and a snapshot stream."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator


def request(path: str, cmd: str, timeout: float = 10.0, **fields) -> dict:
    """Send ``{"ctl": "request", "cmd": cmd, ...}`` and return the reply.

    Raises:
        OSError: the supervisor is unreachable.
        RuntimeError: the supervisor answered with an error.
    """
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(path)
        s.sendall((json.dumps({"ctl": "request", "cmd": cmd, **fields}) + "\n").encode())
        reply = json.loads(_read_line(s))
    if not reply.get("ok"):
        raise RuntimeError(reply.get("error", "supervisor refused the request"))
    return reply


def subscribe(path: str, hz: float = 4.0) -> tuple[socket.socket, Iterator[dict]]:
    """Open a snapshot stream: returns the socket (close it to stop) and an iterator of
    ``{"snapshot", "points", "full"}`` messages."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    s.sendall((json.dumps({"ctl": "subscribe", "hz": hz}) + "\n").encode())
    return s, _messages(s)


def _messages(s: socket.socket) -> Iterator[dict]:
    buf = b""
    while True:
        try:
            chunk = s.recv(1 << 16)
        except OSError:
            return
        if not chunk:
            return
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for line in lines:
            if line.strip():
                yield json.loads(line)


def _read_line(s: socket.socket) -> bytes:
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = s.recv(1 << 16)
        if not chunk:
            break
        buf += chunk
    return buf
