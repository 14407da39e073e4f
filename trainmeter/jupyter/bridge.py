"""Supervisor -> widget: a daemon thread that follows the snapshot stream and updates a widget.

The stream gives a full timeline first, then deltas; the bridge forwards snapshots (a trait,
a few times a second) and new chart points (custom messages), and refreshes the ``history``
trait every ``HISTORY_EVERY_S`` so a re-rendered or reopened view shows the whole chart.

The bridge's own :class:`Timeline` has the supervisor's bounds (2000 points per series, thinned
by min/max buckets, and 128 series), so the kernel's memory stays bounded however long the run
and however far the stream lags (docs/spec.md "The chart timeline", "Bounds on an update").
"""

from __future__ import annotations

import socket
import sys
import threading
import time

from trainmeter.core.timeline import Timeline
from trainmeter.supervisor import client

HISTORY_EVERY_S = 5.0
STOP_JOIN_S = 0.5  # stop() waits this long for the thread at most


class Bridge:
    """Follow ``socket_path``'s snapshots into ``widget`` until :meth:`stop`.

    Args:
        socket_path: the supervisor's socket.
        widget: a :class:`trainmeter.jupyter.widget.TrainmeterWidget` (or anything with
            ``update``, ``push_points`` and ``set_history``).
        hz: snapshot pushes per second at most.
    """

    def __init__(self, socket_path: str, widget, hz: float = 4.0) -> None:
        self.widget = widget
        self.timeline = Timeline()
        self.snapshot: dict | None = None
        self._history_at = 0.0
        self._sock: socket.socket | None = None
        self._stopped = threading.Event()
        # The thread connects, not the cell: a paused supervisor whose listen queue is full
        # would hold a connect() (and the training cell with it) indefinitely.
        self._thread = threading.Thread(target=self._loop, args=(socket_path, hz),
                                        name="trainmeter-bridge", daemon=True)  # fmt: skip
        self._thread.start()

    def _loop(self, socket_path: str, hz: float) -> None:
        try:
            self._sock, messages = client.subscribe(socket_path, hz)
            if self._stopped.is_set():  # stop() came while connecting
                self._close()
                return
            for msg in messages:
                if self._stopped.is_set():
                    return
                self._apply(msg)
        except Exception as exc:  # no supervisor, a closed kernel comm, a bad message
            if not self._stopped.is_set():
                print(f"[trainmeter] widget updates stopped: {exc!r}", file=sys.stderr)

    def _close(self) -> None:
        sock = self._sock
        if sock is None:
            return
        try:
            sock.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked in recv
        except OSError:
            pass
        try:
            sock.close()
        except OSError:
            pass

    def _apply(self, msg: dict) -> None:
        points = msg.get("points") or {}
        if msg.get("full"):
            self.timeline = Timeline()
        for name, (xs, ys) in (points.get("series") or {}).items():
            for x, y in zip(xs, ys, strict=True):
                self.timeline.append(name, x, y)
        self.snapshot = msg.get("snapshot")
        now = time.monotonic()
        if msg.get("full") or now - self._history_at > HISTORY_EVERY_S:
            self._history_at = now
            self.widget.set_history(self.timeline.full())
        elif points.get("series"):
            self.widget.push_points(self.timeline.seq, points["series"])
        if self.snapshot is not None:
            self.widget.update(self.snapshot)

    def stop(self, final: dict | None = None, history: dict | None = None) -> None:
        """Stop following; show ``final`` (the segment's last snapshot) and ``history`` (the
        supervisor's full timeline, which has every point even if the stream lagged)."""
        self._stopped.set()
        self._close()
        # Bounded: a thread still connecting to a paused supervisor is left to finish alone.
        self._thread.join(timeout=STOP_JOIN_S)
        self.widget.set_history(history if history is not None else self.timeline.full())
        if final is not None:
            self.widget.update(final)
