"""What the build stages hand each other: frozen values with a JSON form, stored in the Store.

* ``CompileOutcome``: a compile key's outcome. Success is the Store's compile entry itself; a
  failure is recorded as this value (``cache/failures/<compile key>.json``), so a cell in another
  process learns why its compile is missing from the Store alone.
* ``CellResult``: one cell's resolution, its artifact pointer, or its error
  (``cache/results/<cell key>.json``).

``retry`` separates the two kinds of failure. A failure that the inputs determine (the estimator's
errors, a compiler that reports the model does not fit, a count the backend cannot hold) is final
for those inputs: it is stored and reused until an input changes. Any other failure (a crash, a full
disk, a missing SDK) is recorded with ``retry=True`` so that the manifest can name it, and the next
run tries again.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

__all__ = ["CellResult", "CompileOutcome", "RESULT_SCHEMA"]

RESULT_SCHEMA = 2


@dataclass(frozen=True)
class CompileOutcome:
    """A compile key's failure (a success is the Store entry, which this never duplicates)."""

    compile_key: str
    error: str
    error_kind: str
    retry: bool

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> CompileOutcome:
        return cls(**_checked(cls, data))


@dataclass(frozen=True)
class CellResult:
    """One cell's outcome. Every field is always present, so the manifest's shape never varies."""

    cell_key: str
    compile_key: str | None
    produced: str | None = None  # "program" | "plan" | "rbln" (what the backend made), None on error
    kvcache_num_blocks: int | None = None
    num_full_blocks: int | None = None
    num_min_blocks: int | None = None
    budget_bytes: int | None = None  # per device, resolved
    budget_for_floor: dict[str, Any] | None = None  # BudgetAnswer.to_json()
    budget_for_full_pool: dict[str, Any] | None = None
    warnings: tuple[str, ...] = ()
    artifact_key: str | None = None
    artifact_hash: str | None = None
    error: str | None = None
    error_kind: str | None = None
    retry: bool = False  # a failure the next run tries again (see the module docstring)
    quality: dict[str, Any] | None = None  # a quantized variant's figures (variants._quality); absent: none

    @property
    def ok(self) -> bool:
        return self.error is None

    def failed(self, error: str, kind: str, retry: bool) -> CellResult:
        return replace(self, error=error, error_kind=kind, retry=retry, artifact_key=None, artifact_hash=None)

    def with_artifact(self, key: str, content_hash: str) -> CellResult:
        """This result with its artifact: its fields copied as they are, the two replaced
        (``dataclasses.replace`` runs ``__init__`` again: 6-14 us, against 2, a cell of a sweep)."""
        new = object.__new__(CellResult)
        new.__dict__.update(self.__dict__, artifact_key=key, artifact_hash=content_hash)
        return new

    def to_json(self) -> dict[str, Any]:
        # Field by field rather than ``asdict`` (a deep copy through every value: most of a sweep's
        # per-cell cost); the two nested answers are flat dicts, copied so the caller owns them.
        out = {name: getattr(self, name) for name in _CELL_FIELDS}
        if out["quality"] is None:
            del out["quality"]  # only a variant's record has it: every other record keeps its shape
        out["warnings"] = list(self.warnings)
        for name in ("budget_for_floor", "budget_for_full_pool"):
            if out[name] is not None:
                out[name] = dict(out[name])
        return out

    @classmethod
    def from_json(cls, data: Any) -> CellResult:
        values = _checked(cls, data)
        values["warnings"] = tuple(values["warnings"])
        return cls(**values)


_CELL_FIELDS = tuple(f.name for f in fields(CellResult))
_FIELD_NAMES: dict[type, frozenset[str]] = {}
_OPTIONAL = frozenset({"quality"})  # a CellResult field a record may omit (None)


def _checked(cls: type, data: Any) -> dict[str, Any]:
    """Exactly the dataclass's fields; anything else is a ValueError (the Store treats it as corrupt)."""
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = frozenset(f.name for f in fields(cls))
    if not isinstance(data, dict) or (data.keys() != names and data.keys() | _OPTIONAL != names):
        raise ValueError(f"not a {cls.__name__}: expected the keys {sorted(names)}")
    return dict(data)
