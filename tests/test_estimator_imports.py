"""The estimator is the bottom layer: importing it pulls in the standard library and itself, nothing else."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import json, sys
before = set(sys.modules)
import rbln_build.estimator
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def test_importing_the_estimator_loads_only_the_standard_library_and_itself() -> None:
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60, check=True)
    loaded = json.loads(proc.stdout)
    assert "rbln_build.estimator._estimate" in loaded  # the probe saw the import happen
    ours = [m for m in loaded if m.split(".")[0] == "rbln_build"]
    # nothing from the layers above it (build, backends, memory), only the shared exception tree
    assert [m for m in ours if not m.startswith("rbln_build.estimator")] == ["rbln_build", "rbln_build.errors"]
    foreign = sorted({m.split(".")[0] for m in loaded} - set(sys.stdlib_module_names) - {"rbln_build"})
    assert foreign == []  # neither torch nor transformers, nor any other third-party package
