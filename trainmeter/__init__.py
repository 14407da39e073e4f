"""trainmeter: where are my FLOPs going right now, and how well are the GPUs used?

Importing this package is cheap (standard library only): it loads inside training processes.
The notebook parts load when ``%load_ext trainmeter`` runs.
"""

from trainmeter._version import __version__
from trainmeter.agent.emit import emit

__all__ = ["__version__", "emit", "load_ipython_extension", "show", "unload_ipython_extension"]


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
    from trainmeter.jupyter.extension import show as _show

    return _show(run)
