"""Triton kernels: `fp8_block` (W8A8, [128,128] weight blocks), `int4_w4a16` (AWQ/GPTQ, group
128: the host side; its Triton code in `int4_w4a16_jit`, AWQ decode tiles in `int4_awq_planes`)
and `vllm_awq_like` (the baseline); `_common` and `_atomic` hold the shared Triton helpers
(grouped program order, in-kernel split-K epilogues), `_buffers` their workspaces."""
