"""The report's picture of each deployment the build holds (the manifest's ``deployments``).

Per deployment: its models (cell, planned and built counts, budget, port) and, per (device, chiplet),
what each model occupies at its built count, the reservations, the margin and the headroom, as a
table and as one stacked bar per chiplet drawn to the chiplet's available DRAM (plain HTML, no
figure library). The numbers are the record's own: the built reports at the built counts. A server
(a record with ``cards``) gets its placement, then each card that holds models pictured the same way,
with its devices.

``chiplet_parts`` is the bars' content, shared with ``plan --plot`` (``_plot.plot_deployment``), which
draws the same parts, colors and order from a plan's own per-chiplet numbers (the same record shape).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from html import escape
from typing import Any

from ._html import num, size, table

__all__ = ["Chiplet", "chiplet_label", "chiplet_parts", "deployments_section", "model_colors"]

# one color per model (in order), then the reservations and the margin; headroom is left blank
_COLORS = ("#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#ff9da7", "#9c755f")
_RESERVED, _MARGIN = "#bab0ac", "#e15759"


@dataclass(frozen=True)
class Chiplet:
    """One (device, chiplet) of a deployment: what fills it, left to right, and what is left."""

    node: int
    chiplet: int
    parts: tuple[tuple[str, int, str], ...]  # (label, bytes, color): each model, then reserved and margin
    headroom: int
    available: int


def model_colors(names: Iterable[str]) -> dict[str, str]:
    """One color per model, in order (a server's cards share it: a model keeps its color)."""
    return {n: _COLORS[i % len(_COLORS)] for i, n in enumerate(names)}


def chiplet_parts(record: dict[str, Any], colors: dict[str, str] | None = None) -> list[Chiplet]:
    """Per (device, chiplet) of a deployment record (``models[*].usage``, ``per_chiplet``: a built
    deployment's, or a plan's), its parts in the bars' order."""
    models = record.get("models", {})
    per = record.get("per_chiplet") or {}
    colors = colors or model_colors(models)
    available = per.get("available") or 1
    reserved, margin, headroom = per.get("reserved", []), per.get("margin", []), per.get("headroom", [])
    out = []
    for node, row in enumerate(reserved):
        for chiplet in range(len(row)):
            used = tuple(
                (n, (m.get("usage") or [[0] * len(row)] * len(reserved))[node][chiplet], colors[n])
                for n, m in models.items()
            )
            held = margin[node][chiplet] if margin else 0
            parts = (*used, ("reserved", row[chiplet], _RESERVED), ("margin", held, _MARGIN))
            out.append(Chiplet(node, chiplet, parts, headroom[node][chiplet], available))
    return out


def _bar(parts: list[tuple[str, int, str]], available: int) -> str:
    """A stacked bar: (label, bytes, color) each as wide as its share of ``available``."""
    spans = "".join(
        f'<span title="{escape(label)}: {escape(size(n))}" style="display:inline-block;height:14px;'
        f'width:{100 * n / available:.3f}%;background:{color}"></span>'
        for label, n, color in parts
        if n > 0
    )
    return f'<div style="width:420px;border:1px solid #888;white-space:nowrap;overflow:hidden">{spans}</div>'


def _server(name: str, record: dict[str, Any]) -> str:
    """A server's deployment: its placement and proof, then every card as a deployment of its own."""
    server = record.get("server") or {}
    cards = [c for c in record.get("cards") or [] if isinstance(c, dict)]
    held = {c.get("card") for c in cards}
    empty = [str(k) for k in range(server.get("cards") or 0) if k not in held]
    out = [
        f'<h3 id="deployment-{escape(name)}">{escape(name)}: a server of {num(server.get("cards"))} x '
        f"{escape(str(record.get('device')))} ({num(record.get('num_devices'))} x {escape(str(record.get('npu')))} "
        f"each), mode {escape(str(record.get('mode')))}, {'fits' if record.get('fits') else 'DOES NOT FIT'}</h3>",
        f"<p class=muted>placed by CP-SAT: {escape(str(server.get('proof')))}"
        + (f"; card(s) {escape(', '.join(empty))} hold no model" if empty else "")
        + ".</p>",
    ]
    for card in cards:
        ids = ",".join(str(i) for i in (card.get("serve") or {}).get("device_ids", []))
        out.append(_one(name, card, f"{name}, card {card.get('card')} (devices {ids})", 4))
    return "".join(out)


def chiplet_label(record: dict[str, Any], c: Any) -> str:
    """``device D chiplet C`` with D the device id the record serves on (a server card's devices), else
    the device's index in its group."""
    ids = (record.get("serve") or {}).get("device_ids") or []
    node = ids[c.node] if 0 <= c.node < len(ids) else c.node
    return f"device {node} chiplet {c.chiplet}"


def _one(name: str, record: dict[str, Any], title: str | None = None, level: int = 3) -> str:
    models = record.get("models", {})
    per = record.get("per_chiplet", {})
    available = per.get("available") or 1
    rows = [
        [
            escape(n),
            f"<code>{escape(str(m.get('cell')))}</code>",
            num(m.get("planned_blocks")),
            num(m.get("kvcache_num_blocks")),
            num(m.get("num_full_blocks")),
            escape(str(m.get("memory_budget"))),
            escape(str(m.get("port"))),
        ]
        for n, m in models.items()
    ]
    anchor = f' id="deployment-{escape(name)}"' if title is None else ""
    out = [
        f"<h{level}{anchor}>{escape(title or name)}: {escape(str(record.get('device')))} "
        f"({num(record.get('num_devices'))} x {escape(str(record.get('npu')))}), mode {escape(str(record.get('mode')))}, "
        f"{'fits' if record.get('fits') else 'DOES NOT FIT'}</h{level}>",
        table(["model", "cell", "planned", "built", "full pool", "memory_budget", "port"], rows),
    ]
    legend = list(model_colors(models).items()) + [
        ("reserved", _RESERVED),
        ("margin", _MARGIN),
    ]
    out.append(
        "<p class=muted>"
        + " ".join(f'<span style="color:{c}">&#9632;</span> {escape(label)}' for label, c in legend)
        + " &#9633; headroom; each bar is one chiplet's available DRAM.</p>"
    )
    chiplet_rows = [
        [
            chiplet_label(record, c),
            *(size(b) for _, b, _ in c.parts),
            size(c.headroom),
            _bar(list(c.parts), available),
        ]
        for c in chiplet_parts(record)
    ]
    header = ["", *(escape(n) for n in models), "reserved", "margin", "headroom", f"of {escape(size(available))}"]
    out.append(table(header, chiplet_rows))
    for p in record.get("problems", []):
        out.append(f"<p>problem: {escape(str(p))}</p>")
    return "".join(out)


def deployments_section(deployments: dict[str, Any]) -> str:
    """Every deployment of the manifest, by name ("" when it has none)."""
    return "".join(
        (_server if "cards" in deployments[name] else _one)(name, deployments[name]) for name in sorted(deployments)
    )
