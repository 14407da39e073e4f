"""Injected by ``tm`` (on PYTHONPATH) into the training process: start the trainmeter agent.

It first runs any other ``sitecustomize`` that this one shadows, then installs the agent if
``TRAINMETER_SOCKET`` is set. Standard library only; it never raises (the never-raise invariant).
"""

import os
import sys


def _chain_other_sitecustomize() -> None:
    import importlib.machinery

    here = os.path.dirname(os.path.abspath(__file__))
    path = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    import importlib.util  # only now: its import is a few ms of every child's start

    module = importlib.util.module_from_spec(spec)
    sys.modules["_trainmeter_chained_sitecustomize"] = module
    spec.loader.exec_module(module)


def _start() -> None:
    try:
        _chain_other_sitecustomize()
    except Exception as exc:  # the other sitecustomize failed: report as Python would, go on
        print(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{exc!r}", file=sys.stderr)
    if not os.environ.get("TRAINMETER_SOCKET"):
        return
    try:
        from trainmeter.agent import runtime
    except Exception:
        return  # trainmeter is not importable by this interpreter: run unwatched
    try:
        runtime.install_from_env()
    except Exception as exc:
        print(f"[trainmeter] agent not started: {exc!r} (training continues)", file=sys.stderr)


_start()
