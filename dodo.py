"""doit entry point at the repository root: the same tasks, state and build directory as `rbln-build`.

    doit list                     # tasks of the default matrix: compile:<label>, cells:<label>, manifest
    doit info cells:qwen3_8b.RBLN-CR.x1.<key prefix>
    doit forget cells:qwen3_8b.RBLN-CR.x1.<key prefix>
    RBLN_BUILD_OVERRIDES="matrix=plans budget=0.3" doit list

Build with `rbln-build` (it holds the build lock and prints the results table). `doit run` (and
every doit command that runs tasks or changes doit's state) takes the same lock, held until doit exits.
"""

import sys
from pathlib import Path

from rbln_build.pipeline._dodo import dodo_namespace
from rbln_build.store._lock import lock_for_doit

_namespace = dodo_namespace()
_LOCK = lock_for_doit(Path(_namespace["DOIT_CONFIG"]["dep_file"]).parent, sys.argv)
globals().update(_namespace)
