"""The commands: one module per subcommand, each a thin layer over config, store and pipeline.

_main     dispatch, --help, --version, unknown commands, and the one error boundary
_build    the build (the default command): compose with Hydra, run the pipeline, print the table
_help     the build's help (this project's config groups and the overrides)
_explain  explain one model on one target;  _deploy: plan, serve-command, explain deployment=
_status   status;  _diff: diff;  _gc: gc;  _init: init;  _recipe: recipe add
_release  release and verify (over rbln_build.release)
_guard    Hydra's errors condensed to one line, internal errors logged, a sweep's deferred files
"""

from __future__ import annotations

from ._main import main

__all__ = ["main"]
