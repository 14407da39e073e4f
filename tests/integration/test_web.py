"""The ``tm`` dashboard page: the loopback server against a Live fed by hand (token, Host,
methods, headers, state, the event stream, ports), then ``tm`` end to end, and the new flags."""

import http.client
import json
import re
import socket
import subprocess
import sys
import time
from urllib.parse import urlsplit

import pytest
from conftest import EXAMPLE, FIXTURES, _env, losses, read_log, run_tm

from trainmeter.core import records
from trainmeter.supervisor.live import Live
from trainmeter.web import DEFAULT_PORT, PORT_TRIES
from trainmeter.web.server import PortsTakenError, WebServer, start_page

TOKEN = "test-token-0123456789abcdefghijklmnop"


def _model():
    return records.make("model", 1.0, params=1000, embedding_params=100,
                        token_embedding_params=100, layers=2, width=8, heads=2, seq_len=4,
                        vocab=50, device="cpu")  # fmt: skip


def _steps(first, last, t0=10.0):
    out = []
    for n in range(first, last + 1):
        out.append(records.make("step", t0 + n, step=n, rank=0, tokens=40, samples=2))
        out.append(records.make("series", t0 + n, name="train_loss", value=5.0 / n, step=n))
    return out


@pytest.fixture
def live(tmp_path):
    lv = Live(tmp_path / ".trainmeter")
    lv.open_run("<b>web</b>", ["train.py"], {"budget_tokens": 1000})
    lv.ingest([records.make("agent_hello", 1.0, pid=1, rank=0, world_size=1), _model()])
    lv.ingest(_steps(1, 3))
    yield lv
    lv.close_run("ok", 0)
    lv.shutdown()


@pytest.fixture
def web(live):
    w = WebServer(live, 0, token=TOKEN, ping_s=0.3).start()
    yield w
    w.close()


def _get(web, path, method="GET", host=None, token=TOKEN, body=None):
    conn = http.client.HTTPConnection("127.0.0.1", web.port, timeout=10)
    conn.putrequest(method, f"/t/{token}/{path}" if token is not None else path, skip_host=True)
    if host != "":  # "": no Host header at all
        conn.putheader("Host", host or f"127.0.0.1:{web.port}")
    if body is not None:
        conn.putheader("Content-Length", str(len(body)))
    conn.endheaders(body)
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp, data


def test_the_page_needs_the_token(web):
    resp, page = _get(web, "")
    assert resp.status == 200 and resp.getheader("Content-Type").startswith("text/html")
    assert b"<title>trainmeter</title>" in page and b'src="page.js"' in page
    for token in ("", "wrong", TOKEN[:-1], TOKEN + "x"):
        assert _get(web, "", token=token)[0].status == 403
        assert _get(web, "state", token=token)[0].status == 403
    assert _get(web, "/", token=None)[0].status == 403
    assert _get(web, "/favicon.ico", token=None)[0].status == 403
    assert _get(web, f"/x/{TOKEN}/state", token=None)[0].status == 403
    resp, _ = _get(web, f"/t/{TOKEN}", token=None)  # no slash: relative URLs need one
    assert resp.status == 302 and resp.getheader("Location") == f"/t/{TOKEN}/"
    assert TOKEN.encode() not in _get(web, "", token="wrong")[1]


def test_a_host_that_is_not_loopback_with_this_port_is_refused(web):
    port = web.port
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", f"LOCALHOST:{port}"):
        assert _get(web, "state", host=host)[0].status == 200, host
    for host in (f"evil.example:{port}", "127.0.0.1", f"127.0.0.1:{port + 1}", "localhost",
                 f"127.0.0.1.evil.example:{port}", ""):  # fmt: skip
        assert _get(web, "state", host=host)[0].status == 403, host


def test_only_get_and_head_are_allowed(web):
    for method in ("POST", "PUT", "DELETE", "PATCH", "OPTIONS", "BREW"):
        resp, _ = _get(web, "state", method=method, body=b"{}")
        assert resp.status == 405, method
        assert resp.getheader("Allow") == "GET, HEAD"
    assert _get(web, "state", method="POST", token="wrong", body=b"")[0].status == 403
    resp, body = _get(web, "state", method="HEAD")
    assert resp.status == 200 and body == b"" and int(resp.getheader("Content-Length")) > 0


