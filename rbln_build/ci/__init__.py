"""Machine outputs for CI (docs/building.md, "CI outputs"): what a CI system reads of a build.

_junit     ``--junit FILE``: one test case per cell, failures and expected failures as JUnit says them
_flags     the build's ``--junit``/``--json`` flags, and writing the outputs after a build
_markdown  the GitHub step summary (``$GITHUB_STEP_SUMMARY``): counts, failures by kind, slowest compiles

Each works from the manifest entries and summary.json's dict a build already has; nothing here
imports torch or touches the Store.
"""

from __future__ import annotations

from ._flags import CiFlags, write_ci_outputs
from ._junit import junit_xml, write_junit
from ._markdown import STEP_SUMMARY_ENV, append_step_summary, step_summary

__all__ = [
    "STEP_SUMMARY_ENV",
    "CiFlags",
    "append_step_summary",
    "junit_xml",
    "step_summary",
    "write_ci_outputs",
    "write_junit",
]
