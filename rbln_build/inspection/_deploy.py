"""``rbln-build plan | serve-command | explain deployment=<name>``: a deployment's plan, hand-off, table.

    rbln-build plan deployment=qwen3_8b_llama3_2_1b [--json] [OVERRIDE ...]
    rbln-build serve-command deployment=qwen3_8b_llama3_2_1b [--json]
    rbln-build explain deployment=qwen3_8b_llama3_2_1b [--json]

Each composes conf/config.yaml with the overrides (Hydra's compose API, so any override works, e.g.
``deployment.models.0.batch_size=4`` or ``build_dir=...``). ``plan`` and ``explain`` read the
compile cache of ``build_dir`` and the memory model's inventories only: they compile nothing, and
with cached inventories they import neither torch nor transformers. ``serve-command`` reads the
manifest of a built deployment.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from .._documents import load_json
from ..errors import ConfigError, InputError, RblnBuildError, UserError

__all__ = ["main", "USAGE"]

USAGE = """\
usage: rbln-build plan deployment=<name> [--json] [--plot FILE] [OVERRIDE ...]
       rbln-build plan deployment=<name> --cards N [--pin MODEL=CARD ...] [--json] [--plot FILE] [OVERRIDE ...]
                  (a deployment.server key plans its server; the flags override its cards and pins)
       rbln-build serve-command deployment=<name> [--json] [OVERRIDE ...]
       rbln-build serve-command CELL_DIR [--port N] [--devices IDS] [--json]
       rbln-build explain deployment=<name> [--json] [OVERRIDE ...]

plan           the budgets and block counts that let the deployment's models share its device,
               exactly optimal for the objective it prints; when they cannot, which models conflict
               and the smallest changes that fit, single or in pairs (each verified by planning again);
               with --cards, the models placed on a server of N cards of its device, and each card's
               build and serve command;
               with a deployment.server key, its server, built in one run by `rbln-build deployment=<name>`;
               --plot FILE (.png or .svg) draws each card's chiplets: the models, reservations, margin, headroom
serve-command  one vllm-rbln command per model of the built deployment (`rbln-build deployment=<name>`),
               pinned to the deployment's devices, on its own port, with flags that agree with the artifact;
               or the command of one built or released cell folder (its tokenizer, its compiled model)
explain        the deployment's plan as a table per chiplet, one column per model

