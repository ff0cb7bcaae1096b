"""The build stages: pure functions over the content-addressed Store.

    compile_once(store, key, spec, backend)  -> Entry | CompileOutcome  once per compile key
    resolve(store, cell)                     -> CellResult               the estimator over the report
    finalize(store, cell, result)            -> CellResult               the artifact for the count
    build_cell(store, cell)                  -> CellResult               resolve + finalize, stored
    reusable(store, cell)                    -> CellResult | None        a stored result that stands

Nothing passes between stages in process memory: a compile leaves its entry (or its failure) in the
Store; a cell reads it from there and leaves its ``CellResult`` there. So any stage can run in
another process, or on another machine, given the Store and the cell. The orchestration (doit
tasks, progress lines, the manifest) is elsewhere (``_tasks``, ``_publish``).

Every exception inside a stage becomes a recorded failure with its reason (``describe``), never a
crash of the build: one cell's failure never stops the others.
"""

from __future__ import annotations

import functools
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import BackendUnavailable, EstimateError, InputFailure, RblnBuildError
from ..store import CellResult, CompileOutcome, Entry, Store, digest, render_record

if TYPE_CHECKING:
    from ..backends import CompileSpec
    from ..config import Cell
    from ..estimator import AllocationReport

Held = dict[tuple[str, str], Entry]  # (kind, key) -> an entry verified earlier in this batch of cells

__all__ = [
    "resolve",
    "finalize",
    "build_cell",
    "make_cell",
    "record_cell",
    "reusable",
    "derived_problem",
    "compile_done",
    "artifact_key",
    "describe",
]

LOG_DIR = "logs"  # <build_dir>/logs: tracebacks of unexpected errors


def describe(exc: BaseException, log: Path | None = None) -> tuple[str, str, bool]:
    """(message, kind, retry) for an exception raised inside a stage. Failures the inputs determine
    are final (retry False); anything else is retried by the next run. An unexpected exception's
    traceback goes to ``log`` (named in the message), not to the terminal."""
    if isinstance(exc, (EstimateError, InputFailure)):
        return str(exc), exc.kind, False
    if isinstance(exc, BackendUnavailable):
        return str(exc), "backend_unavailable", True
    if isinstance(exc, RblnBuildError):
        return str(exc), getattr(exc, "kind", "build_failed"), True
    message = f"{type(exc).__name__}: {exc}"
    if log is not None:
        try:
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_text("".join(traceback.format_exception(exc)), encoding="utf-8")
        except OSError:
            pass
    return message, "build_failed", True


def _log_path(store: Store, what: str, key: str) -> Path:
    return store.root.parent / LOG_DIR / f"{what}-{key[:16]}.txt"


# -- compile ---------------------------------------------------------------------------------------


def compile_done(store: Store, key: str) -> bool:
    """Nothing to do for this key: its entry verifies, or it failed for good (an input failure)."""
    if store.lookup("compile", key) is not None:
        return True
    failure = _failure(store, key)
    return failure is not None and not failure.retry


def compile_once(store: Store, key: str, spec: CompileSpec, backend: str) -> Entry | CompileOutcome:
    """Compile ``spec`` once into the Store under ``key``: the entry, or the failure (which is also
    recorded in the Store, for the cells of this key)."""
    existing = store.lookup("compile", key)
    if existing is not None:
        return existing  # built meanwhile (another run or worker)
    from ..backends import get_backend
    from ..variants import compile_record

    store.drop_record("failures", key)
    try:
        impl = get_backend(backend)
        return store.put("compile", key, functools.partial(compile_record, store, spec, backend, impl))
    except Exception as exc:  # one compile's failure must not stop the other cells
        message, kind, retry = describe(exc, _log_path(store, "compile", key))
        outcome = CompileOutcome(compile_key=key, error=message, error_kind=kind, retry=retry)
        try:
            store.save_record("failures", key, outcome.to_json())
        except OSError:
            pass  # the cells then say their compile left no entry; the run still reports it
        return outcome


def _failure(store: Store, key: str) -> CompileOutcome | None:
    body = store.load_record("failures", key)
    if body is None:
        return None
    try:
        return CompileOutcome.from_json(body)
    except (TypeError, ValueError):
        return None


# -- cells -----------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=64)
def _parsed_report(content_hash: str, report_json: str) -> AllocationReport:
    """Parse a compile entry's report once per process (keyed by the entry's verified hash)."""
    import json

    from ..estimator import AllocationReport

    return AllocationReport.from_json(json.loads(report_json))


# compile entry's content hash -> (the report's JSON object it was parsed from, the report). The
# Store's lookup memo hands back the same meta object while entry.json is unchanged, so a sweep
# parses each key's report once instead of serializing it again for every cell.
_REPORTS: dict[str, tuple[Any, AllocationReport]] = {}


