"""What a Ray compile task reads, carried by content: a worker reads nothing from the driver's paths.

The driver packs (``InputPacker.pack``, once per recipe and plug-in per build):

* the recipe's files (``recipe.yaml``, ``config.json``, its tokenizer files and generation config) as
  bytes in the task; the project's config values are already in the ``CompileSpec`` (NPU, devices,
  resolved attention options);
* a local checkpoint's weight files (``weights: {path: DIR}``) by name, size and sha256; their bytes
  go once per build where every node can fetch them: the remote cache's ``inputs/<sha256>``
  (``store/_remote_inputs``) when the build has a writable one it can reach, else Ray's object store
  (one object per file, held in memory by Ray: fine for small checkpoints);
* a plug-in backend's module source (``module:Class`` outside this package), the file its compile
  key hashes.

The worker (``materialize``) writes them into its own temporary folder, checks every weight file
against its sha256 before use, recomputes the recipe's content hash and the checkpoint's weights
digest from what it wrote and refuses to compile unless both equal the ones in the compile key;
the ``CompileSpec`` it compiles then names that folder. The compile key does not change (it hashes
contents, never paths), and a failure's message names the driver's paths (``driver_text``), so a Ray
build's manifest equals a local build's.
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import IntegrityError
from ._input_digests import file_digests, recipe_digest, recipe_files, weights_digest

if TYPE_CHECKING:
    from ..backends import CompileSpec
    from ._jobs import StoreRef

__all__ = [
    "WeightFile",
    "PluginSource",
    "TaskInputs",
    "InputPacker",
    "materialize",
    "plugin_loaded",
    "driver_text",
    "recipe_digest",
]


@dataclass(frozen=True)
class WeightFile:
    name: str
    size: int
    sha256: str
    ref: Any = None  # a Ray ObjectRef of the bytes; None: on the remote cache at inputs/<sha256>


@dataclass(frozen=True)
class PluginSource:
    module: str  # "pkg.mod" of a plug-in backend "pkg.mod:Class"
    source: bytes


@dataclass(frozen=True)
class TaskInputs:
    files: tuple[tuple[str, bytes], ...]  # the recipe's folder: name -> bytes (recipe_files order)
    weights: tuple[WeightFile, ...]  # empty: no local checkpoint
    recipe_dir: str  # the driver's paths, for messages only (never read by a worker)
    weights_dir: str | None
    plugin: PluginSource | None = None


class InputPacker:
    """The driver's side: packs a compile's inputs, each recipe, weight file and plug-in once per build."""

    def __init__(self, ref: StoreRef, ray: Any) -> None:
        self.ref = ref
        self.ray = ray
        self._recipes: dict[tuple[str, str], TaskInputs] = {}
        self._shipped: dict[str, WeightFile] = {}  # sha256 -> how it travels
        self._plugins: dict[str, PluginSource | None] = {}
        self._store: Any = None
        self.uploaded = 0  # weight files this build put on the remote cache
        self.by_object_store = 0  # weight files that went through Ray's object store

    def pack(self, spec: CompileSpec, backend: str) -> TaskInputs:
        recipe = spec.recipe
        mark = (str(recipe.directory), recipe.content_hash)
        if mark not in self._recipes:
            files = tuple((n, (recipe.directory / n).read_bytes()) for n in recipe_files(recipe))
            from ..memory import weights_folder

            weights = self._weights(weights_folder(recipe), recipe.hf_config) if recipe.weights_path else ()
            label = str(recipe.weights_path) if recipe.weights_path else None
            self._recipes[mark] = TaskInputs(files, weights, str(recipe.directory), label)
        return replace(self._recipes[mark], plugin=self._plugin(backend))

    def _weights(self, directory: Path, config: dict[str, Any]) -> tuple[WeightFile, ...]:
        from ..memory import inspect_checkpoint

        shipped = []
        for name, (size, sha) in file_digests(inspect_checkpoint(directory, config)).items():
            if sha not in self._shipped:
                self._shipped[sha] = self._ship(directory / name, sha, size)
            shipped.append(replace(self._shipped[sha], name=name))
        return tuple(shipped)

    def _ship(self, path: Path, sha: str, size: int) -> WeightFile:
        from ..store import RemoteStore, publish_input

        if self._store is None:
            self._store = self.ref.open(lambda _msg: None)
        store = self._store
        if isinstance(store, RemoteStore) and store.options.writes and not store.down:
            try:
                self.uploaded += publish_input(store, path, sha, size)
                return WeightFile(path.name, size, sha)
            except Exception:
                pass  # the remote refuses us: the object store carries it (the build's own checks report the remote)
        self.by_object_store += 1
        return WeightFile(path.name, size, sha, self.ray.put(path.read_bytes()))

    def _plugin(self, backend: str) -> PluginSource | None:
        from ..backends import backend_path

        module = backend_path(backend).split(":")[0]
        if module.split(".")[0] == __name__.split(".")[0]:
            return None  # the workers' installed rbln-build is the code the key hashes
        if module not in self._plugins:
            try:
                spec = importlib.util.find_spec(module)
            except (ImportError, ValueError):
                spec = None
            origin = Path(spec.origin) if spec is not None and spec.origin else None
            self._plugins[module] = (
                PluginSource(module, origin.read_bytes()) if origin is not None and origin.is_file() else None
            )
        return self._plugins[module]


def _plain(name: str) -> bool:
    return bool(name) and Path(name).name == name and name not in (".", "..")


def materialize(inputs: TaskInputs, spec: CompileSpec, work: Path, store: Any) -> CompileSpec:
    """The worker's side: the inputs written under ``work`` and checked; the spec that names them.
    ``store``: the task's Store (a RemoteStore when weights are on the remote cache)."""
    from ..memory import inspect_checkpoint

    recipe = spec.recipe
    folder = work / "recipe" / recipe.name
    folder.mkdir(parents=True)
    for name, data in inputs.files:
        if not _plain(name):
            raise IntegrityError(f"{inputs.recipe_dir}: the task names a recipe file {name!r}; its inputs are damaged.")
        (folder / name).write_bytes(data)
    named = dict(inputs.files)
    companions = [(n, d) for n, d in inputs.files if n not in ("recipe.yaml", "config.json")]
    if recipe_digest(named.get("recipe.yaml", b""), named.get("config.json", b""), companions) != recipe.content_hash:
        raise IntegrityError(
            f"{inputs.recipe_dir}: the recipe's files changed after this build read them (their content hash is "
            "not the compile key's); run the build again."
        )
    weights_path = None
    if recipe.weights_path is not None:
        weights_path = work / "weights"
        weights_path.mkdir()
        for w in inputs.weights:
            _fetch(w, weights_path, inputs.weights_dir or "weights.path", store)
        digest = weights_digest(file_digests(inspect_checkpoint(weights_path, recipe.hf_config)))
        if recipe.gguf is None and digest != recipe.weights_hash:  # a GGUF's: each file's sha256 was checked
            raise IntegrityError(
                f"{inputs.weights_dir}: the weights a worker received hash to {digest}, not the compile key's "
                f"{recipe.weights_hash}; the checkpoint changed while the build ran. Run the build again."
            )
    return replace(spec, recipe=replace(recipe, directory=folder, weights_path=weights_path, gguf=None))


