"""What ``rbln-build status`` prints: a cell's state, the table and the JSON document.

Kept apart from ``_status`` (which composes and reads the Store) so that the no-op short cut
(``_noop``) prints exactly the same thing without importing the configuration layer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["CellStatus", "UP_TO_DATE", "COMPILE", "RESOLVE", "FINALIZE", "render", "show"]

UP_TO_DATE, COMPILE, RESOLVE, FINALIZE = "up to date", "would compile", "would re-resolve", "would finalize"


@dataclass
class CellStatus:
    cell: str
    state: str
    reasons: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"cell": self.cell, "state": self.state, "reasons": list(self.reasons)}


def render(statuses: list[CellStatus], removed: list[str], build_dir: Path | str) -> str:
    width = max([len(s.cell) for s in statuses] + [len(c) for c in removed] + [4])
    lines = [f"{'cell'.ljust(width)}  {'state'.ljust(16)}  why", f"{'-' * width}  {'-' * 16}  {'-' * 3}"]
    for s in statuses:
        lines.append(f"{s.cell.ljust(width)}  {s.state.ljust(16)}  {'; '.join(s.reasons)}".rstrip())
    for cid in removed:
        lines.append(
            f"{cid.ljust(width)}  {'removed'.ljust(16)}  no longer in the matrix (`rbln-build gc` removes its link)"
        )
    counts: dict[str, int] = {}
    for s in statuses:
        counts[s.state] = counts.get(s.state, 0) + 1
    parts = [f"{n} {state}" for state, n in sorted(counts.items())] + ([f"{len(removed)} removed"] if removed else [])
    lines.append(f"{len(statuses)} cells: {', '.join(parts)}. Build dir: {build_dir}")
    return "\n".join(lines)


def show(statuses: list[CellStatus], removed: list[str], build_dir: Path | str, as_json: bool) -> bool:
    """Print the statuses (a table, or JSON); whether everything is up to date and nothing removed."""
    clean = not removed and all(s.state == UP_TO_DATE for s in statuses)
    if as_json:
        print(
            json.dumps(
                {"up_to_date": clean, "cells": [s.to_json() for s in statuses], "removed": removed},
                indent=2,
                sort_keys=True,
            )
        )
    else:
        print(render(statuses, removed, build_dir))
    return clean
