"""Is this checkout the release's sources? The project's git commit and cleanliness against the
commit the release's provenance names (``rbln_build.release.git_state``, the same check
the release made), and the toolchain here against the one its cells record.

A mismatch is refused unless the user allows it (``--allow-dirty``, ``--allow-other-commit``); what
was allowed is said, since a rebuild from other sources proves nothing about the release.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..release import dirty_files, git_state

__all__ = ["SourceCheck", "check_sources", "toolchain_differences"]


@dataclass
class SourceCheck:
    commit: str | None  # this checkout's HEAD
    allowed: list[str]  # what differs and was allowed (said in the verdict)


def check_sources(
    provenance: dict[str, Any],
    root: Path,
    exclude: tuple[Path, ...],
    allow_dirty: bool,
    allow_other_commit: bool,
) -> SourceCheck:
    """Refuse (UserError, exit 2) a checkout that is not the release's commit, or has uncommitted
    changes, unless allowed; the release's own state (no commit, a dirty tree) is said too."""
    git = provenance.get("git")
    recorded: dict[str, Any] = git if isinstance(git, dict) else {}
    want = recorded.get("commit")
    here = git_state(root, exclude)
    allowed: list[str] = []
    if not isinstance(want, str):
        note = recorded.get("note") or "no commit recorded"
        if not allow_other_commit:
            raise UserError(
                f"the release records no git commit ({note}), so its sources cannot be checked out; "
                "pass --allow-other-commit to rebuild it from this checkout anyway (the result then proves less)."
            )
        allowed.append(f"the release records no commit ({note})")
    elif here.get("commit") != want:
        got = here.get("commit") or here.get("note") or "no commit"
        if not allow_other_commit:
            raise UserError(
                f"{root}: this checkout is at {got}, the release was built from commit {want}; "
                f"check it out (git -C {root} checkout {want[:12]}) or pass --allow-other-commit."
            )
        allowed.append(f"this checkout is at {got}, not the release's commit {want[:12]}")
    if recorded.get("clean") is False:
        allowed.append("the release was made from a tree with uncommitted changes (its sources are not a commit)")
    if here.get("commit") is not None and here.get("clean") is False:
        files = dirty_files(root, exclude)
        more = f" and {len(files) - 5} more" if len(files) > 5 else ""
        shown = ", ".join(files[:5]) + more
        if not allow_dirty:
            raise UserError(
                f"{root}: the checkout has uncommitted changes ({shown}); commit or stash them, or pass "
                "--allow-dirty to rebuild from them anyway."
            )
        allowed.append(f"this checkout has uncommitted changes ({shown})")
    return SourceCheck(here.get("commit"), allowed)


def toolchain_differences(
    records: dict[str, Any], here: dict[str, dict[str, str]], version: str, recorded_version: Any
) -> list[str]:
    """What the release's cells record as their toolchain (per backend) that this environment does
    not have, and rbln-build's own version: ``["torch 2.12.0 in the release, 2.13.0 here", ...]``."""
    out: dict[str, str] = {}
    if isinstance(recorded_version, str) and recorded_version != version:
        out["rbln-build"] = f"rbln-build {recorded_version} in the release, {version} here"
    for record in records.values():
        found = (record or {}).get("inputs")
        inputs: dict[str, Any] = found if isinstance(found, dict) else {}
        recorded_tools = inputs.get("toolchain")
        tools: dict[str, Any] = recorded_tools if isinstance(recorded_tools, dict) else {}
        mine = here.get(str(inputs.get("backend")), {})
        for name in sorted(set(tools) | set(mine)):
            if tools.get(name) != mine.get(name):
                out.setdefault(
                    name, f"{name} {tools.get(name) or 'absent'} in the release, {mine.get(name) or 'absent'} here"
                )
    return [out[k] for k in sorted(out)]
