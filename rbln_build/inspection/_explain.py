"""``rbln-build explain``: the memory model's explanation of one model on one device target, with
the model and the device composed through the build's own config loader.

``model=`` names a ``conf/model`` file, as ``rbln-build model=`` does, so the model config's build
options apply to both; ``device=`` is checked against the device schema; a project's configs and
recipes come before the shipped ones (``--project DIR`` as for a build).
"""

from __future__ import annotations

import sys
from typing import Any

from ..config import Project, device_from_node, find_project, load_group_option, model_from_node, split_project_arg
from ..errors import ConfigError
from ..memory import Recipe, load_recipe
from ..memory.explain import Resolver
from ..memory.explain import main as explain_main

__all__ = ["main", "resolver"]


def resolver(project: Project) -> Resolver:
    """(model, device) names -> (recipe, NPU, number of devices, the model config's build options)."""

    def resolve(model: str, device: str) -> tuple[Recipe, str, int, dict[str, Any]]:
        m = model_from_node(model, load_group_option("model", model, "explain model=", project.conf_dirs))
        d = device_from_node(device, load_group_option("device", device, "explain device=", project.conf_dirs))
        return load_recipe(m.recipe, project.recipe_dirs), d.npu, d.num_devices, dict(m.options)

    return resolve


def main(argv: list[str]) -> int:
    from ..reporting import plot_explanation  # matplotlib is imported only to draw --plot

    try:
        explicit, rest = split_project_arg(argv)
        project = find_project(explicit)
    except ConfigError as error:
        print(f"rbln-build: {error}", file=sys.stderr)
        return 2
    return explain_main(rest, plot_with=plot_explanation, resolve=resolver(project))
