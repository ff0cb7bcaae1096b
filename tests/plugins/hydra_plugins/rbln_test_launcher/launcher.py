"""A Hydra launcher for tests (``hydra/launcher=elsewhere``) that stands for one running jobs on other
machines: it reports every job done and runs none here, as a remote launcher looks from this process.
(No `from __future__ import annotations`: Hydra loads this module outside sys.modules, where
dataclasses cannot resolve string annotations.)"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.core.utils import JobReturn, JobStatus
from hydra.plugins.launcher import Launcher


@dataclass
class ElsewhereLauncherConf:
    _target_: str = "hydra_plugins.rbln_test_launcher.launcher.ElsewhereLauncher"


ConfigStore.instance().store(group="hydra/launcher", name="elsewhere", node=ElsewhereLauncherConf, provider="rbln_test")


class ElsewhereLauncher(Launcher):
    def setup(self, *, hydra_context: Any, task_function: Any, config: Any) -> None:
        self.config = config

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        returns = []
        for overrides in job_overrides:
            ret = JobReturn(overrides=list(overrides), status=JobStatus.COMPLETED, _return_value=None)
            returns.append(ret)
        return returns
