"""What ``tm`` adds to the wall time of the command it runs, measured side by side in one run.

    python benchmarks/wrapper.py [--pairs 10] [--torch] [--parts 5] [--compare DIR]
                                 [--env-bytecode]

1. **Rounds.** ``python -c pass`` runs plain and under ``tm --no-web -q --``, ``--pairs``
   rounds, the order of the sides turned by one each round, so the machine's noise (large on a
   shared 2-core VM) hits every side alike. Printed: each side's median wall time, the added
   time (the median of the rounds' differences, with their range) and the ratio of the
   medians. ``--compare DIR`` adds a side: the ``tm`` of another checkout (``DIR`` holds its
   ``trainmeter`` package, first on ``PYTHONPATH`` for tm and its child), such as the tree
   before a change. After every ``tm`` run the run log is read: it must end with its
   ``run_end`` and hold the agent's ``agent_hello``, and ``passport.json`` must be beside it
   (nothing at the end of the run was given up for speed). ``--torch`` does the same for
   ``python -c "import torch"``.
2. **Where tm's time goes** (``--parts`` runs, the median of each part). A small wrapper
   (:data:`PROBE`, run with ``python -c``) imports the run path, times it, wraps the
   launcher's steps with timers and runs ``tm``'s own ``main``: the interpreter's start, the
   imports, the socket, the run log, the child's life, the end-of-run drain, the exit files,
   the sampler's stop, the run's close (``run_end``, the final snapshot) and the passport, the
   socket server's stop, and the interpreter's exit. The child runs under ``python -X
   importtime`` with a line of code that times its agent's final close (:data:`CHILD`), which
   splits the child's life into its start (the injected ``sitecustomize``, the agent's boot,
   is in it: its own import time is printed) and its exit. Also printed: every module of
   the page (``web/``'s modules), the notebook (``jupyter/``), prometheus-client, torch or
   numpy the ``tm`` process loaded (none should be: :data:`NOT_ON_THE_RUN_PATH`), and the
   agent's modules in the child.

Bytecode: an installed package has its ``.pyc`` files, so by default both sides run with a
private, warm bytecode cache (``PYTHONPYCACHEPREFIX`` in a temporary folder, filled by a run of
each before the measurement). ``--env-bytecode`` keeps this environment's setting instead
(``PYTHONDONTWRITEBYTECODE=1`` here: every import compiles its source, on both sides).
Results go in docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from trainmeter.core.envnames import SOCKET

# Modules the run path of ``tm --no-web`` should never load (the page's server, the Prometheus
# endpoint, the notebook parts, the training libraries): prefixes of names in sys.modules.
# ``trainmeter.web`` itself is two constants (the page's default port), which tm's flags name.
NOT_ON_THE_RUN_PATH = ("trainmeter.web.", "trainmeter.jupyter", "prometheus_client",
                       "anywidget", "ipywidgets", "traitlets", "IPython", "torch",
                       "numpy")  # fmt: skip

# The wrapper that times tm's steps in its own process: ``python -c PROBE OUT TM-ARGS...``.
# It writes {"marks": [[part, start, end], ...], "modules": [...]} to OUT (time.monotonic,
# CLOCK_MONOTONIC: the same clock in every process of the machine).
PROBE = r"""
import sys, time
t_first = time.monotonic()
out, argv = sys.argv[1], sys.argv[2:]
marks = []

def timed(obj, name, part):
    fn = getattr(obj, name)
    def wrapper(*a, **k):
        t = time.monotonic()
        try:
            return fn(*a, **k)
        finally:
            marks.append((part, t, time.monotonic()))
    setattr(obj, name, wrapper)

