"""Set an attribute of a class or module and put it back exactly: the taps' one way of patching
torch (the root model's class ``__call__``, the profiler's start and stop functions).

What is patched this way is left as it was on restore: its own attribute again if it had one,
else none, so an inherited one shows through.
"""

from __future__ import annotations


def set_attr(cls: object, name: str, value: object) -> tuple:
    """Set ``cls.name = value``; returns what :func:`restore` needs to undo it."""
    saved = (cls, name, name in cls.__dict__, cls.__dict__.get(name))
    setattr(cls, name, value)
    return saved


def restore(saved: tuple | None) -> None:
    """Undo :func:`set_attr` (None: nothing was set)."""
    if saved is None:
        return
    cls, name, had_own, own = saved
    if had_own:
        setattr(cls, name, own)
    else:
        delattr(cls, name)
