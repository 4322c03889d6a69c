"""A llama-server startup log in llama.cpp 0.3.36's exact format, for the `tiny` test GGUF
(autotune.testing.gguf_models SPECS["tiny"] with a 32000-token synthetic vocab).

The lines are those of a real launch: reports/llamacpp-h200/run/trial-logs.tar.gz,
trials/0006/server.log (llama-server 0.3.36 built for sm_90, one H200, the random 1B GGUF, 8
slots without a unified cache, K q8_0, V q4_0). Only the figures were changed, to what the tiny
model at 2 slots and ctx_size 4096 gives: the model's shape, tensor and key counts, layers
offloaded, slots, n_ctx/n_ctx_seq, n_outputs_max, the model buffers (the tiny file's tensor
bytes as llama.cpp places them: the embedding mapped on the host, the layers and the tied
output's copy on the GPU), the KV cache (2 streams x 2048 cells x 2 layers x 2 KV heads x 32,
q8_0 34 B and q4_0 18 B per 32 values) and the output buffer (32000 x 2 x 4 B). Also changed:
the CUDA0 compute buffer is the planner's estimate for this configuration (3.28 MiB), not a
measurement, and the CUDA_Host compute buffer line is left out (no figure for it); the metadata
dump and print_info block are left out (nothing reads them); the speculative
decoding lines and the FlashAttention kernel warning of that trial are left out (this launch
has no draft). Timestamps, the device, its free memory (142629 MiB) and the build line are the
trial's.
"""

from __future__ import annotations

# What this launch ran with (llama.cpp planner field names) and what it logged.
CONFIG = {
    "parallel": 2,
    "kv_unified": False,
    "ctx_size": 4096,
    "batch_size": 2048,
    "ubatch_size": 512,
    "cache_type_k": "q8_0",
    "cache_type_v": "q4_0",
    "flash_attn": "on",
    "n_gpu_layers": 3,
}
KV_POOL_TOKENS = 4096  # 2 streams x 2048 cells
FREE_BEFORE_WEIGHTS_MIB = 142629
MODEL_BUFFERS_MIB = 3.91 + 4.09

