"""Throughput of the KV-cache block estimator: Python call vs. JSON-lines, and a 10,000-cell matrix.

    python bench/estimate.py [--requests N] [--cells N]

The reports are synthetic but shaped like a real compile: a Qwen3-8B-like model (36 layers, one K
and one V tensor per layer), prefill and decode graphs with several allocation keys, on 1 to 4
devices of RBLN-CR (4 chiplets) and RBLN-CA (1 chiplet). Budgets vary per request so the binary
search runs as often as the full-pool fast path. Prints a table; asserts nothing.
"""

from __future__ import annotations

import argparse
import io
import json
import random
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rbln_build.estimator import Request, estimate  # noqa: E402
from rbln_build.estimator._report import AllocationReport  # noqa: E402
from rbln_build.inspection._jsonl import run  # noqa: E402

MiB, GiB = 2**20, 2**30
LAYERS = 36
BUDGETS = [None, 0.2, 0.3, 0.5, 0.8, 1.0, "25%", "60%", "10GB", "20GB", "40GB"]


def report_json(npu: str, devices: int, weights_gib: float = 15.3) -> dict:
    chiplets = 4 if npu.startswith("RBLN-CR") else 1
    share = int(weights_gib * GiB / devices / chiplets)

    def grid(nbytes: int) -> list[list[int]]:
        return [[nbytes + 4096 * c + 512 * n for c in range(chiplets)] for n in range(devices)]

    alloc = {
        "prefill": {"weights": grid(share), "workspace": grid(300 * MiB), "DramTensor": grid(GiB), "io": grid(MiB)},
        "decode": {"workspace": grid(96 * MiB), "io": grid(MiB // 2), "DramTensor": grid(GiB)},
    }
    # K and V per layer: 8192 tokens x 8 kv heads x 128 x 2 bytes = 16 MiB per block, split over devices,
    # each layer's cache on one chiplet (round robin)
    per_block = 16 * MiB // devices
    kv = {}
    for layer in range(LAYERS):
        for kind in ("k", "v"):
            sizes = [[per_block if c == layer % chiplets else 0 for c in range(chiplets)] for _ in range(devices)]
            kv[f"{kind}{layer}"] = {"can_resize": True, "sizes": sizes}
    return {"alloc": alloc, "kv_tensors": kv}


def request_lines(count: int, seed: int = 0) -> list[str]:
    rnd = random.Random(seed)
    lines = []
    for i in range(count):
        npu = rnd.choice(["RBLN-CR03", "RBLN-CA25"])
        devices = rnd.choice([1, 2, 4])
        body = {
            "id": i,
            "npu": npu,
            "num_devices": devices,
            "batch_size": rnd.choice([1, 4, 8, 16]),
            "max_seq_len": 40_960,
            "attn_impl": "flash_attn",
            "kvcache_partition_len": 8_192,
            "memory_budget": rnd.choice(BUDGETS),
            **report_json(npu, devices),
        }
        lines.append(json.dumps(body))
    return lines


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2_000)
    parser.add_argument("--cells", type=int, default=10_000)
    args = parser.parse_args()

    lines = request_lines(args.requests)
    parsed = [json.loads(text) for text in lines]
    fields = ("npu", "num_devices", "batch_size", "max_seq_len", "attn_impl", "kvcache_partition_len", "memory_budget")
    pairs = [
        (Request(**{k: p[k] for k in fields}), AllocationReport.from_json(p)) for p in parsed
    ]  # one report object per request: every call reduces its report (no cache hit)
    payload = ("\n".join(lines) + "\n").encode()

    rows = []
    n = len(lines)
    t = timed(lambda: [estimate(r, rep) for r, rep in pairs])
    rows.append(("Python call, fresh report per request", n, t))
    t = timed(lambda: list(run(io.BytesIO(payload))))
    rows.append(("JSON lines, in process (parse + estimate + dump)", n, t))
    proc_time = timed(
        lambda: subprocess.run(
            [sys.executable, "-m", "rbln_build.estimate"], input=payload, capture_output=True, check=True
        )
    )
    rows.append(("JSON lines, subprocess incl. interpreter start", n, proc_time))
    startup = timed(
        lambda: subprocess.run(
            [sys.executable, "-m", "rbln_build.estimate"], input=b"", capture_output=True, check=True
        )
    )

    # A matrix: a few cached reports (models x device targets), many cells (budgets x batch sizes).
    cached = {
        (npu, devices): AllocationReport.from_json(report_json(npu, devices))
        for npu in ("RBLN-CR03", "RBLN-CA25")
        for devices in (1, 2, 4)
    }
    rnd = random.Random(1)
    cells = []
    for _ in range(args.cells):
        npu, devices = rnd.choice(sorted(cached))
        # half the cells get a byte budget of their own, so the searches are not all repeats
        budget = rnd.choice(BUDGETS) if rnd.random() < 0.5 else rnd.uniform(0.1, 1.0)
        req = Request(
            npu=npu,
            max_seq_len=40_960,
            batch_size=rnd.choice([1, 4, 8, 16]),
            num_devices=devices,
            attn_impl="flash_attn",
            kvcache_partition_len=8_192,
            memory_budget=budget,
        )
        cells.append((req, cached[(npu, devices)]))
    results: list = []
    t_cells = timed(lambda: results.extend(estimate(r, rep) for r, rep in cells))
    rows.append((f"Matrix: {args.cells} cells, {len(cached)} cached reports", args.cells, t_cells))

    ok = sum(r.ok for r in results)
    print(f"{'path':<52} {'requests':>9} {'seconds':>9} {'req/s':>11}")
    for name, count, seconds in rows:
        print(f"{name:<52} {count:>9} {seconds:>9.3f} {count / seconds:>11,.0f}")
    print(f"\ninterpreter start + import of rbln_build.estimate: {startup:.3f} s")
    print(f"matrix outcome: {ok} resolved, {len(results) - ok} rejected (budget below the floor or over DRAM)")


if __name__ == "__main__":
    main()
