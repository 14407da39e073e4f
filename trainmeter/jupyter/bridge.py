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
import threading
import time

from trainmeter.core.timeline import Timeline
from trainmeter.supervisor import client

HISTORY_EVERY_S = 5.0


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
        self._sock, self._messages = client.subscribe(socket_path, hz)
        self._thread = threading.Thread(target=self._loop, name="trainmeter-bridge", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        try:
            for msg in self._messages:
                self._apply(msg)
        except Exception as exc:  # a closed kernel comm or a bad message: stop quietly
            print(f"[trainmeter] widget updates stopped: {exc!r}")

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
        try:
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked in recv
            self._sock.close()
        except OSError:
            pass
        self._thread.join(timeout=2.0)
        self.widget.set_history(history if history is not None else self.timeline.full())
        if final is not None:
            self.widget.update(final)
