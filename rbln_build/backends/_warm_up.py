"""A process's warm-up before its first compile, measured apart from the compile.

A fresh worker's first compile pays many seconds of imports that later ones do not; the time-left
estimate (``rbln_build.progress``) counts them apart, so they are not charged to one compile's kind.
"""

from __future__ import annotations

import importlib
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._base import CompileSpec

__all__ = ["WARM_UP_MODULES", "warm_up"]

# What a compile of weights imports on first use (measured in a fresh process: torch and transformers
# 5.7 s, torch.export and its dynamo 3.1 s, a model's transformers class 2.1 s).
WARM_UP_MODULES = ("torch", "transformers", "torch.export", "torch._dynamo")


def warm_up(spec: CompileSpec) -> float:
    """In a process that has not loaded torch yet, what a compile of ``spec`` does first: for weights,
    import the modules above and the recipe's model class; for a plan, the recipe's inventory (from
    the inventory cache, else built on the meta device: that imports torch and transformers). The
    seconds it took when it loaded torch, else 0.

    A fresh worker's first compile pays many seconds of imports that later ones do not (a plan: 0.1 s
    warm, 39 s cold on a loaded machine): the time-left estimate counts them apart,
    so they are not charged to one compile's kind. Nothing is loaded that the compile would not load."""
    if "torch" in sys.modules:
        return 0.0  # a warm process: what is left to load is part of its compile, not a warm-up
    started = time.perf_counter()
    try:
        if not spec.recipe.has_weights:
            from ..memory import inventory_for_recipe

            inventory_for_recipe(spec.recipe)  # cached for the compile's own call
        else:
            for name in WARM_UP_MODULES:
                importlib.import_module(name)
            config = spec.recipe.hf_config
            names = config.get("architectures") if isinstance(config, dict) else None
            if isinstance(names, list) and names and isinstance(names[0], str):
                getattr(sys.modules["transformers"], names[0], None)  # its lazy module, imported once
    except Exception:
        pass  # the compile meets it again and says what failed
    return time.perf_counter() - started if "torch" in sys.modules else 0.0
