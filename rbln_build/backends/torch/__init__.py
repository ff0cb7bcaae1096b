"""The torch backend: a paged-KV model exported once per compile key with ``torch.export``.

    _weights     deterministic seeded weights (tiny recipes) or a checkpoint's safetensors
    _paged       the paged-attention wrapper around transformers' modules, and its export
    _export      the Backend: compile (export + report) and finalize (pool of N blocks)
    _runtime     loading an artifact and greedy generation on CPU
    _run         ``python -m rbln_build.run``

Importing this package does not import torch; its modules do.
"""
