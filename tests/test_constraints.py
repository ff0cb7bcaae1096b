"""constraints.txt (scripts/pin_constraints.py) pins every requirement of rbln-build and of every
extra, each pin inside the range pyproject.toml asks for, torch and transformers at the versions
optimum-rbln 0.12.0 pins; .ci/run installs with it."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent


def pins() -> dict[str, Version]:
    out = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: {line!r} is not NAME==VERSION"
            out[canonicalize_name(name)] = Version(version)
    return out


def requirements() -> list[tuple[str, Requirement]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    found = [("dependencies", Requirement(r)) for r in project["dependencies"]]
    for extra, reqs in project["optional-dependencies"].items():
        found += [(f"[{extra}]", Requirement(r)) for r in reqs]
    return [(where, r) for where, r in found if canonicalize_name(r.name) != "rbln-build"]


def test_every_requirement_of_every_extra_is_pinned_inside_its_range() -> None:
    pinned = pins()
    problems = []
    for where, req in requirements():
        version = pinned.get(canonicalize_name(req.name))
        if version is None:
            problems.append(f"{where} {req}: not pinned")
        elif not req.specifier.contains(version, prereleases=True):
            problems.append(f"{where} {req}: pinned at {version}, outside the range")
    assert problems == [], "\n".join(problems) + "\nregenerate: python scripts/pin_constraints.py (its docstring)"


def test_torch_and_transformers_are_the_versions_optimum_rbln_pins() -> None:
    pinned = pins()
    assert pinned["torch"] == Version("2.13.0") and pinned["transformers"] == Version("5.15.1")
    assert "rbln-build" not in pinned  # the project itself is never constrained


def test_ci_installs_with_the_constraints() -> None:
    run = (ROOT / ".ci" / "run").read_text()
    installs = [line for line in run.splitlines() if "pip install" in line and "-e " in line]
    assert installs and all("-c constraints.txt" in line for line in installs), installs
