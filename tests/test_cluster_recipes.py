"""docs/scaling.md's cluster recipes, as far as this machine allows: the KubeRay ``RayCluster``
manifest parses and has what KubeRay needs (no Kubernetes here: it is not applied), and the Slurm
recipe's command, Hydra's submitit launcher with its local executor, gives the basic launcher's
manifest byte for byte (``submitit_slurm`` itself needs a Slurm cluster)."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_cli import check_ok, plans_build, rbln, summary  # noqa: F401 (a fixture)

DOC = Path(__file__).resolve().parent.parent / "docs" / "scaling.md"


def _block(lang: str, needle: str) -> str:
    text = DOC.read_text(encoding="utf-8")
    return next(b for b in re.findall(rf"```{lang}\n(.*?)```", text, re.S) if needle in b)


def _containers(pod_template: dict[str, Any]) -> list[dict[str, Any]]:
    containers = pod_template["spec"]["containers"]
    assert containers and all(isinstance(c.get("name"), str) and isinstance(c.get("image"), str) for c in containers)
    return list(containers)


def test_the_kuberay_manifest_has_what_a_raycluster_needs() -> None:
    ray = pytest.importorskip("ray", reason="the manifest's rayVersion is checked against the installed Ray")
    doc = yaml.safe_load(_block("yaml", "kind: RayCluster"))
    assert doc["apiVersion"] == "ray.io/v1" and doc["kind"] == "RayCluster" and doc["metadata"]["name"]
    spec = doc["spec"]
    assert spec["rayVersion"] == ray.__version__
    groups = [spec["headGroupSpec"], *spec["workerGroupSpecs"]]
    assert len(groups) >= 2
    for group in groups:  # KubeRay passes rayStartParams to `ray start` as strings
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in group["rayStartParams"].items())
    for worker in spec["workerGroupSpecs"]:
        assert isinstance(worker["groupName"], str)
        assert 0 <= worker["minReplicas"] <= worker["replicas"] <= worker["maxReplicas"]
        resources = json.loads(json.loads(worker["rayStartParams"]["resources"]))  # a quoted JSON, as KubeRay wants
        assert resources == {"rbln_sdk": 1}
    assert spec["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"
    for group in groups:
        for container in _containers(group["template"]):
            env = {e["name"]: e for e in container["env"]}
            assert env["RAY_AUTH_MODE"]["value"] == "token"
            assert env["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "rbln-ray-token"
            for e in container["env"]:  # secrets only by reference, never literal values
                if any(word in e["name"] for word in ("TOKEN", "SECRET", "KEY")):
                    assert "value" not in e and "secretKeyRef" in e["valueFrom"], e["name"]


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.skipif(
    importlib.util.find_spec("hydra_plugins.hydra_submitit_launcher") is None,
    reason="hydra-submitit-launcher is not installed (the test extra)",
)
def test_the_slurm_recipe_with_submitits_local_executor_gives_the_basic_launchers_manifest(
    plans_build: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    command = next(line for line in _block("bash", "submitit_local").splitlines() if "submitit_local" in line)
    args = command.split("#")[0].split()
    assert args[:2] == ["rbln-build", "-m"]
    out = tmp_path / "build"
    proc = rbln([*args[1:], f"build_dir={out}"], cwd=tmp_path)
    check_ok(proc)
    assert (out / "manifest.json").read_bytes() == (plans_build / "manifest.json").read_bytes()
    assert summary(out)["cells"] == 8 and summary(out)["compiled"] == 4
    multirun = (out / "hydra" / "multirun.yaml").read_text()
    assert "hydra_submitit_launcher.submitit_launcher.LocalLauncher" in multirun  # the jobs went through submitit
