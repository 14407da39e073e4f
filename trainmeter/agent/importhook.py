"""Run a callback right after a module is imported by the user's code (post-import hook).

The agent never imports torch itself: it waits until the training code does. A finder placed
first on ``sys.meta_path`` wraps the real loader of the watched module so the callback runs
after the module body has executed (the technique of ``wrapt``'s post-import hooks). If the
module is already imported, the callback runs at once.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import ModuleType

from trainmeter.agent import guard

_callbacks: dict[str, list[Callable[[ModuleType], None]]] = {}


def when_imported(name: str, callback: Callable[[ModuleType], None]) -> None:
    """Call ``callback(module)`` once ``name`` is imported (now, if it already is)."""
    module = sys.modules.get(name)
    if module is not None:
        _run(name, callback, module)
        return
    _callbacks.setdefault(name, []).append(callback)
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


def cancel(name: str, callback: Callable[[ModuleType], None]) -> None:
    """Forget a callback that has not run yet (the agent was uninstalled first)."""
    waiting = _callbacks.get(name, [])
    if callback in waiting:
        waiting.remove(callback)


def _run(name: str, callback: Callable[[ModuleType], None], module: ModuleType) -> None:
    try:
        callback(module)
    except Exception as exc:  # the never-raise invariant: the user's import must succeed regardless
        guard.failed(f"attach to {name}", exc)


class _Finder:  # a meta path finder needs only find_spec
    def __init__(self) -> None:
        self._busy: set[str] = set()

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in _callbacks or fullname in self._busy:
            return None
        import importlib.util  # here, not at the agent's boot: a few ms of every child's start

        self._busy.add(fullname)
        try:
            spec = importlib.util.find_spec(fullname)
        except Exception:
            return None
        finally:
            self._busy.discard(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None
        spec.loader = _Loader(spec.loader, fullname)
        return spec


class _Loader:
    """Delegates to the real loader, then runs the callbacks for the module."""

    def __init__(self, loader, name: str) -> None:
        self._loader = loader
        self._name = name

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__.loader = self._loader  # leave the module as if we were never there
        module.__loader__ = self._loader
        self._loader.exec_module(module)
        for callback in _callbacks.pop(self._name, []):
            _run(self._name, callback, module)

    def __getattr__(self, attr):
        return getattr(self._loader, attr)
