"""Where a deployment's models' AllocationReports come from, for planning.

Each model's report comes from the build directory's compile cache when it holds the compile of that
model's compile key (for the configured backend), else from the NPU memory model, which gives the
report the ``torch`` backend and plans record. Reading the cache and the memory model's cached
inventories imports neither torch nor transformers.

A plan staged by a build computes missing inventories into a temporary folder, kept only when the
plan fits (``Reports.commit``), so planning an infeasible build writes nothing.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from ..config import BuildSettings
from ..errors import BackendUnavailable
from ..estimator import AllocationReport
from ..memory import CompileSpec
from ..store import Store, compile_key

__all__ = ["Reports"]


class Reports:
    """Where a model's AllocationReport comes from: the compile cache, else the memory model.

    ``stage``: a parameter inventory the build directory does not hold yet is computed into a
    temporary folder, and moved into ``cache/inventory`` only by ``commit`` (a build whose plan fits);
    ``discard`` removes it, so planning an infeasible build writes nothing."""

    def __init__(self, settings: BuildSettings, stage: bool = False) -> None:
        self.backend = settings.matrix.backend
        self.store = Store(settings.build_dir / "cache")  # a corrupt entry: a warning and a miss
        self.inventory_dir: Path | None = None
        chosen = os.environ.get("RBLN_BUILD_CACHE")
        own = settings.build_dir / "cache"
        # As a build does, inventories live in the build dir, unless the user chose a place. A build
        # that compiled to plan (``pipeline._deploy_compile``) already pointed RBLN_BUILD_CACHE at the
        # build dir's own cache (``scope_inventory_cache``): that is still the build dir, and staged.
        if not chosen or os.path.abspath(chosen) == os.path.abspath(own):
            self.inventory_dir = own / "inventory"
        self._toolchain: dict[str, str] | None | bool = False
        self.stage = stage
        self._staged: Path | None = None

    def _inventories(self, spec: CompileSpec) -> Path | None:
        if not self.stage or self.inventory_dir is None:
            return self.inventory_dir
        from ..memory import cache_key

        config = Path(spec.recipe.directory) / "config.json"
        try:
            if (self.inventory_dir / f"{cache_key(config.read_bytes())}.json").is_file():
                return self.inventory_dir
        except OSError:
            pass  # the recipe's error is for the memory model to report
        if self._staged is None:
            self._staged = Path(tempfile.mkdtemp(prefix="rbln-build-plan-"))
        return self._staged

    def commit(self) -> None:
        """Move the staged inventories into the build directory's cache."""
        if self._staged is not None and self.inventory_dir is not None:
            self.inventory_dir.mkdir(parents=True, exist_ok=True)
            for path in sorted(self._staged.glob("*.json")):
                shutil.move(str(path), str(self.inventory_dir / path.name))
        self.discard()

    def discard(self) -> None:
        if self._staged is not None:
            shutil.rmtree(self._staged, ignore_errors=True)
            self._staged = None

    def toolchain(self) -> dict[str, str] | None:
        if self._toolchain is False:
            from ..backends import get_backend

            try:
                self._toolchain = get_backend(self.backend).toolchain()
            except BackendUnavailable:
                self._toolchain = None  # nothing of this backend can be in the cache
        return self._toolchain  # type: ignore[return-value]

    def report(self, spec: CompileSpec) -> tuple[AllocationReport, str]:
        toolchain = self.toolchain()
        if toolchain is not None and self.store.root.is_dir():
            entry = self.store.lookup("compile", compile_key(spec.key_fields(), self.backend, toolchain))
            if entry is not None:
                report = AllocationReport.from_json(entry.meta["report"])
                return report, f"cache ({entry.meta.get('produced', '?')}, {self.backend})"
        from ..memory import build_report

        return build_report(spec, cache_dir=self._inventories(spec)), "memory model"
