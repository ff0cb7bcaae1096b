"""The KV-cache block estimator: pure arithmetic, no I/O, nothing heavy imported.

Layers, each importing only the ones above it::

    _units       MiB, GiB, the 2 MiB alignment: the one definition of each
    _npu         NPU targets (device DRAM, chiplets, reserves) and their aliases
    _budget      memory_budget forms: parsed, checked and printed in one place
    _attention   attention options resolved as optimum-rbln 0.12.0 resolves them
    _report      the AllocationReport (what a compiled model occupies per chiplet)
    _pool        a report's per-chiplet grids and the block arithmetic over them
    _search      the estimate: Request -> Resolution (blocks, floor, full pool, breakdown)
    _jsonl       ``python -m rbln_build.estimate``: the estimator as a JSON-lines filter

It imports nothing from ``rbln_build.build``, ``rbln_build.memory`` or ``rbln_build.backends``
(a test checks it), so any of them may use it.
"""

from __future__ import annotations

from ._attention import ATTENTION_OPTIONS, AttentionConfig, attention_options, resolve_attention
from ._budget import ACCEPTED_FORMS, BYTE_UNITS, budget_hints, check_budget, fraction_for_bytes, resolve_budget
from ._npu import KNOWN_FAMILIES, NPU_ALIASES, AttentionLimits, NpuTarget, resolve_npu
from ._report import DRAM_TENSOR_KEY, AllocationReport, KVTensor
from ._search import (
    ALIGNMENT,
    Breakdown,
    BudgetAnswer,
    Request,
    Resolution,
    align_2mib,
    estimate,
    fits,
    kv_bytes_at,
    max_blocks_within,
    min_budget_for_blocks,
)

__all__ = [
    "ACCEPTED_FORMS",
    "ALIGNMENT",
    "ATTENTION_OPTIONS",
    "AllocationReport",
    "AttentionConfig",
    "AttentionLimits",
    "BYTE_UNITS",
    "Breakdown",
    "BudgetAnswer",
    "DRAM_TENSOR_KEY",
    "KNOWN_FAMILIES",
    "KVTensor",
    "NPU_ALIASES",
    "NpuTarget",
    "Request",
    "Resolution",
    "align_2mib",
    "attention_options",
    "budget_hints",
    "check_budget",
    "estimate",
    "fits",
    "fraction_for_bytes",
    "kv_bytes_at",
    "max_blocks_within",
    "min_budget_for_blocks",
    "resolve_attention",
    "resolve_budget",
    "resolve_npu",
]
