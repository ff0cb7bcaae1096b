"""``rbln-build plan deployment=<name>`` of a deployment with a ``server`` key, or with ``--cards N
[--pin MODEL=CARD ...]``: the deployment on a server.

Its models are placed on the server's cards of its device target (``rbln_build.colocation.server_plan_for``:
each card holds the deployment's reservations and margins, every model one card), and each card that
holds models is printed with its per-chiplet table. The flags override the config's ``server``
(``--cards`` its cards, each ``--pin`` one model's card over the config's pins). A server from the
config is built and served in one run (``rbln-build deployment=<name>``, printed once); a server from
the flags gets, per card, the two commands that build and serve it as a deployment of its own
(``card_overrides``: its models with their planned budgets fixed, its devices), in a build directory
of its own (``<build_dir>/card<k>``).
"""

from __future__ import annotations

import json
import shlex
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..estimator import count_problem

__all__ = ["parse_server_args", "plan_server_command", "with_server"]


def parse_server_args(rest: list[str]) -> tuple[int | None, dict[str, int], list[str]]:
    """(``--cards``, ``--pin`` MODEL=CARD by model, the other arguments)."""
    cards: int | None = None
    pins: dict[str, int] = {}
    others: list[str] = []
    items = iter(rest)
    for arg in items:
        a, eq, given = arg.partition("=")
        if a in ("--cards", "--pin"):
            value = given if eq else next(items, None)
            if value is None:
                raise ConfigError(f"plan {a}: expected a value after it (such as {a} 2).")
            if a == "--cards":
                if not value.isdigit() or int(value) < 1:
                    raise ConfigError(f"plan --cards: expected a whole number of cards >= 1, got {value[:100]!r}.")
                problem = count_problem("server_cards", int(value))
                if problem:  # the planner models every card: a typed number must not size memory
                    raise ConfigError(f"plan --cards: {problem}.")
                cards = int(value)
            else:
                name, _, card = value.partition("=")
                if not name or not card.isdigit():
                    raise ConfigError(f"plan --pin: expected MODEL=CARD (a model's name, a card index), got {value!r}.")
                pins[name] = int(card)
        else:
            others.append(arg)
    return cards, pins, others


def with_server(settings: Any, cards: int | None, pins: dict[str, int]) -> Any:
    """``settings`` with the flags over its deployment's ``server``: ``--cards`` replaces its cards, each
    ``--pin`` one model's card; checked as the config's key is (``deployment.server...`` errors). The
    devices: ``serve.device_ids`` when it lists every card's, else ``0 .. cards x num_devices - 1``."""
    from ..deploy.server import server_from

    d = settings.deployment
    if cards is None and d.server is None:
        raise ConfigError(
            "plan --pin: pins a model to a card of a server; give the server's --cards too "
            "(or set deployment.server.cards)."
        )
    node = {
        "cards": cards if cards is not None else d.server.cards,
        "pins": {**(d.server.pin_map() if d.server is not None else {}), **pins},
    }
    server = server_from(node, [m.name for m in d.models])
    assert server is not None
    count = d.device.num_devices * server.cards
    ids = d.device_ids if len(d.device_ids) == count else tuple(range(count))
    return replace(settings, deployment=replace(d, server=server, device_ids=ids))


