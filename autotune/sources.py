"""Public sources for the facts autotune's rules, seeds and calibration rest on.

Code, tests and the rule ids use the project's note numbers (P3, K1, C1, ...); what a user reads
(messages, reports, `plan --json`, rule sources) cites what they can open instead: an engine's
issue or pull request ("sglang#8102"), its documentation, or, where no public source exists, the
measurement itself stated plainly. `cite()` turns note numbers into that text, so the planner,
the seeds and the report templates all say it the same way. The built-in search spaces
(`autotune/data/search_spaces/*.yaml`) write the same texts in their `source:` fields.
"""

from __future__ import annotations

# Setups the measurements were taken on (stated where no public source exists).
CALIBRATION_SETUP = (
    "measured with SGLang 0.5.17 on an RTX 4080 SUPER 32G, Qwen3.8-27B AWQ-INT4, fp8 KV cache"
)
TP2_AMD_SETUP = (
    "measured on 2 x RX 7900 XTX 24G with the ROCm fork of SGLang 0.5.18, Qwen3.8-27B W4A16 GPTQ"
)

# Note number -> what a user can read or check. Keep each one line; no internal document names.
CITATIONS: dict[str, str] = {
    # pitfalls
    "P1": (
        "measured with SGLang 0.5.17: HiCache on a hybrid (mamba) model segfaulted at page sizes "
        "other than 1"
    ),
    "P2": "sglang#24121",
    "P3": (
        "sglang#8102 (host pool refused above available RAM - 10 GiB); sglang#32915 "
        "(--hicache-size is one budget for the KV and mamba host pools)"
    ),
    "P3-reserve": "sglang#8102",
    "P4": (
        "sglang#33883 (--file-storage-path is ignored; the directory comes from "
        "SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR); measured with SGLang 0.5.17: the L3 file tier "
        "never prefetched on a hybrid model"
    ),
    "P5": "sglang#21413 (/flush_cache answers 400 until the server is idle)",
    "P6": (
        "vllm#35548 and sglang#35797 (MTP speculation needs MTP weights, which quantized packs "
        "can lack)"
    ),
    "P6-ngram": (
        "measured with SGLang 0.5.17: NGRAM switched off mixed chunked prefill, shrank the KV "
        "pool from 356,237 to 271,673 tokens and started 50 s slower"
    ),
    "P6-mtp-hicache": "measured on 32 GB cards: MTP weights and HiCache compete for GPU memory",
    "P7": 'sglang#36770, sglang#37943 ("Can not alloc mamba cache" kills the scheduler)',
    "P8": "vllm#45678 (one streamed chunk carries several tokens under speculative decoding)",
    "P9": (
        "a process-name match (`pkill -f sglang.launch_server`) also kills every other engine "
        "instance on the machine"
    ),
    "P9-vllm": (
        "a process-name match (`pkill -f vllm`) also kills every other vLLM instance on the machine"
    ),
    "P11-vllm": (
        "vLLM docs: https://docs.vllm.ai/en/latest/api/vllm/reasoning/qwen3_reasoning_parser/"
    ),
    "P10": (
        "sglang#19406 and sglang#20370 (Qwen3.5 AWQ packs: in_proj_a/in_proj_b quantized through "
        "an ignore-name mismatch, and Marlin needs size_n % 64 == 0)"
    ),
    "P11": (
        "SGLang docs: https://docs.sglang.io/docs/advanced_features/separate_reasoning and "
        "https://docs.sglang.io/docs/advanced_features/tool_parser"
    ),
    "P12": (
        "sglang#22935 (mamba state is checkpointed only at request end and chunk boundaries, so "
        "an identical prompt can miss the cache)"
    ),
    "P13": (
        "sglang#27418 (mamba_scheduler_strategy renamed mamba_radix_cache_strategy); sglang#29591 "
        "(--cuda-graph-max-bs is a deprecated alias of --cuda-graph-max-bs-decode)"
    ),
    "P14": (
        "measured on an RTX 4080 SUPER 32G (SGLang 0.5.17) and 2 x RX 7900 XTX (SGLang 0.5.18): "
        "decode fell little with context, prefill fell with prompt length"
    ),
    # model and hardware facts
    "F1": (
        "the Qwen3.8-27B config.json (Qwen3.5 hybrid architecture: 48 Gated DeltaNet layers, "
        "16 full attention)"
    ),
    "F2": (
        "NVFP4 is a Blackwell format: https://huggingface.co/docs/transformers/main/en/"
        "quantization/nvfp4"
    ),
    "F3": "measured: a GeForce desktop session takes about 80 MB of GPU 0",
    # calibration measurements
    "C1": CALIBRATION_SETUP,
    "C2": CALIBRATION_SETUP,
    "C3": CALIBRATION_SETUP + ", HiCache 12 GB write_through",
    "C4": CALIBRATION_SETUP + ", NGRAM 5 steps / 6 draft tokens",
    "C5": TP2_AMD_SETUP,
    # known-good launch configurations
    "K1": (
        "measured with SGLang 0.5.17 on an RTX 4080 SUPER 32G, Qwen3.8-27B AWQ-INT4: 356,237 KV "
        "tokens, two 123K-token requests at once"
    ),
    "K2": "measured with SGLang 0.5.18 on an RTX PRO 4500 Blackwell 32G, Qwen3.8-27B NVFP4",
    "K3": TP2_AMD_SETUP + " (MTP layer kept bf16)",
    "K4": "measured on 2 x RTX 3080 20G, Qwen3.8-27B AWQ-INT4 with a DFlash2 draft model",
    "K5": "measured with SGLang 0.5.18 on 2 x RTX 4080 SUPER 32G, Qwen3.8-27B FP8",
    "K6": (
        "measured with a vLLM fork on 2 x RTX 2080 Ti 22G, Qwen3.8-27B W4A16; vllm#21410 "
        "(a configuration that starts can still OOM under load)"
    ),
    # SGLang source files (public) that rules read behaviour from
    "sglang-server-args": (
        "SGLang python/sglang/srt/server_args.py (arg_groups/fields/*.py from 0.5.23)"
    ),
    "sglang-server-args-adjust": (
        "SGLang python/sglang/srt/server_args.py automatic adjustments (ServerArgs._handle_*; "
        "arg_groups/*_hook.py from 0.5.23)"
    ),
    "sglang-flag-renames": (
        "the flag lists of SGLang 0.5.9, 0.5.12, 0.5.16 and 0.5.20 "
        "(python/sglang/srt/server_args.py)"
    ),
    "sglang-host-pool": "SGLang python/sglang/srt/mem_cache/memory_pool_host.py (HostKVCache)",
}


def cite(*codes: str) -> str:
    """The public citation for one or more note numbers, joined with "; ".

    >>> cite("P2")
    'sglang#24121'
    """
    missing = [c for c in codes if c not in CITATIONS]
    if missing:
        raise KeyError(f"no public citation for {', '.join(missing)}")
    return "; ".join(CITATIONS[c] for c in codes)


__all__ = ["CALIBRATION_SETUP", "CITATIONS", "TP2_AMD_SETUP", "cite"]
