"""``python -m rbln_build.estimate``: the estimator as a JSON-lines filter (rbln_build.inspection._jsonl)."""

import sys

from .inspection import estimate_main as main

if __name__ == "__main__":
    sys.exit(main())
