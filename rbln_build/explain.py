"""``python -m rbln_build.explain``: the same as ``rbln-build explain`` (rbln_build.inspection._explain)."""

import sys

from .inspection._explain import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
