"""The GitHub step summary of a build: Markdown appended to the file ``$GITHUB_STEP_SUMMARY`` names
(GitHub shows it on the run's page). Counts by status, the failures grouped by kind with the first
few cells named (never one row per cell: a 10,000-cell sweep stays a screenful), and the slowest
compiles of the run."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["STEP_SUMMARY_ENV", "append_step_summary", "step_summary"]

STEP_SUMMARY_ENV = "GITHUB_STEP_SUMMARY"
SHOWN = 5  # cells named per failure kind; compiles shown


def cell(text: Any) -> str:
    """``text`` safe inside a Markdown table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def step_summary(entries: Sequence[Mapping[str, Any]], summary: Mapping[str, Any], manifest: str) -> str:
    failing = ("failed", "unexpected_success")
    lines = [
        "### rbln-build",
        "",
        "| cells | compiled | finalized | reused | failed | failed as expected |",
        "|---:|---:|---:|---:|---:|---:|",
        f"| {summary.get('cells', len(entries)):,} | {summary.get('compiled', 0):,} | {summary.get('finalized', 0):,} "
        f"| {summary.get('skipped', 0):,} | {summary.get('failed', 0):,} | {summary.get('expected_failures', 0):,} |",
        "",
    ]
    kinds: dict[str, list[Mapping[str, Any]]] = {}
    for e in entries:
        if e.get("status") in failing:
            kind = (
                "unexpected_success" if e["status"] == "unexpected_success" else str(e.get("error_kind") or "unknown")
            )
            kinds.setdefault(kind, []).append(e)
    if kinds:
        lines += ["**Failed cells, by kind**", "", "| kind | cells | first cells | first error |", "|---|---:|---|---|"]
        for kind, group in sorted(kinds.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            group = sorted(group, key=lambda e: str(e["cell"]))
            names = ", ".join(f"`{cell(e['cell'])}`" for e in group[:SHOWN])
            more = f" and {len(group) - SHOWN:,} more" if len(group) > SHOWN else ""
            lines.append(f"| {cell(kind)} | {len(group):,} | {names}{more} | {cell(group[0].get('error') or '-')} |")
        lines.append("")
    else:
        lines += ["No cell failed." if entries else "No cells.", ""]
    compiles = sorted(summary.get("compiles") or [], key=lambda c: -float(c.get("seconds") or 0))
    if compiles:
        lines += ["**Slowest compiles of this run**", "", "| compile | seconds | cells |", "|---|---:|---:|"]
        lines += [
            f"| {cell(c.get('label'))} | {float(c.get('seconds') or 0):.1f} | {int(c.get('cells_redone') or 0):,} |"
            for c in compiles[:SHOWN]
        ]
        lines.append("")
    lines += [f"Manifest: `{cell(manifest)}`", ""]
    return "\n".join(lines)


def append_step_summary(entries: Sequence[Mapping[str, Any]], summary: Mapping[str, Any], manifest: str) -> Path | None:
    """Append ``step_summary`` to ``$GITHUB_STEP_SUMMARY`` when it is set; the path, or None. Raises OSError."""
    target = os.environ.get(STEP_SUMMARY_ENV)
    if not target:
        return None
    with open(target, "a", encoding="utf-8") as f:
        f.write(step_summary(entries, summary, manifest) + "\n")
    return Path(target)