t = time.monotonic()
import trainmeter.cli as cli
import trainmeter.commands.run
import trainmeter.commands.serve
from trainmeter.supervisor import launcher, ingest, live, sampler
marks.append(("imports", t, time.monotonic()))
timed(ingest.Server, "__init__", "socket")
timed(ingest.Server, "serve_in_thread", "socket")
timed(live.Live, "open_run", "run log opened")
timed(live.Live, "_write_passport", "passport files")
timed(live.Live, "close_run", "run closed")
timed(launcher.subprocess, "Popen", "child started")
timed(launcher, "start_sampler", "sampler started")
timed(launcher.signals, "wait", "child runs")
timed(launcher, "_drain_agents", "end drain")
timed(launcher, "apply_exit_files", "exit files")
timed(sampler.Sampler, "stop", "sampler stopped")
timed(sampler.Sampler, "tick", "sampler tick (its thread)")
timed(launcher, "_stop", "socket server stopped")
timed(launcher, "summary_line", "summary line")
sys.argv = ["tm", *argv]
t_main = time.monotonic()
rc = cli.main()  # as the console script calls it
t_end = time.monotonic()
marks.append(("main", t_main, t_end))
with open(out, "w") as f:
    f.write(__import__("json").dumps({"first": t_first, "end": t_end, "marks": marks,
                                      "modules": sorted(sys.modules)}))
sys.exit(rc)
"""

# The child of the breakdown: times its agent's final close (atexit) into OUT.
CHILD = r"""
import sys, time
t_code = time.monotonic()
from trainmeter.agent import runtime
agent, out = runtime.current(), sys.argv[1]
close = agent.sender.close
def timed_close():
    t = time.monotonic()
    close()
    with open(out, "w") as f:
        f.write(__import__("json").dumps({"code": t_code, "close": (t, time.monotonic()),
                "modules": sorted(m for m in sys.modules if m.startswith("trainmeter"))}))
