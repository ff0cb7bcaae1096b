"""The house: each subpackage imports only the layers below it, and nothing imports in a cycle.

    commands    -> every layer below (dispatch, help, the one error boundary; build, status, gc)
    scaffold    -> config, memory, estimator, errors   (init, recipe add: files the user edits)
    inspection  -> release, pipeline, colocation, config, store, deploy, reporting, figures, backends,
                   memory, estimator, errors   (explain, plan, serve-command, diff: questions, no build)
    reproduce   -> release, config, backends, estimator, errors  (rebuild a release from its commit, compare)
    release     -> pipeline, config, store, errors  (the release and verify commands and their work)
    pipeline    -> execution, progress, colocation, config, store, deploy, backends, memory, estimator, errors
    execution   -> variants, config, store, backends, memory, quantization, estimator, errors  (stages, ledger, executors, Ray)
    variants    -> store, backends, memory, quantization, estimator, errors  (a quantized variant made and measured)
    colocation  -> config, store, deploy, backends, memory, estimator, errors  (a run's cells, deployments)
    config      -> store, deploy, backends, memory, estimator, errors
    store       -> backends, memory, estimator, errors   (the content-addressed cache)
    deploy      -> estimator, errors           (the co-location planner: pure arithmetic over reports)
    reporting   -> figures, estimator, errors  (reads manifests and compile entries as files)
    figures     -> estimator, errors           (matplotlib figures and the numbers behind them)
    progress    -> errors                      (what a build shows while it runs)
    ci          -> errors                      (a build's machine outputs: JUnit XML, the GitHub step summary)
    noop        -> errors                      (the no-op short cut: stamps of a run's inputs and outputs)
    backends    -> memory, quantization, estimator, errors
    memory      -> quantization, gguf, estimator, errors
    quantization -> errors                     (formats, round-to-nearest, the quality text)
    gguf        -> errors                      (GGUF weights: named, found, de-quantized once)
    estimator   -> errors
    _documents -> errors                      (bounded reads of user documents; every layer but the estimator)
    _interrupts                               (Ctrl-C never swallowed by a finalizer; commands, execution)

Checked statically over every module's imports (top level and inside functions), so a lazy import
cannot hide a wrong direction.

A package's public names are what its __init__ exports: no module imports another package's
_private module or name (tests may).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import rbln_build

PKG = Path(rbln_build.__file__).resolve().parent
_LOW = {"backends", "memory", "quantization", "gguf", "estimator", "errors"}
ALLOWED = {
    "estimator": {"errors"},
    "memory": {"quantization", "gguf", "estimator", "errors"},
    "quantization": {"errors"},
    "gguf": {
        "errors"
    },  # GGUF weights: named, found, de-quantized (memory reads recipes through it)  # formats and rounding: below memory (config, memory, backends use it)
    "backends": {"memory", "quantization", "estimator", "errors"},
    "progress": {"errors"},
    "noop": {"errors"},
    "figures": {"estimator", "errors"},
    "deploy": {"estimator", "errors"},
    "reporting": {"figures", "estimator", "errors"},
    "store": set(_LOW),
    "config": {"store", "deploy"} | _LOW,
    "colocation": {"config", "store", "deploy"} | _LOW,
    "variants": {"store"} | _LOW,  # a quantized variant made in the Store and measured (runs programs)
    "execution": {"config", "store", "variants"} | _LOW,
    "pipeline": {"execution", "progress", "colocation", "config", "store", "deploy"} | _LOW,
    "release": {"pipeline", "config", "store", "errors"},
    "reproduce": {"release", "config", "backends", "estimator", "errors"},
    "ci": {"errors"},
    "inspection": {"release", "pipeline", "colocation", "config", "store", "deploy", "reporting", "figures"} | _LOW,
    "scaffold": {"config"} | _LOW,
    "commands": {
        "ci",
        "reproduce",
        "noop",
        "scaffold",
        "inspection",
        "release",
        "pipeline",
        "execution",
        "variants",
        "progress",
        "colocation",
        "config",
        "store",
        "deploy",
        "reporting",
        "figures",
    }
    | _LOW,
    "_documents": {"errors"},  # bounded reads of user documents: a base like errors, below every layer
    "_interrupts": set(),  # standard library only: the process's and the workers' Ctrl-C
}
ALLOWED["execution"].add("_interrupts")
ALLOWED["commands"].add("_interrupts")
for _layer_name, _below in ALLOWED.items():
    if _layer_name not in ("estimator", "_documents", "_interrupts"):  # the estimator stays standard library + errors
        _below.add("_documents")
ENTRY_SHIMS = {"estimate.py", "run.py", "explain.py", "cli.py", "__init__.py", "errors.py"}  # top-level modules


def _layer(path: Path) -> str:
    rel = path.relative_to(PKG)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _imported_layers(path: Path) -> set[str]:
    """The top-level rbln_build parts (subpackage or module) that ``path`` imports."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    here = list(path.relative_to(PKG).with_suffix("").parts)
    if here[-1] == "__init__":
        here = here[:-1]
    else:
        here = here[:-1]  # the module's package
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - (node.level - 1)] if node.level > 1 else here
                parts = base + (node.module.split(".") if node.module else [])
                names = [a.name for a in node.names] if not node.module and not base else []
                out.update({parts[0]} if parts else set(names))
            elif node.module and node.module.split(".")[0] == "rbln_build":
                parts = node.module.split(".")[1:]
                out.update({parts[0]} if parts else {a.name for a in node.names})
        elif isinstance(node, ast.Import):
            for a in node.names:
                parts = a.name.split(".")
                if parts[0] == "rbln_build" and len(parts) > 1:
                    out.add(parts[1])
    return out


