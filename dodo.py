"""doit entry point at the repository root: the same tasks, state and build directory as `rbln-build`.

    doit list                     # tasks of the default matrix
    doit info cell:qwen3_8b.rebel100.b0.3
    doit forget cell:qwen3_8b.rebel100.b0.3
    RBLN_BUILD_OVERRIDES="matrix=plans budget=0.3" doit list

Build with `rbln-build` (it holds the build lock and prints the results table).
"""

from rbln_build.build._tasks import dodo_namespace

globals().update(dodo_namespace())
