"""A float checkpoint written as a quantized one (``quantization.quantize_state``), in optimum-rbln's
format: the same file names, the index (if any) listing the scales too. Moved out of ``quantization``
(which sits below memory) because it reads the checkpoint through ``memory``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..quantization import METHOD, Quantization, dequantized, is_target, quantize_state

__all__ = ["write_quantized"]


def write_quantized(source: Path, out_dir: Path, q: Quantization) -> dict[str, Any]:
    """Quantize the float checkpoint ``source`` into ``out_dir`` (same file names; the index, if
    any, lists the scales too). Returns the record: method, format, layers, largest error."""
    import torch
    from safetensors.torch import load_file, save_file

    from ..memory import INDEX_FILE, inspect_checkpoint

    checkpoint = inspect_checkpoint(source)
    if checkpoint.quantized is not None:
        raise ValueError(f"{source}: already quantized ({checkpoint.quantized.storage}); it is not a float checkpoint.")
    weight_map: dict[str, str] = {}
    layers, worst = 0, 0.0
    for path in checkpoint.files:
        if path.name == INDEX_FILE:
            continue
        state = load_file(str(path))
        quantized = quantize_state(state, q)
        for name in quantized:
            weight_map[name] = path.name
        back = dequantized(quantized, torch.float32)
        for name in state:
            if is_target(name, state[name]):
                layers += 1
                worst = max(worst, float((back[name] - state[name].to(torch.float32)).abs().max()))
        save_file(quantized, str(out_dir / path.name), metadata={"format": "pt"})
    if (source / INDEX_FILE).is_file():
        index = {"metadata": {}, "weight_map": dict(sorted(weight_map.items()))}
        (out_dir / INDEX_FILE).write_text(json.dumps(index, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return {"method": METHOD, "format": q.to_json(), "linear_layers": layers, "max_abs_error": worst}
