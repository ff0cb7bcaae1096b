"""What a report shows, read from a build directory: the manifest and the compile entries' reports.

Read-only: nothing in the build directory is changed (a missing or unreadable compile entry becomes
a note on its group, not a removal; ``rbln-build`` itself verifies and rebuilds entries). No Hydra,
no torch: the manifest already holds every cell's inputs and results, and each compile entry
(``cache/compile/<key>/entry.json``) holds its AllocationReport under ``meta.report``.

Cells are grouped for the figures by what determines their curve: the compile key and the target
NPU (the compile key covers the recipe, the NPU family, the device count and the attention options).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._documents import absent, load_json, parse_json, read_document
from ..errors import UserError
from ..estimator import AllocationReport

__all__ = [
    "BuildView",
    "Group",
    "load_build",
    "read_old_manifest",
    "MANIFEST_SCHEMA",
    "FAILED_STATUSES",
    "budget_label",
    "outcome",
]

MANIFEST_SCHEMA = 1
FAILED_STATUSES = ("failed", "unexpected_success")


class ReportInputError(UserError):
    """The build directory cannot be reported on (no manifest, or not one this version reads)."""


@dataclass
class Group:
    """The cells of one compile key on one NPU: one curve, one DRAM figure."""

    compile_key: str
    npu: str
    num_devices: int
    model: str
    device: str
    attention: dict[str, Any]
    backend: str
    cells: list[dict[str, Any]] = field(default_factory=list)  # manifest entries, sorted by budget bytes
    produced: str | None = None
    report: AllocationReport | None = None
    problem: str | None = None  # why there is no report (the figures are replaced by this note)
    options: str = ""  # the build options that tell this compile from the model's others ("" if none)

    @property
    def slug(self) -> str:
        return f"{self.model}.{self.device}.{self.compile_key[:12]}"

    @property
    def title(self) -> str:
        return f"{self.model} on {self.device}: {self.num_devices} x {self.npu}" + (
            f" ({self.options})" if self.options else ""
        )


@dataclass
class BuildView:
    manifest_sha256: str
    entries: list[dict[str, Any]]  # sorted by cell id
    groups: list[Group]
    compile_meta: dict[str, dict[str, Any]]  # compile key -> entry meta without the report
    varying: dict[str, list[str]] = field(default_factory=dict)  # model -> build options that vary
    deployments: dict[str, Any] = field(default_factory=dict)  # the manifest's deployment records, by name

    def options(self, entry: dict[str, Any], blocks: bool = True) -> str:
        """The short label of an entry's options: only those that vary among its model's cells,
        ``key=value`` in key order, and an explicit block count (``n=12``)."""
        inputs = entry["inputs"]
        opts = inputs.get("build_options") or {}
        parts = [f"{k}={_value(opts.get(k))}" for k in self.varying.get(inputs["model"], [])]
        if blocks and inputs.get("kvcache_num_blocks"):
            parts.append(f"n={inputs['kvcache_num_blocks']}")
        return ", ".join(parts)


def _value(value: Any) -> str:
    return "-" if value is None else value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def _varying(entries: list[dict[str, Any]]) -> dict[str, list[str]]:
    seen: dict[str, dict[str, set[str]]] = {}
    for e in entries:
        opts = e["inputs"].get("build_options") or {}
        keys = seen.setdefault(e["inputs"]["model"], {})
        for k in set(opts) | set(keys):
            keys.setdefault(k, set()).add(json.dumps(opts.get(k), sort_keys=True))
    return {m: sorted(k for k, values in keys.items() if len(values) > 1) for m, keys in seen.items()}


def budget_label(value: Any) -> str:
    """A budget as typed in a config: ``null``, ``0.3``, ``1`` (one byte), ``1.0``, ``"10GB"``."""
    if value is None:
        return "null"
    return value if isinstance(value, str) else repr(value)


def outcome(entry: dict[str, Any]) -> str:
    """The grid's status: full_pool, cut, failed, expected_failure, unexpected_success."""
    status = entry["status"]
    if status != "ok":
        return str(status)
    return "full_pool" if entry["kvcache_num_blocks"] == entry["num_full_blocks"] else "cut"


def _read_manifest(build_dir: Path) -> tuple[bytes, dict[str, Any]]:
    path = build_dir / "manifest.json"
    if absent(path, error=ReportInputError, hint="pass build_dir=PATH"):
        raise ReportInputError(
            f"report: no manifest at {path}; build first (rbln-build build_dir={build_dir}) or pass build_dir=PATH."
        )
    hint = "rebuild it with rbln-build, or pass build_dir=PATH"
    data = read_document(path, error=ReportInputError, hint=hint)
    manifest = parse_json(data, str(path), error=ReportInputError, hint=hint)
    try:
        version, cells = manifest["schema_version"], manifest["cells"]
        if not isinstance(cells, dict):
            raise TypeError("'cells' is not an object")
    except (ValueError, KeyError, TypeError) as exc:
        raise ReportInputError(
            f"report: {path} is not an rbln-build manifest ({exc}); rebuild it with rbln-build."
        ) from None
    if version != MANIFEST_SCHEMA:
        raise ReportInputError(
            f"report: {path} has schema_version {version!r}; this rbln-build reads {MANIFEST_SCHEMA}. "
            "Rebuild with this version, or report with the version that built it."
        )
    return data, manifest