def plan_server_command(
    settings: Any, overrides: list[str], configured: bool, flags: bool, as_json: bool, plot: Path | None = None
) -> int:
    """``configured``: the deployment's config names a server; ``flags``: ``--cards``/``--pin`` were given
    (then each card is printed as a deployment of its own, as the config may not say this server)."""
    from ..colocation import card_devices, card_overrides, server_plan_for
    from ..deploy import OBJECTIVE, render_chiplets

    d = settings.deployment
    cards, pins = d.server.cards, d.server.pin_map()
    plan = server_plan_for(settings)
    if plot is not None:
        from ._plot_plan import plot_plan

        sys.stderr.write(plot_plan(plot, d.name, server=plan) + "\n")
    per_card = dict(card_overrides(d, plan, configured)) if plan.feasible and plan.mode == "budget" else {}
    given = [o for o in overrides if not o.startswith(("deployment=", "build_dir="))]
    build_dir = next((o.split("=", 1)[1] for o in reversed(overrides) if o.startswith("build_dir=")), "build")
    for k in per_card:  # each card its own build directory: its own manifest and deployment record
        per_card[k] = [*per_card[k], f"build_dir={build_dir.rstrip('/')}/card{k}"]
    base = ["rbln-build", f"deployment={d.name}", *given]
    t = plan.server.target
    if as_json:
        out = {
            "deployment": d.name,
            "device": t.name,
            "cards": cards,
            "mode": plan.mode,
            "feasible": plan.feasible,
            "reason": plan.reason,
            "shortfalls": [vars(s) for s in plan.shortfalls],
            "fits_on_cards": plan.fits_on,
            "objective": None if plan.objective is None else plan.objective.to_json(),
            "proof": plan.proof.to_json(),
            "placement": dict(plan.placement),
            "per_card": [
                {
                    "card": k,
                    "device_ids": list(card_devices(d, plan, k)),
                    "models": {
                        a.name: {"kvcache_num_blocks": a.kvcache_num_blocks, "memory_budget": a.memory_budget}
                        for a in mp.assignments
                    },
                    "per_chiplet": {
                        "reserved": [list(r) for r in t.grid(mp.reserved)],
                        "margin": [list(r) for r in t.grid(mp.held())],
                        "total": [list(r) for r in t.grid(mp.used())],
                        "headroom": [list(r) for r in t.grid(mp.headroom())],
                    },
                    "overrides": per_card.get(k, []),
                }
                for k, mp in enumerate(plan.cards)
            ],
        }
        sys.stdout.write(json.dumps(out, sort_keys=True, indent=2) + "\n")
        return 0 if plan.feasible else 1
    lines = [
        f"deployment {d.name} on a server of {cards} x {t.name} ({t.num_devices} x {t.npu.name} each), mode {plan.mode}",
        f"objective: {OBJECTIVE}; then each model's card in listed order, lower first",
    ]
    if not plan.feasible:
        lines.append(f"the {plan.mode} plan does not fit: {plan.reason}")
        if plan.fits_on is not None:
            again = [f"deployment={d.name}", *(o for o in overrides if not o.startswith("deployment="))]
            again += [x for name, k in (pins.items() if flags else ()) for x in ("--pin", f"{name}={k}")]
            lines.append("  " + shlex.join(["rbln-build", "plan", *again, "--cards", str(plan.fits_on)]))
        sys.stdout.write("\n".join(lines) + "\n")
        return 1
    assert plan.objective is not None
    lines.append(
        f"placed and planned by CP-SAT (OR-Tools): {plan.proof.note}; smallest share "
        f"{float(plan.objective.min_share):.4f}, {plan.objective.total_blocks} blocks in total"
    )
    for k, mp in enumerate(plan.cards):
        ids = ",".join(map(str, card_devices(d, plan, k)))
        lines.append("")
        if not mp.assignments:
            lines.append(f"card {k} (devices {ids}): no model")
            continue
        models = ", ".join(
            f"{a.name} {a.kvcache_num_blocks}/{a.num_full_blocks} blocks"
            + ("" if a.memory_budget is None else f" (memory_budget {a.memory_budget})")
            for a in mp.assignments
        )
        lines.append(f"card {k} (devices {ids}): {models}")
        lines += ["  " + row for row in render_chiplets(mp)]
        if k in per_card and flags:
            lines.append("  build: " + shlex.join([*base, *per_card[k]]))
            lines.append("  serve: " + shlex.join([base[0], "serve-command", *base[1:], *per_card[k]]))
    if not flags:  # the config names this server: one run builds every card, one command serves them
        whole = [*base, *[o for o in overrides if o.startswith("build_dir=")][-1:]]
        lines += ["", "build (every card, in one run): " + shlex.join(whole)]
        lines.append("serve (every model on its card): " + shlex.join([base[0], "serve-command", *whole[1:]]))
    elif not per_card:
        lines.append("")
        lines.append(
            "(build commands per card are printed for mode budget: each card fixes its models' planned budgets)"
        )
    sys.stdout.write("\n".join(lines) + "\n")
    return 0
