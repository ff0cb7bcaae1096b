"""A release against its rebuild: every file of the selected cells (sha256, then where inside it
differs) and every cell's manifest record in ``release.json`` (a JSON key path), with the input a
record difference points at named as the likely cause.

Not compared: ``release.json``'s ``manifest_sha256``, ``selection`` and ``not_released`` describe
the whole build the release was cut from (cells it did not release), which a rebuild of the
released cells does not make; ``provenance`` is derived from the records, which are compared.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._inside import json_difference, where_inside

__all__ = ["Difference", "compare_release", "cause_of"]

_CAUSES = (
    ("inputs.toolchain", "the toolchain (the versions the release's cells record differ from this environment's)"),
    ("inputs.recipe_hash", "the recipe {recipe} (its files in this checkout are not the release's)"),
    ("inputs.weights_hash", "the weights of recipe {recipe} (their content is not the release's)"),
    ("inputs.code", "rbln-build's own code (another rbln-build than the one that made the release)"),
    ("inputs.build_options", "the build options (the model's or recipe's configuration)"),
    ("inputs.attention", "the build options (the model's or recipe's configuration)"),
)


@dataclass(frozen=True)
class Difference:
    file: str  # the release's relative path ("release.json" for a cell's record)
    where: str  # where inside it differs, or how (missing, extra)
    cause: str | None = None  # the input a record difference points at

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "where": self.where, "cause": self.cause}


def cause_of(path: str, record: dict[str, Any]) -> str | None:
    """The input a record difference at ``path`` (``inputs.recipe_hash: ...``) points at."""
    recipe = ((record or {}).get("inputs") or {}).get("recipe")
    for prefix, text in _CAUSES:
        if path.startswith(prefix):
            return text.format(recipe=recipe)
    return None


def _local_copy(release: Any, rel: str, scratch: Path) -> Path:
    """The released file as a local path: itself for a folder release, a download for a URL."""
    root = getattr(release, "root", None)
    if root is not None:
        return Path(root) / rel
    out = scratch / rel.replace("/", "__")
    with open(out, "wb") as f:
        for chunk in release.chunks(rel):
            f.write(chunk)
    return out


def compare_release(
    release: Any, body: dict[str, Any], cells: list[str], staged_root: Path, staged_body: dict[str, Any]
) -> list[Difference]:
    """Every difference of ``cells`` between the release (``release``, its parsed ``body``) and the
    rebuild staged at ``staged_root`` (its ``staged_body``): files in path order, then records."""
    chosen = set(cells)
    mine = {rel: v for rel, v in (body.get("files") or {}).items() if rel.split("/", 1)[0] in chosen}
    theirs = {rel: v for rel, v in (staged_body.get("files") or {}).items() if rel.split("/", 1)[0] in chosen}
    found: list[Difference] = []
    with tempfile.TemporaryDirectory(prefix="rbln-reproduce-") as scratch:
        for rel in sorted(set(mine) | set(theirs)):
            if rel not in theirs:
                found.append(Difference(rel, "in the release, not made by the rebuild"))
            elif rel not in mine:
                found.append(Difference(rel, "made by the rebuild, not in the release"))
            elif (mine[rel].get("sha256"), mine[rel].get("size")) != (theirs[rel]["sha256"], theirs[rel]["size"]):
                found.append(Difference(rel, where_inside(_local_copy(release, rel, Path(scratch)), staged_root / rel)))
    for cid in sorted(chosen):
        a = ((body.get("cells") or {}).get(cid) or {}).get("record")
        b = ((staged_body.get("cells") or {}).get(cid) or {}).get("record")
        # the inputs first: a difference there is the cause of the others (a content hash, a count)
        path = json_difference((a or {}).get("inputs"), (b or {}).get("inputs"), "inputs") or json_difference(a, b)
        if path is not None:
            found.append(Difference("release.json", f"cells.{cid}.record.{path}", cause_of(path, a or {})))
    return found
