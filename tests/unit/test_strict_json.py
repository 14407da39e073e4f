"""One rule for JSON that leaves trainmeter (core/strict_json.py): a NaN or infinite float is
null, everything else as ``json.dumps`` writes it; the page, the subscription stream to the
kernel and ``tm replay --json`` all go through it."""

import io
import json
import math
from types import SimpleNamespace

from trainmeter.core import strict_json
from trainmeter.supervisor import ingest
from trainmeter.web import server


def _refuse(name):
    raise ValueError(f"{name} is not JSON")


def test_a_non_finite_float_is_null_and_the_rest_as_json_writes_it():
    obj = {"mfu": {"hf": math.inf, "titan": 0.5}, "xs": [1, -math.inf, math.nan], "t": (2.5,)}
    got = json.loads(strict_json.dumps(obj), parse_constant=_refuse)
    assert got == {"mfu": {"hf": None, "titan": 0.5}, "xs": [1, None, None], "t": [2.5]}
    plain = {"a": [1, 2.5, "x", None, True]}
    assert strict_json.dumps(plain, indent=2) == json.dumps(plain, indent=2)


def test_the_page_and_the_subscription_stream_write_strict_json():
    snap = {"snapshot": {"tokens_per_s": 1.6e301, "mfu": {"hf": math.inf}}}
    want = {"snapshot": {"tokens_per_s": 1.6e301, "mfu": {"hf": None}}}
    assert json.loads(server.to_json(snap), parse_constant=_refuse) == want
    handler = SimpleNamespace(wfile=io.BytesIO())
    ingest._Handler._send(handler, snap)  # what a subscriber (the kernel's bridge) reads
    assert json.loads(handler.wfile.getvalue(), parse_constant=_refuse) == want
