"""Compare two manifests field by field, ignoring the fields that hash the code itself.

    python scripts/compare_manifests.py OLD/manifest.json NEW/manifest.json [--ignore FIELD ...] [--all]

Used to prove that a refactor resolves every cell the same: status, blocks, floors, full pools,
budgets and errors must match exactly. Ignored by default: ``compile_key`` and ``cell_key`` (they
hash the backend's and the estimator's source code) and ``artifact.content_hash`` (artifacts embed
the compile key's inputs). Exit 0 when equal, 1 with one line per difference otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

CODE_HASHED = ("compile_key", "cell_key", "artifact.content_hash")


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else k))
        return out
    return {prefix: value}


def differences(old: dict[str, Any], new: dict[str, Any], ignore: tuple[str, ...]) -> list[str]:
    out = []
    a, b = old["cells"], new["cells"]
    for cid in sorted(set(a) ^ set(b)):
        out.append(f"{cid}: only in {'old' if cid in a else 'new'}")
    for cid in sorted(set(a) & set(b)):
        fa, fb = flatten(a[cid]), flatten(b[cid])
        for field in sorted(set(fa) | set(fb)):
            if field in ignore:
                continue
            if fa.get(field, "<absent>") != fb.get(field, "<absent>"):
                out.append(f"{cid}: {field}: {fa.get(field, '<absent>')!r} -> {fb.get(field, '<absent>')!r}")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("old")
    p.add_argument("new")
    p.add_argument("--ignore", action="append", default=[], help="one more dotted field to skip")
    p.add_argument("--all", action="store_true", help="compare the code-hashed fields too")
    args = p.parse_args(argv)
    args.ignore = [*([] if args.all else CODE_HASHED), *args.ignore]
    with open(args.old, encoding="utf-8") as f:
        old = json.load(f)
    with open(args.new, encoding="utf-8") as f:
        new = json.load(f)
    diffs = differences(old, new, tuple(args.ignore))
    for line in diffs:
        print(line)
    print(
        f"{len(old['cells'])} vs {len(new['cells'])} cells; {len(diffs)} difference(s) "
        f"(ignored: {', '.join(args.ignore)})"
    )
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
