"""trainmeter: where are my FLOPs going right now, and how well are the GPUs used?

Importing this package is cheap (standard library only): it loads inside training processes.
``emit`` loads on first use (``tm``'s own process never needs it), the notebook parts when
``%load_ext trainmeter`` runs.
"""

from trainmeter._version import __version__

__all__ = [
    "__version__", "emit", "load_ipython_extension", "show", "show_run",
    "unload_ipython_extension",
]  # fmt: skip


def __getattr__(name: str):
    """``trainmeter.emit``, imported on first use and then kept in this module's namespace
    (later lookups are plain attribute reads, with no call here)."""
    if name == "emit":
        from trainmeter.agent.emit import emit

        globals()["emit"] = emit
        return emit
    raise AttributeError(f"module 'trainmeter' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


def load_ipython_extension(ipython) -> None:
    """``%load_ext trainmeter``: start the supervisor, install the agent, register magics."""
    from trainmeter.jupyter.extension import load

    load(ipython)


def unload_ipython_extension(ipython) -> None:
    """``%unload_ext trainmeter``: stop the supervisor cleanly and detach the agent."""
    from trainmeter.jupyter.extension import unload

    unload(ipython)


def show(run: str | None = None):
    """Display the widget for the live run, or for a finished run's folder or id."""
    if run is not None:  # a finished run: replayed from its log, as show_run does
        return show_run(run)
    from trainmeter.jupyter.extension import show as _show

    return _show(run)


def show_run(run: str | None = None, *, dir: str | None = None):
    """Display a finished run (id, id prefix, folder; None: the newest under ``dir``, default
    ``./.trainmeter``) in the widget, replayed from its log; returns the widget
    (:func:`trainmeter.jupyter.replay.show_run`)."""
    from trainmeter.jupyter.replay import show_run as _show_run

    return _show_run(run, dir=dir)
