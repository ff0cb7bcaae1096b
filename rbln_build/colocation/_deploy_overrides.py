"""A suggested change as the command-line overrides that apply it to the configured deployment.

``plan`` prints them under each suggestion, so that a change is applied exactly as printed:
``rbln-build plan deployment=<name> <overrides>`` plans the changed deployment (the tests run every
printed line). A change keeps everything it does not name: dropping a model or a reservation lists
the ones that stay with every key they were configured with, and each model's port, so no port moves.
A combination of changes is one set of overrides: a model dropped with another one changed gives one
list of the models that stay, the change folded into its entry.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import Any

from ..config import Deployment, DeploymentModel
from ..deploy import Suggestion, Traffic

__all__ = ["overrides_for"]


def _value(value: Any) -> str:
    """A value in Hydra's override grammar: numbers and plain words as they are, other strings quoted."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    text = str(value)
    if text.replace("_", "").replace("-", "").replace(".", "").isalnum():
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _mapping(items: dict[str, Any]) -> str:
    return "{" + ",".join(f"{k}:{_entry(v)}" for k, v in items.items() if v is not None) + "}"


def _entry(value: Any) -> str:
    if isinstance(value, Traffic):  # a nested mapping of its set fields (rates as the floats configured)
        fields = {k: (float(v) if isinstance(v, Fraction) else v) for k, v in vars(value).items()}
        return _mapping(fields)
    return _value(value)


def _model_entry(dm: DeploymentModel) -> dict[str, Any]:
    return {
        "model": dm.model.name,
        "name": dm.name if dm.name != dm.model.name else None,
        "batch_size": dm.batch_size,
        "max_seq_len": dm.max_seq_len,
        "min_blocks": dm.min_blocks,
        "weight": None if dm.weight == 1 else float(dm.weight),
        "memory_budget": dm.memory_budget,
        "port": dm.port,  # explicit: the models after a dropped one keep their ports
        "traffic": dm.traffic,
    }


def overrides_for(d: Deployment) -> Callable[[Suggestion], list[str]]:
    """Suggestion -> the overrides (unquoted; the caller quotes them for a shell)."""
    index = {m.name: i for i, m in enumerate(d.models)}

    def apply(s: Suggestion) -> list[str]:
        if s.kind == "combination":
            return _combined(d, s, apply)
        if s.kind == "mode":
            return [f"deployment.mode={s.new}"]
        if s.kind == "device":
            out = [f"deployment.device={s.new}"]
            if len(d.device_ids) != s.plan.target.num_devices:  # pinned ids of the old count cannot stay
                out.append("deployment.serve.device_ids=null")
                if d.margins.devices:  # nor per-device margins: the deployment's margin stays (as planned)
                    out.append("deployment.device_margins=null")
            return out
        if s.kind == "margin":
            nbytes = int(s.new)  # type: ignore[call-overload]
            return [f"deployment.margin={nbytes // 2**20}MB" if nbytes else "deployment.margin=null"]
        if s.kind == "drop_model":
            kept = [_mapping(_model_entry(m)) for m in d.models if m.name != s.subject]
            return ["deployment.models=[" + ",".join(kept) + "]"]
        if s.kind in ("reservation", "drop_reservation"):
            j = next(j for j, r in enumerate(d.reservations) if r.name == s.subject)
            if s.kind == "reservation":
                nbytes = int(s.new)  # type: ignore[call-overload]
                return [f"deployment.reservations.{j}.bytes={nbytes // 2**20}MB"]
            kept = [
                _mapping({"name": r.name, "bytes": r.nbytes, "chiplet": r.chiplet})
                for r in d.reservations
                if r.name != s.subject
            ]
            return ["deployment.reservations=[" + ",".join(kept) + "]"]
        i = index[s.subject]
        out = [f"deployment.models.{i}.{s.kind}={_value(s.new)}"]
        out += [f"deployment.models.{i}.{key}={_value(new)}" for key, _, new in s.also]
        return out

    return apply


_MODEL_KINDS = ("batch_size", "max_seq_len", "min_blocks", "memory_budget")


def _combined(d: Deployment, s: Suggestion, single: Callable[[Suggestion], list[str]]) -> list[str]:
    """A combination's overrides: the models' changes (folded into one list when one is dropped), the
    reservations' (likewise), then the rest; one value per key, the later part's."""
    dropped = {p.subject for p in s.parts if p.kind == "drop_model"}
    changes: dict[str, dict[str, Any]] = {}
    for p in s.parts:
        if p.kind in _MODEL_KINDS:
            changes.setdefault(p.subject, {})[p.kind] = p.new
            changes[p.subject].update({key: new for key, _, new in p.also})
    out: list[str] = []
    if dropped:
        kept = [_mapping({**_model_entry(m), **changes.get(m.name, {})}) for m in d.models if m.name not in dropped]
        out.append("deployment.models=[" + ",".join(kept) + "]")
    else:
        index = {m.name: i for i, m in enumerate(d.models)}
        for name, change in changes.items():
            out += [f"deployment.models.{index[name]}.{key}={_value(new)}" for key, new in change.items()]
    gone = {p.subject for p in s.parts if p.kind == "drop_reservation"}
    sizes = {p.subject: p.new for p in s.parts if p.kind == "reservation"}
    if gone:
        kept = [
            _mapping({"name": r.name, "bytes": sizes.get(r.name, r.nbytes), "chiplet": r.chiplet})
            for r in d.reservations
            if r.name not in gone
        ]
        out.append("deployment.reservations=[" + ",".join(kept) + "]")
    for p in s.parts:
        if p.kind in ("mode", "device", "margin") or (p.kind == "reservation" and not gone):
            out += single(p)
    last = {o.split("=", 1)[0]: o for o in out}
    return list(dict.fromkeys(last[o.split("=", 1)[0]] for o in out))
