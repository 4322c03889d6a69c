"""Triton kernels: `fp8_block` (W8A8, [128,128] weight blocks), `int4_w4a16` (AWQ/GPTQ, group
128) and `vllm_awq_like` (the baseline); `_common` holds the shared Triton helpers (grouped
program order, in-kernel split-K epilogue)."""