def _read_compile(build_dir: Path, key: str) -> tuple[dict[str, Any] | None, AllocationReport | None, str | None]:
    """(meta without the report, the report, None) or (.., None, why not)."""
    if not (isinstance(key, str) and len(key) == 64 and all(c in "0123456789abcdef" for c in key)):
        return None, None, f"the compile key {str(key)[:70]!r} is not a sha256 digest; rebuild the manifest."
    path = build_dir / "cache" / "compile" / key / "entry.json"
    where = f"cache/compile/{key[:12]}…/entry.json"  # relative: the page holds no absolute path
    try:
        record = parse_json(read_document(path), str(path))
        if record.get("key") != key:
            raise ValueError(f"it names key {record.get('key')!r}")
        meta = dict(record["meta"])
        report = AllocationReport.from_json(meta.pop("report"))
    except (OSError, ValueError, KeyError, TypeError, AttributeError, UserError) as exc:
        if not path.exists():
            return (
                None,
                None,
                f"the compile entry {where} is not in the cache (gc removed it?); run rbln-build to rebuild it.",
            )
        why = str(exc).replace(str(build_dir), "<build_dir>")
        return None, None, f"the compile entry {where} is unreadable ({why}); run rbln-build to rebuild it."
    return meta, report, None


def read_old_manifest(path: Path) -> dict[str, Any]:
    """The cells of an earlier manifest or release (``report --compare``): a manifest.json, a
    release.json (its released cells' records), or the folder holding one."""
    from ._changes import cells_of, document_path

    hint = "give a manifest.json, a release.json, or the folder holding one"
    path = document_path(path)
    found = cells_of(load_json(path, error=ReportInputError, hint=hint, limit=256 * 2**20))
    if found is None:
        raise ReportInputError(f"report: --compare {path}: not an rbln-build manifest or release (no 'cells' mapping).")
    cells = found[0]
    odd = next((cid for cid, e in cells.items() if not isinstance(e, dict)), None)
    if odd is not None:
        raise ReportInputError(f"report: --compare {path}: cell {odd!r} is not an object; {hint}.")
    return cells


def load_build(build_dir: Path) -> BuildView:
    build_dir = Path(build_dir)
    data, manifest = _read_manifest(build_dir)
    try:
        return _view(build_dir, data, manifest)
    except (KeyError, TypeError, AttributeError) as exc:
        raise ReportInputError(
            f"report: {build_dir / 'manifest.json'} has a cell entry without the fields this rbln-build reads "
            f"({type(exc).__name__}: {exc}); rebuild it with this version."
        ) from None


_ENTRY_FIELDS = (
    "cell",
    "status",
    "inputs",
    "memory_budget",
    "budget_bytes",
    "kvcache_num_blocks",
    "num_full_blocks",
    "num_min_blocks",
    "compile_key",
    "cell_key",
)
_INPUT_FIELDS = (
    "model",
    "recipe",
    "recipe_hash",
    "device",
    "npu",
    "num_devices",
    "backend",
    "build_options",
    "attention",
    "kvcache_num_blocks",
)


def _check_entry(cid: str, entry: Any) -> dict[str, Any]:
    if not isinstance(entry, dict):
        raise KeyError(f"cell {cid!r} is not an object")
    missing = [k for k in _ENTRY_FIELDS if k not in entry]
    missing += [
        f"inputs.{k}" for k in _INPUT_FIELDS if not isinstance(entry.get("inputs"), dict) or k not in entry["inputs"]
    ]
    if missing:
        raise KeyError(f"cell {cid!r} lacks {', '.join(missing)}")
    for name, bound in _COUNT_BOUNDS.items():  # NaN, a string, 10**18 blocks: not what a build writes
        value = entry[name]
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= bound):
            raise TypeError(f"cell {cid!r} has {name} {str(value)[:40]!r}, not a count from 0 to {bound:,}")
    return entry


# The largest values a build writes, with room: a pool of 2**31 blocks, 2**50 bytes of budget.
_COUNT_BOUNDS = {
    "kvcache_num_blocks": 2**31,
    "num_full_blocks": 2**31,
    "num_min_blocks": 2**31,
    "budget_bytes": 2**50,
}


def _view(build_dir: Path, data: bytes, manifest: dict[str, Any]) -> BuildView:
    entries = [_check_entry(cid, manifest["cells"][cid]) for cid in sorted(manifest["cells"])]
    groups: dict[tuple[str, str], Group] = {}
    for e in entries:
        if e.get("compile_key") is None:
            continue  # a cell that could not even be compiled: it appears in the grid and the failures
        inputs = e["inputs"]
        key = (e["compile_key"], inputs["npu"])
        if key not in groups:
            groups[key] = Group(
                compile_key=e["compile_key"],
                npu=inputs["npu"],
                num_devices=inputs["num_devices"],
                model=inputs["model"],
                device=inputs["device"],
                attention=dict(inputs["attention"]),
                backend=inputs["backend"],
            )
        groups[key].cells.append(e)
    compile_meta: dict[str, dict[str, Any]] = {}
    view = BuildView(hashlib.sha256(data).hexdigest(), entries, [], compile_meta, _varying(entries))
    if isinstance(manifest.get("deployments"), dict):
        view.deployments = manifest["deployments"]
    for g in groups.values():
        g.options = view.options(g.cells[0], blocks=False)
        meta, report, problem = _read_compile(build_dir, g.compile_key)
        g.report, g.problem = report, problem
        if meta is not None:
            compile_meta[g.compile_key] = meta
            g.produced = meta.get("produced")
        g.cells.sort(key=lambda e: (e["budget_bytes"] is None, e["budget_bytes"] or 0, e["cell"]))
    # model -> device -> options: the order a reader looks for (the key breaks ties only)
    view.groups = sorted(groups.values(), key=lambda g: (g.model, g.device, g.npu, g.options, g.compile_key))
    return view
