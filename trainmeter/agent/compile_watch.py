"""Whether Dynamo may be tracing the root's ``__call__``: a flag the counting ``__call__`` reads.

The counting ``__call__`` (torch_taps.py) must queue nothing while Dynamo traces it (the append
would be traced as a side effect, with a guard on the queue: a recompile at every call). It
asks ``torch.compiler.is_compiling()``, which Dynamo folds to True, but that is two Python
frames per call (about 1 us of a small CPU's step), and torch imports Dynamo at the first
optimizer step of every run, compiled or not. So the call asks only once Dynamo has begun to
compile in this process: Dynamo runs its start-of-compile callbacks
(``torch._dynamo.callback_handler``, convert_frame.py) before it traces anything, and the first
one sets the flag, for good (Dynamo guards on the flag's value, so it never goes back).
``torch._dynamo.reset()`` clears the callbacks: the watch registers again after it. A torch
without the callbacks sets the flag at once (the call then always asks).
"""

from __future__ import annotations

from trainmeter.agent import guard

_NEEDS = ("register_start_callback", "remove_start_callback", "clear")


class CompileWatch:
    """Calls ``on_compile()`` before Dynamo's first trace in this process (from the thread
    that compiles), or at once where Dynamo cannot be watched.

    Args:
        on_compile: sets the flag (torch_taps.py); it must not raise.
    """

    def __init__(self, on_compile) -> None:
        self.on_compile = on_compile
        self.fired = False
        self._handler = None  # Dynamo's callback handler while watched
        self._clear = None  # our wrapper on its clear(), while set

    def start(self, dynamo) -> None:
        """Watch the just-imported ``torch._dynamo`` (post-import hook); never raises."""
        try:
            handler = getattr(dynamo, "callback_handler", None)
            if self.fired or not all(hasattr(handler, name) for name in _NEEDS):
                self.started()
                return
            self._handler = handler
            handler.register_start_callback(self.started)
            self._clear = _then_register(handler.clear, handler, self.started)
            handler.clear = self._clear  # an instance attribute: the class's method is intact
        except Exception as exc:
            self.started()  # unknown: always ask
            guard.failed("compile watch", exc)

    def started(self, *args) -> None:
        """Dynamo's start-of-compile callback."""
        self.fired = True
        self.on_compile()

    def stop(self) -> None:
        """Leave Dynamo's callbacks as they were (the agent detaches); never raises."""
        handler, self._handler = self._handler, None
        if handler is None:
            return
        try:
            if vars(handler).get("clear") is self._clear:
                del handler.clear
            try:
                handler.remove_start_callback(self.started)
            except ValueError:  # a reset cleared it, and no compile registered it again
                pass
        except Exception as exc:
            guard.failed("compile watch", exc)
        self._clear = None


def _then_register(clear, handler, callback):
    """``handler.clear()`` (``torch._dynamo.reset()`` calls it), then ``callback`` again."""

    def cleared(*args, **kwargs):
        out = clear(*args, **kwargs)
        handler.register_start_callback(callback)
        return out

    return cleared
