"""The commands that answer questions without building: explain, plan, serve-command, diff.

_explain     ``explain``: the budget breakdown of one model on one target (--json, --plot)
_deploy      ``plan``, ``serve-command`` and ``explain deployment=``: a deployment's plan and commands
_serve_cell  ``serve-command CELL_DIR``: the vllm-rbln command of one built or released cell
_diff        ``diff OLD NEW``: two manifests compared cell by cell

Each module has ``main(argv) -> int`` (``rbln_build.commands`` dispatches to them and is the one
error boundary). Nothing is imported here, so dispatching to one command loads only its module.
"""