def test_every_answer_carries_the_security_headers(web):
    for path, token in (("", TOKEN), ("state", TOKEN), ("page.js", TOKEN), ("nope", TOKEN),
                        ("state", "wrong")):  # fmt: skip
        resp, _ = _get(web, path, token=token)
        assert resp.getheader("Cache-Control") == "no-store", path
        assert resp.getheader("X-Content-Type-Options") == "nosniff"
        assert resp.getheader("Referrer-Policy") == "no-referrer"
        csp = resp.getheader("Content-Security-Policy")
        assert "script-src 'self'" in csp and "default-src 'none'" in csp
        assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
        assert "frame-ancestors 'none'" in csp


def test_the_html_holds_no_string_from_the_run(web):
    _, page = _get(web, "")
    assert b"<b>" not in page and b"train.py" not in page
    assert b"<script>" not in page  # no inline script: the CSP would refuse it anyway


def test_the_bundle_is_served_with_script_and_style_types(web):
    resp, js = _get(web, "page.js")
    assert resp.status == 200 and resp.getheader("Content-Type").startswith("text/javascript")
    assert len(js) > 1000
    resp, _ = _get(web, "page.css")
    assert resp.status == 200 and resp.getheader("Content-Type").startswith("text/css")
    assert _get(web, "host.css")[0].status == 200
    assert _get(web, "../../etc/passwd")[0].status == 404
    assert _get(web, "widget.js")[0].status == 404


def test_a_missing_bundle_gives_a_clear_page(live, tmp_path):
    w = WebServer(live, 0, token=TOKEN, static_dir=tmp_path / "nothing").start()
    try:
        resp, page = _get(w, "")
        assert resp.status == 503 and b"npm run build" in page
        resp, text = _get(w, "page.js")
        assert resp.status == 404 and b"npm run build" in text
    finally:
        w.close()


def test_state_is_the_snapshot_and_the_full_history(web, live):
    resp, body = _get(web, "state")
    assert resp.status == 200 and resp.getheader("Content-Type") == "application/json"
    state = json.loads(body)
    assert state["snapshot"]["step"] == 3 and state["snapshot"]["tokens"] == 120
    assert state["snapshot"]["run"]["name"] == "<b>web</b>"  # JSON only, never HTML
    assert state["history"]["seq"] == live.timeline_since(-1)["seq"] > 0
    xs, ys = state["history"]["series"]["train_loss"]
    assert xs == [1, 2, 3] and ys == pytest.approx([5.0, 2.5, 5.0 / 3])


class _Events:
    """Reads a text/event-stream response one event at a time."""

    def __init__(self, web):
        self.conn = http.client.HTTPConnection("127.0.0.1", web.port, timeout=10)
        self.conn.request("GET", f"/t/{TOKEN}/events")
        self.resp = self.conn.getresponse()
        self.comments = 0

    def next(self):
        kind, data = None, []
        while True:
            line = self.resp.fp.readline()
            if not line:
                return None  # the stream ended
            line = line.decode().rstrip("\n")
            if line == "":
                if kind or data:
                    return kind, json.loads("\n".join(data)) if data else None
                continue
            if line.startswith(":"):
                self.comments += 1
            elif line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: "):
                data.append(line[6:])

    def close(self):
        self.conn.close()


def test_events_start_full_then_send_deltas_and_end_with_the_run(web, live):
    ev = _Events(web)
    try:
        assert ev.resp.status == 200
        assert ev.resp.getheader("Content-Type").startswith("text/event-stream")
        assert ev.resp.getheader("Cache-Control") == "no-store"
        kind, full = ev.next()
        assert kind == "full" and full["snapshot"]["step"] == 3
        assert full["history"]["series"]["train_loss"][0] == [1, 2, 3]
        t0 = time.monotonic()
        live.ingest(_steps(4, 5))
        kind, delta = ev.next()
        assert kind == "delta" and delta["snapshot"]["step"] == 5
        assert delta["points"]["seq"] > full["history"]["seq"]
        assert delta["points"]["series"]["train_loss"][0] == [4, 5]  # only the new points
        live.ingest(_steps(6, 6))
        kind, delta = ev.next()
        assert kind == "delta" and delta["snapshot"]["step"] == 6
        assert delta["points"]["series"]["train_loss"][0] == [6]
        assert time.monotonic() - t0 >= 0.2  # at most ~4 deltas a second
        web.finish()
        kind, last = ev.next()
        assert kind == "delta" and last["snapshot"]["step"] == 6
        assert ev.next() == ("end", {})
        assert ev.next() is None  # the server closed the stream
        assert web.open_streams == 0
    finally:
        ev.close()


