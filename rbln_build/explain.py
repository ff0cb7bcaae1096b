"""``python -m rbln_build.explain``: the same as ``rbln-build explain`` (rbln_build.inspection)."""

import sys

from .inspection import explain_main as main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
