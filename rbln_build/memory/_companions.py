"""A checkpoint's companion files: its tokenizer and ``generation_config.json``, carried byte for byte.

A recipe names them in ``recipe.yaml``; they live in the recipe's folder (``rbln-build recipe add``
copies them from the checkpoint, or a recipe ships its own)::

    tokenizer: {files: [tokenizer.json, tokenizer_config.json, chat_template.jinja]}   # or null
    generation_config: generation_config.json                                          # or null

Each name is a plain file name in the recipe's folder (no folder part, no link leaving it). Their
bytes are part of the recipe's content hash, so an edited tokenizer is a new compile key. Every
backend copies them into the baseline at compile and into each cell at finalize, unchanged, at the
top of the artifact (where optimum-rbln's own compile saves its preprocessors and generation config),
and records what the cell has in ``rbln-build.json``::

    "tokenizer": null | {"files": ["chat_template.jinja", "tokenizer.json", ...]},
    "generation_config": null | "generation_config.json",
    "data_files": {"<file>": "<sha256 hex>", ...}   # each of them, checked before run --prompt loads them
    "license": {"id": "apache-2.0" | null, "file": "LICENSE" | null}   # only for a recipe with a licence

A recipe's ``license: {id, file}`` travels the same way: the file is copied into the baseline and
every cell under its own name and hashed in ``data_files``. ``null`` says the cell has none (a serving host must then bring its own). Standard library only.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

from ..errors import RecipeError

__all__ = [
    "TOKENIZER_FILE_NAMES",
    "GENERATION_CONFIG",
    "checkpoint_companions",
    "checkpoint_license",
    "checkpoint_language",
    "languages_of",
    "parse_language",
    "parse_companions",
    "parse_license",
    "copy_companions",
    "copy_from",
    "companion_names",
    "remove_preprocessor_files",
    "companions_record",
    "verify_data_files",
]

# The files a Hugging Face tokenizer (or its processor) is saved as: what `recipe add` looks for in a
# checkpoint, and what optimum-rbln's preprocessor step may write into a compiled folder.
TOKENIZER_FILE_NAMES = (
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
    "merges.txt",
    "special_tokens_map.json",
    "spiece.model",
    "tokenizer.json",
    "tokenizer.model",
    "tokenizer_config.json",
    "vocab.json",
    "vocab.txt",
)
PROCESSOR_FILE_NAMES = ("preprocessor_config.json", "processor_config.json")
GENERATION_CONFIG = "generation_config.json"
_RESERVED = ("recipe.yaml", "config.json")


def checkpoint_companions(directory: Path) -> tuple[list[str], str | None]:
    """The tokenizer files and the generation config a checkpoint folder holds. A link to a file counts
    (a Hugging Face cache snapshot links every file to a blob): ``recipe add`` copies the bytes."""
    tokenizer = [n for n in TOKENIZER_FILE_NAMES if (directory / n).is_file()]
    generation = GENERATION_CONFIG if (directory / GENERATION_CONFIG).is_file() else None
    return tokenizer, generation


def _regular(path: Path) -> bool:
    return path.is_file() and not path.is_symlink()


def _file(recipe_file: Path, key: str, name: Any) -> str:
    """``name`` checked: a plain file name of a regular file in the recipe's folder."""
    directory = recipe_file.parent
    if not isinstance(name, str) or not name or Path(name).name != name or name in (".", "..") or name in _RESERVED:
        raise RecipeError(
            f"{recipe_file}: {key}: {name!r} is not a file name in the recipe's folder; name a file beside "
            "recipe.yaml (no folder part), such as tokenizer.json."
        )
    path = directory / name
    if path.is_symlink() or not path.is_file():
        what = "a link" if path.is_symlink() else "missing"
        raise RecipeError(
            f"{recipe_file}: {key}: {path} is {what}; put the file itself in the recipe's folder "
            "(rbln-build recipe add copies a checkpoint's), or remove it from the list."
        )
    return name


