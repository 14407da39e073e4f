"""What was dropped on the way to the run log, by place and reason (docs/reliability.md).

Every place that can drop a record (an agent's queue, the socket, the supervisor, the disk,
a replay that skips a line) counts what it dropped and sends a ``dropped`` record with its
cumulative counts; the newest record of a place (``node``, ``source``, ``pid``) replaces its
earlier ones, so a duplicated or repeated record never double-counts. ``node`` is the label
``tm merge`` adds to a merged log's records (None in a node's own run): two nodes' processes
may share a pid, and each node's counts are its own. The total and the reasons are in
the snapshot (``dropped``), in its notes and in the summary line.
"""

from __future__ import annotations

from typing import Any

MAX_PLACES = 256  # (node, source, pid) places kept; later ones are summed into one


class Drops:
    """Cumulative drop counts per place."""

    def __init__(self) -> None:
        self.places: dict[tuple[str | None, str, int | None], dict[str, int]] = {}

    def apply(self, rec: dict[str, Any]) -> None:
        """Take a validated ``dropped`` record (core/records.py)."""
        node = rec.get("node")
        node = node[:200] if isinstance(node, str) else None
        key = (node, rec["source"], rec.get("pid"))
        if key not in self.places and len(self.places) >= MAX_PLACES:
            key = (None, rec["source"], -1)
        self.places[key] = dict(rec["counts"])

    def add(self, source: str, reason: str, n: int = 1) -> None:
        """Count ``n`` drops found by the reader itself (replay: a skipped line)."""
        counts = self.places.setdefault((None, source, None), {})
        counts[reason] = counts.get(reason, 0) + n

    def by_reason(self) -> dict[str, int]:
        """``{"<reason> (<source>)": n}`` over every place, largest first, zeros left out."""
        out: dict[str, int] = {}
        for (_node, source, _pid), counts in self.places.items():
            for reason, n in counts.items():
                if n > 0:
                    key = f"{reason} ({source})"
                    out[key] = out.get(key, 0) + n
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))

    def snapshot(self) -> dict[str, Any] | None:
        """``{"total": N, "by": {reason: n}}``, or None when nothing was dropped."""
        by = self.by_reason()
        return {"total": sum(by.values()), "by": by} if by else None


def drop_text(dropped: dict[str, Any] | None, limit: int = 3) -> str | None:
    """``"1,234 records dropped (1,200 series shed under load (agent), ...)"``, or
    None when ``dropped`` (a snapshot's ``dropped``) says nothing was."""
    if not dropped or not dropped.get("total"):
        return None
    by = list((dropped.get("by") or {}).items())
    why = ", ".join(f"{n:,} {reason}" for reason, n in by[:limit])
    if len(by) > limit:
        why += f", {len(by) - limit} more"
    total = dropped["total"]
    return f"{total:,} record{'' if total == 1 else 's'} dropped ({why})"
