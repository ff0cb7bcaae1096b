"""Exact per-tensor parameter inventory of a model: what the memory model sizes.

Built with transformers on the ``meta`` device (shapes and dtypes, no memory), so it is exact
for any architecture transformers knows: tied weights are counted once, and layer types come
from the model's own config class. Building costs seconds of imports, so the result is cached
as JSON, keyed by everything it depends on (``cache_key``): the sha256 of ``config.json``'s bytes,
the installed transformers and torch versions (read from package metadata, nothing imported) and
the sha256 of this file's source. An upgrade or an edit of the extraction therefore misses instead of
reusing a stale entry; a corrupt or unreadable entry is a miss too, and is rewritten. This module
imports neither torch nor transformers until an inventory has to be computed.

    inventory_for_recipe(recipe, cache_dir=None)     cached; computes on a miss
    cached_inventory(config_bytes, cache_dir=None)   the same, from config.json's bytes
    cache_key(config_bytes)                          the entry's name: what the inventory depends on
    inventory_from_config(hf_config)                 always builds on the meta device
    inventory_from_model(model, config_sha256="")    from an already-built (real) model

Each entry: ``name``, ``shape``, ``dtype``, ``role`` (embedding, lm_head, linear, norm, other)
and ``layer`` (decoder layer index or None). ``tied`` maps every alias that was dropped as a
duplicate (``lm_head.weight`` of a tied model) to the entry it shares storage with.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import re
import tempfile
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._documents import read_file
from ..errors import CacheError, RecipeError

if TYPE_CHECKING:  # pragma: no cover
    from ._recipes import Recipe

__all__ = [
    "ROLES",
    "TensorEntry",
    "Inventory",
    "default_cache_dir",
    "inventory_for_recipe",
    "cached_inventory",
    "cache_key",
    "inventory_from_config",
    "inventory_from_model",
]

SCHEMA_VERSION = 1
ROLES = ("embedding", "lm_head", "linear", "norm", "other")
_LAYER_RE = re.compile(r"\.layers\.(\d+)\.")


@dataclass(frozen=True)
class TensorEntry:
    name: str
    shape: tuple[int, ...]
    dtype: str
    role: str
    layer: int | None

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "shape": list(self.shape),
            "dtype": self.dtype,
            "role": self.role,
            "layer": self.layer,
        }

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> TensorEntry:
        role = value["role"]
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r}")
        layer = value["layer"]
        return cls(
            str(value["name"]),
            tuple(int(d) for d in value["shape"]),
            str(value["dtype"]),
            role,
            None if layer is None else int(layer),
        )


@dataclass(frozen=True)
class Inventory:
    tensors: tuple[TensorEntry, ...]
    tied: dict[str, str] = field(default_factory=dict)  # dropped alias -> kept name
    model_class: str = ""
    config_sha256: str = ""

    @property
    def total_parameters(self) -> int:
        return sum(t.numel for t in self.tensors)

    def by_role(self, role: str) -> list[TensorEntry]:
        return [t for t in self.tensors if t.role == role]

    @property
    def lm_head_tied(self) -> bool:
        """True when the output projection shares the input embedding's storage."""
        return not self.by_role("lm_head") and bool(self.tied)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "config_sha256": self.config_sha256,
            "model_class": self.model_class,
            "total_parameters": self.total_parameters,
            "tied": dict(sorted(self.tied.items())),
            "tensors": [t.to_json() for t in self.tensors],
        }

    @classmethod
    def from_json(cls, value: Any) -> Inventory:
        if not isinstance(value, dict) or value.get("schema_version") != SCHEMA_VERSION:
            raise ValueError(f"not an inventory of schema_version {SCHEMA_VERSION}")
        inv = cls(
            tensors=tuple(TensorEntry.from_json(t) for t in value["tensors"]),
            tied={str(k): str(v) for k, v in value.get("tied", {}).items()},
            model_class=str(value.get("model_class", "")),
            config_sha256=str(value.get("config_sha256", "")),
        )
        if inv.total_parameters != value.get("total_parameters"):
            raise ValueError("total_parameters does not match the tensors")
        return inv


def default_cache_dir() -> Path:
    """``$RBLN_BUILD_CACHE/inventory``, else ``~/.cache/rbln-build/inventory``."""
    root = os.environ.get("RBLN_BUILD_CACHE")
    base = Path(root) if root else Path.home() / ".cache" / "rbln-build"
    return base / "inventory"


# --------------------------------------------------------------------------- cached entry points


def inventory_for_recipe(recipe: Recipe, cache_dir: Path | None = None) -> Inventory:
    """The inventory of ``recipe``'s config.json, from the cache or computed (then cached)."""
    config_file = Path(recipe.directory) / "config.json"
    try:
        config_bytes = config_file.read_bytes()
    except OSError as exc:
        raise RecipeError(f"recipe '{recipe.name}': cannot read {config_file} ({exc}).") from None
    return cached_inventory(config_bytes, cache_dir)


def cached_inventory(config_bytes: bytes, cache_dir: Path | None = None) -> Inventory:
    """Inventory of ``config_bytes`` from ``<cache_dir>/<cache_key>.json``; ``cache_dir`` defaults to
    ``default_cache_dir()``. A missing, corrupt or unreadable entry is a miss: computed and rewritten."""
    digest = hashlib.sha256(config_bytes).hexdigest()
    context = _build_context(digest)
    key = _key_of(context)
    directory = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    path = directory / f"{key}.json"
    cached = _load_entry(path, key, digest)
    if cached is not None:
        return cached
    inv = inventory_from_config(json.loads(config_bytes), config_sha256=digest)
    entry = {**inv.to_json(), "cache_key": key, "built_with": context}
    _write_atomic(path, json.dumps(entry, sort_keys=True, indent=1) + "\n")
    return inv