def parse_companions(recipe_file: Path, meta: dict[str, Any]) -> tuple[tuple[str, ...] | None, str | None]:
    """``tokenizer`` and ``generation_config`` of a recipe.yaml mapping, checked (errors name the key)."""
    tokenizer = meta.get("tokenizer")
    files: tuple[str, ...] | None = None
    if tokenizer is not None:
        if not isinstance(tokenizer, dict) or set(tokenizer) != {"files"} or not isinstance(tokenizer["files"], list):
            raise RecipeError(
                f"{recipe_file}: tokenizer must be null or {{files: [tokenizer.json, ...]}}, got {tokenizer!r}."
            )
        names = [_file(recipe_file, f"tokenizer.files[{i}]", n) for i, n in enumerate(tokenizer["files"])]
        if not names:
            raise RecipeError(
                f"{recipe_file}: tokenizer.files is empty; list the tokenizer's files or set tokenizer: null."
            )
        if len(set(names)) != len(names):
            raise RecipeError(f"{recipe_file}: tokenizer.files lists a file twice: {names}.")
        files = tuple(sorted(names))
    generation = meta.get("generation_config")
    if generation is not None:
        generation = _file(recipe_file, "generation_config", generation)
        if files is not None and generation in files:
            raise RecipeError(
                f"{recipe_file}: {generation} is listed both as generation_config and in tokenizer.files."
            )
    return files, generation


# A Hub licence identifier: lower-case letters, digits and ``.-_`` (apache-2.0, llama3.2, cc-by-4.0, other).
_LICENSE_ID = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")


def parse_license(recipe_file: Path, meta: dict[str, Any]) -> tuple[str | None, str | None]:
    """``license`` of a recipe.yaml mapping, checked: ``(id, file)``, each None when not given. The file
    is a plain file name in the recipe's folder, as a tokenizer file is (its bytes are hashed too)."""
    value = meta.get("license")
    if value is None:
        return None, None
    if not isinstance(value, dict) or not set(value) <= {"id", "file"}:
        raise RecipeError(
            f"{recipe_file}: license must be null or {{id: apache-2.0, file: LICENSE}} (either may be null), "
            f"got {value!r}."
        )
    ident = value.get("id")
    if ident is not None and not (isinstance(ident, str) and _LICENSE_ID.fullmatch(ident)):
        raise RecipeError(
            f"{recipe_file}: license.id {ident!r} is not a Hub licence identifier (lower-case, such as apache-2.0, "
            "mit, llama3.2 or other); set it or null."
        )
    name = value.get("file")
    if name is not None:
        name = _file(recipe_file, "license.file", name)
    return ident, name


LICENSE_FILE_NAMES = ("LICENSE", "LICENSE.txt", "LICENSE.md", "LICENCE", "LICENCE.txt", "COPYING")
_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(\r?\n|\Z)", re.S)


def _readme_front_matter(directory: Path) -> dict[str, Any]:
    """The Hub front matter of a checkpoint folder's ``README.md`` ({} when there is none or it is not YAML)."""
    import yaml

    readme = directory / "README.md"
    if not readme.is_file():
        return {}
    try:
        text = readme.read_bytes()[: 1 << 20].decode("utf-8", errors="replace")
        match = _FRONT_MATTER.match(text)
        meta = yaml.safe_load(match.group(1)) if match else None
    except yaml.YAMLError:
        meta = None
    return meta if isinstance(meta, dict) else {}


def checkpoint_license(directory: Path) -> tuple[str | None, str | None]:
    """A checkpoint folder's licence: ``(id, file)``, the ``license:`` of its ``README.md``'s Hub front
    matter (when it is a Hub licence identifier) and its licence file (``LICENSE``, ...), each None when
    absent. What ``recipe add`` copies into the recipe as ``license: {id, file}``."""
    name = next((n for n in LICENSE_FILE_NAMES if (directory / n).is_file()), None)
    value = _readme_front_matter(directory).get("license")
    ident = value if isinstance(value, str) and _LICENSE_ID.fullmatch(value) else None
    return ident, name


# A language code as the Hub's model cards take it: ISO 639-1/2/3, optionally with a region or script.
_LANGUAGE = re.compile(r"[a-z]{2,3}(-[A-Za-z0-9]{2,8})?")


def languages_of(value: Any) -> list[str]:
    """``value`` (one code or a list of them, as a card's ``language:`` or a GGUF's ``general.languages``)
    as the codes that are language codes, in order, each once; [] for anything else."""
    codes = [value] if isinstance(value, str) else value if isinstance(value, list) else []
    out: list[str] = []
    for code in codes:
        if isinstance(code, str) and _LANGUAGE.fullmatch(code) and code not in out:
            out.append(code)
    return out


def checkpoint_language(directory: Path) -> list[str]:
    """The ``language:`` of a checkpoint folder's ``README.md`` front matter ([] when it names none)."""
    return languages_of(_readme_front_matter(directory).get("language"))


