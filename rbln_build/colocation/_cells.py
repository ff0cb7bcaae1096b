"""All the cells of a run: the union of its jobs' matrices and deployments (a sweep's jobs share one
build directory, one cache and one manifest)."""

from __future__ import annotations

from pathlib import Path

from ..config import BuildSettings, Cell, expand
from ..errors import ConfigError
from ._colocation import deployment_cells
from ._server_build import server_cells

__all__ = ["expand_all", "declared_cells"]


def expand_all(jobs: list[BuildSettings]) -> tuple[Path, list[Cell]]:
    """The union of the cells of several composed configs (the jobs of a multirun sweep), in job
    order, each cell once. A sweep shares one build directory; a cell id that two jobs define
    differently is an error."""
    from ..backends import get_backend

    if not jobs:
        raise ConfigError("nothing to build: no configuration was composed.")
    build_dir = jobs[0].build_dir
    toolchains: dict[str, dict[str, str]] = {}
    cells: dict[str, Cell] = {}
    for job in jobs:
        if job.build_dir != build_dir:
            raise ConfigError(
                f"build_dir: the jobs of one sweep must share one build directory, got {build_dir} and {job.build_dir}."
            )
        name = job.matrix.backend
        if name not in toolchains:
            toolchains[name] = get_backend(name).toolchain()
        if job.deployment is not None and job.deployment.server is not None:  # every card's planned cells
            job_cells = server_cells(job, toolchains[name])[1]
        elif job.deployment is not None:  # a deployment's planned cells instead of the matrix
            job_cells = deployment_cells(job, toolchains[name])[1]
        else:
            job_cells = expand(job, toolchains[name])
        for cell in job_cells:
            other = cells.get(cell.id)
            if other is None:
                cells[cell.id] = cell
            elif other.cell_key != cell.cell_key:
                raise ConfigError(f"cell {cell.id}: two jobs of the sweep define it with different inputs.")
    return build_dir, list(cells.values())


def declared_cells(jobs: list[BuildSettings], cells: list[Cell]) -> list[Cell]:
    """The cells of the declared (un-narrowed) matrices of narrowed jobs (``model=``, ``device=``,
    ``budget=``, or a deployment, which builds its own cells) that are not among ``cells``: a narrowed run keeps their manifest entries, and
    ``status`` does not call them removed. Empty when no job was narrowed."""
    from dataclasses import replace

    declared = [replace(j, matrix=j.declared, declared=None, deployment=None) for j in jobs if j.declared is not None]
    if not declared:
        return []
    ids = {c.id for c in cells}
    return [c for c in expand_all(declared)[1] if c.id not in ids]
