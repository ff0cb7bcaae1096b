"""``python -m rbln_build.explain``: the same as ``rbln-build explain`` (rbln_build.commands._explain)."""

import sys

from .commands._explain import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
