"""The doit side of a build: its configuration, the tasks' names, and the tasks of a ``BuildRun``.

Up-to-date checks (doit ``uptodate``):

* ``compile:<label>``: ``config_changed(compile key)`` and the key is done (the entry verifies, or
  the key failed for good).
* ``cells:<label>``: ``config_changed`` of the key's cells (their ids and cell keys) and every one of
  them stands (a final stored result whose artifact verifies). When it runs, it redoes only the
  cells that do not stand.
* ``manifest``: always runs; it rewrites ``manifest.json`` only when its bytes change.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, TextIO

from ..config import Cell
from ..store import digest
from ._startup import STATE_FILE

__all__ = [
    "NO_COMPILE",
    "TracebackTrap",
    "cells_digest",
    "compile_label",
    "compile_units",
    "display_label",
    "doit_config",
    "doit_said",
    "group_label",
    "task_namespace",
]


def doit_config(build_dir: Path) -> dict[str, Any]:
    return {
        "dep_file": str(build_dir / STATE_FILE),
        "backend": "sqlite3",
        "verbosity": 2,  # actions print their own progress lines
        "reporter": "error-only",
    }


def compile_label(cell: Cell) -> str:
    assert cell.compile_key is not None
    return f"{cell.recipe.name}.{cell.npu.family}.x{cell.device.num_devices}.{cell.compile_key[:12]}"


NO_COMPILE = "-"  # the group of the cells whose options are invalid (no compile key)


def group_label(key: str, cells: list[Cell]) -> str:
    """The ``cells:`` task of a compile key's cells (the cells with invalid options: ``invalid-options``)."""
    return "invalid-options" if key == NO_COMPILE else compile_label(cells[0])


def task_namespace(run: Any) -> dict[str, Any]:
    """A dodo-like namespace for doit's ModuleTaskLoader (also what dodo.py exports): the tasks of
    ``run`` (a ``_tasks.BuildRun``), whose methods they call."""
    from doit.tools import config_changed

    ns: dict[str, Any] = {"DOIT_CONFIG": {**doit_config(run.build_dir), "reporter": run._reporter()}}

    if run.compiles:

        def task_compile() -> Iterator[dict[str, Any]]:
            """Compile each compile key once (the baseline and its AllocationReport)."""
            for key, cell in run.compiles.items():
                yield {
                    "name": compile_label(cell),
                    "doc": f"compile {cell.recipe.name} for {cell.npu.family} x{cell.device.num_devices}",
                    "actions": [(run._compile, [key])],
                    "uptodate": [config_changed(key), (run._compile_stands, [key])],
                    "verbosity": 2,
                }

        ns["task_compile"] = task_compile

    def task_cells() -> Iterator[dict[str, Any]]:
        """Resolve the kvcache_num_blocks of a compile key's cells and finalize their artifacts."""
        for key, cells in run.groups.items():
            yield {
                "name": group_label(key, cells),
                "doc": f"{len(cells)} cell(s) of {group_label(key, cells)}",
                "actions": [(run._group, [key])],
                "task_dep": [] if key == NO_COMPILE else [f"compile:{compile_label(cells[0])}"],
                "uptodate": [config_changed(cells_digest(cells)), (run._group_stands, [key])],
                "verbosity": 2,
            }

    def task_manifest() -> dict[str, Any]:
        """Write manifest.json with one entry per cell, then the artifacts/ links."""
        return {"actions": [run._publish], "task_dep": ["cells"], "uptodate": [False], "verbosity": 2}

    ns["task_cells"] = task_cells
    ns["task_manifest"] = task_manifest
    return ns


class TracebackTrap:
    """A stderr that keeps each write that is a whole traceback (doit writes one in a single call)
    and passes everything else through to ``real`` at once."""

    def __init__(self, real: TextIO) -> None:
        self.real = real
        self.trapped: list[str] = []

    def write(self, text: str) -> int:
        if text.startswith("Traceback (most recent call last)"):
            self.trapped.append(text)
            return len(text)
        return self.real.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


_ID_OPTION = re.compile(r"bs\d+|s\d+|eager|flash_attn|p\d+")


def display_label(cell: Cell) -> str:
    """A compile as the progress display names it (and matches it with earlier similar compiles):
    the model, the build options its cell id names (``bs4 s8192``: the ones the matrix sets), the
    target and the backend, so two compiles of one model for one target read differently."""
    parts = cell.id.removeprefix(f"{cell.model}.{cell.device.name}.").split(".")
    options = list(itertools.takewhile(_ID_OPTION.fullmatch, parts[:-1]))
    model = " ".join([cell.recipe.name, *options])
    # the built-in backends compile a recipe without weights into a plan (the memory model only)
    kind = "plan" if cell.backend in ("torch", "rbln") and not cell.recipe.has_weights else cell.backend
    return f"{model} for {cell.npu.family} x{cell.device.num_devices} ({kind})"


def compile_units(cells: Iterable[Cell]) -> dict[str, float]:
    """How big each compile (by ``display_label``) is, relative to another of its kind, for the
    time-left estimate when its kind has no history: a fixed part and one per decoder layer
    (``torch.export`` traces each layer)."""
    out = {}
    for cell in cells:
        config = cell.recipe.hf_config
        layers = config.get("num_hidden_layers") if isinstance(config, dict) else None
        out[display_label(cell)] = 1.0 + (layers if isinstance(layers, int) and layers > 0 else 0)
    return out


def cells_digest(cells: list[Cell]) -> str:
    """What a ``cells:`` task's doit state remembers: its cells' ids and keys."""
    return digest([[c.id, c.cell_key] for c in cells])


def doit_said(logs: Path, text: str) -> str:
    """A traceback doit printed: to a file in ``logs``; the warning that names it."""
    last = [ln for ln in text.splitlines() if ln.strip()][-1]
    log = logs / f"doit-{os.getpid()}.txt"
    try:
        log.parent.mkdir(exist_ok=True)
        log.write_text(text, encoding="utf-8")
        where = f"; details in {log}"
    except OSError:
        where = ""
    return f"doit stopped before running every task: {last}{where}"
