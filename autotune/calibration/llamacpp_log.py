"""What a llama-server startup log records for `autotune calibrate`: the launch's configuration in
the llama.cpp planner's field names (autotune/planner/llamacpp_config.py) and the free device
memory before the weights.

The figures are llama.cpp's own lines (autotune/engines/llamacpp/logs.py lists them):
`llama_context: n_seq_max / n_ctx / n_batch / n_ubatch / flash_attn / kv_unified`, the
`llama_kv_cache: size = ... K (type): ..., V (type): ...` line and `load_tensors: offloaded
N/M layers to GPU`. The free memory is `llama_prepare_model_devices: using device CUDA0 (...) -
142629 MiB free` (0.3.36; older releases print it from `llama_model_load_from_file_impl`).
llama-server logs its build number, not the llama-cpp-python release the planner follows, so the
version is never read from the log.
"""

from __future__ import annotations

import re
from typing import Any

# Lines only llama.cpp prints (library and server), to tell its logs from SGLang's and vLLM's.
SIGNS = (" model buffer size =", "llama_kv_cache: size =", "llama_context: n_seq_max")

_FREE_RE = re.compile(r"using device (?P<dev>\S+) \(.*\) - (?P<mib>\d+) MiB free")

# llama_flash_attn_type_name (0.3.30+): auto / enabled / disabled; 0.3.16 printed 0 or 1.
_FLASH_ATTN = {"auto": "auto", "enabled": "on", "disabled": "off", "1": "on", "0": "off"}


def logged_config(text: str) -> dict[str, Any]:
    """The launch's configuration as the llama.cpp planner takes it ({} when the log has no
    context lines). ctx_size is the logged n_ctx: the planner pads it to 256 cells and, without
    a unified cache, splits it into one padded stream per slot, which gives back the logged
    n_ctx (already n_ctx_seq x slots)."""
    from autotune.engines.llamacpp.logs import parse_startup_details

    s = parse_startup_details(text)
    slots = s.n_seq_max if s.n_seq_max is not None else s.n_slots
    cfg: dict[str, Any] = {
        "parallel": slots,
        "kv_unified": s.kv_unified,
        "ctx_size": s.n_ctx,
        "batch_size": s.n_batch,
        "ubatch_size": s.n_ubatch,
        "cache_type_k": s.kv_type_k,
        "cache_type_v": s.kv_type_v,
        "flash_attn": _FLASH_ATTN.get(s.flash_attn or "", s.flash_attn),
    }
    if s.gpu_layers is not None:
        cfg["n_gpu_layers"] = s.gpu_layers[0]
    return {k: v for k, v in cfg.items() if v is not None}


def free_before_weights_gib(text: str) -> float | None:
    """Free memory of the first device the model was placed on, GiB, as llama.cpp measured it
    before loading the weights (None for a CPU run: no such line)."""
    m = _FREE_RE.search(text)
    return None if m is None else round(int(m["mib"]) / 1024, 4)
