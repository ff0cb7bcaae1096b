"""The command line: dispatch, help, the one error boundary, and the commands that build.

_main     dispatch, --help, --version, unknown commands, and the one error boundary
_build    the build (the default command): compose with Hydra, run the pipeline, print the table
_compose_once  a plain run's config composed once (Hydra's run mode composes it twice)
_table    the build's table (summary or every cell)
_help     the build's help (this project's config groups and the overrides) and --version
_status   status;  _gc: gc (_gc_remote: gc of cache.remote)
_report   report: the reporting layer's command, answered by the no-op short cut when it can
_guard    Hydra's errors condensed to one line, internal errors logged, a sweep's deferred files

Other commands live with what they work on: ``rbln_build.inspection`` (explain, plan,
serve-command, diff, estimate), ``rbln_build.scaffold`` (init, recipe add), ``rbln_build.release``
(release, verify). The no-op short cut the build, status and report use is ``rbln_build.noop``.
"""

from __future__ import annotations

from ._guard import report_internal
from ._main import entry, main

__all__ = [
    "entry",
    "main",
    "report_internal",
]
