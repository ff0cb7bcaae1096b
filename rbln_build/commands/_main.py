"""``rbln-build``: one tool, many commands. Dispatch, help, version, and the one error boundary.

Every command is a module of this package with ``main(argv) -> int``; this module chooses it, gives
it its ``--help``, and turns what it raises into one line and an exit status (``run_command``):

    0  success                     1  a cell (or a check) failed
    2  the user's input is wrong   3  a bug in rbln-build (one line; the traceback in a file)
    130 interrupted (Ctrl-C)       a closed pipe (``| head``) ends quietly

A first word with no ``=`` that is not a command is an unknown command (with the closest names);
``--project DIR`` may come before the command.
"""

from __future__ import annotations

import difflib
import importlib
import os
import sys
from dataclasses import dataclass
from typing import Any

__all__ = ["main", "entry", "COMMANDS", "run_command"]


@dataclass(frozen=True)
class Command:
    target: str  # "module:function", function(argv) -> exit status
    summary: str  # one line for the top-level --help
    usage: str  # the command's own --help ("" when the command prints its own)


COMMANDS: dict[str, Command] = {
    "build": Command("rbln_build.commands._build:run", "build the matrix (the default command)", ""),
    "explain": Command(
        "rbln_build.inspection:explain_main", "budget breakdown of one model on one target (--json, --plot)", ""
    ),
    "plan": Command("rbln_build.inspection:plan_main", "the co-location plan of a deployment, or what to change", ""),
    "serve-command": Command(
        "rbln_build.inspection:serve_main",
        "one vllm-rbln command per model of a built deployment, or of one built or released cell folder",
        "",
    ),
    "report": Command("rbln_build.commands._report:main", "build/report/index.html: grid, curves, DRAM, failures", ""),
    "status": Command(
        "rbln_build.commands._status:main",
        "CI drift check: what a build would redo and why (exit 1 when anything would)",
        "usage: rbln-build status [--project DIR] [--json] [OVERRIDE ...]\n\n"
        "Compose the matrix as a build would and say, per cell, whether it is up to date, new, or which\n"
        "input changed; cells in the manifest that left the matrix are listed as removed. Reads only.\n"
        "Exit status: 0 up to date, 1 a build would redo something, 2 a configuration error.\n",
    ),
    "diff": Command(
        "rbln_build.inspection:diff_main",
        "compare two manifests or releases cell by cell (exit 1 when a resolved count changed)",
        "usage: rbln-build diff OLD NEW [--json | --format text|markdown|json]\n\n"
        "Compare two manifests or releases (manifest.json, release.json, or a folder holding one): one\n"
        "row per changed cell with its deltas (blocks, bytes per device), largest first; a budget edit\n"
        "or a change of the options the matrix sets pairs a cell with its old self. --format markdown:\n"
        "a PR comment.\n"
        "Exit status: 0 no resolved count changed, 1 a count changed, 2 a file cannot be read.\n",
    ),
    "gc": Command(
        "rbln_build.commands._gc:main",
        "remove cache entries and links nothing references any more (--dry-run)",
        "usage: rbln-build gc [--project DIR] [--dry-run] [--json] [--keep MANIFEST ...] [OVERRIDE ...]\n\n"
        "Remove what neither the current matrix nor a kept manifest references: cache entries, result\n"
        "records and the artifact links rbln-build made. --dry-run lists them and the bytes they hold.\n"
        "Exit status: 0 done, 2 a configuration error.\n",
    ),
    "init": Command(
        "rbln_build.scaffold:init_main",
        "make a new project: rbln-build.yaml, conf/, recipes/, .gitignore",
        "",
    ),
    "recipe": Command(
        "rbln_build.scaffold:recipe_main",
        "recipe add NAME --from DIR: a recipe from a local checkpoint",
        "",
    ),
    "release": Command(
        "rbln_build.commands._gc_remote:release_main",
        "built cells as self-contained folders + release.json, to a folder or URL (--sign)",
        "",
    ),
    "reproduce": Command(
        "rbln_build.reproduce:reproduce_main",
        "rebuild a release's cells from its commit and compare every file with its release.json",
        "",
    ),
    "verify": Command(
        "rbln_build.release:verify_main",
        "check a release (folder or URL) against its release.json, without the build dir (--key)",
        "",
    ),
}
_HYDRA_VALUE_FLAGS = {"--cfg", "-c", "--package", "-p", "--config-path", "-cp", "--config-name", "-cn"}
_HYDRA_VALUE_FLAGS |= {"--config-dir", "-cd", "--info", "-i", "--experimental-rerun"}


