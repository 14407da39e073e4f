"""The browser's copies of the core's rules, pinned by a golden file (js/tests/golden/parity.json)
that this test writes from the Python and js/tests/parity.test.js reads back against the JS.

Where the dashboard must compute in the browser (thinning a chart it appends to; smoothing a
series it draws), the rule is the core's: ``core/timeline.py`` ``thin_pass`` and
``core/metrics.py`` ``ema`` with ``engine.EMA_BETA``. This test fails when the committed file is
not what the Python gives now (run ``python tests/unit/test_parity.py --write`` and commit it);
the JS test fails when ``js/state.js`` ``thin``/``ema`` disagree with the file.
"""

import json
import math
import random
import sys
from pathlib import Path

from trainmeter.core import metrics
from trainmeter.core.engine import EMA_BETA
from trainmeter.core.timeline import thin_pass

GOLDEN = Path(__file__).resolve().parents[2] / "js" / "tests" / "golden" / "parity.json"


def _thin(xs: list, ys: list, cap: int) -> tuple[list, list]:
    """Passes of ``thin_pass`` until at most ``cap`` points are left (or a pass keeps all)."""
    while len(xs) > cap:
        keep = thin_pass(ys)
        if len(keep) == len(xs):
            break
        xs, ys = [xs[i] for i in keep], [ys[i] for i in keep]
    return xs, ys


def _ema(ys: list) -> list:
    out, prev = [], None
    for y in ys:
        prev = metrics.ema(prev, y, EMA_BETA)
        out.append(prev)
    return out


def _series(rng: random.Random, n: int, gaps: bool) -> list:
    ys = []
    for i in range(n):
        r = rng.random()
        if gaps and r < 0.05:
            ys.append(None)  # JSON null: NaN and infinity reach the browser as gaps
        elif r < 0.08:
            ys.append(10.0 * rng.random() + 5.0)  # a spike
        elif r < 0.12 and ys and ys[-1] is not None:
            ys.append(ys[-1])  # a tie
        else:
            ys.append(3.0 * math.exp(-i / max(n, 1)) + 0.1 * rng.random())
    return ys


def golden() -> dict:
    rng = random.Random(20261202)
    thin = []
    for n, cap, gaps in ((9, 8, False), (100, 8, True), (300, 200, True), (1000, 64, True),
                         (900, 200, False), (7, 8, False)):  # fmt: skip
        xs = list(range(1, n + 1))
        ys = _series(rng, n, gaps)
        tx, ty = _thin(xs, ys, cap)
        thin.append({"cap": cap, "xs": xs, "ys": ys, "out_xs": tx, "out_ys": ty})
    ema = []
    for n in (1, 2, 50, 600):
        ys = _series(rng, n, gaps=False)
        ema.append({"ys": ys, "out": _ema(ys)})
    return {"beta": EMA_BETA, "thin": thin, "ema": ema}


def test_the_golden_file_is_what_the_python_gives_now():
    assert GOLDEN.exists(), "write it: python tests/unit/test_parity.py --write"
    assert json.loads(GOLDEN.read_text()) == golden(), (
        "the core's rule changed: python tests/unit/test_parity.py --write, then npm test"
    )


def test_the_cases_exercise_what_can_differ():
    g = golden()
    assert any(None in c["ys"] for c in g["thin"])  # gaps
    assert any(len(c["out_xs"]) < len(c["xs"]) // 2 for c in g["thin"])  # several passes
    assert any(len(c["out_xs"]) == len(c["xs"]) for c in g["thin"])  # under the cap: untouched


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    GOLDEN.write_text(json.dumps(golden(), separators=(",", ":")) + "\n")
    print(f"wrote {GOLDEN}")
