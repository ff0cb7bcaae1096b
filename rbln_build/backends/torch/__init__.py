"""The torch backend: a paged-KV model exported once per compile key with ``torch.export``.

    _weights     deterministic seeded weights (tiny recipes) or a checkpoint's safetensors
    _paged       the paged-attention wrapper around transformers' modules, and its export
    _export      the Backend: compile (export + report) and finalize (pool of N blocks)
    _runtime     loading an artifact (verified first) and greedy generation on CPU
    _archive     the .pt2 allowlist: nothing torch would unpickle gets loaded
    _graph       the graph's strings torch evaluates (expressions, guards, targets), held to torch's forms
    _cellrecord  a cell's whole rbln-build.json, checked against its bounds and its program's inputs

``python -m rbln_build.run`` (rbln_build/run.py) is the command line over ``_runtime``.

Importing this package does not import torch; its modules do.
"""