Deployments are conf/deployment/<name>.yaml ({deployments}); docs/colocation.md walks through one.
Exit status: 0 success; 1 the deployment's plan does not fit (plan) or it is not built (serve-command);
2 a configuration error.
"""


def _compose(overrides: list[str]) -> Any:
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from ..config import closest_names, compose_settings, find_project, split_project_arg

    chosen, overrides = split_project_arg(overrides)
    try:
        settings = compose_settings(overrides, project=find_project(chosen))
    except (HydraException, OmegaConfBaseException) as exc:
        cause = exc.__cause__
        detail = "" if cause is None or str(cause) in str(exc) else f"\n{str(cause).strip()}"
        text = str(exc).strip() + detail
        raise ConfigError(closest_names(" ".join(text.split())) or text) from None  # a misspelt name: the closest
    if settings.deployment is None:
        raise ConfigError("no deployment chosen: add deployment=<name> (conf/deployment/<name>.yaml).")
    return settings


def _plan(settings: Any, as_json: bool, plot: Path | None = None) -> int:
    from ..colocation import overrides_for, plan_for
    from ..deploy import plan_json, render_plan

    plan = plan_for(settings)
    name = settings.deployment.name
    if plot is not None:
        from ._plot_plan import plot_plan

        sys.stderr.write(plot_plan(plot, name, plan=plan) + "\n")
    overrides = overrides_for(settings.deployment)
    if as_json:
        sys.stdout.write(json.dumps(plan_json(plan, name, overrides=overrides), sort_keys=True, indent=2) + "\n")
    else:
        sys.stdout.write(render_plan(plan, name, overrides=overrides))
    return 0 if plan.feasible else 1


def _explain(settings: Any, as_json: bool) -> int:
    from ..colocation import plan_for
    from ..deploy import Demand, mib, plan_json, render_chiplets

    plan = plan_for(settings)
    name = settings.deployment.name
    mp = plan.chosen
    if as_json:
        data = plan_json(plan, name)
        data["plans"] = {plan.mode: data["plans"][plan.mode]}
        sys.stdout.write(json.dumps(data, sort_keys=True, indent=2) + "\n")
        return 0 if plan.feasible else 1
    t = plan.target
    out = [f"deployment {name} on {t.name}: {t.num_devices} x {t.npu.name} ({t.npu.product}), mode {plan.mode}"]
    if not mp.feasible:
        out.append(
            f"the {plan.mode} plan does not fit: {mp.reason}; `rbln-build plan deployment={name}` says what would."
        )
        sys.stdout.write("\n".join(out) + "\n")
        return 1
    for a in mp.assignments:
        tenant = plan.tenant(a.name)
        fixed = Demand(tenant, t).need(0)
        kv = max(u - f for u, f in zip(a.usage, fixed, strict=True))
        budget = (
            "" if a.budget_bytes is None else f", memory_budget {a.memory_budget!r} ({a.budget_bytes:,} B per device)"
        )
        out.append(
            f"  {a.name}: {a.kvcache_num_blocks} of {a.num_full_blocks} blocks{budget}; "
            f"KV pool up to {mib(kv)} MiB on a chiplet; report: {tenant.source}"
        )
    out.append("")
    out.append("per chiplet, what each model occupies at its planned count:")
    out += ["  " + line for line in render_chiplets(mp)]
    sys.stdout.write("\n".join(out) + "\n")
    return 0


def _serve(settings: Any, as_json: bool) -> int:
    from ..estimator import resolve_npu
    from ..pipeline import check_serving, command_for, with_budget

    d = settings.deployment
    path = settings.build_dir / "manifest.json"
    manifest = load_json(path, hint="rebuild the deployment") if path.exists() else {}
    deployments = manifest.get("deployments") if isinstance(manifest, dict) else None
    record = deployments.get(d.name) if isinstance(deployments, dict) else None
    if not isinstance(record, dict):
        sys.stderr.write(
            f"rbln-build serve-command: {path} holds no build of deployment {d.name}; build it first: "
            f"rbln-build deployment={d.name}\n"
        )
        return 1
    devices = _devices(record, d, path)
    if devices is None:
        sys.stderr.write(
            f"rbln-build serve-command: {path} holds deployment {d.name} built "
            + (
                "as a server, which its config no longer names"
                if d.server is None
                else "without its server"
                if "cards" not in record
                else "with other models on its cards than its config names"
            )
            + f"; build it again: rbln-build deployment={d.name}\n"
        )
        return 1
    npu = resolve_npu(d.device.npu)
    commands = []
    for dm in d.models:
        try:
            entry_id = record["models"][dm.name]["cell"]
            serving = manifest["cells"][entry_id].get("serving")
        except (KeyError, TypeError, AttributeError) as exc:
            raise InputError(
                f"{path} does not describe deployment {d.name} as this rbln-build writes it "
                f"(no {exc}); rebuild it: rbln-build deployment={d.name}"
            ) from None
        if serving is None:
            sys.stderr.write(f"rbln-build serve-command: cell {entry_id} of {d.name} did not build; see {path}.\n")
            return 1
        serving = check_serving(serving, f"{path}: cell {str(entry_id)[:200]}")
        budget = record["models"][dm.name].get("serve_budget_bytes")
        if budget is not None and (not isinstance(budget, int) or isinstance(budget, bool) or budget < 1):
            raise InputError(
                f"{path}: deployment {d.name}'s serve_budget_bytes of {dm.name} is "
                f"{str(budget)[:80]!r}, not a positive integer; rebuild it: rbln-build deployment={d.name}"
            )
        serving = with_budget(serving, budget, npu)
        card, ids = devices[dm.name]
        command = command_for(serving, dm.port, ids, str(_display(settings.build_dir)))
        commands.append(
            {
                "model": dm.name,
                "cell": entry_id,
                "port": dm.port,
                **({} if card is None else {"card": card, "device_ids": list(ids)}),
                **command,
                "exact": serving["exact"],
                "notes": serving["notes"],
            }
        )
    if as_json:
        sys.stdout.write(json.dumps({"deployment": d.name, "commands": commands}, sort_keys=True, indent=2) + "\n")
        return 0
    where = f"sharing {d.device.name}"
    if d.server is not None:
        where = f"on a server of {d.server.cards} x {d.device.name}"
    out = [
        f"# deployment {d.name}: {len(commands)} vllm-rbln processes {where} "
        f"({d.device.npu} x{d.device.num_devices}), devices {','.join(map(str, d.device_ids))}"
    ]
    for c in commands:
        on = "" if "card" not in c else f", card {c['card']} (devices {','.join(map(str, c['device_ids']))})"
        out.append(
            f"# {c['model']}: cell {c['cell']}, port {c['port']}{on}"
            + ("" if c["exact"] else " (the flags cannot pin its block count; see the notes)")
        )
        out += [f"#   {n}" for n in c["notes"]]
        out.append(c["shell"] + " &")
    sys.stdout.write("\n".join(out) + "\n")
    return 0


def _devices(record: dict[str, Any], d: Any, path: Path) -> dict[str, tuple[Any, tuple[int, ...]]] | None:
    """Each model's (card, devices): a server's record lists its cards, each with its devices; a
    one-card record, the deployment's devices (card None). None: the record and the config disagree
    on whether the deployment is a server."""
    cards = record.get("cards")
    if (cards is not None) != (d.server is not None):
        return None
    if cards is None:
        return {dm.name: (None, tuple(d.device_ids)) for dm in d.models}
    out: dict[str, tuple[Any, tuple[int, ...]]] = {}
    try:
        for card in cards:
            ids = tuple(card["serve"]["device_ids"])
            if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
                raise TypeError("device_ids")
            out.update((name, (card["card"], ids)) for name in card["models"])
    except (KeyError, TypeError, AttributeError) as exc:
        raise InputError(
            f"{path}: deployment {d.name}'s cards are not as this rbln-build writes them ({exc}); "
            f"rebuild it: rbln-build deployment={d.name}"
        ) from None
    if set(out) != {dm.name for dm in d.models}:
        return None
    return out


def _display(path: Path) -> Path:
    try:
        return path.relative_to(Path.cwd())
    except ValueError:
        return path


def main(argv: list[str]) -> int:
    """``argv``: the subcommand and its arguments (``plan deployment=x --json``)."""
    command, rest = argv[0], argv[1:]
    if command == "serve-command" and any(not a.startswith("-") and "=" not in a for a in rest):
        from ._serve_cell import main as serve_cell  # a cell folder instead of a deployment

        try:
            return serve_cell(rest)
        except UserError as exc:
            sys.stderr.write(f"rbln-build {command}: {_one_line(exc)}\n")
            return 2
    if any(a in ("-h", "--help", "help") for a in rest):
        from ..config import list_group_options

        options = [o for o in list_group_options("deployment") if o != "deployment_schema"]
        sys.stdout.write(USAGE.format(deployments=", ".join(options) or "none"))
        return 0
    as_json = "--json" in rest
    overrides = [a for a in rest if a != "--json"]
    try:
        cards: int | None = None
        pins: dict[str, int] = {}
        plot: Path | None = None
        if command == "plan":
            from ._plot_plan import take_plot
            from ._server import parse_server_args, plan_server_command

            plot, overrides = take_plot(overrides)
            cards, pins, overrides = parse_server_args(overrides)
        settings = _compose(overrides)
        configured = settings.deployment.server is not None
        flags = cards is not None or bool(pins)
        if flags:
            from ._server import with_server

            settings = with_server(settings, cards, pins)
        if command == "plan" and settings.deployment.server is not None:
            return plan_server_command(settings, overrides, configured, flags, as_json, plot)
        if command == "explain" and configured:
            raise ConfigError(
                f"explain deployment={settings.deployment.name}: it is a server of {settings.deployment.server.cards} "
                "card(s); `rbln-build plan` prints each card's table."
            )
        if plot is not None:  # only `plan` takes --plot
            return _plan(settings, as_json, plot)
        run = {"plan": _plan, "serve-command": _serve, "explain": _explain}[command]
        return run(settings, as_json)
    except UserError as exc:
        sys.stderr.write(f"rbln-build {command}: {_one_line(exc)}\n")
        return 2
    except RblnBuildError as exc:
        sys.stderr.write(f"rbln-build {command}: {_one_line(exc)}\n")
        return 1


def _one_line(exc: Exception) -> str:
    """An error as one line (Hydra's own messages list the config search path on many)."""
    return " ".join(str(exc).split())


def plan_main(argv: list[str]) -> int:
    return main(["plan", *argv])


def serve_main(argv: list[str]) -> int:
    return main(["serve-command", *argv])


def explain_main(argv: list[str]) -> int:
    return main(["explain", *argv])
