"""vllm-rbln 0.12.0's own reading of a compiled model's ``rbln_config.json``, from its wheel.

vllm-rbln needs vLLM, which does not install here, so the one module that decides how many devices a
compiled model is served on (``vllm_rbln/utils/optimum/converter/params.py``) is read from the wheel
(``pip download --no-deps vllm-rbln==0.12.0``, fetched by ``.ci/run`` beside the other registry
wheels) and run as it is; only the three vllm-rbln modules it imports for other purposes (its logger,
a file name constant, architecture predicates) are stood in. Skipped without the wheel (failed under CI).
"""

from __future__ import annotations

import sys
import types
import zipfile
from typing import Any

from _registry import registry_wheel

VLLM_RBLN = {
    "package": "vllm-rbln",
    "version": "0.12.0",
    "wheel": "vllm_rbln-0.12.0-py3-none-any.whl",
    "member": "vllm_rbln/utils/optimum/converter/params.py",
}


def resolve_num_devices() -> Any:
    """vllm-rbln 0.12.0's ``_resolve_num_devices(rbln_config)``, the wheel's own code."""
    import logging

    with zipfile.ZipFile(registry_wheel(VLLM_RBLN)) as wheel:
        source = wheel.read(VLLM_RBLN["member"]).decode("utf-8")
    stand_ins = {
        "vllm_rbln.logger": {"init_logger": logging.getLogger},
        "vllm_rbln.utils.optimum.paths": {"RBLN_CONFIG_FILE": "rbln_config.json"},
        "vllm_rbln.utils.optimum.registry": {
            "is_enc_dec_arch": lambda c: False,
            "is_multi_modal": lambda c: False,
            "is_pooling_arch": lambda c: False,
        },
    }
    params = types.ModuleType("vllm_rbln.utils.optimum.converter.params")  # its dataclass looks itself up
    saved = {name: sys.modules.get(name) for name in [*stand_ins, params.__name__]}
    try:
        for name, attrs in stand_ins.items():
            module = types.ModuleType(name)
            module.__dict__.update(attrs)
            sys.modules[name] = module
        sys.modules[params.__name__] = params
        exec(compile(source, f"{VLLM_RBLN['wheel']}/{VLLM_RBLN['member']}", "exec"), params.__dict__)
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
    return params._resolve_num_devices
