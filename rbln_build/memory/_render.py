"""``explain``'s table: the value ``explain`` computes, as the text ``rbln-build explain`` prints
(sizes in the unit that reads, budgets rounded up so that any budget at or above still suffices)."""

from __future__ import annotations

import math
from typing import Any

from ..estimator import GiB, MiB

__all__ = ["render"]


def _mib(n: int | None) -> str:
    if n is None:
        return "-"
    return f"{n / MiB:,.2f} MiB" if n % MiB else f"{n / MiB:,.0f} MiB"  # whole MiB without decimals


def _ceil4(fraction: float) -> str:
    """A fraction rounded *up* to 4 decimals: any budget at or above it still suffices."""
    return f"{min(1.0, math.ceil(fraction * 10_000) / 10_000):.4f}"


def _gib(n: int) -> str:
    """Bytes in the unit that reads: GiB from 1 GiB on, MiB below (a tiny model's 200 MiB floor)."""
    return f"{n / GiB:,.2f} GiB" if n >= GiB else f"{n / MiB:,.2f} MiB"


def render(data: dict[str, Any]) -> str:
    a = data["attention"]
    out = [
        f"{data['model']} on {data['device']}: {data['num_devices']} x {data['npu']} ({data['product']}, "
        f"{data['num_chiplets']} chiplet(s) per device, "
        f"{_gib(data['available_bytes_per_device'])} available per device)",
        "Model-based estimate (rbln_build.memory), calibrated to the specification's figures; not a compiler report.",
        "",
        f"attention   {a['attn_impl']}, block {a['kvcache_block_size']}, partition {a['kvcache_partition_len']}, "
        f"prefill chunk {a['prefill_chunk_size']}; batch_size {a['batch_size']}, max_seq_len {a['max_seq_len']}",
        f"weights     {data['parameters']:,} parameters, {data['dtype']}, linear weights {data['weight_bits']}-bit; "
        f"input embedding on the host ({_mib(data['host_embedding_bytes'])})",
        f"layers      per chiplet: {'/'.join(str(n) for n in data['layers_per_chiplet'])}",
        "",
    ]
    nodes = data["per_chiplet"]
    groups: list[tuple[str, list[dict[str, int]]]] = []
    if all(n == nodes[0] for n in nodes):
        label = "each device" if len(nodes) > 1 else "device 0"
        groups.append((label, nodes[0]))
    else:
        groups += [(f"device {i}", n) for i, n in enumerate(nodes)]
    keys = [k for k in ("weights", "workspace", "runtime_buffers") if k in nodes[0][0]]
    keys += sorted(k for k in nodes[0][0] if k not in keys and k not in ("non_kv", "kv_per_block", "kv_fixed"))
    labels = {
        "weights": "weights",
        "workspace": "workspace (prefill+decode)",
        "runtime_buffers": "runtime buffers (prefill+decode)",
        "non_kv": "non-KV total",
        "kv_per_block": "KV per block (2 MiB-aligned)",
        "kv_fixed": "KV fixed (sliding windows)",
    }
    for label, chiplets in groups:
        width = max(14, *(len(_mib(c[k])) + 2 for c in chiplets for k in c))
        header = "".join(f"{'chiplet ' + str(i):>{width}}" for i in range(len(chiplets)))
        out.append(f"{'per chiplet, ' + label:34}" + header)
        for key in keys + ["non_kv", "kv_per_block", "kv_fixed"]:
            out.append(f"  {labels.get(key, key):32}" + "".join(f"{_mib(c[key]):>{width}}" for c in chiplets))
        out.append("")

    def need(name: str, answer: dict[str, Any]) -> str:
        head = f"{name} ({answer['blocks']} blocks)"
        if answer["bytes"] is None:
            return f"{head:28} needs {answer['required_bytes']:,} B per device: {answer['reason']}"
        return (
            f"{head:28} needs {answer['bytes']:,} B per device ({_gib(answer['bytes'])}), "
            f"memory_budget >= {_ceil4(answer['fraction'])}"
        )

    out.append(need("full pool", data["budget_for_full_pool"]))
    out.append(need("floor", data["budget_for_floor"]))
    out.append("")
    out.append(f"{'memory_budget':>14}  {'bytes per device':>18}  kvcache_num_blocks")
    for row in data["budgets"]:
        if row["error"] is None:
            result = str(row["kvcache_num_blocks"])
        elif row["error_kind"] == "insufficient_memory":
            result = f"error: below the floor ({row['max_fitting_blocks']} blocks fit, {data['num_min_blocks']} needed)"
        else:
            result = f"error: {row['error']}"
        nbytes = "-" if row["budget_bytes"] is None else f"{row['budget_bytes']:,}"
        out.append(f"{row['budget']!s:>14}  {nbytes:>18}  {result}")
    for w in data["warnings"]:
        out.append(f"warning: {w}")
    return "\n".join(out) + "\n"