def _report(entry: Entry) -> AllocationReport:
    from ..store import canonical_json

    raw = entry.meta["report"]
    seen = _REPORTS.get(entry.content_hash)
    if seen is not None and seen[0] is raw:
        return seen[1]
    report = _parsed_report(entry.content_hash, canonical_json(raw))
    if len(_REPORTS) >= 256:
        _REPORTS.clear()
    _REPORTS[entry.content_hash] = (raw, report)
    return report


def _lookup(store: Store, kind: str, key: str, held: Held | None) -> Entry | None:
    """``store.lookup``, once per entry in a batch of cells (``held``: the entries it verified)."""
    entry = None if held is None else held.get((kind, key))
    if entry is None:
        entry = store.lookup(kind, key)
        if entry is not None and held is not None:
            held[(kind, key)] = entry
    return entry


# (answer, its fraction's repr: 0.0 and -0.0 are equal, not alike) -> its JSON. A row's cells share
# one object per answer, never changed in place: a batch pickles it once, the index numbers it once.
_ANSWERS: dict[tuple[Any, str], dict[str, Any]] = {}


def _answer_json(answer: Any) -> dict[str, Any]:
    made = _ANSWERS.get(key := (answer, repr(answer.fraction)))
    if made is None:
        if len(_ANSWERS) >= 4096:
            _ANSWERS.clear()
        made = _ANSWERS[key] = answer.to_json()
    return made


def resolve(store: Store, cell: Cell, held: Held | None = None) -> CellResult:
    """The cell's resolution from its compile entry's report (no artifact yet)."""
    base = CellResult(cell_key=cell.cell_key, compile_key=cell.compile_key)
    if cell.setup_error is not None:
        return base.failed(cell.setup_error[0], cell.setup_error[1], retry=False)
    assert cell.compile_key is not None
    compiled = _lookup(store, "compile", cell.compile_key, held)
    if compiled is None:
        failure = _failure(store, cell.compile_key)
        if failure is not None:
            return base.failed(failure.error, failure.error_kind, failure.retry)
        return base.failed("the compile of this cell's key did not produce a cache entry", "compile_failed", True)
    from ..estimator import estimate

    report = _report(compiled)
    res = estimate(cell.request(report.current_blocks), report)
    bd = res.breakdown
    quality = compiled.meta.get("quality")
    result = CellResult(  # made whole (``dataclasses.replace`` of ``base`` costs a sweep's worker 8 us a cell)
        cell_key=cell.cell_key,
        compile_key=cell.compile_key,
        produced=compiled.meta["produced"],
        kvcache_num_blocks=res.kvcache_num_blocks,
        num_full_blocks=res.num_full_blocks,
        num_min_blocks=res.num_min_blocks,
        budget_bytes=None if bd is None else bd.budget_bytes,
        budget_for_floor=None if bd is None else _answer_json(bd.budget_for_floor),
        budget_for_full_pool=None if bd is None else _answer_json(bd.budget_for_full_pool),
        warnings=tuple(res.warnings),
        error=res.error,
        error_kind=res.error_kind,
        retry=False,  # the estimator's answer depends on the inputs alone
        quality=quality if isinstance(quality, dict) else None,
    )
    if result.ok and cell.quality_gate is not None:
        from ..variants import gate_problem

        problem = gate_problem(result.quality, cell.quality_gate)
        if problem is not None:
            return result.failed(problem, "quality_gate", retry=False)
    return result


def artifact_key(cell: Cell, num_blocks: int) -> str:
    """One artifact per (compile key, target NPU, block count): cells that resolve alike share it."""
    return artifact_key_of(cell.compile_key, cell.npu.name, num_blocks)


@functools.lru_cache(maxsize=4096, typed=True)  # a pure function of its three values; a sweep's cells share few
def artifact_key_of(compile_key: str | None, npu: str, num_blocks: int) -> str:
    """``artifact_key`` from what a manifest entry records (``gc --remote`` keeps it)."""
    return digest({"kind": "artifact", "compile": compile_key, "npu": npu, "num_blocks": num_blocks})


def finalize(store: Store, cell: Cell, result: CellResult, held: Held | None = None) -> CellResult:
    """The artifact for a resolved cell (the backend resizes the KV pool to the resolved count)."""
    if not result.ok:
        return result
    blocks = result.kvcache_num_blocks
    assert blocks is not None and blocks > 0 and cell.compile_key is not None and cell.spec is not None
    akey = artifact_key(cell, blocks)
    try:
        entry = _lookup(store, "artifacts", akey, held)
        if entry is None:
            from ..backends import get_backend

            compiled = _lookup(store, "compile", cell.compile_key, held)
            if compiled is None:
                return result.failed(
                    "the compile entry of this cell disappeared before finalize", "compile_failed", True
                )
            impl = get_backend(cell.backend)
            spec = cell.spec

            def fill(files: Path) -> dict[str, Any]:
                impl.finalize(spec, compiled.files, blocks, files)
                return {
                    "compile_key": cell.compile_key,
                    "npu": cell.npu.name,
                    "kvcache_num_blocks": blocks,
                    "produced": compiled.meta["produced"],
                }

            entry = store.put("artifacts", akey, fill)
            if held is not None:
                held[("artifacts", akey)] = entry
    except Exception as exc:
        return result.failed(*describe(exc, _log_path(store, "finalize", akey)))
    return result.with_artifact(akey, entry.content_hash)


