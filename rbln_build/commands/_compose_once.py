"""One Hydra composition for a plain run (no ``-m``), where ``@hydra.main`` makes two.

For a run, Hydra 1.3 composes the config twice: ``Hydra.get_mode`` composes it in MULTIRUN mode
only to read ``hydra.mode`` (a config may turn a run into a multirun), then ``Hydra.run`` composes
it again in RUN mode. With a large matrix (a 556-element budget list) each composition is ~0.2 s
of a no-op's full path. Here ``get_mode`` composes in RUN mode, as the run will, reads
``hydra.mode`` from that, and the run's composition returns that config instead of loading it
again:

* the two compositions differ only in what a RUN composition refuses (a sweep value without
  ``-m``, a missing ``???`` default): any error falls back to Hydra's own ``get_mode``, so the
  run composes and reports exactly as before;
* when no config sets ``hydra.mode``, Hydra adds the override ``hydra.mode=RUN`` to the run's
  composition: it is applied to the kept config with Hydra's own override code, and recorded in
  ``hydra.overrides.hydra``, last, as the composition would;
* a config that sets ``hydra.mode=MULTIRUN`` keeps Hydra's path (the multirun composes itself);
  ``-m`` runs, launchers' jobs, ``--cfg``/``--help``/``--info`` are not touched at all.

Only for the pinned hydra-core 1.3.2 (these are Hydra internals); any other version composes
twice, as Hydra does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

__all__ = ["composed_once"]

HYDRA_VERSION = "1.3.2"  # the internals below were read in this version (pyproject pins it)


@contextlib.contextmanager
def composed_once(args: list[str]) -> Iterator[None]:
    """While active, a plain run's ``@hydra.main`` composes its config once."""
    import hydra

    if {"-m", "--multirun"} & set(args) or hydra.__version__ != HYDRA_VERSION:
        yield
        return
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra._internal.hydra import Hydra
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.types import RunMode

    get_mode, load = Hydra.get_mode, ConfigLoaderImpl.load_configuration
    kept: dict[str, Any] = {}

    def once_get_mode(self: Any, config_name: str | None, overrides: list[str]) -> Any:
        kept.clear()
        try:
            cfg = load(self.config_loader, config_name=config_name, overrides=list(overrides), run_mode=RunMode.RUN)
            mode = cfg.hydra.mode
        except Exception:  # Hydra's own path: the run composes again and reports the error as it does
            return get_mode(self, config_name, overrides)
        if mode is not None and mode != RunMode.RUN:
            return mode
        extra = [] if mode == RunMode.RUN else ["hydra.mode=RUN"]  # what hydra's _run_app adds for None
        kept.update(name=config_name, overrides=[*overrides, *extra], extra=extra, cfg=cfg)
        return mode

    def once_load(
        self: Any,
        config_name: str | None,
        overrides: list[str],
        run_mode: Any,
        from_shell: bool = True,
        validate_sweep_overrides: bool = True,
    ) -> Any:
        cfg = kept.pop("cfg", None)
        same = (config_name, list(overrides), run_mode, from_shell, validate_sweep_overrides) == (
            kept.get("name"),
            kept.get("overrides"),
            RunMode.RUN,
            True,
            True,
        )
        if cfg is None or not same:
            return load(self, config_name, overrides, run_mode, from_shell, validate_sweep_overrides)
        if kept["extra"]:  # as _load_configuration_impl applies and records a hydra override
            ConfigLoaderImpl._apply_overrides_to_config(OverridesParser.create().parse_overrides(kept["extra"]), cfg)
            cfg.hydra.overrides.hydra.extend(kept["extra"])
        return cfg

    Hydra.get_mode = once_get_mode  # type: ignore[method-assign]
    ConfigLoaderImpl.load_configuration = once_load  # type: ignore[method-assign]
    try:
        yield
    finally:
        Hydra.get_mode = get_mode  # type: ignore[method-assign]
        ConfigLoaderImpl.load_configuration = load  # type: ignore[method-assign]
        kept.clear()