MODULES = sorted(p for p in PKG.rglob("*.py") if p.relative_to(PKG).as_posix() not in ENTRY_SHIMS)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.relative_to(PKG).as_posix())
def test_imports_point_down(path: Path) -> None:
    layer = _layer(path)
    assert layer in ALLOWED, f"{path.relative_to(PKG)}: a new subpackage; add its layer to ALLOWED (and the docs)"
    wrong = _imported_layers(path) - ALLOWED[layer] - {layer, "__version__"}  # the package version: any layer
    assert not wrong, f"{path.relative_to(PKG)} ({layer}) imports {sorted(wrong)}; imports point down only"


# Reaches into another package's private module that stay, each with the reason.
PRIVATE_REACHES = {
    # python -m rbln_build.run is the command line over the torch runtime; backends.torch exports
    # nothing so that importing it never imports torch (backends/torch/__init__.py)
    ("run.py", "rbln_build.backends.torch._runtime"),
    # reproduce stages a rebuild with the release's own writer and reads a release as verify does;
    # release/__init__ keeps its writer side (_bundle: the store) out of its exports so that importing
    # it stays light for verify and run, and names _bundle as the writer's entry (its docstring)
    ("reproduce/_cli.py", "rbln_build.release._bundle"),
    ("reproduce/_cli.py", "rbln_build.release._format"),
    ("reproduce/_cli.py", "rbln_build.release._verify"),
}


def _private_reaches(rel: Path, source: str) -> list[str]:
    """``from ..pkg._private import x``, ``import rbln_build.pkg._private`` and ``from ..pkg import _x``
    in the module at ``rel`` (under rbln_build/) where pkg is not the module's own package (top-level
    modules such as ``rbln_build._documents`` are shared bases, not a package's privates)."""
    own = rel.parts[0] if len(rel.parts) > 1 else None
    package = ["rbln_build", *rel.parts[:-1]]
    tree = ast.parse(source)
    found: list[str] = []

    def check(parts: list[str], names: list[str], lineno: int) -> None:
        if parts[0] != "rbln_build" or len(parts) < 2 or parts[1] == own or not (PKG / parts[1]).is_dir():
            return
        target = ".".join(parts)
        private = [p for p in parts[2:] if p.startswith("_")] + [n for n in names if n.startswith("_")]
        if private and (rel.as_posix(), target) not in PRIVATE_REACHES:
            found.append(f"{rel}:{lineno}: {target} {names}")

    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - (node.level - 1)] if node.level else []
            parts = base + (node.module.split(".") if node.module else [])
            check(parts, [a.name for a in node.names], node.lineno)
        elif isinstance(node, ast.Import):
            for a in node.names:
                check(a.name.split("."), [], node.lineno)
    return found


def test_no_package_reaches_into_another_packages_private_modules() -> None:
    """A package's public names are what its ``__init__`` exports; nothing outside the package
    imports its ``_modules`` (or ``_names``). Tests may; rbln_build's own code may not."""
    reaches = [
        r
        for p in sorted(PKG.rglob("*.py"))
        for r in _private_reaches(p.relative_to(PKG), p.read_text(encoding="utf-8"))
    ]
    assert reaches == [], "import these from the package (export them in its __init__):\n" + "\n".join(reaches)


