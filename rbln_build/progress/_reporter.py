"""What doit tells the progress display: which tasks it found up to date (doit's error-only reporter,
extended), so a cached compile or cell shows as such. Built ahead of doit is shown by the scheduler."""

from __future__ import annotations

from collections.abc import Callable, Container
from typing import Any

__all__ = ["doit_reporter"]


def doit_reporter(
    display: Any,
    compiles: dict[str, tuple[str, str]],
    shown: Callable[[], Container[str] | None],
    groups: dict[str, list[str]] | None = None,
) -> type:
    """doit's error-only reporter, also telling ``display`` which tasks were up to date. ``compiles``:
    compile task name -> (compile key, display label); ``shown()``: the compile keys and cell ids the
    scheduler already showed (or None); ``groups``: ``cells:`` task name -> the ids of its cells.
    Compiles are matched by key: two compiles can share a label."""
    from doit.reporter import ErrorOnlyReporter

    cells_of = groups or {}

    class Reporter(ErrorOnlyReporter):  # type: ignore[misc]
        def skip_uptodate(self, task: Any) -> None:
            kind, _, name = task.name.partition(":")
            already = shown() or ()
            if kind == "compile" and name in compiles:
                key, label = compiles[name]
                if key not in already:  # else built ahead of doit: shown already
                    display.compile_cached(label)
            elif kind == "cells" and name in cells_of:
                for cell_id in cells_of[name]:
                    if cell_id not in already:
                        display.cell_cached(cell_id)

    return Reporter
