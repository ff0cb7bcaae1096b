"""The docs cannot drift from the code: every ``rbln_build/...`` path and every ``rbln_build.x.y``
module or name written in README.md and docs/*.md exists."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# Paths the docs name that are made, not kept in the source tree (and who makes them).
MADE = {"rbln_build/_data": "setup.py copies conf/ and recipes/ into the wheel there"}

_PATH = re.compile(r"rbln_build/[A-Za-z0-9_/.]*[A-Za-z0-9_/]")
_DOTTED = re.compile(r"(?<![\w/.-])rbln_build(?:\.[A-Za-z_][A-Za-z0-9_]*)+")


def _refs(pattern: re.Pattern[str]) -> list[tuple[str, str]]:
    out = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for m in pattern.finditer(text):
            if text[m.end() : m.end() + 1] == "<":  # a template (rbln_build/commands/_<name>.py)
                continue
            out.append((doc.relative_to(ROOT).as_posix(), m.group(0).rstrip("./")))
    return sorted(set(out))


@pytest.mark.parametrize(("doc", "ref"), _refs(_PATH), ids=lambda v: str(v))
def test_every_path_in_the_docs_exists(doc: str, ref: str) -> None:
    path = ROOT / ref
    exists = path.exists() or path.with_suffix(".py").exists()
    assert exists or ref in MADE, f"{doc} names {ref}, which does not exist"


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for i in range(len(parts), 1, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


@pytest.mark.parametrize(("doc", "ref"), _refs(_DOTTED), ids=lambda v: str(v))
def test_every_module_in_the_docs_exists(doc: str, ref: str) -> None:
    if ref in ("rbln_build.py",):
        pytest.skip("a file name, not a module")
    assert _resolves(ref), f"{doc} names {ref}, which is no module or name of rbln_build"
