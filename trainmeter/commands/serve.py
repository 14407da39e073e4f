"""What ``tm`` and ``tm attach`` serve beside a live run: the dashboard page on loopback
(:mod:`trainmeter.web.server`) and, with ``tm --prometheus``, the metrics endpoint
(:mod:`trainmeter.web.prometheus`).

Each is a view, never a reason not to run: one that cannot start is one line on stderr and
the run goes on without it. :class:`RunViews` hands both to the supervisor's launcher
(``supervisor.launcher.Views``), so the supervisor itself imports no web code.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from trainmeter.supervisor.launcher import Views
from trainmeter.supervisor.live import Live
from trainmeter.web import DEFAULT_PORT


def open_page(live: Live, web: bool, port: int):
    """The dashboard page for ``live`` (``tm`` and ``tm attach``): None without ``web`` or when
    it cannot start (one line on stderr). End it with :func:`close_page` once the run is closed."""
    return _start_page(live, port) if web else None


def close_page(live: Live, page=None) -> None:
    """Send open pages the final state (``run_end`` is written) and the stream's end, then wake
    ``live``'s subscribers for good."""
    if page is not None:
        page.close()
    live.shutdown()


def _start_page(live: Live, port: int):
    """The dashboard page, or None (after one line on stderr) when it cannot start."""
    try:
        from trainmeter.web.server import start_page

        return start_page(live, port)
    except Exception as exc:  # the page is a view: never a reason not to run the command
        print(f"[trainmeter] no dashboard page ({exc!r}); the run goes on", file=sys.stderr)
        return None


def _start_metrics(live: Live, address: tuple[str, int]):
    """The Prometheus endpoint, or None (after one line on stderr) when it cannot start."""
    from trainmeter.supervisor.store import job_facts
    from trainmeter.web.prometheus import start_exporter

    try:
        job = job_facts(os.environ) or {}
        return start_exporter(live.snapshot, *address, job_id=job.get("id"))
    except OSError as exc:  # a port taken: the metrics are a view, never a reason not to run
        print(f"[trainmeter] no Prometheus endpoint on {address[0]}:{address[1]} "
              f"({exc.strerror or exc}); the run goes on", file=sys.stderr)  # fmt: skip
        return None


class RunViews(Views):
    """``tm``'s views of its run: the page (with ``web``, on 127.0.0.1 from ``port`` or the
    next free port above it) and the Prometheus endpoint (``prometheus``: (host, port)). The
    bound addresses are in the start line; the endpoint's is also in the run's options
    (``prometheus``)."""

    def __init__(self, web: bool = True, port: int = DEFAULT_PORT,
                 prometheus: tuple[str, int] | None = None) -> None:  # fmt: skip
        self.web, self.port, self.prometheus = web, port, prometheus
        self.page = None
        self.metrics = None

    def start(self, live: Live) -> dict[str, Any]:
        if self.prometheus:
            self.metrics = _start_metrics(live, self.prometheus)
        return {"prometheus": self.metrics.address} if self.metrics is not None else {}

    def opened(self, live: Live) -> str:
        self.page = open_page(live, self.web, self.port)
        url = f" · dashboard {self.page.url}" if self.page is not None else ""
        return url + (f" · prometheus {self.metrics.url}" if self.metrics is not None else "")

    def close(self) -> None:
        if self.metrics is not None:
            self.metrics.close()
        if self.page is not None:
            self.page.close()
