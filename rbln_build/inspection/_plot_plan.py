"""``rbln-build plan deployment=<name> [--cards N] --plot FILE``: the plan as a picture.

One bar per (device, chiplet), as long as its available DRAM: each model's bytes at its planned count,
the reservations, the margin and the headroom, for the one device set or for each card of a server.
The drawing is the report's (``rbln_build.reporting.plot_deployment``, the parts of its deployment
bars), fed the plan's own numbers in the report's record shape. Same plan, same bytes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import ConfigError

__all__ = ["mode_plan_record", "plot_plan", "take_plot"]


def take_plot(args: list[str]) -> tuple[Path | None, list[str]]:
    """(``--plot FILE``, the other arguments); the file's extension is checked here, before planning."""
    if "--plot" not in args:
        return None, args
    i = args.index("--plot")
    if i + 1 >= len(args) or args[i + 1].startswith("--"):
        raise ConfigError("plan --plot: expected a file after it (a .png or .svg).")
    path = Path(args[i + 1])
    from ..reporting import plot_format

    plot_format("", path)
    rest = args[:i] + args[i + 2 :]
    if "--plot" in rest:
        raise ConfigError("plan --plot: give it once.")
    return path, rest


def mode_plan_record(mp: Any) -> dict[str, Any]:
    """A fitting ModePlan as the report's deployment record: models' usage and the per-chiplet parts."""
    t = mp.target
    return {
        "models": {a.name: {"usage": [list(r) for r in t.grid(a.usage)]} for a in mp.assignments},
        "per_chiplet": {
            "available": t.available_per_chiplet,
            "reserved": [list(r) for r in t.grid(mp.reserved)],
            "margin": [list(r) for r in t.grid(mp.held())],
            "headroom": [list(r) for r in t.grid(mp.headroom())],
        },
    }


def _heading(mp: Any, where: str) -> str:
    models = ", ".join(f"{a.name} {a.kvcache_num_blocks}/{a.num_full_blocks} blocks" for a in mp.assignments)
    return f"{where}: {models or 'no model'}"


def plot_plan(path: Path, name: str, plan: Any = None, server: Any = None) -> str:
    """Draw the configured mode's plan (``plan``: a DeploymentPlan) or a server's (``server``: a
    ServerPlan) into ``path``; what was done, as one line for stderr."""
    from ..reporting import plot_deployment

    if server is not None:
        t = server.server.target
        if not server.feasible:
            return f"plan --plot {path}: the {server.mode} plan does not fit; nothing drawn."
        cards = [
            (
                _heading(mp, f"card {k} (devices {','.join(map(str, server.server.device_ids(k)))})"),
                {**mode_plan_record(mp), "serve": {"device_ids": list(server.server.device_ids(k))}},
            )
            for k, mp in enumerate(server.cards)
        ]
        title = f"deployment {name}: {len(cards)} x {t.name} ({t.num_devices} x {t.npu.name} each), mode {server.mode}"
    else:
        mp, t = plan.chosen, plan.target
        if not mp.feasible:
            return f"plan --plot {path}: the {plan.mode} plan does not fit; nothing drawn."
        cards = [(_heading(mp, f"{t.name} ({t.num_devices} x {t.npu.name})"), mode_plan_record(mp))]
        title = f"deployment {name} on {t.name}, mode {plan.mode}"
    plot_deployment(title, cards, path)
    return f"plan --plot: wrote {path}"
