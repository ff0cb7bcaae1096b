"""``rbln-build serve-command CELL_DIR [--port N] [--devices IDS] [--json]``: the vllm-rbln command of one cell.

CELL_DIR is a folder holding ``rbln-build.json``: a built cell (``<build_dir>/artifacts/<cell id>``,
whose manifest is ``<build_dir>/manifest.json``) or a released one (``<release>/<cell id>``, whose
record is in ``<release>/release.json`` under ``cells.<cell id>.record``, or, for a released cell that
travels alone such as a Hub download, in its own ``rbln-build-files.json`` under ``record``). The serving record is the
manifest entry's (``_serving.serving_for``): the flags that agree with the cell. Paths in the command
(a compiled model, the cell's tokenizer) are CELL_DIR itself, so a released cell is served from where
it lies. A cell no command can serve (no model, no tokenizer) is refused with the reason (exit 2).
Nothing heavy is imported.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from .._documents import absent, load_json
from ..errors import UsageParser, UserError
from ..release import CELL_FILES

__all__ = ["serving_of_dir", "main"]

RECORD_FILE = "rbln-build.json"


def _load(path: Path) -> Any:
    """The JSON document at ``path``, or None when there is none; one that is there but cannot be
    used (a FIFO, a device, over the size cap, too deep, not JSON) is an InputError naming it."""
    if absent(path):
        return None
    return load_json(path, hint="pass the cell where the build or the release put it")


def serving_of_dir(cell_dir: Path) -> tuple[str, dict[str, Any]]:
    """(cell id, manifest entry) of a built or released cell folder; UserError naming what is missing."""
    from ..release import check_released_cell

    if absent(cell_dir, hint="pass a cell folder") or not (cell_dir / RECORD_FILE).is_file():
        if not os.path.lexists(cell_dir) and not absent(cell_dir.parent / "release.json"):
            check_released_cell(Path(os.path.abspath(cell_dir)))  # a mistyped cell: the closest names
        raise UserError(f"{cell_dir}: no {RECORD_FILE}; {_what_instead(cell_dir)}")
    cell_dir = Path(os.path.abspath(cell_dir))  # '.' inside a cell names it; links are not followed
    check_released_cell(cell_dir)  # a released cell is checked against release.json first, as run does
    cid = cell_dir.name
    manifest = _load(cell_dir.parent.parent / "manifest.json")  # the literal path: artifacts/<id> is a link
    if isinstance(manifest, dict) and isinstance(manifest.get("cells"), dict) and cid in manifest["cells"]:
        return cid, manifest["cells"][cid]
    release = _load(cell_dir.parent / "release.json")
    cells = release.get("cells") if isinstance(release, dict) else None
    if isinstance(cells, dict):
        for rid, item in sorted(cells.items()):
            if isinstance(item, dict) and item.get("dir", rid) == cid and isinstance(item.get("record"), dict):
                return str(rid), item["record"]
    alone = _load(cell_dir / CELL_FILES)  # a released cell that travels alone (a Hub repo) holds its record
    if isinstance(alone, dict) and isinstance(alone.get("record"), dict) and isinstance(alone.get("cell"), str):
        return alone["cell"], alone["record"]
    raise UserError(
        f"{cell_dir}: neither {cell_dir.parent.parent / 'manifest.json'} nor {cell_dir.parent / 'release.json'} "
        f"nor {cell_dir / CELL_FILES} records cell {cid!r}; pass the cell where the build or the release put it."
    )


def _what_instead(folder: Path) -> str:
    """What to pass instead of ``folder``: a release's or a build directory's cells, by name."""
    release = _load(folder / "release.json")
    if isinstance(release, dict) and isinstance(release.get("cells"), dict) and release["cells"]:
        cells = sorted(release["cells"])
        more = f", ... ({len(cells)} cells)" if len(cells) > 3 else ""
        return f"it is a release, not a cell: pass one of its cell folders ({', '.join(cells[:3])}{more}), e.g. {folder / cells[0]}."
    manifest = _load(folder / "manifest.json")
    if isinstance(manifest, dict) and isinstance(manifest.get("cells"), dict) and manifest["cells"]:
        cells = sorted(manifest["cells"])
        return f"it is a build directory, not a cell: pass {folder / 'artifacts'}/<cell id>, e.g. {folder / 'artifacts' / cells[0]}."
    return "pass a cell folder (<build_dir>/artifacts/<cell id> or <release>/<cell id>), or deployment=<name>."


def _devices(text: str) -> tuple[int, ...]:
    try:
        ids = tuple(int(p) for p in text.split(",") if p.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated device ids like 0,1, got {text!r}") from None
    if not ids or any(i < 0 for i in ids):
        raise argparse.ArgumentTypeError(f"expected non-negative device ids like 0,1, got {text!r}")
    return ids


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text[:80]!r}") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port number from 1 to 65535, got {port}")
    return port


def main(argv: list[str]) -> int:
    from ..pipeline import check_compiled_devices, check_serving, command_for

    parser = UsageParser(
        prog="rbln-build serve-command",
        description="The vllm-rbln command that serves one built or released cell.",
    )
    parser.add_argument("cell", type=Path, metavar="CELL_DIR", help="a cell folder holding rbln-build.json")
    parser.add_argument("--port", type=_port, default=8000, help="the server's port (default 8000)")
    parser.add_argument(
        "--devices", type=_devices, default=None, help="NPU ids to pin (default: 0..N-1 for the cell's N devices)"
    )
    parser.add_argument("--json", action="store_true", help="print the command as JSON")
    opts = parser.parse_args(argv)
    cid, entry = serving_of_dir(opts.cell)
    serving = entry.get("serving") if isinstance(entry, dict) else None
    if serving is None:
        status = entry.get("status") if isinstance(entry, dict) else None
        raise UserError(f"{opts.cell}: cell {cid} has no serving record (status {str(status)[:80]!r}).")
    serving = check_serving(serving, f"{opts.cell}: cell {cid}")
    if serving["precompiled"]:  # what vllm-rbln reads from the compiled model, not the flags
        check_compiled_devices(serving, _load(opts.cell / "rbln_config.json"), str(opts.cell / "rbln_config.json"))
    count = serving["flags"].get("rbln_num_devices_per_local_rank", 1)
    devices = opts.devices if opts.devices is not None else tuple(range(count))
    if len(devices) != count:
        raise UserError(f"--devices: cell {cid} runs on {count} device(s), got {len(devices)} id(s).")
    command = command_for(serving, opts.port, devices, "", cell_dir=str(opts.cell))
    if opts.json:
        out = {"cell": cid, "port": opts.port, **command, "exact": serving["exact"], "notes": serving["notes"]}
        sys.stdout.write(json.dumps(out, sort_keys=True, indent=2) + "\n")
        return 0
    exact = "" if serving["exact"] else " (the flags cannot pin its block count; see the notes)"
    lines = [f"# cell {cid}: {serving['kvcache_num_blocks']} KV blocks{exact}"]
    lines += [f"#   {n}" for n in serving["notes"]]
    lines.append(command["shell"])
    sys.stdout.write("\n".join(lines) + "\n")
    return 0
