"""``python -m rbln_build.run``: run a torch-backend artifact on CPU (rbln_build.backends.torch._run)."""

import sys

from .backends.torch._run import main

if __name__ == "__main__":
    sys.exit(main())
