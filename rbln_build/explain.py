"""``python -m rbln_build.explain``: the same as ``rbln-build explain`` (rbln_build.memory.explain)."""

import sys

from .memory.explain import main
from .reporting import plot_explanation

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], plot_with=plot_explanation))
