"""``python -m rbln_build.estimate``: the estimator as a JSON-lines filter (rbln_build.estimator._jsonl)."""

import sys

from .estimator._jsonl import main

if __name__ == "__main__":
    sys.exit(main())
