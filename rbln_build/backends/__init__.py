"""Compile backends behind one small interface and one registry (``_base``).

    _base        the Backend interface, CompileSpec/CompileResult, the registry (short names and
                 ``module:Class`` import paths), plans for recipes without weights
    _rbln        optimum-rbln and the Rebellions compiler (when the SDK is installed)
    _rbln_cell   what a finalized rbln cell's rbln_config.json may say: the count's limits, the compiled placement
    torch/       torch.export programs with a paged KV cache that really run on CPU
    _record      rbln-build.json, every cell's record, and the programs' digests
    _verify      a cache entry's programs checked as data (no torch), before an entry is installed
    _warm_up     a process's first imports before a compile, timed apart (for the time-left estimate)

Importing this package is cheap: a backend module (and torch) is imported only when
``get_backend`` is called for it.
"""

from __future__ import annotations

from ._base import BACKENDS, Backend, CompileResult, CompileSpec, backend_path, get_backend
from ._rbln_cell import check_compiled_devices, compiled_num_devices
from ._record import read_record
from ._verify import verify_entry_files
from ._warm_up import warm_up

__all__ = [
    "check_compiled_devices",
    "compiled_num_devices",
    "BACKENDS",
    "Backend",
    "CompileResult",
    "CompileSpec",
    "backend_path",
    "get_backend",
    "read_record",
    "verify_entry_files",
    "warm_up",
]
