"""``python -m rbln_build.explain``: the same as ``rbln-build explain`` (rbln_build.build._explain_cli)."""

import sys

from .build._explain_cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