LOG = """\
0.00.103.705 I srv  llama_server: initializing ...
0.00.103.714 I cmn  common_param: common_params_print_info: build 0 (unknown) with GNU 13.3.0 for Linux x86_64
0.00.103.715 I cmn  common_param: common_params_print_info: verbosity = 4 (adjust with the `-lv N` CLI arg)
0.00.103.715 I cmn  common_param: device_info:
0.00.228.308 I cmn  common_param:   - CUDA0   : NVIDIA H200 (143155 MiB, 142629 MiB free)
0.00.228.319 I cmn  common_param:   - CPU     : Intel(R) Xeon(R) Processor (128868 MiB, 128868 MiB free)
0.00.228.379 I srv  init_listene: running without SSL
0.00.228.403 I srv          init: using 15 threads for HTTP server
0.00.228.458 W srv  llama_server: security: no API key is set and CORS allows all origins (see https://github.com/ggml-org/llama.cpp/pull/25655)
0.00.231.915 I srv    load_model: loading model '/root/.cache/autotune/llama-server/models/autotune-tiny-s0.gguf'
0.00.231.920 I srv    load_model: local path '/root/.cache/autotune/llama-server/models/autotune-tiny-s0.gguf'
0.00.238.652 I llama_model_loader: loaded meta data with 21 key-value pairs and 20 tensors from /root/.cache/autotune/llama-server/models/autotune-tiny-s0.gguf (version GGUF V3 (latest))
0.00.238.669 I llama_model_loader: Dumping metadata keys/values. Note: KV overrides do not apply in this output.
0.00.252.924 I llama_prepare_model_devices: using device CUDA0 (NVIDIA H200) (0000:00:06.0) - 142629 MiB free
0.00.279.080 I load_tensors: loading model tensors, this can take a while... (load_mode = mmap)
0.00.286.131 I load_tensors: offloading output layer to GPU
0.00.286.137 I load_tensors: offloading 1 repeating layers to GPU
0.00.286.137 I load_tensors: offloaded 3/3 layers to GPU
0.00.286.145 I load_tensors:   CPU_Mapped model buffer size =     3.91 MiB
0.00.286.146 I load_tensors:        CUDA0 model buffer size =     4.09 MiB
0.00.556.493 I cmn  common_init_: added </s> logit bias = -inf
0.00.556.786 I llama_init_from_model: enabling flash_attn since it is required for quantized V cache
0.00.556.810 I llama_context: constructing llama_context
0.00.556.823 I llama_context: n_seq_max             = 2
0.00.556.825 I llama_context: n_ctx                 = 4096
0.00.556.825 I llama_context: n_ctx_seq             = 2048
0.00.556.826 I llama_context: n_batch               = 2048
0.00.556.826 I llama_context: n_ubatch              = 512
0.00.556.826 I llama_context: causal_attn           = 1
0.00.556.827 I llama_context: flash_attn            = enabled
0.00.556.827 I llama_context: kv_unified            = false
0.00.556.832 I llama_context: freq_base             = 10000.0
0.00.556.833 I llama_context: freq_scale            = 1
0.00.556.833 I llama_context: n_rs_seq              = 0
0.00.556.834 I llama_context: n_outputs_max         = 2
0.00.556.834 I llama_context: n_outputs_max_per_seq = 1
0.00.556.835 I llama_context: n_ctx_seq (2048) < n_ctx_train (4096) -- the full capacity of the model will not be utilized
0.00.557.994 I llama_context:  CUDA_Host  output buffer size =     0.24 MiB
0.00.558.947 I llama_kv_cache:      CUDA0 KV buffer size =     0.81 MiB
0.00.559.106 I llama_kv_cache: size =    0.81 MiB (  2048 cells,   2 layers,  2/2 seqs), K (q8_0):    0.53 MiB, V (q4_0):    0.28 MiB
0.00.559.109 I llama_kv_cache: attn_rot_k = 1, n_embd_head_k_all = 32
0.00.559.110 I llama_kv_cache: attn_rot_v = 1, n_embd_head_k_all = 32
0.00.559.129 I sched_reserve: reserving ...
0.00.559.750 I resolve_fused_ops: resolving fused DeepSeek V4 HC support:
0.00.560.336 I resolve_fused_ops: fused DeepSeek V4 HC pre enabled
0.00.560.696 I resolve_fused_ops: fused DeepSeek V4 HC comb enabled
0.00.561.021 I resolve_fused_ops: fused DeepSeek V4 HC post enabled
0.00.569.751 I sched_reserve:      CUDA0 compute buffer size =     3.28 MiB
0.00.569.763 I sched_reserve: graph: nodes = 726, splits = 2, input objects = 4, input tensors = 8
0.00.569.765 I sched_reserve: reserve took 10.63 ms, sched copies = 1
0.00.569.884 I cmn          init: llama threadpool init, n_threads = 8
0.00.569.900 I cmn  common_init_: warming up the model with an empty run - please wait ... (--no-warmup to disable)
0.00.624.185 I srv    load_model: initializing, n_slots = 2, n_ctx_slot = 2048, kv_unified = 'false'
0.00.634.813 I slot   load_model: id  0 | task -1 | new slot, n_ctx = 2048
0.00.634.816 I slot   load_model: id  1 | task -1 | new slot, n_ctx = 2048
0.00.634.825 I srv    load_model: prompt cache is enabled, size limit: 8192 MiB
0.00.634.826 I srv    load_model: use `--cache-ram 0` to disable the prompt cache
0.00.634.827 I srv    load_model: for more info see https://github.com/ggml-org/llama.cpp/pull/16391
0.00.634.827 I srv    load_model: context checkpoints enabled, max = 32, min spacing = 8192
0.00.634.851 I srv          init: idle slots will be saved to prompt cache upon starting a new task
0.00.639.122 I srv  llama_server: model loaded
0.00.639.124 I srv  llama_server: listening on http://127.0.0.1:40661
"""
