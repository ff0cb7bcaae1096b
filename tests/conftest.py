"""Shared test setup: nothing in the test suite may reach a model hub."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

# Plug-in backends and helpers for tests (tests/plugins), importable in process and in subprocesses.
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

PLUGINS = str(Path(__file__).resolve().parent / "plugins")
if PLUGINS not in sys.path:
    sys.path.insert(0, PLUGINS)
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (PLUGINS, os.environ.get("PYTHONPATH")) if p)

# A project chosen in the caller's environment must not leak into the tests (config._project).
os.environ.pop("RBLN_BUILD_PROJECT", None)
