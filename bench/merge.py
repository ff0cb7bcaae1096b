"""Bench: bytes a shard merge moves per cell, the metadata merge (``shard=merge/N``) against the
merge before it (a run over the whole matrix with the same remote, which downloads every compile
entry and artifact and finalizes every cell), side by side in one run.

    python bench/merge.py [--shards 2] [--budgets 100] [OVERRIDE ...]

The matrix: ``matrix=plans`` (4 compile keys) with ``--budgets`` memory budgets (fractions 0.41,
0.415, ...: most fit, some do not, each an outcome the manifest records) unless OVERRIDEs are given.

Every run is the real CLI against moto's S3 server on 127.0.0.1 through the real s3fs, with a
counting proxy between them (tests/plugins/s3_proxy.py): the bytes are everything on the wire both
ways (request lines, headers, bodies), not payloads only. The shards fill the remote first; the
proxy's counts are zeroed before each merge. Both merges must write the same manifest (checked).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "plugins"))


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("overrides", nargs="*", help="the matrix's overrides (default: matrix=plans, --budgets)")
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--budgets", type=int, default=100, help="memory budgets per compile key (default 100)")
    opts = parser.parse_args()
    budgets = "[" + ",".join(str(round(0.41 + i * 0.005, 3)) for i in range(opts.budgets)) + "]"
    matrix = opts.overrides or ["matrix=plans", f"matrix.budgets={budgets}", "matrix.expect_failure=[]"]
    from moto.server import ThreadedMotoServer
    from s3_proxy import S3Proxy

    port = _port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    proxy = S3Proxy(port)
    work = Path(tempfile.mkdtemp(prefix="rbln-bench-merge-"))
    env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": proxy.url,
        "HF_HUB_OFFLINE": "1",
    }
    try:
        import s3fs

        s3fs.S3FileSystem(key="bench", secret="bench", endpoint_url=proxy.url).mkdir("bench-cache")
        remote = "cache.remote=s3://bench-cache/merge"

        def cli(*args: str) -> tuple[float, subprocess.CompletedProcess[str]]:
            started = time.perf_counter()
            proc = subprocess.run(
                [sys.executable, "-m", "rbln_build.cli", *matrix, "progress=false", remote, *args],
                cwd=work,
                env=env,
                capture_output=True,
                text=True,
            )
            return time.perf_counter() - started, proc

        for i in range(1, opts.shards + 1):
            _, proc = cli("jobs=1", f"build_dir={work / f'shard{i}'}", f"shard={i}/{opts.shards}")
            if proc.returncode != 0:
                sys.exit(f"shard {i} failed:\n{proc.stdout[-2000:]}\n{proc.stderr}")
        rows = {}
        for name, args in (
            ("metadata merge (shard=merge/N)", [f"shard=merge/{opts.shards}"]),
            ("full run with the remote (before)", ["jobs=1"]),
        ):
            proxy.reset_counts()
            out = work / name.split()[0]
            took, proc = cli(f"build_dir={out}", *args)
            if proc.returncode != 0:
                sys.exit(f"{name} failed:\n{proc.stdout[-2000:]}\n{proc.stderr}")
            cells = len(json.loads((out / "manifest.json").read_bytes())["cells"])
            moved = proxy.sent + proxy.received
            rows[name] = {
                "cells": cells,
                "requests": len(proxy.requests),
                "bytes": moved,
                "bytes_per_cell": round(moved / cells),
                "seconds": round(took, 2),
                "manifest": (out / "manifest.json").read_bytes(),
            }
        manifests = {r.pop("manifest") for r in rows.values()}
        print(json.dumps({"matrix": matrix, "shards": opts.shards, "runs": rows}, indent=2))
        if len(manifests) != 1:
            sys.exit("the two merges wrote different manifests")
        a, b = rows.values()
        print(
            f"bytes per cell: {a['bytes_per_cell']:,} against {b['bytes_per_cell']:,} ({b['bytes'] / a['bytes']:.0f}x fewer)"
        )
    finally:
        proxy.close()
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
