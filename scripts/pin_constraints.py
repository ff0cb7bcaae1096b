"""Write constraints.txt: every package of a resolved environment holding every extra, pinned.

    python -m venv /tmp/pin && . /tmp/pin/bin/activate
    pip install -e '.[test,lint,scale-test,gguf,report,sign,remote,ray]' && pip install --no-deps optimum-rbln==0.12.0
    python scripts/pin_constraints.py            # rewrites constraints.txt from `pip freeze`

`.ci/run` installs with `pip install -c constraints.txt ...`: pip then takes these versions and does
not search (an unconstrained `.[scale-test]` once sat 18 minutes in pip's resolver). A newcomer's
plain `pip install -e .` does not read it. A local version label (torch's ``+cpu``) is dropped, so
the pin holds for whichever build of that version the index serves. rbln-build itself (editable) is
left out; tests/test_constraints.py checks the file covers every extra's requirements.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HEADER = """\
# Pinned versions of every package rbln-build and all its extras install, from one resolved
# environment (python scripts/pin_constraints.py; docs/building.md, "Pinned installs").
# CI: pip install -c constraints.txt -e '.[test,lint,scale-test,gguf]'. Not needed for a plain install.
"""


def main() -> int:
    frozen = subprocess.run(
        [sys.executable, "-m", "pip", "freeze", "--exclude-editable"], capture_output=True, text=True, check=True
    ).stdout
    pins = []
    for line in frozen.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "-e")) or "==" not in line:
            continue
        name, version = line.split("==", 1)
        pins.append(f"{name}=={version.split('+', 1)[0]}")
    out = Path(__file__).resolve().parent.parent / "constraints.txt"
    out.write_text(HEADER + "\n".join(sorted(pins, key=str.lower)) + "\n", encoding="utf-8")
    print(f"{out}: {len(pins)} pins")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
