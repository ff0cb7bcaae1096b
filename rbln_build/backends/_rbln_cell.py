"""What a finalized ``rbln`` cell's ``rbln_config.json`` may say (``backends._rbln``'s finalize): the
count optimum-rbln's own limits allow (an ``InputFailure`` otherwise, stored and not retried), and the
compile's target NPU and device count, kept where optimum-rbln 0.12.0 records them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import BuildError, InputFailure, UserError
from ._base import CompileSpec

__all__ = ["check_count", "check_compiled_devices", "compiled_num_devices", "keep_compiled_placement"]


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


def compiled_num_devices(rbln_config: Any) -> int:
    """The device count vllm-rbln 0.12.0 serves a compiled model on, read from its ``rbln_config.json``
    as ``utils/optimum/converter/params.py:_resolve_num_devices`` reads it (it overrides
    ``--rbln-num-devices-per-local-rank``): a ``language_model``/``text_model`` submodule's first, then
    the top level's ``num_devices``, then the first ``_compile_cfgs`` entry that has one, else 1."""

    def of(cfg: Any) -> int | None:
        if not isinstance(cfg, dict):
            return None
        value = cfg.get("num_devices")
        if value is not None:
            return value if isinstance(value, int) else None
        for entry in cfg.get("_compile_cfgs") or []:
            value = entry.get("num_devices") if isinstance(entry, dict) else None
            if value is not None:
                return value if isinstance(value, int) else None
        return None

    for name in ("language_model", "text_model"):
        sub = rbln_config.get(name) if isinstance(rbln_config, dict) else None
        if sub is not None and of(sub) is not None:
            return of(sub)  # type: ignore[return-value]
    return of(rbln_config) or 1


def check_compiled_devices(serving: dict[str, Any], rbln_config: Any, where: str) -> None:
    """A precompiled cell is served on the device count its ``rbln_config.json`` gives vllm-rbln
    (``compiled_num_devices``), not the flag's: UserError naming ``where`` when the two differ (a
    multi-device cell resized by optimum-rbln 0.12.0's own CLI, or by rbln-build before it kept the
    count, records none and would be served on 1 device)."""
    if not serving.get("precompiled"):
        return
    wanted = serving["flags"].get("rbln_num_devices_per_local_rank", 1)
    got = compiled_num_devices(rbln_config)
    if got != wanted:
        raise UserError(
            f"no serve command: {where}: cell compiled for {wanted} device(s), but its rbln_config.json gives "
            f"vllm-rbln 0.12.0 {got} (it reads num_devices from the file, the top level or _compile_cfgs, and "
            "ignores --rbln-num-devices-per-local-rank for a compiled model); rebuild the cell with this "
            "rbln-build, which keeps the compiled device count in _compile_cfgs"
        )
