"""The build's flags for CI outputs (``--junit FILE``, ``--json``) and writing them after a build."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import UserError
from ._junit import write_junit
from ._markdown import STEP_SUMMARY_ENV, append_step_summary

__all__ = ["CiFlags", "write_ci_outputs"]


@dataclass(frozen=True)
class CiFlags:
    """The build's machine outputs (rbln_build.ci): ``--junit FILE``, ``--json`` (the summary on stdout)."""

    junit: Path | None = None
    json: bool = False

    @staticmethod
    def take(argv: list[str]) -> tuple[CiFlags, list[str]]:
        """The flags out of ``argv`` (Hydra's), and the rest. A --junit whose folder is not there is
        a usage error before anything is built."""
        junit: Path | None = None
        rest: list[str] = []
        it = iter(argv)
        for a in it:
            if a == "--junit" or a.startswith("--junit="):
                value = a.split("=", 1)[1] if "=" in a else next(it, "")
                if not value or value.startswith("-"):
                    raise UserError("--junit needs a file name: rbln-build --junit build-junit.xml [OVERRIDE ...]")
                junit = Path(value)
                if junit.is_dir():
                    raise UserError(
                        f"--junit {value}: a folder; give a file path in it, e.g. --junit {junit / 'build-junit.xml'}."
                    )
                if not (junit.parent if str(junit.parent) else Path(".")).is_dir():
                    raise UserError(
                        f"--junit {value}: its folder does not exist ({junit.parent}); create it first or give a file path in an existing folder."
                    )
            else:
                rest.append(a)
        json_flag = "--json" in rest
        return CiFlags(junit, json_flag), [a for a in rest if a != "--json"]

    @property
    def any(self) -> bool:
        return self.junit is not None or self.json or bool(os.environ.get(STEP_SUMMARY_ENV))


def write_ci_outputs(flags: CiFlags, entries: list[dict[str, Any]], summary: dict[str, Any], manifest: str) -> bool:
    """Write the JUnit file and append the GitHub step summary; False when one could not be written."""
    ok = True
    if flags.junit is not None:
        try:
            write_junit(flags.junit, entries, summary)
        except OSError as exc:
            print(f"rbln-build: --junit {flags.junit}: cannot write it ({exc.strerror or exc}).", file=sys.stderr)
            ok = False
    try:
        append_step_summary(entries, summary, manifest)
    except OSError as exc:
        where = os.environ.get(STEP_SUMMARY_ENV)
        print(
            f"rbln-build: {STEP_SUMMARY_ENV}={where}: cannot append the step summary ({exc.strerror or exc}).",
            file=sys.stderr,
        )
        ok = False
    return ok