def parse_language(recipe_file: Path, meta: dict[str, Any]) -> tuple[str, ...]:
    """``language`` of a recipe.yaml mapping, checked: the languages of the weights, () when not given."""
    value = meta.get("language")
    if value is None:
        return ()
    if not isinstance(value, list) or not value or languages_of(value) != value:
        raise RecipeError(
            f"{recipe_file}: language must be null or a list of language codes (ISO 639, such as [en] or "
            f"[en, fr]), each once, got {str(value)[:80]!r}."
        )
    return tuple(value)


def companion_names(tokenizer: tuple[str, ...] | None, generation: str | None) -> list[str]:
    return [*(tokenizer or ()), *([generation] if generation else [])]


def copy_companions(recipe: Any, out_dir: Path) -> None:
    """Copy the recipe's tokenizer files, generation config and licence file into ``out_dir``, byte
    for byte. A generation config is saved as ``generation_config.json`` (the name every loader reads);
    the licence keeps its name (``LICENSE``, ``LICENSE.txt``, ...)."""
    for name in recipe.tokenizer_files or ():
        shutil.copyfile(recipe.directory / name, out_dir / name)
    if recipe.generation_config:
        shutil.copyfile(recipe.directory / recipe.generation_config, out_dir / GENERATION_CONFIG)
    if getattr(recipe, "license_file", None):
        shutil.copyfile(recipe.directory / recipe.license_file, out_dir / recipe.license_file)


def copy_from(baseline_dir: Path, out_dir: Path, license_file: str | None = None) -> None:
    """The companion files a baseline holds (and the recipe's licence file), into a cell (byte for byte)."""
    for name in (*TOKENIZER_FILE_NAMES, GENERATION_CONFIG, *([license_file] if license_file else [])):
        if _regular(baseline_dir / name):
            shutil.copyfile(baseline_dir / name, out_dir / name)


def remove_preprocessor_files(directory: Path) -> list[str]:
    """Remove the tokenizer and processor files a library wrote into ``directory`` (ours replace them)."""
    removed = []
    for name in (*TOKENIZER_FILE_NAMES, *PROCESSOR_FILE_NAMES):
        path = directory / name
        if path.is_file() or path.is_symlink():
            path.unlink()
            removed.append(name)
    return removed


def companions_record(
    directory: Path, license_id: str | None = None, license_file: str | None = None
) -> dict[str, Any]:
    """The record fields of what a cell folder holds: ``tokenizer``, ``generation_config`` and
    ``data_files`` (the sha256 of each, checked before ``run --prompt`` loads them); with a recipe's
    licence, ``license: {"id", "file"}`` too (its file among ``data_files``). A recipe without a
    licence gets no ``license`` key: its records stay as they were."""
    import hashlib

    files = [n for n in TOKENIZER_FILE_NAMES if _regular(directory / n)]
    generation = GENERATION_CONFIG if _regular(directory / GENERATION_CONFIG) else None
    held = license_file if license_file and _regular(directory / license_file) else None
    names = sorted([*files, *([generation] if generation else []), *([held] if held else [])])
    record: dict[str, Any] = {
        "tokenizer": {"files": files} if files else None,
        "generation_config": generation,
        "data_files": {n: hashlib.sha256((directory / n).read_bytes()).hexdigest() for n in names},
    }
    if license_id or license_file:
        record["license"] = {"id": license_id, "file": held}
    return record


def verify_data_files(directory: Path, record: dict[str, Any]) -> None:
    """Check each companion file against the sha256 ``record["data_files"]`` holds (IntegrityError)."""
    import hashlib

    from ..errors import IntegrityError

    recorded = record.get("data_files")
    if not isinstance(recorded, dict):
        raise IntegrityError(f"{directory}/rbln-build.json: no data_files digests; rebuild the cell.")
    for name, expected in sorted(recorded.items()):
        if not isinstance(name, str) or Path(name).name != name or name in ("", ".", ".."):
            raise IntegrityError(f"{directory}/rbln-build.json: data file {name!r} is not a file in the cell.")
        path = directory / name
        try:
            actual = hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError as exc:
            raise IntegrityError(f"{path}: cannot read it ({exc.strerror}); rebuild the cell or restore it.") from None
        if actual != expected:
            raise IntegrityError(
                f"{path}: sha256 {actual} does not match {expected} recorded in rbln-build.json; the file was changed "
                "after the build. Refusing to load it: rebuild the cell (rbln-build) or restore it."
            )
