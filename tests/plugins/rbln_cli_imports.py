"""``python -m rbln_cli_imports OUT [rbln-build args...]``: run the real CLI in this process, then
write the torch/transformers modules it imported to OUT (one per line; empty when none)."""

from __future__ import annotations

import sys
from pathlib import Path

from rbln_build.cli import main

if __name__ == "__main__":
    out = Path(sys.argv[1])
    sys.argv = ["rbln-build", *sys.argv[2:]]
    try:
        main()
    finally:
        heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "transformers"))
        out.write_text("".join(f"{m}\n" for m in heavy), encoding="utf-8")