def test_the_private_reach_check_sees_every_form() -> None:
    """The check above finds each form of a reach (so an empty list means none, not a blind check)."""
    source = (
        "from ..store._store import Store\n"
        "import rbln_build.config._matrix\n"
        "from ..execution import _stages\n"
        "from rbln_build.memory._recipes import Recipe\n"
        "from ._tasks import BuildRun\n"  # its own package: fine
        "from .._documents import load_json\n"  # a shared top-level module: fine
        "from ..store import Store\n"  # the public name: fine
    )
    found = _private_reaches(Path("pipeline/_probe.py"), source)
    assert [f.split(": ", 1)[1] for f in found] == [
        "rbln_build.store._store ['Store']",
        "rbln_build.config._matrix []",
        "rbln_build.execution ['_stages']",
        "rbln_build.memory._recipes ['Recipe']",
    ]


@pytest.mark.integration
def test_the_estimator_imports_nothing_heavy_and_nothing_above_it() -> None:
    """In a fresh interpreter, importing the estimator loads the standard library, the shared
    exception tree and the estimator itself: nothing from build/memory/backends, and no third-party
    package at all (so neither torch nor transformers)."""
    code = (
        "import json, sys\n"
        "before = set(sys.modules)\n"
        "import rbln_build.estimator\n"
        "print(json.dumps(sorted(set(sys.modules) - before)))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    loaded = json.loads(proc.stdout)
    assert "rbln_build.estimator._estimate" in loaded  # the probe saw the import happen
    ours = [m for m in loaded if m.split(".")[0] == "rbln_build"]
    assert [m for m in ours if not m.startswith("rbln_build.estimator")] == ["rbln_build", "rbln_build.errors"]
    foreign = sorted({m.split(".")[0] for m in loaded} - set(sys.stdlib_module_names) - {"rbln_build"})
    assert foreign == []


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_imports(path: Path) -> set[str]:
    """The rbln_build modules ``path`` imports at run time (top level or inside functions; imports
    under ``if TYPE_CHECKING:`` only feed the type checker and are left out)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    me = _module_name(path)
    package = me if path.name == "__init__.py" else me.rsplit(".", 1)[0]
    typing_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            typing_only.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    known = {_module_name(p) for p in PKG.rglob("*.py")}
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("rbln_build"):
                continue
            for alias in node.names:  # `from pkg import module` imports that module
                sub = f"{target}.{alias.name}"
                out.add(sub if sub in known else target)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("rbln_build"))
    return {m for m in out if m in known and m != me}


def test_no_import_cycles() -> None:
    """No module imports itself through others (Tarjan's strongly connected components)."""
    graph = {_module_name(p): _runtime_imports(p) for p in PKG.rglob("*.py")}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1:
                cycles.append(sorted(scc))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(10_000)
    try:
        for v in sorted(graph):
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(limit)  # a raised limit would change how later tests' parsers fail
    assert cycles == [], f"import cycles: {cycles}"


# The house's sizes (issue 18): a module holds one idea, a folder one package's worth of them.
MAX_MODULE_LINES = 350
MAX_FOLDER_MODULES = 12  # .py files, __init__.py included
MAX_FOLDER_LINES = 2_500
# Modules allowed over MAX_MODULE_LINES (none now). A module that gets under the limit must leave this set.
KNOWN_LONG: set[str] = set()


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_no_module_is_over_the_size_limit() -> None:
    sizes = {p.relative_to(PKG).as_posix(): _lines(p) for p in PKG.rglob("*.py")}
    long = sorted(f"{name} ({n} lines)" for name, n in sizes.items() if n > MAX_MODULE_LINES and name not in KNOWN_LONG)
    assert long == [], f"over {MAX_MODULE_LINES} lines: split by idea: {long}"
    cured = sorted(name for name in KNOWN_LONG if sizes.get(name, 0) <= MAX_MODULE_LINES)
    assert cured == [], f"no longer over the limit (or gone): remove from KNOWN_LONG: {cured}"


def test_no_folder_is_over_the_size_limit() -> None:
    folders: dict[Path, list[Path]] = {}
    for p in PKG.rglob("*.py"):
        folders.setdefault(p.parent, []).append(p)
    assert len(folders) > 10  # the walk saw the house
    crowded = sorted(
        f"{folder.relative_to(PKG.parent).as_posix()}/ ({len(files)} modules, {sum(map(_lines, files))} lines)"
        for folder, files in folders.items()
        if len(files) > MAX_FOLDER_MODULES or sum(map(_lines, files)) > MAX_FOLDER_LINES
    )
    assert crowded == [], f"over {MAX_FOLDER_MODULES} modules or {MAX_FOLDER_LINES} lines: {crowded}"
