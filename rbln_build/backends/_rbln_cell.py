"""What a finalized ``rbln`` cell's ``rbln_config.json`` may say (``backends._rbln``'s finalize): the
count optimum-rbln's own limits allow (an ``InputFailure`` otherwise, stored and not retried), and the
compile's target NPU and device count, kept where optimum-rbln 0.12.0 records them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import BuildError, InputFailure
from ._base import CompileSpec

__all__ = ["check_count", "keep_compiled_placement"]


def keep_compiled_placement(config: Any, baseline_dir: Path) -> None:
    """Put back the target NPU and device count the compile recorded in ``_compile_cfgs``.

    optimum-rbln 0.12.0 records them only there (``npu`` and ``num_devices`` are not saved at the top
    level), and reading its own file back (``from_pretrained``, as its CLI's ``--set-kvcache-num-blocks``
    does) sets every entry's ``npu`` and ``num_devices`` to null. vllm-rbln 0.12.0 takes a compiled
    model's device count from ``rbln_config.json`` alone (``_resolve_num_devices``: the top level, then
    the first ``_compile_cfgs`` entry that has one, else 1), whatever ``--rbln-num-devices-per-local-rank``
    says: a 4-device cell written as the CLI writes it would be served on 1 device."""
    try:
        saved = json.loads((baseline_dir / "rbln_config.json").read_text(encoding="utf-8"))
        compiled = {c["compiled_model_name"]: c for c in saved["_compile_cfgs"]}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise BuildError(
            f"{baseline_dir / 'rbln_config.json'}: no readable _compile_cfgs ({exc}); recompile this key."
        ) from None
    for cfg in config.compile_cfgs:
        recorded = compiled.get(cfg.compiled_model_name)
        if recorded is None:
            raise BuildError(
                f"{baseline_dir / 'rbln_config.json'}: no _compile_cfgs entry for {cfg.compiled_model_name!r}; "
                "recompile this key."
            )
        cfg.npu, cfg.num_devices = recorded.get("npu"), recorded.get("num_devices")


def check_count(spec: CompileSpec, config: Any, num_blocks: int, current: int) -> None:
    """optimum-rbln's own limits on a compiled artifact's count, as InputFailure (stored, not retried)."""
    if num_blocks != current and not any(meta.can_resize for meta in config.cache_metas):
        why = (
            "optimum-rbln compiles eager attention at the full pool and cannot resize it"
            if config.attn_impl == "eager"
            else "it was compiled with an explicit kvcache_num_blocks (is_auto false)"
        )
        raise InputFailure(
            f"kvcache_num_blocks {num_blocks}: the compiled KV cache of {spec.recipe.name} holds exactly {current} "
            f"blocks and no cache can be resized ({why}). Build this cell with kvcache_num_blocks unset (eager "
            f"attention always uses the full pool of {current}) or set it to {current}, or use attn_impl=flash_attn.",
            "kv_cache_not_resizable",
        )
    floor = int(config.num_min_blocks)
    if num_blocks < floor:
        raise InputFailure(
            f"The set `kvcache_num_blocks` ({num_blocks}) is less than the minimum number of blocks ({floor}). "
            f"Set it to at least {floor}, or to 0 to estimate it from the available memory.",
            "blocks_below_floor",
        )