def build_cell(store: Store, cell: Cell) -> CellResult:
    """Resolve and finalize one cell, and record the result in the Store (failures included)."""
    return record_cell(store, cell, make_cell(store, cell))


def make_cell(store: Store, cell: Cell, held: Held | None = None) -> CellResult:
    """Resolve and finalize one cell, not recorded yet (``record_cell``). ``held``: the entries a batch
    of cells verified so far (``_jobs.cells_job``): each is looked up once per batch."""
    try:
        return finalize(store, cell, resolve(store, cell, held), held)
    except Exception as exc:  # resolve has no handler of its own: a damaged report, a bug
        base = CellResult(cell_key=cell.cell_key, compile_key=cell.compile_key)
        return base.failed(*describe(exc, _log_path(store, "cell", cell.cell_key)))


def record_cell(store: Store, cell: Cell, result: CellResult, rendered: bytes | None = None) -> CellResult:
    """Record ``result`` as ``cell``'s in the Store (the results index learns its record's fingerprint,
    ``_index.remember``). ``rendered``: the record's bytes, rendered already (``render_record``). A
    record that cannot be written makes the cell a retryable failure."""
    from ._index import remember

    try:
        data = render_record(cell.cell_key, result.to_json()) if rendered is None else rendered
        recorded = store.save_rendered("results", cell.cell_key, data)
    except OSError as exc:
        return result.failed(f"cannot record the cell's result in {store.root}: {exc}", "build_failed", True)
    if recorded is not None:
        remember(result, recorded)
    return result


def derived_problem(cell: Cell, result: CellResult, keys: dict[tuple[Any, ...], str] | None = None) -> str | None:
    """Why a stored result does not belong to ``cell``'s keys, or None. The artifact key is derived
    (compile key, NPU, block count), so a record pointing a cell at another valid artifact -- say, of
    40 blocks for a cell resolved to 21 -- is caught without trusting anything the record says.
    ``keys``: derived artifact keys already worked out in this run (many cells share one)."""
    if result.cell_key != cell.cell_key or result.compile_key != cell.compile_key:
        return f"it is the result of cell key {str(result.cell_key)[:16]}/compile key {str(result.compile_key)[:16]}"
    if not result.ok:
        return None
    blocks = result.kvcache_num_blocks
    if type(blocks) is not int or blocks < 1:
        return f"its kvcache_num_blocks {blocks!r} is not a positive count"
    memo = (cell.compile_key, cell.npu.name, blocks)
    want = keys.get(memo) if keys is not None else None
    if want is None:
        want = artifact_key(cell, blocks)
        if keys is not None:
            keys[memo] = want
    if result.artifact_key != want:
        return f"it points at artifact {str(result.artifact_key)[:64]!r}, but the artifact of {blocks} blocks is {want}"
    return None


def reusable(store: Store, cell: Cell) -> CellResult | None:
    """The stored result if it stands as is: final (not to be retried), derived from this cell's keys,
    and its artifact verifies (and records the same compile key, NPU and block count). A record that
    fails is reported (a warning naming the file), removed and redone."""
    body = store.load_record("results", cell.cell_key)
    if body is None:
        return None
    try:
        result = CellResult.from_json(body)
        problem = derived_problem(cell, result)
    except (TypeError, ValueError) as exc:
        result, problem = None, f"not a cell result ({exc})"
    if problem is None and result is not None and result.ok:
        entry = store.lookup("artifacts", result.artifact_key)  # type: ignore[arg-type]
        if entry is None or entry.content_hash != result.artifact_hash:
            return None
        recorded = (entry.meta.get("compile_key"), entry.meta.get("npu"), entry.meta.get("kvcache_num_blocks"))
        if recorded != (cell.compile_key, cell.npu.name, result.kvcache_num_blocks):
            problem = f"its artifact {entry.path} records {recorded}, not this cell's"
    if problem is not None:
        store.warn(
            f"cache record {store.record_path('results', cell.cell_key)} of cell {cell.id}: {problem}; "
            "forged or damaged: removed, the cell will be redone"
        )
        store.drop_record("results", cell.cell_key)  # never used as a path
        return None
    if result is None or result.retry:
        return None
    return result
