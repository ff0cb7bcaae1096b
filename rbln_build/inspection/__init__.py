"""The commands that answer questions without building: explain, plan, serve-command, diff, estimate.

_explain     ``explain``: the budget breakdown of one model on one target (--json, --plot)
_deploy      ``plan``, ``serve-command`` and ``explain deployment=``: a deployment's plan and commands
_serve_cell  ``serve-command CELL_DIR``: the vllm-rbln command of one built or released cell
_diff        ``diff OLD NEW``: two manifests compared cell by cell
_jsonl       ``python -m rbln_build.estimate``: the estimator as a JSON-lines filter

The public names are the commands' entry points, ``f(argv) -> exit status``
(``rbln_build.commands`` dispatches to them and is the one error boundary). Each imports its module
when called, so running one command loads only what that command needs.
"""

from __future__ import annotations

__all__ = ["diff_main", "estimate_main", "explain_deployment_main", "explain_main", "plan_main", "serve_main"]


def explain_main(argv: list[str]) -> int:
    """``rbln-build explain MODEL DEVICE [BUDGET]`` (``python -m rbln_build.explain``)."""
    from ._explain import main

    return main(argv)


def explain_deployment_main(argv: list[str]) -> int:
    """``rbln-build explain deployment=NAME``."""
    from ._deploy import explain_main as main

    return main(argv)


def plan_main(argv: list[str]) -> int:
    """``rbln-build plan deployment=NAME``."""
    from ._deploy import plan_main as main

    return main(argv)


def serve_main(argv: list[str]) -> int:
    """``rbln-build serve-command deployment=NAME`` or ``serve-command CELL_DIR``."""
    from ._deploy import serve_main as main

    return main(argv)


def diff_main(argv: list[str]) -> int:
    """``rbln-build diff OLD.json NEW.json``."""
    from ._diff import main

    return main(argv)


def estimate_main(argv: list[str] | None = None) -> int:
    """``python -m rbln_build.estimate``: one request per line on stdin, one result per line out."""
    from ._jsonl import main

    return main(argv)
