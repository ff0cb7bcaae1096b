"""The torch backend: a paged-KV model exported once per compile key with ``torch.export``.

    _weights     deterministic seeded weights (tiny recipes) or a checkpoint's safetensors
    _paged       the paged-attention wrapper around transformers' modules, and its export
    _export      the Backend: compile (export + report) and finalize (pool of N blocks)
    _runtime     loading an artifact (verified first) and greedy generation on CPU
    _archive     the .pt2 allowlist: nothing torch would unpickle gets loaded
    _graph       the graph's strings torch evaluates (expressions, guards, targets), held to torch's forms
    _cellrecord  a cell's whole rbln-build.json, checked against its bounds and its program's inputs

``python -m rbln_build.run`` (rbln_build/run.py) is the command line over ``_runtime``.

Importing this package does not import torch; its modules do.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["PROGRAM_FILE", "PagedCausalLM", "build_model", "empty_pools"]

# The names other packages use (the quantized variants' stage), each from the module that holds
# it, imported on first use: importing this package still imports no torch.
_LAZY = {"PROGRAM_FILE": "_export", "PagedCausalLM": "_paged", "build_model": "_weights", "empty_pools": "_paged"}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