def top_help() -> str:
    width = max(len(n) for n in COMMANDS)
    lines = [
        "rbln-build: build a matrix of model x device x memory budget into compiled artifacts, each with its",
        "resolved kvcache_num_blocks, and a manifest. Unchanged cells are skipped.",
        "",
        "usage: rbln-build [--project DIR] [COMMAND] [ARG ...]      (no command: build)",
        "",
        "Commands:",
    ]
    lines += [f"  {name.ljust(width)}  {c.summary}" for name, c in COMMANDS.items()]
    lines += [
        "",
        "  rbln-build COMMAND --help   that command's own help",
        "  rbln-build --version        rbln-build's version and toolchain",
        "",
    ]
    return "\n".join(lines)


def _first_word(argv: list[str]) -> int | None:
    """The index of the first argument that is a word, not an override or a flag (or a flag's value)."""
    skip = False
    for i, a in enumerate(argv):
        if skip:
            skip = False
            continue
        if a in _HYDRA_VALUE_FLAGS or a in ("--project", "--junit"):  # --junit FILE: the build's (rbln_build.ci)
            skip = True
            continue
        if a.startswith(("-", "+", "~")) or "=" in a:
            continue
        return i
    return None


def _resolve(target: str) -> Any:
    module, func = target.split(":")
    return getattr(importlib.import_module(module), func)