def cache_key(config_bytes: bytes) -> str:
    """sha256 over what an inventory depends on: config.json's bytes, the transformers and torch
    versions, the inventory code and the entry format. Equal keys mean an equal inventory."""
    return _key_of(_build_context(hashlib.sha256(config_bytes).hexdigest()))


def _key_of(context: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(context, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _build_context(config_sha256: str) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "config_sha256": config_sha256,
        "transformers": _package_version("transformers"),
        "torch": _package_version("torch"),
        "inventory_code": _inventory_code(),
    }


@functools.cache
def _package_version(name: str) -> str | None:
    """The installed distribution's version from its metadata (the package is not imported)."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


@functools.cache
def _inventory_code() -> str:
    """sha256 of this file's source. A hash rather than a hand-bumped constant: a forgotten bump is
    exactly the silent staleness the key exists to prevent, while a needless miss (an edited comment)
    only costs seconds per recipe. Only this file: the extraction lives entirely here."""
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()


# What a missing or damaged entry can raise while being read: absent or unreadable (OSError); not UTF-8,
# not JSON or bad values (ValueError); missing keys (KeyError); wrong JSON types (TypeError,
# AttributeError); absurd nesting (RecursionError). Any of them is a miss.
_CORRUPT = (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError)


def _load_entry(path: Path, key: str, config_sha256: str) -> Inventory | None:
    """The entry at ``path`` if it is intact and is the one for ``key``, else None (a miss)."""
    try:
        value = json.loads(read_file(path))  # a FIFO or a link to /dev/zero in the cache: a miss, never read
        inv = Inventory.from_json(value)
        if value.get("cache_key") != key or inv.config_sha256 != config_sha256:
            return None
        return inv
    except _CORRUPT:  # missing (FileNotFoundError) or corrupt: the caller computes and overwrites it
        return None


def _write_atomic(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
            os.chmod(tmp, 0o644)  # a shared cache: readable like any other file, not mkstemp's 0600
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise CacheError(
            f"inventory cache: cannot write {path} ({exc}); set RBLN_BUILD_CACHE to a writable directory."
        ) from None


# --------------------------------------------------------------------------- computing (heavy)


def inventory_from_config(hf_config: dict[str, Any], config_sha256: str = "") -> Inventory:
    """Build the model on the meta device from a published config.json dict (imports torch)."""
    import torch
    from transformers import CONFIG_MAPPING, AutoModelForCausalLM

    text = hf_config.get("text_config") if isinstance(hf_config.get("text_config"), dict) else hf_config
    model_type = text.get("model_type")
    if model_type == "gemma3":  # a multimodal wrapper: the decoder is the gemma3_text model
        model_type = "gemma3_text"
    if model_type not in CONFIG_MAPPING:
        raise RecipeError(f"config.json: model_type {model_type!r} is not known to the installed transformers.")
    fields = {k: v for k, v in text.items() if k not in ("model_type", "transformers_version", "architectures")}
    dtype_name = fields.pop("torch_dtype", None) or fields.pop("dtype", None) or "float32"
    # transformers 5.15.1 emits no Python warnings for the recipes' published configs (checked with
    # warnings as errors in the tests), so none are filtered here.
    config = CONFIG_MAPPING[model_type](**fields)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, str(dtype_name)))
    return inventory_from_model(model, config_sha256=config_sha256)


def inventory_from_model(model: Any, config_sha256: str = "") -> Inventory:
    """Inventory of an already-built torch model (meta or real); shared tensors listed once."""
    import torch

    embedding = model.get_input_embeddings()
    output = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    embed_param = getattr(embedding, "weight", None)
    out_param = getattr(output, "weight", None)

    owner: dict[str, Any] = {}
    for mod_name, module in model.named_modules():
        for p_name, _ in module.named_parameters(recurse=False):
            owner[f"{mod_name}.{p_name}" if mod_name else p_name] = module

    kept: dict[int, str] = {}
    tied: dict[str, str] = {}
    entries: list[TensorEntry] = []
    for name, param in model.named_parameters(remove_duplicate=False):
        key = id(param)
        if key in kept:
            tied[name] = kept[key]
            continue
        kept[key] = name
        module = owner.get(name)
        if param is embed_param:
            role = "embedding"
        elif param is out_param:
            role = "lm_head"
        elif isinstance(module, torch.nn.Linear):
            role = "linear"
        elif "norm" in type(module).__name__.lower() or "norm" in name.rpartition(".")[0].rsplit(".", 1)[-1].lower():
            role = "norm"
        else:
            role = "other"
        match = _LAYER_RE.search("." + name)
        entries.append(
            TensorEntry(
                name=name,
                shape=tuple(int(d) for d in param.shape),
                dtype=str(param.dtype).removeprefix("torch."),
                role=role,
                layer=int(match.group(1)) if match else None,
            )
        )
    return Inventory(tensors=tuple(entries), tied=tied, model_class=type(model).__name__, config_sha256=config_sha256)