def test_the_last_delta_has_the_closed_run(web, live):
    ev = _Events(web)
    try:
        assert ev.next()[0] == "full"
        live.close_run("ok", 0)
        web.finish()
        events = []
        while (e := ev.next()) is not None:
            events.append(e)
        assert events[-1] == ("end", {})
        assert events[-2][0] == "delta"
        assert events[-2][1]["snapshot"]["run"]["state"] == "finished"
    finally:
        ev.close()


def test_a_quiet_stream_gets_pings(web):
    ev = _Events(web)
    try:
        assert ev.next()[0] == "full"
        line = ev.resp.fp.readline()  # nothing changes: the next line is a ping (within 0.3 s)
        assert line == b": ping\n"
    finally:
        ev.close()


def test_a_taken_port_moves_to_the_next_free_one(live):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        w = WebServer(live, port, tries=5).start()
        try:
            assert port < w.port < port + 5
            assert w.url == f"http://127.0.0.1:{w.port}/t/{w.token}/"
            assert len(w.token) >= 32  # token_urlsafe(24): 192 random bits
            assert _get(w, "state", token=w.token)[0].status == 200
        finally:
            w.close()
        with pytest.raises(PortsTakenError):
            WebServer(live, port, tries=1)
        said = []
        assert start_page(live, port, tries=1, warn=said.append) is None
        assert len(said) == 1 and f"ports {port}" in said[0] and "the run goes on" in said[0]
    finally:
        taken.close()


def test_the_server_listens_on_loopback_only_with_a_fresh_token(web):
    assert web.httpd.server_address[0] == "127.0.0.1"
    a, b = WebServer(web.live, 0), WebServer(web.live, 0)
    try:
        assert a.token != b.token and a.httpd.server_address[0] == "127.0.0.1"
    finally:
        a.close()
        b.close()


# -- tm end to end ----------------------------------------------------------------------------


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_tm_serves_the_page_while_the_child_runs(workdir):
    port = _free_port()
    cmd = [sys.executable, "-m", "trainmeter.cli", "--port", str(port),
           str(FIXTURES / "tiny_train.py"), "--steps", "40", "--sleep", "0.1"]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=workdir, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        start = proc.stderr.readline()
        m = re.search(r"dashboard (http://127\.0\.0\.1:(\d+)/t/([\w-]+)/) ", start)
        assert m, start
        assert start.startswith("[trainmeter] run ") and "tiny_train.py" in start
        assert int(m.group(2)) >= port  # the port asked for, or a free one just above it
        url = m.group(1)
        deadline, snap = time.monotonic() + 120, None
        while time.monotonic() < deadline:
            conn = http.client.HTTPConnection("127.0.0.1", int(m.group(2)), timeout=10)
            conn.request("GET", urlsplit(url).path + "state")
            resp = conn.getresponse()
            assert resp.status == 200
            snap = json.loads(resp.read())["snapshot"]
            conn.close()
            if snap["step"] >= 2:
                break
            time.sleep(0.2)
        assert snap["step"] >= 2 and snap["run"]["state"] == "running"
        assert proc.poll() is None  # read while the child runs
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert len(losses(out)) == 40
    assert m.group(3) not in json.dumps(read_log(workdir))  # the token is never logged