agent.sender.close = timed_close
"""


def tm_command() -> list[str]:
    """``tm`` beside this interpreter (the console script), else ``python -m trainmeter.cli``."""
    script = Path(sys.executable).with_name("tm")
    return [str(script)] if script.exists() else [sys.executable, "-m", "trainmeter.cli"]


def bench_env(env_bytecode: bool, cache: str) -> dict[str, str]:
    env = dict(os.environ)
    if not env_bytecode:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = cache
    env.pop(SOCKET, None)  # a tm run from inside another one's child: not its socket
    return env


def wall(cmd: list[str], cwd: str, env: dict[str, str]) -> float:
    """Seconds from start to end of ``cmd`` (its output thrown away; it must succeed)."""
    t = time.monotonic()
    out = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, check=False)  # fmt: skip
    took = time.monotonic() - t
    if out.returncode != 0:
        raise SystemExit(f"{cmd} failed ({out.returncode}): {out.stderr.decode()[-2000:]}")
    return took


def newest_run(root: Path) -> Path:
    return max((root / "runs").iterdir(), key=lambda p: p.stat().st_mtime)


def check_kept(root: Path) -> None:
    """The newest run's log ends with ``run_end`` (then its last checkpoint, in a tree that
    writes them), holds the agent's hello, and its passport is written: the end-of-run records
    were kept."""
    folder = newest_run(root)
    recs = [json.loads(x) for x in (folder / "run.jsonl").read_text().splitlines()]
    kinds = [r["k"] for r in recs if r["k"] != "checkpoint"]
    problems = [why for ok, why in (
        (kinds[-1:] == ["run_end"], "the log does not end with run_end"),
        ("agent_hello" in kinds, "no agent_hello: the agent's records were lost"),
        ((folder / "passport.json").exists(), "no passport.json"),
    ) if not ok]  # fmt: skip
    if problems:
        raise SystemExit(f"{folder}: {'; '.join(problems)}")
    shutil.rmtree(folder)


def sides_env(env: dict[str, str], tree: str | None) -> dict[str, str]:
    """``env`` with ``tree``'s trainmeter first on the path (for tm and, through the injected
    bootstrap, its child's agent), or as it is."""
    if tree is None:
        return env
    paths = [os.path.abspath(tree), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    return {**env, "PYTHONPATH": os.pathsep.join(paths)}


def rounds(code: str, n: int, work: str, env: dict[str, str], tm: list[str],
           compare: str | None = None) -> dict[str, list[float]]:  # fmt: skip
    """``python -c code`` plain and under tm (and under ``compare``'s tm), ``n`` rounds, the
    order turned by one each round; one warm-up of each side first."""
    plain = [sys.executable, "-c", code]
    wrapped = [*tm, "--no-web", "-q", "--dir", work, "--", *plain]
    sides = {"plain": (plain, env), "tm": (wrapped, env)}
    if compare is not None:
        sides[f"tm of {compare}"] = (wrapped, sides_env(env, compare))
    root = Path(work)
    for cmd, side_env in sides.values():
        wall(cmd, work, side_env)
        if cmd is wrapped:
            check_kept(root)
    got: dict[str, list[float]] = {side: [] for side in sides}
    names = list(sides)
    for i in range(n):
        for side in names[i % len(names) :] + names[: i % len(names)]:
            cmd, side_env = sides[side]
            got[side].append(wall(cmd, work, side_env))
            if cmd is wrapped:
                check_kept(root)
    return got


def report_rounds(label: str, got: dict[str, list[float]]) -> None:
    plain = got["plain"]
    mp = statistics.median(plain)
    print(f"{label} ({len(plain)} rounds, the order turned each round; medians)")
    print(f"  plain {mp * 1e3:8.1f} ms")
    for side, under in got.items():
        if side == "plain":
            continue
        added = [b - a for a, b in zip(plain, under, strict=True)]
        mt, ma = statistics.median(under), statistics.median(added)
        print(f"  under {side}: {mt * 1e3:8.1f} ms   added {ma * 1e3:7.1f} ms (median of the "
              f"pairs' differences; {min(added) * 1e3:.1f}..{max(added) * 1e3:.1f})   "
              f"ratio {mt / mp:.2f}")  # fmt: skip


def breakdown(n: int, work: str, env: dict[str, str]) -> None:
    """Run tm through :data:`PROBE` ``n`` times; print the median of each part."""
    parts: dict[str, list[float]] = {}
    sitecustom: list[float] = []
    modules: set[str] = set()
    child_modules: set[str] = set()
    root = Path(work)
    for i in range(n + 1):  # the first fills the bytecode cache of the wrapper's imports
        out, cout = os.path.join(work, "probe.json"), os.path.join(work, "child.json")
        child = [sys.executable, "-X", "importtime", "-c", CHILD, cout]
        cmd = [sys.executable, "-c", PROBE, out, "--no-web", "-q", "--dir", work, "--", *child]
        t0 = time.monotonic()
        res = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, check=False)
        t_exit = time.monotonic()
        if res.returncode != 0:
            raise SystemExit(f"the probe failed ({res.returncode}): {res.stderr[-2000:]}")
        check_kept(root)
        if i == 0:
            continue
        with open(out) as f:
            probe = json.load(f)
        with open(cout) as f:
            ch = json.load(f)
        m = re.search(r"\|\s*(\d+) \|\s*sitecustomize$", res.stderr, re.M)
        sitecustom.append(int(m.group(1)) / 1e6 if m else float("nan"))
        modules.update(probe["modules"])
        child_modules.update(ch["modules"])
        spans: dict[str, float] = {}
        for part, a, b in probe["marks"]:
            spans[part] = spans.get(part, 0.0) + (b - a)
        by = {part: (a, b) for part, a, b in probe["marks"]}
        spans["interpreter start (tm)"] = probe["first"] - t0
        spans["interpreter exit (tm)"] = t_exit - probe["end"]
        spans["run closed"] -= spans.get("passport files", 0.0)
        popen_end = by["child started"][1]
        spans["child: start to its code (agent boot in it)"] = ch["code"] - popen_end
        spans["child: its code"] = ch["close"][0] - ch["code"]
        spans["child: agent's final close"] = ch["close"][1] - ch["close"][0]
        spans["child: exit (tm sees it)"] = by["child runs"][1] - ch["close"][1]
        spans["total (from outside)"] = t_exit - t0
        main = by["main"]
        covered = sum(v for k, v in spans.items() if k in MAIN_PARTS and k != "imports")
        spans["other (flags, start line, threads)"] = (main[1] - main[0]) - covered
        for part, v in spans.items():
            parts.setdefault(part, []).append(v)
    print(f"\nwhere tm's time goes (median of {n} runs; the child is `python -X importtime -c "
          "...`, so its own parts are slower than a plain run's)")  # fmt: skip
    for part in ORDER:
        if part in parts:
            v = statistics.median(parts[part])
            crit = "" if part in CRITICAL or part.startswith("total") else "  (beside the child)"
            child = part.startswith("child")
            print(f"  {'  ' if child else ''}{part:<46} {v * 1e3:8.2f} ms{crit}")
    print(f"    the child's sitecustomize (the agent's boot), -X importtime: "
          f"{statistics.median(sitecustom) * 1e3:.2f} ms")  # fmt: skip
    bad = sorted(m for m in modules if m.startswith(NOT_ON_THE_RUN_PATH))
    print(f"  modules the tm process loaded: {len(modules)}; of the page, notebook, "
          f"Prometheus, torch, numpy: {', '.join(bad) or 'none'}")  # fmt: skip
    print(f"  the agent's modules in the child: {', '.join(sorted(child_modules))}")


