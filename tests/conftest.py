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

# Hypothesis on a loaded machine (issue 36): the suite's promise is that it passes beside other work.
# Hypothesis' own clock-based checks turn a busy machine into a failure: the ``too_slow`` health check
# (data generation over ~1 s for the first examples) and the per-example ``deadline`` (200 ms). Neither
# is a property of the code under test, so the profile every test inherits turns both off; a test that
# names its own ``settings`` keeps these unless it says otherwise. HYPOTHESIS_PROFILE picks another
# registered profile (e.g. "default" to see Hypothesis' own checks).
from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile("rbln-build", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "rbln-build"))
