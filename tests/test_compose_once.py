"""A plain run composes its config once (rbln_build.commands._compose_once), with the same result.

Each case composes in process twice: with the short cut and with Hydra's own two compositions
(``composed_once`` replaced by a no-op context), and compares everything the build sees: the jobs
(or the error), the config and Hydra's config each job got, what Hydra printed.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

import pytest
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.hydra import Hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf

import rbln_build.config as config_package
from rbln_build.commands import _build, _compose_once
from rbln_build.config import find_project

CASES = [
    [],
    ["budget=0.3"],
    ["matrix=release", "device=atom_max_x4", "progress=false"],
    ["hydra.mode=RUN"],
    ["hydra.mode=MULTIRUN", "budget=0.3"],  # a config's mode turns a run into a multirun
    ["-m", "budget=0.3,0.5", "device=atom_max,rebel100"],
    ["budget=-1"],
    # bad input: the same one-line errors
    ["budget=0.3,0.5"],
    ["nosuch=1"],
    ["matrix=nosuch"],
    ["jobs=abc"],
    ["hydra.mode=nosuch"],
]


def _compose(args: list[str], once: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, ...]:
    seen: list[str] = []
    compositions = [0]
    real_settings = config_package.settings_from_config
    real_load = ConfigLoaderImpl._load_configuration_impl

    def spy(cfg: Any, *a: Any, **k: Any) -> Any:
        seen.append(OmegaConf.to_yaml(cfg) + OmegaConf.to_yaml(HydraConfig.get()))
        return real_settings(cfg, *a, **k)

    def counting(self: Any, *a: Any, **k: Any) -> Any:
        compositions[0] += 1
        return real_load(self, *a, **k)

    with monkeypatch.context() as mp:
        mp.setattr(config_package, "settings_from_config", spy)
        mp.setattr(ConfigLoaderImpl, "_load_configuration_impl", counting)
        if not once:
            mp.setattr(_compose_once, "composed_once", lambda args: contextlib.nullcontext())
        err, out = io.StringIO(), io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            try:
                jobs, errors, called = _build._compose_jobs(find_project(None), list(args))
                result: Any = (repr(jobs), [repr(e) for e in errors], called)
            except BaseException as exc:  # Hydra's reports end in SystemExit(2)
                result = ("raised", type(exc).__name__, str(exc))
    return result, seen, err.getvalue(), out.getvalue(), compositions[0]


@pytest.mark.parametrize("args", CASES, ids=lambda a: " ".join(a) or "default")
def test_same_jobs_configs_and_errors(args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    twice = _compose(args, False, monkeypatch)
    once = _compose(args, True, monkeypatch)
    assert once[:4] == twice[:4]
    assert twice[1] or twice[0][0] == "raised"  # the comparison saw configs, or an error
    if "-m" in args or "hydra.mode=MULTIRUN" in args:
        assert once[4] == twice[4]  # Hydra's own path
    elif twice[0][0] != "raised":
        assert (once[4], twice[4]) == (1, 2)
    assert (Hydra.get_mode, ConfigLoaderImpl.load_configuration) == (
        _compose_once_originals["get_mode"],
        _compose_once_originals["load"],
    )


_compose_once_originals = {"get_mode": Hydra.get_mode, "load": ConfigLoaderImpl.load_configuration}


def test_errors_are_reported_as_before(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bad override is still one line naming it (exit 2), from Hydra's own composition."""
    monkeypatch.chdir(tmp_path)
    result, _, err, _, _ = _compose(["nosuch=1"], True, monkeypatch)
    assert result[:2] == ("raised", "SystemExit") and result[2] == "2"
    assert err.count("\n") == 1 and "nosuch" in err