@pytest.mark.slow
def test_no_web_prints_no_url_and_quiet_prints_nothing(workdir):
    out = run_tm(["--no-web", "--", sys.executable, "-c", "print('x')"], workdir)
    assert out.returncode == 0 and "[trainmeter] run" in out.stderr
    assert "http://" not in out.stderr and "dashboard" not in out.stderr
    out = run_tm(["-q", "--port", "0", "--", sys.executable, "-c", "print('x')"], workdir)
    assert out.returncode == 0 and out.stderr == ""


def _hold_ports(n):
    """Listen on ``n`` consecutive loopback ports; returns (first port, sockets)."""
    for _ in range(50):
        first, held = _free_port(), []
        try:
            for p in range(first, first + n):
                s = socket.socket()
                held.append(s)
                s.bind(("127.0.0.1", p))
                s.listen()
            return first, held
        except OSError:
            for s in held:
                s.close()
    pytest.skip(f"found no {n} consecutive free ports")


@pytest.mark.slow
def test_tm_runs_the_child_without_a_page_when_no_port_is_free(workdir):
    first, held = _hold_ports(PORT_TRIES)
    try:
        out = run_tm(["--port", first, "--", sys.executable, "-c", "print('ran')"], workdir)
    finally:
        for s in held:
            s.close()
    assert out.returncode == 0 and out.stdout == "ran\n"
    said = [line for line in out.stderr.splitlines() if "no dashboard page" in line]
    assert len(said) == 1 and f"ports {first}-{first + PORT_TRIES - 1}" in said[0]
    assert "http://" not in out.stderr and "[trainmeter] run " in out.stderr


# -- flags --------------------------------------------------------------------------------------


def test_the_default_port_is_documented():
    from trainmeter.commands.run import run_parser

    assert run_parser().parse_args(["x.py"]).port == DEFAULT_PORT == 8470


@pytest.mark.slow
def test_a_port_flag_typo_says_which_flag_was_meant(workdir):
    out = run_tm(["--prot", "8470", EXAMPLE], workdir)
    assert out.returncode == 2 and "did you mean --port" in out.stderr
    assert not (workdir / ".trainmeter").exists()


@pytest.mark.slow
@pytest.mark.parametrize("bad", ["lots", "-1", "70000", "84.5"])
def test_a_bad_port_is_refused_before_anything_starts(workdir, bad):
    out = run_tm(["--port", bad, EXAMPLE], workdir)
    assert out.returncode == 2 and repr(bad) in out.stderr and "0-65535" in out.stderr
    assert not (workdir / ".trainmeter").exists()


@pytest.mark.slow
def test_a_budget_flops_typo_and_a_bad_value_are_refused(workdir):
    out = run_tm(["--budget-flopz", "1e18", EXAMPLE], workdir)
    assert out.returncode == 2 and "did you mean --budget-flops" in out.stderr
    out = run_tm(["--budget-flops", "lots", EXAMPLE], workdir)
    assert out.returncode == 2 and "'lots'" in out.stderr and "1e18" in out.stderr
    assert not (workdir / ".trainmeter").exists()


@pytest.mark.slow
def test_budget_flops_reaches_the_run_options(workdir):
    out = run_tm(["-q", "--no-web", "--budget-flops", "2.5e18", "--", sys.executable, "-c", ""],
                 workdir)  # fmt: skip
    assert out.returncode == 0, out.stderr
    opts = read_log(workdir)[0]["opts"]
    assert opts["budget_flops"] == 2.5e18 and isinstance(opts["budget_flops"], float)
    out = run_tm(["-q", "--no-web", "--budget-flops", "250P", "--", sys.executable, "-c", ""],
                 workdir)  # fmt: skip
    assert read_log(workdir)[0]["opts"]["budget_flops"] == 2.5e17


def test_the_magic_takes_budget_flops():
    pytest.importorskip("IPython")
    from IPython.core.error import UsageError
    from IPython.core.magic_arguments import parse_argstring

    from trainmeter.jupyter.magics import TrainmeterMagics, _opts

    magic = TrainmeterMagics.trainmeter
    args = parse_argstring(magic, "--budget-flops 1e18")
    assert _opts(args)["budget_flops"] == 1e18
    assert _opts(parse_argstring(magic, ""))["budget_flops"] is None
    with pytest.raises(UsageError, match="lots"):
        _opts(parse_argstring(magic, "--budget-flops lots"))
