"""Serve the live dashboard of one :class:`~trainmeter.supervisor.live.Live` on loopback.

Standard library only (``http.server``): the page is a few static files plus two JSON views of
the run, so a web framework would add a dependency and buy nothing. One daemon thread accepts
connections and one daemon thread serves each request (an open event stream holds its thread).

Everything lives under ``/t/<token>/`` where the token is ``secrets.token_urlsafe(24)``:

- ``/t/<token>/``: the HTML page (a constant: no string from the run is put into HTML; the
  front-end writes everything through ``textContent``);
- ``page.js``, ``page.css``: the bundle in ``trainmeter/static`` (``npm run build``);
  ``host.css``: the page's own frame (margins, the status line);
- ``state``: ``{"snapshot": ..., "history": {"seq", "series"}}`` (the widget's traits);
- ``events``: Server-Sent Events: ``full`` ``{snapshot, history}`` first, then ``delta``
  ``{snapshot, points: {seq, series}}`` at most ``EVENTS_HZ`` times a second when something
  changed, a comment every ``PING_S`` seconds, and when the run is over one last ``delta`` and
  an ``end`` event, then the stream closes.

Security rules (the page shows what the training run reports, so it stays private): the
socket is bound to 127.0.0.1 only; a request whose path lacks the token, or whose ``Host`` is
not a loopback name with this port (DNS rebinding), gets 403; methods other than GET and HEAD
get 405; every response says ``no-store``, ``nosniff``, ``no-referrer`` (the token is in the
URL) and carries a Content-Security-Policy that runs only same-origin scripts and styles.
"""

from __future__ import annotations

import errno
import hmac
import html
import secrets
import socketserver
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from trainmeter.core import strict_json
from trainmeter.supervisor.ingest import PromptShutdown
from trainmeter.web import DEFAULT_PORT, PORT_TRIES

if TYPE_CHECKING:
    from trainmeter.supervisor.live import Live

HOST = "127.0.0.1"
STATIC = Path(__file__).resolve().parent.parent / "static"
EVENTS_HZ = 4.0  # deltas per second at most, like the socket's subscribers (ingest.SUBSCRIBE_HZ)
PING_S = 15.0  # a comment line this often keeps proxies and idle timers from closing the stream
RETRY_MS = 2000  # how long a browser waits before reconnecting a dropped stream
FINISH_WAIT_S = 1.0  # at the end of the run, wait this long at most for streams' last events
SOCKET_TIMEOUT_S = 30.0  # a client that stops reading for this long is dropped

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = (
    ("Cache-Control", "no-store"),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("Content-Security-Policy", CSP),
    ("X-Frame-Options", "DENY"),
    ("Cross-Origin-Resource-Policy", "same-origin"),
)

