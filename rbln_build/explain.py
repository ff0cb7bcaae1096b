"""``python -m rbln_build.explain``: the same as ``rbln-build explain`` (rbln_build.memory.explain)."""

import sys

from .memory.explain import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