def _fetch(w: WeightFile, folder: Path, label: str, store: Any) -> None:
    from ..store import fetch_input, sha256_of

    if not _plain(w.name):
        raise IntegrityError(f"{label}: the task names a weight file {w.name!r}; its inputs are damaged.")
    dest = folder / w.name
    if w.ref is None:
        from ..store import RemoteStore

        if not isinstance(store, RemoteStore):
            raise IntegrityError(f"{label}/{w.name}: the task says it is on the remote cache, but it has none.")
        fetch_input(store, w.sha256, w.size, dest, f"{label}/{w.name}")
        return
    import ray

    dest.write_bytes(ray.get(w.ref))
    if dest.stat().st_size != w.size or sha256_of(dest) != w.sha256:
        raise IntegrityError(f"{label}/{w.name}: the copy Ray's object store delivered fails its sha256; not used.")


@contextlib.contextmanager
def plugin_loaded(plugin: PluginSource | None, work: Path) -> Iterator[None]:
    """Within: the plug-in backend's module is the shipped source (the bytes its compile key hashes),
    whatever this node has installed under that name; afterwards this process is as it was."""
    if plugin is None or not all(p.isidentifier() for p in plugin.module.split(".")):
        yield
        return
    from ..backends import get_backend

    saved = {n: m for n, m in sys.modules.items() if n == plugin.module or plugin.module.startswith(n + ".")}
    parts = plugin.module.split(".")
    source = work / "plugin" / (parts[-1] + ".py")
    source.parent.mkdir(parents=True, exist_ok=True)
    source.write_bytes(plugin.source)
    try:
        for i in range(1, len(parts)):  # parents this node lacks: empty packages, for the import system
            name = ".".join(parts[:i])
            if name not in sys.modules:
                package = types.ModuleType(name)
                package.__path__ = []
                sys.modules[name] = package
        module_spec = importlib.util.spec_from_file_location(plugin.module, source)
        assert module_spec is not None and module_spec.loader is not None
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[plugin.module] = module
        module_spec.loader.exec_module(module)
        get_backend.cache_clear()
        yield
    finally:
        for i in range(1, len(parts) + 1):
            name = ".".join(parts[:i])
            if name in saved:
                sys.modules[name] = saved[name]
            else:
                sys.modules.pop(name, None)
        get_backend.cache_clear()


def driver_text(text: str | None, work: Path, inputs: TaskInputs) -> str | None:
    """A worker's message with its folder's paths replaced by the driver's (the same text as a local build's)."""
    if text is None:
        return None
    text = text.replace(str(work / "weights"), inputs.weights_dir or "weights.path")
    return text.replace(str(work / "recipe" / Path(inputs.recipe_dir).name), inputs.recipe_dir)
