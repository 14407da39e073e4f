"""The trainmeter widget: an anywidget whose front-end is the bundle built from ``js/``.

The contract with the browser is three traits and one custom message, nothing else:

- ``snapshot``: the latest figures (``core.engine``'s snapshot; any key may be missing or None);
- ``history``: ``{"seq": n, "series": {name: [[x...], [y...]]}}``, a full bounded chart history
  (``core.timeline.Timeline.full()``) that always replaces the browser's copy (messages arrive in
  order, and a new timeline may start its ``seq`` from zero again);
- ``version``: this package's version, which the bundle compares with its own;
- ``{"type": "points", "seq": n, "series": {...}}`` custom messages: points appended after the
  browser's ``seq`` (``Timeline.since()``), applied only when ``n`` is newer.
"""

from __future__ import annotations

import copy
from pathlib import Path

import anywidget
import traitlets

from trainmeter._version import __version__

_STATIC = Path(__file__).resolve().parent.parent / "static"
_ESM = _STATIC / "widget.js"
_CSS = _STATIC / "widget.css"


class BundleMissingError(FileNotFoundError):
    """The front-end bundle was not built (a source checkout before ``npm run build``)."""


class TrainmeterWidget(anywidget.AnyWidget):
    """The live training dashboard: :meth:`update`, :meth:`set_history` and :meth:`push_points`."""

    # anywidget reads _esm/_css when the class is defined, and raises there if a file is missing.
    # Set them only when the bundle exists: importing trainmeter then never fails, and constructing
    # the widget without a bundle gives the hint in __init__ instead.
    if _ESM.is_file() and _CSS.is_file():
        _esm = _ESM
        _css = _CSS

    snapshot = traitlets.Dict().tag(sync=True)
    history = traitlets.Dict().tag(sync=True)
    version = traitlets.Unicode(__version__).tag(sync=True)

    def __init__(self, **kwargs: object) -> None:
        if "_esm" not in TrainmeterWidget.__dict__:
            raise BundleMissingError(
                f"trainmeter's front-end bundle is missing ({_ESM}). In a source checkout run "
                "`npm install && npm run build` in the repository root, then restart the kernel; "
                "otherwise reinstall trainmeter (`pip install --force-reinstall trainmeter`)."
            )
        super().__init__(**kwargs)

    def update(self, snapshot: dict) -> None:
        """Show a new snapshot. Copied, so a caller that mutates and re-sends its dict still syncs
        (traitlets only sends a value that compares unequal to the one it holds)."""
        self.snapshot = copy.deepcopy(snapshot)

    def set_history(self, history: dict) -> None:
        """Replace the chart history: ``{"seq": n, "series": {name: [[x...], [y...]]}}``."""
        self.history = copy.deepcopy(history)

    def push_points(self, seq: int, series: dict) -> None:
        """Send the points appended after the browser's copy, as of timeline sequence ``seq``.

        ``series`` is ``{name: [[x...], [y...]]}`` (``Timeline.since(...)["series"]``). Custom
        messages reach only views that exist: one sent before the widget is displayed is dropped,
        and the next ``set_history`` covers it.
        """
        self.send({"type": "points", "seq": int(seq), "series": series})
