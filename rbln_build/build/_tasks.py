"""doit tasks for a build: one per compile key, one per cell, one for the manifest.

Nothing heavy happens at import or while tasks are created: keys come from recipe bytes, attention
arithmetic and package versions. torch (through the backend) and the estimator are imported inside
the actions, so a no-op rebuild never imports torch or transformers.

Up-to-date checks (doit ``uptodate``), each from one hash of the whole canonical input:

* ``compile:<label>``: ``config_changed(compile key)`` and the cache entry for the key verifies.
* ``cell:<cell id>``: ``config_changed(cell key)`` and the stored result for the cell key is there
  (and, for a built cell, its artifact entry verifies and ``artifacts/<cell id>`` points at it).
* ``manifest``: the manifest file already holds exactly the bytes this run would write.

The content-addressed cache is the ground truth; doit's state (``<build_dir>/.doit.sqlite3``,
the sqlite3 backend: transactional, safe when a build is killed or two processes open it) only
saves the checks. A failure never fails a doit task: it is recorded in the cell's result, so one
cell's failure never stops the others and the manifest is always written. Failures that depend only
on the inputs (the estimator's) are stored and not retried; build failures (a compile or finalize
that raised) are not stored, so the next run retries them.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Iterator, TextIO

from ._store import Store, link_atomic, write_atomic
from ..errors import BackendUnavailable, RblnBuildError
from ._keys import digest
from ._manifest import entry_for, render_json, render_manifest, summarize
from ._matrix import Cell

__all__ = ["Build", "doit_config", "dodo_namespace", "STATE_FILE", "LOCK_FILE", "TEST_SLEEP_ENV"]

STATE_FILE = ".doit.sqlite3"
LOCK_FILE = ".lock"
TEST_SLEEP_ENV = "RBLN_BUILD_TEST_COMPILE_SLEEP"  # test hook: seconds to sleep inside a compile
INVENTORY_ENV = "RBLN_BUILD_CACHE"  # rbln_build.memory._inventory's cache root


def doit_config(build_dir: Path) -> dict[str, Any]:
    return {
        "dep_file": str(build_dir / STATE_FILE),
        "backend": "sqlite3",
        "verbosity": 2,  # actions print their own progress lines
        "reporter": "error-only",
    }


def _compile_label(cell: Cell) -> str:
    assert cell.compile_key is not None
    return f"{cell.recipe.name}.{cell.npu.family}.x{cell.device.num_devices}.{cell.compile_key[:12]}"


class Build:
    """One build of a list of cells into one build directory."""

    def __init__(self, build_dir: Path, cells: list[Cell], progress: bool = True, out: TextIO | None = None) -> None:
        self.build_dir = Path(build_dir)
        self.cells = cells
        self.progress = progress
        self.out = out or sys.stderr
        self.warnings: list[str] = []
        self.store = Store(self.build_dir / "cache", warn=self._warn)
        self.compiles: dict[str, Cell] = {}
        for cell in cells:
            if cell.compile_key is not None and cell.compile_key not in self.compiles:
                self.compiles[cell.compile_key] = cell
        self.compiled: list[str] = []
        self.compile_errors: dict[str, tuple[str, str]] = {}
        self.results: dict[str, dict[str, Any]] = {}
        self.redone: set[str] = set()
        self._backends: dict[str, Any] = {}
        self._reports: dict[str, Any] = {}  # compile key -> parsed AllocationReport

    # -- output -----------------------------------------------------------------------------------

    def _say(self, line: str) -> None:
        if self.progress:
            print(line, file=self.out, flush=True)

    def _warn(self, message: str) -> None:
        self.warnings.append(message)
        print(f"warning: {message}", file=self.out, flush=True)

    def _backend(self, name: str) -> Any:
        if name not in self._backends:
            from ..backends import get_backend

            self._backends[name] = get_backend(name)
        return self._backends[name]

    # -- doit tasks -------------------------------------------------------------------------------

    def namespace(self) -> dict[str, Any]:
        """A dodo-like namespace for doit's ModuleTaskLoader (also what dodo.py exports)."""
        from doit.tools import config_changed

        ns: dict[str, Any] = {"DOIT_CONFIG": doit_config(self.build_dir)}

        if self.compiles:

            def task_compile() -> Iterator[dict[str, Any]]:
                """Compile each compile key once (the baseline and its AllocationReport)."""
                for i, (key, cell) in enumerate(self.compiles.items(), 1):
                    yield {
                        "name": _compile_label(cell),
                        "doc": f"compile {cell.recipe.name} for {cell.npu.family} x{cell.device.num_devices}",
                        "actions": [(self._compile_action, [key, i])],
                        "uptodate": [config_changed(key), (self._compile_ok, [key])],
                        "verbosity": 2,
                    }

            ns["task_compile"] = task_compile

        def task_cell() -> Iterator[dict[str, Any]]:
            """Resolve each cell's kvcache_num_blocks and finalize its artifact."""
            for i, cell in enumerate(self.cells, 1):
                yield {
                    "name": cell.id,
                    "doc": f"cell {cell.id} (budget {cell.memory_budget!r})",
                    "actions": [(self._cell_action, [cell, i])],
                    "task_dep": [f"compile:{_compile_label(cell)}"] if cell.compile_key else [],
                    "uptodate": [config_changed(cell.cell_key), (self._cell_ok, [cell])],
                    "verbosity": 2,
                }

        def task_manifest() -> dict[str, Any]:
            """Write manifest.json with one entry per cell."""
            return {
                "actions": [self._manifest_action],
                "task_dep": ["cell"],
                "uptodate": [self._manifest_ok],
                "verbosity": 2,
            }

        ns["task_cell"] = task_cell
        ns["task_manifest"] = task_manifest
        return ns

    def run_doit(self, args: list[str] | None = None) -> int:
        from doit.cmd_base import ModuleTaskLoader
        from doit.doit_cmd import DoitMain

        self.build_dir.mkdir(parents=True, exist_ok=True)
        self._scope_inventory_cache()
        removed = self.store.clean_temporaries()
        if removed:
            self._say(f"removed {removed} temporary file(s) left by an interrupted build")
        return int(DoitMain(ModuleTaskLoader(self.namespace())).run(args or ["run"]))

    def _scope_inventory_cache(self) -> None:
        """Unless the user chose a place (RBLN_BUILD_CACHE), keep the memory model's parameter
        inventories under this build directory (``cache/inventory``), so ``rm -rf build`` resets
        everything. Staleness is not handled here: the inventory cache's own key covers the
        transformers and torch versions and the inventory code (``rbln_build.memory._inventory.cache_key``)."""
        if not os.environ.get(INVENTORY_ENV):
            os.environ[INVENTORY_ENV] = str(self.build_dir / "cache")

    # -- compile ----------------------------------------------------------------------------------

    def _compile_ok(self, key: str) -> bool:
        return self.store.lookup("compile", key) is not None

    def _compile_action(self, key: str, index: int) -> None:
        cell = self.compiles[key]
        if self.store.lookup("compile", key) is not None:
            return  # built meanwhile (another run, or the doit state was forgotten)
        label = f"{cell.recipe.name} for {cell.npu.family} x{cell.device.num_devices} ({cell.backend})"
        self._say(f"[compile {index}/{len(self.compiles)}] {label} ...")
        started = time.perf_counter()
        assert cell.spec is not None
        try:
            backend = self._backend(cell.backend)

            def fill(files: Path) -> dict[str, Any]:
                result = backend.compile(cell.spec, files)
                sleep_s = float(os.environ.get(TEST_SLEEP_ENV) or 0)
                if sleep_s:
                    self._say(f"(test hook) compile of {key[:12]} sleeping {sleep_s}s before commit")
                    time.sleep(sleep_s)
                return {
                    "produced": result.produced,
                    "report": result.report.to_json(),
                    "spec": cell.spec.key_fields(),  # type: ignore[union-attr]
                    "backend": cell.backend,
                }

            entry = self.store.put("compile", key, fill)
        except Exception as exc:  # one compile's failure must not stop the other cells
            message, kind = _describe(exc)
            self.compile_errors[key] = (message, kind)
            self._say(f"[compile {index}/{len(self.compiles)}] {label}: FAILED: {message}")
            return
        self.compiled.append(key)
        took = time.perf_counter() - started
        self._say(f"[compile {index}/{len(self.compiles)}] {label}: {entry.meta['produced']} in {took:.1f}s")

    # -- cells ------------------------------------------------------------------------------------

    def _reusable(self, cell: Cell) -> dict[str, Any] | None:
        """The cell's stored result if it can stand as is (its artifact verified and linked)."""
        result = self.results.get(cell.cell_key)
        if result is None:
            result = self.store.load_result(cell.cell_key)
        if result is None:
            return None
        link = self.build_dir / "artifacts" / cell.id
        if result.get("error") is None:
            entry = self.store.lookup("artifacts", result["artifact_key"])
            if entry is None:
                return None
            link_atomic(link, f"../cache/artifacts/{entry.key}/files")
        elif link.is_symlink():
            link.unlink()
        self.results[cell.cell_key] = result
        return result

    def _cell_ok(self, cell: Cell) -> bool:
        return self._reusable(cell) is not None

    def _cell_action(self, cell: Cell, index: int) -> None:
        if self._reusable(cell) is not None:
            return
        self.redone.add(cell.id)
        result, keep = self._build_cell(cell)
        if keep:
            self.store.save_result(cell.cell_key, result)
        self.results[cell.cell_key] = result
        link = self.build_dir / "artifacts" / cell.id
        if result.get("error") is None:
            link_atomic(link, f"../cache/artifacts/{result['artifact_key']}/files")
            what = f"{result['kvcache_num_blocks']} blocks (full {result['num_full_blocks']}, floor {result['num_min_blocks']}), {result['produced']}"
        else:
            if link.is_symlink():
                link.unlink()
            what = f"FAILED ({result['error_kind']})"
            if cell.expected is not None:
                what += " (expected)"
        self._say(f"[cell {index}/{len(self.cells)}] {cell.id}: {what}")

    def _build_cell(self, cell: Cell) -> tuple[dict[str, Any], bool]:
        """(result, whether to store it). Estimator failures are stored; build failures are retried."""
        base: dict[str, Any] = {
            "cell_key": cell.cell_key,
            "compile_key": cell.compile_key,
            "produced": None,
            "kvcache_num_blocks": None,
            "num_full_blocks": None,
            "num_min_blocks": None,
            "budget_bytes": None,
            "budget_for_floor": None,
            "budget_for_full_pool": None,
            "warnings": [],
            "artifact_key": None,
            "artifact_hash": None,
            "error": None,
            "error_kind": None,
        }
        if cell.setup_error is not None:
            return dict(base, error=cell.setup_error[0], error_kind=cell.setup_error[1]), True
        assert cell.compile_key is not None and cell.spec is not None
        compiled = self.store.lookup("compile", cell.compile_key)
        if compiled is None:
            message, kind = self.compile_errors.get(
                cell.compile_key, ("the compile of this cell's key did not produce a cache entry", "compile_failed")
            )
            return dict(base, error=message, error_kind=kind), False

        from ..estimator._search import Request, estimate
        from ..estimator._report import AllocationReport

        report = self._reports.get(cell.compile_key)
        if report is None:
            report = self._reports[cell.compile_key] = AllocationReport.from_json(compiled.meta["report"])
        opts = dict(cell.options)
        request = Request(
            npu=cell.npu.name,
            max_seq_len=opts.get("max_seq_len", 0),
            batch_size=opts.get("batch_size", 1),
            num_devices=cell.device.num_devices,
            attn_impl=opts.get("attn_impl"),
            kvcache_partition_len=opts.get("kvcache_partition_len"),
            kvcache_block_size=opts.get("kvcache_block_size"),
            prefill_chunk_size=opts.get("prefill_chunk_size"),
            kvcache_num_blocks=cell.kvcache_num_blocks,
            memory_budget=cell.memory_budget,
            current_blocks=report.current_blocks,
        )
        res = estimate(request, report)
        bd = res.breakdown
        result = dict(
            base,
            produced=compiled.meta["produced"],
            kvcache_num_blocks=res.kvcache_num_blocks,
            num_full_blocks=res.num_full_blocks,
            num_min_blocks=res.num_min_blocks,
            budget_bytes=None if bd is None else bd.budget_bytes,
            budget_for_floor=None if bd is None else bd.budget_for_floor.to_json(),
            budget_for_full_pool=None if bd is None else bd.budget_for_full_pool.to_json(),
            warnings=list(res.warnings),
            error=res.error,
            error_kind=res.error_kind,
        )
        if not res.ok:
            return result, True
        blocks = res.kvcache_num_blocks
        assert blocks is not None and blocks > 0
        akey = digest({"kind": "artifact", "compile": cell.compile_key, "npu": cell.npu.name, "num_blocks": blocks})
        try:
            entry = self.store.lookup("artifacts", akey)
            if entry is None:
                backend = self._backend(cell.backend)

                def fill(files: Path) -> dict[str, Any]:
                    backend.finalize(cell.spec, compiled.files, blocks, files)
                    return {"compile_key": cell.compile_key, "npu": cell.npu.name, "kvcache_num_blocks": blocks,
                            "produced": compiled.meta["produced"]}

                entry = self.store.put("artifacts", akey, fill)
        except Exception as exc:
            message, kind = _describe(exc)
            return dict(result, error=message, error_kind=kind), False
        return dict(result, artifact_key=akey, artifact_hash=entry.content_hash), True

    # -- manifest ---------------------------------------------------------------------------------

    def entries(self) -> list[dict[str, Any]]:
        return [entry_for(cell, self.results.get(cell.cell_key)) for cell in self.cells]

    def manifest_bytes(self) -> bytes:
        return render_manifest(self.entries())

    def _manifest_ok(self) -> bool:
        path = self.build_dir / "manifest.json"
        try:
            return path.read_bytes() == self.manifest_bytes()
        except OSError:
            return False

    def _manifest_action(self) -> None:
        write_atomic(self.build_dir / "manifest.json", self.manifest_bytes())

    def write_summary(self, entries: list[dict[str, Any]]) -> dict[str, Any]:
        summary = summarize(entries, len(self.compiled), self.redone)
        summary["warnings"] = list(self.warnings)
        write_atomic(self.build_dir / "summary.json", render_json(summary))
        return summary


def _describe(exc: BaseException) -> tuple[str, str]:
    if isinstance(exc, BackendUnavailable):
        return str(exc), "backend_unavailable"
    if isinstance(exc, RblnBuildError):
        return str(exc), getattr(exc, "kind", "build_failed")
    traceback.print_exception(exc, file=sys.stderr)
    return f"{type(exc).__name__}: {exc}", "build_failed"


def dodo_namespace(overrides: list[str] | None = None) -> dict[str, Any]:
    """What dodo.py exports: the tasks of the configured build (``RBLN_BUILD_OVERRIDES`` narrows it,
    e.g. ``RBLN_BUILD_OVERRIDES="budget=0.3 device=rebel100" doit list``)."""
    from ._config import compose_settings
    from ._matrix import expand_all

    if overrides is None:
        overrides = os.environ.get("RBLN_BUILD_OVERRIDES", "").split()
    settings = compose_settings(overrides)
    build_dir, cells = expand_all([settings])
    build_dir.mkdir(parents=True, exist_ok=True)  # doit opens its state file there
    build = Build(build_dir, cells, progress=settings.progress)
    return build.namespace()

