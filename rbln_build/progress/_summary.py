"""What is printed under the build's table: the failed cells grouped by kind, and the cells'
warnings grouped by message (each most frequent first, naming the first cells)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ._progress import plain

__all__ = ["failure_summary", "warning_summary"]


def failure_summary(
    entries: Sequence[Mapping[str, Any]], failing: Sequence[str] = ("failed", "unexpected_success")
) -> list[str]:
    """Lines grouping the failed manifest entries by error kind, most frequent first: a count and
    the first cell (by id) with its message. Empty when nothing failed."""
    kinds: dict[str, list[Mapping[str, Any]]] = {}
    for e in entries:
        if e["status"] in failing:
            kind = "unexpected_success" if e["status"] == "unexpected_success" else (e.get("error_kind") or "unknown")
            kinds.setdefault(kind, []).append(e)
    if not kinds:
        return []
    total = sum(len(v) for v in kinds.values())
    lines = [f"{total} failed cell(s) by kind:"]
    width = max(len(k) for k in kinds)
    for kind, group in sorted(kinds.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        first = min(group, key=lambda e: e["cell"])
        lines.append(
            f"  {kind:<{width}}  {len(group):>6,}  e.g. {first['cell']}: {plain(str(first.get('error') or '-'))}"
        )
    return lines


def warning_summary(entries: Sequence[Mapping[str, Any]], show: int = 3) -> list[str]:
    """One line per distinct cell warning (manifest entries' ``warnings``), most cells first, naming
    the first ``show`` cells it concerns and how many more. Empty when no cell warned."""
    cells: dict[str, list[str]] = {}
    for e in entries:
        for message in e.get("warnings") or ():
            cells.setdefault(str(message), []).append(str(e["cell"]))
    lines = []
    for message, ids in sorted(cells.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        ids = sorted(ids)
        more = f" and {len(ids) - show:,} more" if len(ids) > show else ""
        which = ", ".join(ids[:show]) + more
        lines.append(f"warning ({len(ids):,} cell{'' if len(ids) == 1 else 's'}: {which}): {plain(message)}")
    return lines
