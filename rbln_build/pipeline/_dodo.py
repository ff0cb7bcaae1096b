"""What ``dodo.py`` (doit's entry point at the repository root) exports: the configured build's tasks."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ._tasks import BuildRun

__all__ = ["dodo_namespace"]


def dodo_namespace(overrides: list[str] | None = None) -> dict[str, Any]:
    """What dodo.py exports: the tasks of the configured build (``RBLN_BUILD_OVERRIDES`` narrows it,
    e.g. ``RBLN_BUILD_OVERRIDES="budget=0.3 device=rebel100" doit list``)."""
    from ..colocation import expand_all
    from ..config import check_contained, compose_settings, find_project

    if overrides is None:
        overrides = os.environ.get("RBLN_BUILD_OVERRIDES", "").split()

    settings = compose_settings(overrides, project=find_project())
    build_dir, cells = expand_all([settings])
    cache_dir = settings.scale.cache_dir
    check_contained(build_dir, None if cache_dir is None else Path(cache_dir))  # doit writes its state there
    build_dir.mkdir(parents=True, exist_ok=True)  # doit opens its state file there
    return BuildRun(build_dir, cells, progress=settings.progress).namespace()