def run_command(name: str, fn: Any, argv: list[str]) -> int:
    """The one error boundary: the project's errors become one line and exit 2 (1 for a failure the
    command reports as its result), Ctrl-C 130, a closed pipe ends quietly, anything else is a bug:
    one line naming the file that holds the traceback, exit 3."""
    from ..errors import RblnBuildError
    from ._guard import report_internal

    prefix = "rbln-build" if name == "build" else f"rbln-build {name}"
    state: dict[str, Any] = {}
    try:
        if name == "build":
            return int(fn(argv, state))
        return int(fn(argv))
    except BrokenPipeError:
        return _closed_pipe()
    except RblnBuildError as exc:  # UserError (ConfigError, RecipeError, InputError: a file they named), ...
        print(f"{prefix}: {' '.join(str(exc).split())}", file=sys.stderr)  # one line, whatever a value held
        if exc.detail:  # text rbln-build rendered itself (a plan's tables), kept as it is
            print(exc.detail.rstrip(), file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # workers are stopped; the Store holds only whole entries
        print(f"{prefix}: interrupted; finished compiles and cells are kept, the next run resumes.", file=sys.stderr)
        return 130
    except SystemExit as exc:  # a command (or Hydra) chose its status
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    except Exception as exc:  # a bug: one line, the traceback in a file
        print(report_internal(exc, state.get("build_dir")), file=sys.stderr)
        return 3


def _closed_pipe() -> int:
    """The reader went away (``| head``): stop writing, say nothing, exit 0."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return 0


def dispatch(argv: list[str]) -> int:
    if argv in (["--version"], ["-V"]):
        from ._help import version_text

        print(version_text())
        return 0
    if argv in (["help"],):
        argv = ["--help"]
    i = _first_word(argv)
    if i is not None:
        word = argv[i]
        if word not in COMMANDS:
            close = difflib.get_close_matches(word, list(COMMANDS), n=3, cutoff=0.5)
            hint = f" (did you mean {' or '.join(close)}?)" if close else ""
            print(
                f"rbln-build: unknown command {word!r}{hint}. Commands: {', '.join(COMMANDS)}; "
                "overrides are KEY=VALUE (rbln-build --help).",
                file=sys.stderr,
            )
            return 2
        before, rest = argv[:i], argv[i + 1 :]
        if word != "build" and [a for a in before if a != "--project"] and not _only_project(before):
            print(
                f"rbln-build: {' '.join(before)} before {word!r}: put the command first "
                f"(rbln-build {word} {' '.join(before)} ...).",
                file=sys.stderr,
            )
            return 2
        if word != "build" and before:  # --project DIR before the command: the same as RBLN_BUILD_PROJECT
            from ..config import PROJECT_ENV

            os.environ[PROJECT_ENV] = before[-1].split("=", 1)[1] if "=" in before[-1] else before[-1]
            before = []
        name, args = word, before + rest
    else:
        name, args = "build", argv
    if name == "explain" and any(a.startswith("deployment=") for a in args):
        name = "explain-deployment"
        command = Command("rbln_build.inspection:explain_deployment_main", "", "")
    else:
        command = COMMANDS[name]
    if command.usage and any(a in ("-h", "--help") for a in args):
        print(command.usage, end="")
        return 0
    if name == "build" and any(a in ("-h", "--help") for a in args):
        return run_command("build", _build_help, args)
    return run_command(name, _resolve(command.target), args)


def _build_help(argv: list[str], state: dict[str, Any]) -> int:
    from ._help import build_help

    print(top_help())
    print(build_help(argv))
    return 0


def _only_project(before: list[str]) -> bool:
    """``--project DIR`` (or ``--project=DIR``) and nothing else."""
    rest = list(before)
    while rest:
        if rest[0] == "--project" and len(rest) >= 2:
            rest = rest[2:]
        elif rest[0].startswith("--project="):
            rest = rest[1:]
        else:
            return False
    return True


class _StdoutUntilClosed:
    """sys.stdout that stops writing, quietly, once the reader went away (``| head``): the command
    runs to its end and keeps its exit status (a build's failed cells still exit 1)."""

    def __init__(self, real: Any) -> None:
        self._real = real
        self.closed_pipe = False

    def write(self, text: str) -> int:
        if not self.closed_pipe:
            try:
                return int(self._real.write(text))
            except BrokenPipeError:
                self._close()
        return len(text)

    def flush(self) -> None:
        if not self.closed_pipe:
            try:
                self._real.flush()
            except BrokenPipeError:
                self._close()

    def _close(self) -> None:
        self.closed_pipe = True
        _closed_pipe()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def main() -> None:
    sys.stdout = _StdoutUntilClosed(sys.stdout)
    code = dispatch(sys.argv[1:])
    sys.stdout.flush()
    sys.exit(code)


def entry() -> None:
    """The process's entry point (the ``rbln-build`` script, ``python -m rbln_build.cli``): ``main``,
    then the exit hooks (``atexit``), the streams flushed, and an exit without the interpreter's
    teardown, which frees every object one by one (about 0.3 s after a 10,000-cell sweep, measured).
    Only when this is the process's last thread and it has no child process: otherwise the usual exit,
    which waits for them. ``main`` itself exits as usual (tests call it in process)."""
    from .. import _interrupts

    _interrupts.catch()  # Ctrl-C is never swallowed by a finalizer that happened to run
    status = 0
    try:
        main()
    except SystemExit as exc:
        code = exc.code
        threading = sys.modules.get("threading")
        processes = sys.modules.get("multiprocessing")
        if (
            not isinstance(code, int)
            or not 0 <= code <= 255
            or (threading is not None and threading.active_count() > 1)
            or (processes is not None and processes.active_children())
        ):
            raise
        status = code
    import atexit

    atexit._run_exitfuncs()  # what the interpreter runs at exit (logging's flush, multiprocessing's hooks)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass  # a closed pipe (| head): main has ended quietly already
    os._exit(status)
