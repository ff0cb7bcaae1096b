"""``python -m rbln_build.estimate``: the estimator as a JSON-lines filter (rbln_build.estimator._jsonl)."""

import sys

from .estimator import jsonl_main as main

if __name__ == "__main__":
    sys.exit(main())
