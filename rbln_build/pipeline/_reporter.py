"""What doit tells the progress display: which tasks it found up to date (doit's error-only reporter,
extended), so a cached compile or cell shows as such. Built ahead of doit is shown by the scheduler."""

from __future__ import annotations

from collections.abc import Callable, Container
from typing import Any

__all__ = ["doit_reporter"]


def doit_reporter(display: Any, labels: dict[str, str], shown: Callable[[], Container[str] | None]) -> type:
    """doit's error-only reporter, also telling ``display`` which tasks were up to date. ``labels``:
    compile task name -> display label; ``shown()``: what the scheduler already showed (or None)."""
    from doit.reporter import ErrorOnlyReporter

    class Reporter(ErrorOnlyReporter):  # type: ignore[misc]
        def skip_uptodate(self, task: Any) -> None:
            kind, _, name = task.name.partition(":")
            already = shown()
            if already is not None and (labels.get(name, name) if kind == "compile" else name) in already:
                return  # built ahead of doit: shown already
            if kind == "compile" and name in labels:
                display.compile_cached(labels[name])
            elif kind == "cell" and name:
                display.cell_cached(name)

    return Reporter