PAGE = b"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>trainmeter</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="page.css">
<link rel="stylesheet" href="host.css">
<script type="module" src="page.js"></script>
</head>
<body>
<p id="tm-status" class="tm-page-status" data-state="connecting" role="status">connecting</p>
<div id="app"></div>
</body>
</html>
"""

HOST_CSS = b"""body { margin: 16px; background: #ffffff; }
.tm-page-status { margin: 0 0 8px; font: 12px system-ui, -apple-system, "Segoe UI", sans-serif;
  color: #59636e; }
.tm-page-status[data-state="live"]::before { content: "\\25CF  "; color: #1a7f37; }
@media (prefers-color-scheme: dark) {
  body { background: #0d1117; }
  .tm-page-status { color: #9198a1; }
}
"""

_MISSING = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>trainmeter: front-end missing</title></head>
<body><h1>trainmeter's front-end bundle is missing</h1>
<p>{files} not found. In a source checkout run <code>npm install &amp;&amp; npm run build</code>
in the repository root and reload this page; otherwise reinstall trainmeter
(<code>pip install --force-reinstall trainmeter</code>).</p>
<p>The run goes on, and its log is written as usual.</p></body></html>
"""

_STATIC_TYPES = {
    "page.js": "text/javascript; charset=utf-8",
    "page.css": "text/css; charset=utf-8",
}


class PortsTakenError(OSError):
    """No port was free in the range tried."""


class WebServer:
    """The dashboard page for ``live``, bound on 127.0.0.1 when constructed.

    Args:
        live: the run state to show: a ``Live``, or a finished run replayed from its log
            (``trainmeter.jupyter.replay.Replayed``, ``tm view --web``), which has the same
            ``update``/``info``/``wait_change``/``closed`` and never changes.
        port: the first port to try; if it is taken, the next ones above it (``tries`` in
            all). ``0`` lets the system choose a free port.
        tries: how many ports to try.
        token: the URL's secret (default: a fresh ``secrets.token_urlsafe(24)``).
        static_dir: where ``page.js`` and ``page.css`` are.
        hz: event-stream deltas per second at most; ``ping_s``: seconds between keep-alives.

    Raises:
        PortsTakenError: every port tried is in use; OSError: another bind failure.
    """

    def __init__(self, live: Live, port: int = DEFAULT_PORT, *, tries: int = PORT_TRIES,
                 token: str | None = None, static_dir: Path | str = STATIC,
                 hz: float = EVENTS_HZ, ping_s: float = PING_S) -> None:  # fmt: skip
        self.live = live
        self.token = token or secrets.token_urlsafe(24)
        self.static_dir = Path(static_dir)
        self.period = 1.0 / max(0.1, min(hz, 20.0))
        self.ping_s = ping_s
        self.stopping = threading.Event()
        self._streams = 0
        self._streams_cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self.httpd = _bind(port, tries, self)
        self.port: int = self.httpd.server_address[1]
        self.url = f"http://{HOST}:{self.port}/t/{self.token}/"
        self.allowed_hosts = {f"127.0.0.1:{self.port}", f"localhost:{self.port}",
                              f"[::1]:{self.port}"}  # fmt: skip

    def start(self) -> WebServer:
        """Serve in a daemon thread; returns self."""
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="trainmeter-web",
                                        daemon=True)  # fmt: skip
        self._thread.start()
        return self

    def finish(self, timeout: float = FINISH_WAIT_S) -> None:
        """The run is over: every open stream sends its last delta and ``end``, then closes.
        Waits ``timeout`` seconds at most for them."""
        self.stopping.set()
        cond = getattr(self.live, "cond", None)
        if cond is not None:  # wake streams waiting for a change now rather than at their timeout
            with cond:
                cond.notify_all()
        deadline = time.monotonic() + timeout
        with self._streams_cond:
            while self._streams and (left := deadline - time.monotonic()) > 0:
                self._streams_cond.wait(left)

    def close(self) -> None:
        """Finish the streams, stop accepting and close the socket. Never raises."""
        try:
            self.finish()
            if self._thread is not None:
                self.httpd.shutdown()
            self.httpd.server_close()
        except Exception:
            pass

    @property
    def open_streams(self) -> int:
        with self._streams_cond:
            return self._streams

    @contextmanager
    def _stream_open(self) -> Iterator[None]:
        with self._streams_cond:
            self._streams += 1
        try:
            yield
        finally:
            with self._streams_cond:
                self._streams -= 1
                self._streams_cond.notify_all()

    def missing_bundle(self) -> list[str]:
        return [n for n in _STATIC_TYPES if not (self.static_dir / n).is_file()]


def start_page(live: Live, port: int = DEFAULT_PORT, *, tries: int = PORT_TRIES,
               warn: Callable[[str], None] | None = None) -> WebServer | None:  # fmt: skip
    """Start the page for ``live``; on any failure say one line through ``warn`` (default:
    stderr) and return None, so the run goes on without a page."""
    try:
        return WebServer(live, port, tries=tries).start()
    except Exception as exc:
        if isinstance(exc, PortsTakenError):
            why = exc.strerror
        else:
            why = f"cannot listen on {HOST}:{port}: {getattr(exc, 'strerror', None) or exc}"
        line = f"[trainmeter] no dashboard page ({why}); the run goes on"
        try:
            (warn or (lambda s: print(s, file=sys.stderr, flush=True)))(line)
        except Exception:
            pass
        return None


class _HTTPServer(PromptShutdown, ThreadingHTTPServer):
    """The page's HTTP server; stopped at once when the run ends (``PromptShutdown``: no
    polling interval)."""

    daemon_threads = True
    allow_reuse_address = True  # a port in TIME_WAIT from the last run is free; a listener is not
    allow_reuse_port = False  # never share a port with another listener

    def __init__(self, address: tuple[str, int], web: WebServer) -> None:
        self.web = web
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind looks the name up in DNS (getfqdn); loopback needs no lookup.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = HOST, self.server_address[1]

    def handle_error(self, request, client_address) -> None:
        pass  # a client that went away mid-response is not news; never print in the terminal


def _bind(port: int, tries: int, web: WebServer) -> _HTTPServer:
    if port == 0:
        return _HTTPServer((HOST, 0), web)
    ports = range(port, min(port + max(1, tries), 65536))
    for p in ports:
        try:
            return _HTTPServer((HOST, p), web)
        except OSError as exc:
            if exc.errno not in (errno.EADDRINUSE, errno.EACCES):
                raise
    span = f"{port}-{ports[-1]}" if len(ports) > 1 else f"{port}"
    raise PortsTakenError(errno.EADDRINUSE, f"ports {span} on {HOST} are all taken; try --port")


def to_json(obj: Any) -> bytes:
    """Strict JSON (a browser's JSON.parse refuses NaN): a non-finite float becomes null."""
    return strict_json.dumps(obj, separators=(",", ":")).encode()


def _update(live: Live, seq: int) -> tuple[dict, dict]:
    """The snapshot and the points after ``seq`` (all of them when ``seq < 0``): through
    ``Live.update`` (both under one lock) where it exists, else two calls."""
    update = getattr(live, "update", None)
    if callable(update):
        u = update(seq)
        return u["snapshot"], u["points"]
    return live.snapshot(), live.timeline_since(seq)


class _Handler(BaseHTTPRequestHandler):
    server: _HTTPServer
    protocol_version = "HTTP/1.0"  # one request per connection; a stream ends by closing
    server_version = "trainmeter"
    sys_version = ""
    timeout = SOCKET_TIMEOUT_S

    def version_string(self) -> str:
        return self.server_version

    def log_message(self, format: str, *args: Any) -> None:
        pass  # tm's terminal belongs to the training script

    def end_headers(self) -> None:
        for name, value in SECURITY_HEADERS:
            self.send_header(name, value)
        super().end_headers()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("do_"):  # any method but GET and HEAD
            return self._not_allowed
        raise AttributeError(name)

    def do_GET(self) -> None:
        self._route(head=False)

    def do_HEAD(self) -> None:
        self._route(head=True)

    # -- answers --------------------------------------------------------------------------------
    def _send(self, status: int, ctype: str, body: bytes, head: bool = False,
              headers: tuple[tuple[str, str], ...] = ()) -> None:  # fmt: skip
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _text(self, status: int, text: str, head: bool = False, **kw: Any) -> None:
        self._send(status, "text/plain; charset=utf-8", (text + "\n").encode(), head, **kw)

    def _not_allowed(self) -> None:
        if self._authorized() is not None:
            self._text(405, "method not allowed", headers=(("Allow", "GET, HEAD"),))

    def _authorized(self) -> str | None:
        """The path after ``/t/<token>`` (``""`` when it stops there), or None after a 403."""
        web = self.server.web
        host = (self.headers.get("Host") or "").strip().lower()
        parts = urlsplit(self.path).path.split("/", 3)  # "", "t", token, rest
        given = parts[2] if len(parts) > 2 and parts[1] == "t" else ""
        token_ok = hmac.compare_digest(given.encode(), web.token.encode())
        if host not in web.allowed_hosts or not token_ok:
            self._text(403, "forbidden")
            return None
        return "/" + parts[3] if len(parts) > 3 else ""

    def _route(self, head: bool) -> None:
        rest = self._authorized()
        if rest is None:
            return
        web = self.server.web
        if rest == "":  # /t/<token>: relative URLs need the slash
            self._text(302, "see /t/<token>/", head, headers=(("Location", f"/t/{web.token}/"),))
        elif rest in ("/", "/index.html"):
            missing = web.missing_bundle()
            if missing:
                files = ", ".join(html.escape(str(web.static_dir / n)) for n in missing)
                page = _MISSING.format(files=files).encode()
                self._send(503, "text/html; charset=utf-8", page, head)
            else:
                self._send(200, "text/html; charset=utf-8", PAGE, head)
        elif rest[1:] in _STATIC_TYPES:
            self._static(rest[1:], head)
        elif rest == "/host.css":
            self._send(200, "text/css; charset=utf-8", HOST_CSS, head)
        elif rest == "/state":
            snapshot, history = _update(web.live, -1)
            body = to_json({"snapshot": snapshot, "history": history})
            self._send(200, "application/json", body, head)
        elif rest == "/events":
            self._events(head)
        else:
            self._text(404, "not found", head)

    def _static(self, name: str, head: bool) -> None:
        path = self.server.web.static_dir / name
        try:
            body = path.read_bytes()
        except OSError:
            self._text(404, f"{name} is missing: the front-end bundle is not built (npm run build)",
                       head)  # fmt: skip
            return
        self._send(200, _STATIC_TYPES[name], body, head)

    # -- the event stream -----------------------------------------------------------------------
    def _events(self, head: bool) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("X-Accel-Buffering", "no")
        self.end_headers()
        if head:
            return
        web = self.server.web
        with web._stream_open():
            try:
                self._stream(web)
            except (OSError, ValueError):
                pass  # the browser went away (or timed out): nothing to tell anyone

    def _event(self, kind: str, payload: dict) -> None:
        self.wfile.write(b"event: " + kind.encode() + b"\ndata: " + to_json(payload) + b"\n\n")
        self.wfile.flush()

    def _stream(self, web: WebServer) -> None:
        live = web.live
        self.wfile.write(f"retry: {RETRY_MS}\n\n".encode())
        version = live.wait_change(-1, 0.0)  # the current version (it is never -1): no wait
        run_id = live.info().get("run_id")
        snapshot, history = _update(live, -1)
        self._event("full", {"snapshot": snapshot, "history": history})
        seq, quiet_since = history["seq"], time.monotonic()
        while True:
            ending = web.stopping.is_set() or getattr(live, "closed", False)
            now = version
            if not ending:
                now = live.wait_change(version, timeout=min(0.5, web.ping_s))
                ending = web.stopping.is_set() or getattr(live, "closed", False)
            if now == version and not ending:
                if time.monotonic() - quiet_since >= web.ping_s:
                    self.wfile.write(b": ping\n\n")
                    self.wfile.flush()
                    quiet_since = time.monotonic()
                continue
            version = live.wait_change(-1, 0.0)
            if live.info().get("run_id") != run_id:  # a new run: its timeline starts over
                run_id = live.info().get("run_id")
                snapshot, history = _update(live, -1)
                self._event("full", {"snapshot": snapshot, "history": history})
                seq = history["seq"]
            else:
                snapshot, points = _update(live, seq)
                self._event("delta", {"snapshot": snapshot, "points": points})
                seq = points["seq"]
            quiet_since = time.monotonic()
            if ending:
                self._event("end", {})
                return
            web.stopping.wait(web.period)