MAIN_PARTS = ("imports", "socket", "run log opened", "child started", "sampler started",
              "child runs", "end drain", "exit files", "sampler stopped", "run closed",
              "passport files", "socket server stopped", "summary line")  # fmt: skip
ORDER = ("interpreter start (tm)", "imports", "socket", "run log opened", "child started",
         "sampler started", "child runs", "child: start to its code (agent boot in it)",
         "child: its code", "child: agent's final close", "child: exit (tm sees it)",
         "end drain", "exit files", "sampler stopped", "run closed", "passport files",
         "socket server stopped", "summary line", "other (flags, start line, threads)",
         "interpreter exit (tm)", "sampler tick (its thread)",
         "total (from outside)")  # fmt: skip
CRITICAL = set(ORDER) - {"sampler tick (its thread)"}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--pairs", type=int, default=10, help="plain/tm pairs per command (10)")
    p.add_argument("--torch", action="store_true", help='also python -c "import torch"')
    p.add_argument("--parts", type=int, default=5, help="runs of the breakdown (5; 0: none)")
    p.add_argument("--compare", metavar="DIR",
                   help="also time the tm of another checkout (DIR holds its trainmeter "
                        "package: git archive REV trainmeter | tar -x -C DIR) in the same "
                        "rounds")  # fmt: skip
    p.add_argument("--env-bytecode", action="store_true",
                   help="keep this environment's bytecode setting (default: a warm private "
                        "cache, as an installed package has)")  # fmt: skip
    args = p.parse_args(argv)
    tm = tm_command()
    with tempfile.TemporaryDirectory(prefix="tm-wrapper-") as work:
        env = bench_env(args.env_bytecode, os.path.join(work, "pyc"))
        how = ("this environment's bytecode setting (PYTHONDONTWRITEBYTECODE="
               f"{os.environ.get('PYTHONDONTWRITEBYTECODE', '')!r})" if args.env_bytecode
               else "a warm private bytecode cache")  # fmt: skip
        print(f"{' '.join(tm)} --no-web -q -- {sys.executable} -c ...; {how}; "
              f"load average {os.getloadavg()[0]:.2f}")  # fmt: skip
        got = rounds("pass", args.pairs, work, env, tm, args.compare)
        report_rounds("python -c pass", got)
        if args.torch:
            got = rounds("import torch", args.pairs, work, env, tm, args.compare)
            report_rounds('python -c "import torch"', got)
        if args.parts:
            breakdown(args.parts, work, env)
            if args.compare is not None:
                print(f"\n(the same for the tm of {args.compare})")
                breakdown(args.parts, work, sides_env(env, args.compare))
    return 0


if __name__ == "__main__":
    sys.exit(main())
