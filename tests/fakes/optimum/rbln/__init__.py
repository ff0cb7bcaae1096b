"""Stand-in for ``optimum.rbln`` 0.12.0: compiles with auto blocks into JSON "compiled models"."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

__version__ = "0.12.0+fake"

COMPILES: list[dict[str, Any]] = []  # one entry per from_pretrained(export=True)

_WEIGHT_BYTES = 50 * 2**20
_WORKSPACE_BYTES = 8 * 2**20


class RBLNAutoModelForCausalLM:
    def __init__(self, model_dir: Path, hf: dict[str, Any], rbln_config: dict[str, Any]) -> None:
        self._model_dir, self._hf, self._cfg = model_dir, hf, rbln_config

    @classmethod
    def from_pretrained(cls, model_id: str, export: bool = False, rbln_config: dict[str, Any] | None = None):
        assert export, "the fake only compiles"
        hf = json.loads((Path(model_id) / "config.json").read_text())
        cfg = dict(rbln_config or {})
        assert "kvcache_num_blocks" not in cfg, "rbln-build compiles with auto blocks"
        COMPILES.append(dict(cfg))
        full = cfg["max_seq_len"] // cfg["kvcache_block_size"] * cfg["batch_size"]
        cfg["kvcache_num_blocks"] = full - 1  # "auto": what fit on the host's NPU
        return cls(Path(model_id), hf, cfg)

    def save_pretrained(self, save_dir: str) -> None:
        out = Path(save_dir)
        hf, cfg = self._hf, self._cfg
        layers = hf["num_hidden_layers"]
        types = hf.get("layer_types") or ["full_attention"] * layers
        head_dim = hf.get("head_dim") or hf["hidden_size"] // hf["num_attention_heads"]
        per_block = hf["num_key_value_heads"] * cfg["kvcache_block_size"] * head_dim * 2
        metas, tensors = [], {}
        for i, kind in enumerate(types):
            for part in ("key", "value"):
                name = f"past_key_values_{i}_{part}"
                if kind == "sliding_attention":
                    shape = [cfg["batch_size"], hf["num_key_value_heads"], hf["sliding_window"], head_dim]
                    size = cfg["batch_size"] * hf["num_key_value_heads"] * hf["sliding_window"] * head_dim * 2
                    metas.append({"name": name, "layer_index": i, "shape": shape, "layer_type": "sliding_attention",
                                  "is_auto": False, "dtype": "float16"})
                else:
                    shape = [cfg["kvcache_num_blocks"], hf["num_key_value_heads"], cfg["kvcache_block_size"], head_dim]
                    size = per_block * cfg["kvcache_num_blocks"]
                    metas.append({"name": name, "layer_index": i, "shape": shape, "layer_type": "full_attention",
                                  "is_auto": True, "dtype": "float16"})
                tensors[name] = [[size]]
        graphs = {"prefill": 1, f"decoder_batch_{cfg['batch_size']}": 0}
        for graph, weights in graphs.items():
            data = {
                "graph": graph,
                "alloc": {"weights": [[_WEIGHT_BYTES * weights]], "workspace": [[_WORKSPACE_BYTES]]},
                "dram_tensors": tensors,
            }
            (out / f"{graph}.rbln").write_text(json.dumps(data, sort_keys=True))
        saved = {k: v for k, v in cfg.items() if k not in ("npu", "create_runtimes")}  # 0.12 drops npu
        saved.update(cls_name=f"RBLN{hf['architectures'][0]}Config", cache_metas=metas)
        (out / "rbln_config.json").write_text(json.dumps(saved, indent=2))
        shutil.copyfile(self._model_dir / "config.json", out / "config.json")
