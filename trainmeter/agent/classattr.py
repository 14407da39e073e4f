"""Set a class attribute and put it back exactly: the taps' one way of patching torch's classes.

A class patched this way (the root model's ``__call__``, the clock optimizer's
``_optimizer_step_code``) is left as it was on restore: its own attribute again if it had one,
else none, so the inherited one shows through.
"""

from __future__ import annotations


def set_attr(cls: type, name: str, value: object) -> tuple:
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
