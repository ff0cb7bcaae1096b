"""The KV-cache block estimator: pure arithmetic, no I/O, nothing heavy imported.

Layers, each importing only the ones above it (data flows one way: the pool computes its grids
once, the search reads them, the breakdown reads the search, the estimate reads all three)::

    _units       MiB, GiB, the 2 MiB alignment: the one definition of each
    _limits      what input is accepted: the identifier rule and the upper bound of every count
    _npu         NPU targets (device DRAM, chiplets, reserves) and their aliases
    _budget      memory_budget forms: parsed, checked and printed in one place
    _attention   attention options resolved as optimum-rbln 0.12.0 resolves them
    _report      the AllocationReport (what a compiled model occupies per chiplet)
    _pool        a report reduced once: its buckets, shape and grids, what N blocks need
    _search      the searches over a pool: most blocks within a budget, least budget for N blocks
    _breakdown   the explanation of an answer, from the pool and the search
    _request     Request and Resolution, and the request's validation (every count within its bound)
    _estimate    Request -> Resolution: the rules, every message

It imports nothing from ``rbln_build.memory``, ``rbln_build.backends`` or any layer above them
(a test checks it), so any of them may use it.
"""

from __future__ import annotations

from ._attention import ATTENTION_OPTIONS, AttentionConfig, attention_options, resolve_attention
from ._breakdown import Breakdown, BudgetAnswer
from ._budget import (
    ACCEPTED_FORMS,
    BYTE_UNITS,
    FORMS_SYNOPSIS,
    WORDS_SYNOPSIS,
    budget_from_text,
    budget_hints,
    check_budget,
    format_budget,
    fraction_for_bytes,
    resolve_budget,
)
from ._estimate import estimate
from ._limits import LIMITS, cell_id_problem, count_problem, name_problem
from ._npu import KNOWN_FAMILIES, NPU_ALIASES, AttentionLimits, NpuTarget, resolve_npu
from ._pool import fits, kv_bytes_at
from ._report import DRAM_TENSOR_KEY, AllocationReport, KVTensor
from ._request import Request, Resolution
from ._search import max_blocks_within, min_budget_for_blocks
from ._units import ALIGNMENT, GiB, KiB, MiB, TiB, align, align_2mib

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
    "FORMS_SYNOPSIS",
    "GiB",
    "KNOWN_FAMILIES",
    "KVTensor",
    "KiB",
    "LIMITS",
    "MiB",
    "NPU_ALIASES",
    "NpuTarget",
    "Request",
    "Resolution",
    "TiB",
    "WORDS_SYNOPSIS",
    "align",
    "align_2mib",
    "attention_options",
    "budget_from_text",
    "budget_hints",
    "cell_id_problem",
    "check_budget",
    "count_problem",
    "estimate",
    "fits",
    "format_budget",
    "fraction_for_bytes",
    "kv_bytes_at",
    "max_blocks_within",
    "min_budget_for_blocks",
    "name_problem",
    "resolve_attention",
    "resolve_budget",
    "resolve_npu",
]
