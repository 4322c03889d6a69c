"""Parsing vLLM startup logs of three generations (0.10.x, 0.2x/0.33, 0.34), written with vLLM's
own f-strings and the figures of public startup logs:

- LOG_0_10: 0.10.0 formats (`%.4f GiB and`, two KV lines, `VllmWorker rank=N`, no API-server
  prefix, the `Engine 000: ... num_gpu_blocks` line) for a dense model.
- LOG_0_2X: a 2 x RTX 3090 TP2 Qwen3.6-27B launch on a 0.2x release with fp8_e5m2 KV, prefix
  caching, gpu_memory_utilization 0.88. The KV figures and the utilisation advice are those of
  github.com/noonghunna/club-3090 issue 104 (9.84 GiB, 619,202 tokens, 2.36x at 262,144;
  0.8800 / 0.8592 / 0.9008); weights, graph and timing figures are illustrative.
- LOG_0_33: the one-line capacity report (0.28+) with the device first (0.30+) and the colour
  codes vLLM adds on a terminal.
- LOG_0_34 / LOG_0_34_EAGER: 0.34.0's extensible KV cache, sized after warmup (the final size is
  the report's, not the `Available KV cache memory` capacity).
"""

from __future__ import annotations

from autotune.engines.vllm import (
    READY_TEXT,
    SIMULATED_MARKER,
    is_ready_line,
    parse_startup,
    split_prefix,
    strip_prefix,
)
from autotune.engines.vllm.logs import rank_of

LOG_0_10 = """\
INFO 07-25 10:00:01 [api_server.py:1755] vLLM API server version 0.10.0
INFO 07-25 10:00:01 [cli_args.py:261] non-default args: {'model_tag': 'Qwen/Qwen3-8B', 'host': '127.0.0.1', 'max_model_len': 16384, 'tensor_parallel_size': 2}
INFO 07-25 10:00:05 [config.py:1604] Using max model len 16384
INFO 07-25 10:00:05 [config.py:2435] Chunked prefill is enabled with max_num_batched_tokens=2048.
(EngineCore_0 pid=311) INFO 07-25 10:00:07 [core.py:71] Initializing a V1 LLM engine (v0.10.0) with config: model='Qwen/Qwen3-8B', speculative_config=None, tokenizer='Qwen/Qwen3-8B', skip_tokenizer_init=False, dtype=torch.bfloat16, max_seq_len=16384, download_dir=None, load_format=auto, tensor_parallel_size=2, pipeline_parallel_size=1, quantization=None, enforce_eager=False, kv_cache_dtype=auto, device_config=cuda, served_model_name=Qwen/Qwen3-8B, enable_prefix_caching=True, chunked_prefill_enabled=True
(VllmWorker rank=0 pid=402) INFO 07-25 10:00:31 [gpu_model_runner.py:1892] Model loading took 7.6342 GiB and 20.118443 seconds
(VllmWorker rank=1 pid=403) INFO 07-25 10:00:31 [gpu_model_runner.py:1892] Model loading took 7.6342 GiB and 20.209921 seconds
(VllmWorker rank=0 pid=402) INFO 07-25 10:00:39 [gpu_worker.py:255] Available KV cache memory: 12.55 GiB
(VllmWorker rank=1 pid=403) INFO 07-25 10:00:39 [gpu_worker.py:255] Available KV cache memory: 12.61 GiB
(EngineCore_0 pid=311) INFO 07-25 10:00:39 [kv_cache_utils.py:833] GPU KV cache size: 182,768 tokens
(EngineCore_0 pid=311) INFO 07-25 10:00:39 [kv_cache_utils.py:837] Maximum concurrency for 16,384 tokens per request: 11.16x
(VllmWorker rank=1 pid=403) INFO 07-25 10:00:52 [gpu_model_runner.py:2485] Graph capturing finished in 13 secs, took 0.61 GiB
(VllmWorker rank=0 pid=402) INFO 07-25 10:00:52 [gpu_model_runner.py:2485] Graph capturing finished in 13 secs, took 0.58 GiB
(EngineCore_0 pid=311) INFO 07-25 10:00:52 [core.py:193] init engine (profile, create kv cache, warmup model) took 21.37 seconds
INFO 07-25 10:00:53 [loggers.py:142] Engine 000: vllm cache_config_info with initialization after num_gpu_blocks is: 11423
INFO 07-25 10:00:53 [api_server.py:1818] Starting vLLM API server 0 on http://127.0.0.1:8000
INFO:     Started server process [290]
INFO:     Waiting for application startup.
INFO:     Application startup complete.
"""

LOG_0_2X = """\
(APIServer pid=1) INFO 05-07 20:26:40 [utils.py:233] non-default args: {'model_tag': 'qwen3.6-27b-autoround-int4', 'host': '0.0.0.0', 'max_model_len': 262144, 'quantization': 'auto_round', 'tensor_parallel_size': 2, 'gpu_memory_utilization': 0.88, 'kv_cache_dtype': 'fp8_e5m2', 'enable_prefix_caching': True, 'max_num_batched_tokens': 8192, 'max_num_seqs': 2}
(APIServer pid=1) INFO 05-07 20:26:52 [model.py:1692] Using max model len 262144
(EngineCore pid=90) INFO 05-07 20:27:01 [core.py:110] Initializing a V1 LLM engine (v0.20.2) with config: model='qwen3.6-27b-autoround-int4', speculative_config=None, max_seq_len=262144, tensor_parallel_size=2, quantization=auto_round, enforce_eager=False, kv_cache_dtype=fp8_e5m2, device_config=cuda, enable_prefix_caching=True, enable_chunked_prefill=True, compilation_config={'level': None, 'mode': 3}
(Worker_TP0 pid=99) INFO 05-07 20:27:40 [gpu_model_runner.py:4880] Model loading took 8.85 GiB memory and 31.204511 seconds
(Worker_TP1 pid=100) INFO 05-07 20:27:40 [gpu_model_runner.py:4880] Model loading took 8.86 GiB memory and 31.391822 seconds
(Worker_TP0 pid=99) INFO 05-07 20:27:40 [interface.py:508] Setting attention block size to 1568 tokens to ensure that attention page size is >= mamba page size.
(Worker_TP0 pid=99) INFO 05-07 20:27:40 [interface.py:532] Padding mamba page size by 0.13% to ensure that mamba page size and attention page size are exactly equal.
(Worker_TP0 pid=99) INFO 05-07 20:28:09 [gpu_model_runner.py:5963] Profiling CUDA graph memory: PIECEWISE=3 (largest=8), FULL=2 (largest=4)
(Worker_TP0 pid=99) INFO 05-07 20:28:10 [gpu_model_runner.py:6041] Estimated CUDA graph memory: 0.49 GiB total
(Worker_TP1 pid=100) INFO 05-07 20:28:10 [gpu_model_runner.py:6041] Estimated CUDA graph memory: 0.52 GiB total
(Worker_TP0 pid=99) INFO 05-07 20:28:11 [gpu_worker.py:460] Available KV cache memory: 9.84 GiB
(Worker_TP0 pid=99) INFO 05-07 20:28:11 [gpu_worker.py:475] CUDA graph memory profiling is enabled (default since v0.21.0). The current --gpu-memory-utilization=0.8800 is equivalent to --gpu-memory-utilization=0.8592 without CUDA graph memory profiling. To maintain the same effective KV cache size as before, increase --gpu-memory-utilization to 0.9008. To disable, set VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0.
(Worker_TP1 pid=100) INFO 05-07 20:28:11 [gpu_worker.py:460] Available KV cache memory: 9.81 GiB
(EngineCore pid=90) INFO 05-07 20:28:11 [kv_cache_utils.py:1710] GPU KV cache size: 619,202 tokens
(EngineCore pid=90) INFO 05-07 20:28:11 [kv_cache_utils.py:1711] Maximum concurrency for 262,144 tokens per request: 2.36x
(Worker_TP0 pid=99) INFO 05-07 20:28:19 [gpu_model_runner.py:6134] Graph capturing finished in 8 secs, took 0.41 GiB
(EngineCore pid=90) INFO 05-07 20:28:20 [core.py:300] init engine (profile, create kv cache, warmup model) took 79.12 s (compilation: 21.40 s)
(APIServer pid=1) INFO 05-07 20:28:21 [api_server.py:602] Starting vLLM server on http://0.0.0.0:8000
(APIServer pid=1) INFO:     Started server process [1]
(APIServer pid=1) INFO:     Waiting for application startup.
(APIServer pid=1) INFO:     Application startup complete.
"""

ESC = "\x1b"
LOG_0_33 = f"""\
{ESC}[36m(APIServer pid=7){ESC}[0m INFO 11-01 09:00:00 [startup.py:22] vLLM server version 0.33.0, serving model Qwen/Qwen3.8-27B-FP8
{ESC}[36m(EngineCore_DP0 pid=9){ESC}[0m INFO 11-01 09:00:40 {ESC}[90m[gpu_model_runner.py:5089]{ESC}[0m Model loading took 29.12 GiB memory and 40.000000 seconds
{ESC}[36m(EngineCore_DP0 pid=9){ESC}[0m INFO 11-01 09:01:00 [gpu_worker.py:773] Available KV cache memory: 85.3 GiB
{ESC}[36m(EngineCore_DP0 pid=9){ESC}[0m INFO 11-01 09:01:00 [kv_cache_utils.py:1149] GPU KV cache size: 2,731,008 tokens, Maximum concurrency for 131,072 tokens per request: 20.84x
{ESC}[36m(APIServer pid=7){ESC}[0m INFO:     Application startup complete.
"""


def test_split_prefix_and_ranks() -> None:
    line = "(Worker_TP1 pid=100) INFO 05-07 20:28:11 [gpu_worker.py:460] Available KV"
    assert split_prefix(line) == ("Worker_TP1", "Available KV")
    assert strip_prefix("INFO 07-25 10:00:01 [x.py:1] hello") == "hello"
    assert split_prefix("no prefix here") == (None, "no prefix here")
    assert rank_of("VllmWorker rank=1") == 1
    assert rank_of("VllmWorker TP1") == 1
    assert rank_of("Worker_PP0_TP1") == 1
    for proc in ("EngineCore_DP0", "EngineCore_0", "APIServer", "Worker_TP0", None):
        assert rank_of(proc) == 0


def test_parse_0_10() -> None:
    r = parse_startup(LOG_0_10)
    assert r.ready and not r.simulated
    assert r.engine_version == "0.10.0"
    assert r.weights_gib == 7.6342  # rank 0's figure
    assert r.kv_cache_gib == 12.55
    assert r.kv_pool_tokens == 182768 and r.max_concurrency == 11.16
    assert r.context_len == 16384
    assert r.graph_gib == 0.58 and r.graph_capture_s == 13  # rank 1's 0.61 is ignored
    assert r.num_gpu_blocks == 11423
    assert r.max_num_batched_tokens == 2048 and r.chunked_prefill_size == 2048
    assert r.tensor_parallel_size == 2 and r.kv_dtype == "auto"
    assert r.enable_prefix_caching is True and r.enforce_eager is False
    assert r.enable_chunked_prefill is True  # `chunked_prefill_enabled=` up to 0.11.0
    assert r.gpu_memory_utilization is None  # default, not logged by 0.10
    assert r.init_engine_s == 21.37


def test_parse_0_2x_tp2_hybrid() -> None:
    r = parse_startup(LOG_0_2X)
    assert r.ready
    assert r.engine_version == "0.20.2"
    assert r.weights_gib == 8.85
    assert r.kv_cache_gib == 9.84 and r.kv_pool_tokens == 619202 and r.max_concurrency == 2.36
    assert r.context_len == 262144
    assert r.gpu_memory_utilization == 0.88
    assert r.graph_estimate_gib == 0.49 and r.graph_gib == 0.41
    assert r.block_size == 1568
    assert r.max_num_seqs == 2 and r.max_running_requests == 2
    assert r.max_num_batched_tokens == 8192
    assert r.kv_dtype == "fp8_e5m2" and r.quantization == "auto_round"
    assert r.init_engine_s == 79.12
    assert any("Padding mamba page size by 0.13%" in w for w in r.warnings)
    assert any("--gpu-memory-utilization=0.8800" in w for w in r.warnings)


def test_parse_0_33_one_line_capacity_with_colours() -> None:
    r = parse_startup(LOG_0_33)
    assert r.ready
    assert r.engine_version == "0.33.0"
    assert r.weights_gib == 29.12 and r.kv_cache_gib == 85.3
    assert r.kv_pool_tokens == 2731008 and r.max_concurrency == 20.84
    assert r.context_len == 131072


def test_device_prefix_and_host_pool_wording() -> None:
    text = (
        "(EngineCore_DP0 pid=9) INFO 11-01 09:01:00 [kv_cache_utils.py:2328] GPU + host KV "
        "cache size: 1,000,000 tokens, Maximum concurrency for 100,000 tokens per request: 10.00x"
    )
    r = parse_startup(text)
    assert r.kv_pool_tokens == 1_000_000 and r.max_concurrency == 10.0


def test_ready_and_simulated_markers() -> None:
    assert is_ready_line("(APIServer pid=1) INFO:     Application startup complete.")
    assert not is_ready_line("INFO:     Waiting for application startup.")
    assert READY_TEXT == "Application startup complete."
    r = parse_startup(f"INFO 01-01 00:00:00 [sim.py:1] {SIMULATED_MARKER}\n")
    assert r.simulated and not r.ready


def test_v0_blocks_line_and_gmu_advice_of_0_18() -> None:
    text = (
        "INFO 07-25 10:00:39 [executor_base.py:113] # cuda blocks: 2048, # CPU blocks: 512\n"
        "(EngineCore_DP0 pid=3) INFO 03-01 12:00:00 [gpu_worker.py:480] In v0.19, CUDA graph "
        "memory profiling will be enabled by default (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1), "
        "which more accurately accounts for CUDA graph memory during KV cache allocation. To try "
        "it now, set VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1 and increase "
        "--gpu-memory-utilization from 0.9200 to 0.9271 to maintain the same effective KV cache "
        "size.\n"
    )
    r = parse_startup(text)
    assert r.num_gpu_blocks == 2048
    assert r.gpu_memory_utilization == 0.92


def test_garbage_and_partial_logs() -> None:
    r = parse_startup("random text\n\n(Worker_TP3 pid=1) INFO 01-01 00:00:00 [x.py:1] Model loading"
                      " took 9.99 GiB memory and 1.0 seconds\n")  # fmt: skip
    assert r.weights_gib is None and not r.ready  # only a rank-3 line
    r = parse_startup(
        "(APIServer pid=1) INFO 01-01 00:00:00 [utils.py:233] non-default args: "
        "{'model_tag': 'm', 'middleware': [<function f at 0x7f>], 'max_num_seqs': 4, "
        "'gpu_memory_utilization': 0.85}\n"
    )
    # literal_eval fails on the function repr; the numeric keys are still read
    assert r.max_num_seqs == 4 and r.gpu_memory_utilization == 0.85


# V0 and early releases, lines as public logs show them (tests/data/real_launches has sources).
V0_064 = """\
Loading model weights took 14.9888 GB
Memory profiling results: total_gpu_memory=23.58GiB initial_memory_usage=15.34GiB peak_torch_memory=17.06GiB memory_usage_post_profile=15.35GiB non_torch_memory=0.35GiB kv_cache_size=3.81GiB gpu_memory_utilization=0.90
GPU blocks: 1952, # CPU blocks: 2048
Maximum concurrency for 20000 tokens per request: 1.56x
"""  # noqa: E501
V0_066 = """\
INFO 01-16 09:40:00 worker.py:238] the current vLLM instance can use total_gpu_memory (79.22GiB) x gpu_memory_utilization (0.90) = 71.29GiB
INFO 01-16 09:40:00 worker.py:238] model weights take 19.86GiB; non_torch_memory takes 0.16GiB; PyTorch activation peak memory takes 36.63GiB; the rest of the memory reserved for KV Cache is 14.65GiB.
INFO 01-16 09:40:00 executor_base.py:95] # CUDA blocks: 6001, # CPU blocks: 1638
"""  # noqa: E501
COMPOSE = (
    "qwen3-1  | (VllmWorker rank=0 pid=105) INFO 04-29 01:07:41 [gpu_model_runner.py:1347] "
    "Model loading took 14.2474 GiB and 558.868858 seconds\n"
    "qwen3-1  | INFO 04-29 01:09:49 [kv_cache_utils.py:634] GPU KV cache size: 198,784 tokens\n"
)


def test_v0_lines() -> None:
    r = parse_startup(V0_064)
    assert r.weights_gib == 14.9888 and r.kv_cache_gib == 3.81
    assert r.total_gpu_gib == 23.58 and r.gpu_memory_utilization == 0.9
    assert r.num_gpu_blocks == 1952  # the post lost the leading "# "
    r = parse_startup(V0_066)
    assert r.weights_gib == 19.86 and r.kv_cache_gib == 14.65 and r.num_gpu_blocks == 6001
    assert r.total_gpu_gib == 79.22 and r.gpu_memory_utilization == 0.9


def test_compose_prefix() -> None:
    r = parse_startup(COMPOSE)
    assert r.weights_gib == 14.2474 and r.kv_pool_tokens == 198_784


# vLLM 0.34.0's extensible KV cache (the default on CUDA and ROCm), every message built from the
# 0.34.0 wheel's format strings: v1/worker/gpu_worker.py determine_available_memory
# `Available KV cache memory: %s GiB` (format_gib, utils/mem_utils.py: round(b / GiB, 2); now only
# the reserved capacity, and no graph estimate nor advice line since profile_cudagraph_memory
# returns 0 with it); v1/worker/gpu/model_runner.py `Graph capturing finished in %.0f secs, took
# %.2f GiB`; v1/worker/extensible_kv_cache.py measure_kv_cache_blocks `Memory after warmup: %s GiB
# free, %s GiB committed to the KV cache, %s GiB kept for transient activations (%s GiB allocated
# at peak, %s GiB of torch reservation growth); %d KV cache blocks (%s GiB) fit within the
# requested %s GiB. Torch may reserve up to %s GiB.` on every rank, then
# v1/core/kv_cache_planning.py finalize_extensible_kv_cache -> kv_cache_utils.py
# update_kv_cache_capacity `%s KV cache size: %s tokens, Maximum concurrency for %s tokens per
# request: %.2fx` with the count the ranks agreed on (their minimum), then extend_kv_cache
# `Extended KV cache to %d blocks (%.2f GiB).` (physical bytes, each layer's segment rounded up
# to the 2 MiB granule). A TP2 Qwen3-32B on 2 x H100 80GB, gpu_memory_utilization unset (1.0
# with the extensible cache): 8 MiB blocks of 64 tokens, rank 1 measures 5372 blocks and rank 0
# 5374, so 5372 x 64 layers x 128 KiB rounds to 42.00 GiB; 5372 / 640 blocks per 40,960-token
# request = 8.39x, 343,808 tokens. The memory figures are illustrative.
LOG_0_34 = """\
(APIServer pid=1) INFO 06-02 14:00:01 [startup.py:22] vLLM server version 0.34.0, serving model Qwen/Qwen3-32B
(APIServer pid=1) INFO 06-02 14:00:01 [startup.py:96] non-default args: {'model_tag': 'Qwen/Qwen3-32B', 'host': '0.0.0.0', 'max_model_len': 40960, 'tensor_parallel_size': 2}
(APIServer pid=1) INFO 06-02 14:00:09 [model.py:2214] Using max model len 40960
(EngineCore_DP0 pid=60) INFO 06-02 14:00:15 [core.py:154] Initializing a V1 LLM engine (v0.34.0) with config: model='Qwen/Qwen3-32B', speculative_config=None, tokenizer='Qwen/Qwen3-32B', max_seq_len=40960, tensor_parallel_size=2, quantization=None, enforce_eager=False, kv_cache_dtype=auto, device_config=cuda, enable_prefix_caching=True, enable_chunked_prefill=True
(Worker_TP0 pid=70) INFO 06-02 14:00:48 [model_runner.py:441] Model loading took 30.54 GiB memory and 28.104551 seconds
(Worker_TP1 pid=71) INFO 06-02 14:00:48 [model_runner.py:441] Model loading took 30.54 GiB memory and 28.311207 seconds
(Worker_TP0 pid=70) INFO 06-02 14:01:02 [gpu_worker.py:795] Available KV cache memory: 44.65 GiB
(Worker_TP1 pid=71) INFO 06-02 14:01:02 [gpu_worker.py:795] Available KV cache memory: 44.62 GiB
(Worker_TP0 pid=70) INFO 06-02 14:01:31 [model_runner.py:1216] Graph capturing finished in 9 secs, took 0.60 GiB
(Worker_TP1 pid=71) INFO 06-02 14:01:31 [model_runner.py:1216] Graph capturing finished in 9 secs, took 0.61 GiB
(Worker_TP0 pid=70) INFO 06-02 14:01:33 [extensible_kv_cache.py:693] Memory after warmup: 45.54 GiB free, 0.12 GiB committed to the KV cache, 2.1 GiB kept for transient activations (2.1 GiB allocated at peak, 0.35 GiB of torch reservation growth); 5374 KV cache blocks (41.98 GiB) fit within the requested 79.19 GiB. Torch may reserve up to 34.66 GiB.
(Worker_TP1 pid=71) INFO 06-02 14:01:33 [extensible_kv_cache.py:693] Memory after warmup: 45.52 GiB free, 0.12 GiB committed to the KV cache, 2.1 GiB kept for transient activations (2.1 GiB allocated at peak, 0.35 GiB of torch reservation growth); 5372 KV cache blocks (41.97 GiB) fit within the requested 79.19 GiB. Torch may reserve up to 34.64 GiB.
(EngineCore_DP0 pid=60) INFO 06-02 14:01:33 [kv_cache_utils.py:1168] GPU KV cache size: 343,808 tokens, Maximum concurrency for 40,960 tokens per request: 8.39x
(Worker_TP0 pid=70) INFO 06-02 14:01:34 [extensible_kv_cache.py:536] Extended KV cache to 5372 blocks (42.00 GiB).
(Worker_TP1 pid=71) INFO 06-02 14:01:34 [extensible_kv_cache.py:536] Extended KV cache to 5372 blocks (42.00 GiB).
(EngineCore_DP0 pid=60) INFO 06-02 14:01:35 [core.py:452] init engine (profile, create kv cache, warmup model) took 79.40 s (compilation: 18.22 s)
(APIServer pid=1) INFO 06-02 14:01:37 [entry.py:139] Starting vLLM server on http://0.0.0.0:8000
(APIServer pid=1) INFO:     Started server process [1]
(APIServer pid=1) INFO:     Waiting for application startup.
(APIServer pid=1) INFO:     Application startup complete.
"""  # noqa: E501


def test_parse_0_34_extensible_reports_the_final_kv_size() -> None:
    r = parse_startup(LOG_0_34)
    assert r.ready and r.engine_version == "0.34.0" and r.tensor_parallel_size == 2
    assert r.extensible_kv_cache is True
    # the size committed after warmup, not the profiling run's capacity
    assert r.kv_cache_gib == 42.0 and r.kv_reserve_gib == 44.65
    assert r.num_gpu_blocks == 5372  # the ranks' agreed count, not rank 0's own 5374
    assert r.kv_pool_tokens == 343808 and r.max_concurrency == 8.39 and r.context_len == 40960
    # rank 0's measurement
    assert r.free_after_warmup_gib == 45.54 and r.warmup_kv_gib == 0.12
    assert r.transient_reserve_gib == 2.1 and r.transient_peak_gib == 2.1
    assert r.torch_reserve_growth_gib == 0.35
    assert r.requested_gib == 79.19 and r.torch_limit_gib == 34.66
    assert r.kv_withheld_gib is None and r.kv_remapped_from_blocks is None
    assert r.weights_gib == 30.54 and r.graph_gib == 0.6 and r.graph_estimate_gib is None
    assert r.gpu_memory_utilization is None  # unset: no advice line with the extensible cache
    assert r.init_engine_s == 79.4
    assert r.warnings == []


def test_0_34_log_cut_before_the_extension_keeps_rank_0s_measurement() -> None:
    cut = LOG_0_34[: LOG_0_34.index("(EngineCore_DP0 pid=60) INFO 06-02 14:01:33")]
    r = parse_startup(cut)
    assert not r.ready and r.extensible_kv_cache is True
    assert r.kv_cache_gib == 41.98 and r.num_gpu_blocks == 5374 and r.kv_reserve_gib == 44.65
    assert r.kv_pool_tokens is None
    # before warmup only the capacity is known
    r = parse_startup(LOG_0_34[: LOG_0_34.index("(Worker_TP0 pid=70) INFO 06-02 14:01:31")])
    assert r.kv_cache_gib == 44.65 and r.kv_reserve_gib == 44.65
    assert r.extensible_kv_cache is None and r.num_gpu_blocks is None


# extensible_kv_cache.py measure_kv_cache_blocks' logger.warning_once (an explicit 0.7 <
# gpu_memory_utilization < 1.0 keeping >= 1 GiB of free memory out of the cache: `%s` of the
# float, format_gib of the requested and withheld bytes) and extend_kv_cache's `Remapping the KV
# cache from %d to %d blocks to fit the measured budget.`: under enforce_eager the sizing steps'
# blocks stay committed (6100 of the 6116-block capacity), more than the 0.9 budget fits. One
# H100, Qwen3-8B (9 MiB blocks, 36 layers of 256 KiB each rounded to 2 MiB granules), so the
# worker is the engine core; illustrative figures that add up as measure_kv_cache_bytes does.
LOG_0_34_EAGER = """\
(APIServer pid=1) INFO 06-02 15:00:01 [startup.py:96] non-default args: {'model_tag': 'Qwen/Qwen3-8B', 'enforce_eager': True, 'gpu_memory_utilization': 0.9}
(EngineCore_DP0 pid=60) INFO 06-02 15:00:20 [gpu_worker.py:795] Available KV cache memory: 53.76 GiB
(EngineCore_DP0 pid=60) WARNING 06-02 15:00:41 [extensible_kv_cache.py:662] gpu_memory_utilization=0.9 caps this instance at 71.27 GiB, keeping 6.2 GiB of free device memory out of the KV cache. The extensible KV cache is sized from the memory measured after warmup and CUDA graph capture, so vLLM's own use needs no headroom below 1.0. Leave gpu_memory_utilization unset unless it leaves room for memory vLLM does not measure: other processes sharing the GPU (including ones that allocate on it later), the CPU on a unified-memory device, weight transfer buffers for weight updates, or a KV connector's own device buffers.
(EngineCore_DP0 pid=60) INFO 06-02 15:00:41 [extensible_kv_cache.py:693] Memory after warmup: 8.88 GiB free, 53.65 GiB committed to the KV cache, 1.64 GiB kept for transient activations (1.64 GiB allocated at peak, 0.0 GiB of torch reservation growth); 6082 KV cache blocks (53.46 GiB) fit within the requested 71.27 GiB. Torch may reserve up to 24.09 GiB.
(EngineCore_DP0 pid=60) INFO 06-02 15:00:41 [kv_cache_utils.py:1168] GPU KV cache size: 389,248 tokens, Maximum concurrency for 40,960 tokens per request: 9.50x
(EngineCore_DP0 pid=60) INFO 06-02 15:00:41 [extensible_kv_cache.py:525] Remapping the KV cache from 6100 to 6082 blocks to fit the measured budget.
(EngineCore_DP0 pid=60) INFO 06-02 15:00:42 [extensible_kv_cache.py:536] Extended KV cache to 6082 blocks (53.51 GiB).
"""  # noqa: E501


def test_0_34_utilisation_warning_and_remap() -> None:
    r = parse_startup(LOG_0_34_EAGER)
    assert r.gpu_memory_utilization == 0.9 and r.extensible_kv_cache is True
    assert r.requested_gib == 71.27 and r.kv_withheld_gib == 6.2
    assert r.kv_remapped_from_blocks == 6100 and r.num_gpu_blocks == 6082
    assert r.kv_cache_gib == 53.51 and r.kv_reserve_gib == 53.76
    assert r.warmup_kv_gib == 53.65 and r.free_after_warmup_gib == 8.88
    assert r.kv_pool_tokens == 389248 and r.max_concurrency == 9.5
    assert len(r.warnings) == 1 and "caps this instance at 71.27 GiB" in r.warnings[0]


def test_0_34_without_the_extensible_cache() -> None:
    # --no-enable-extensible-kv-cache: sized from the profiling estimate as before, the capacity
    # line before the graph capture; the 0.34.0 advice line still names the utilisation.
    text = (
        "(APIServer pid=1) INFO 06-02 16:00:01 [startup.py:96] non-default args: {'model_tag': "
        "'Qwen/Qwen3-8B', 'enable_extensible_kv_cache': False}\n"
        "(EngineCore_DP0 pid=6) INFO 06-02 16:00:20 [gpu_worker.py:795] Available KV cache "
        "memory: 48.1 GiB\n"
        "(EngineCore_DP0 pid=6) INFO 06-02 16:00:20 [gpu_worker.py:809] CUDA graph memory "
        "profiling is enabled (default since v0.21.0). The current --gpu-memory-utilization="
        "0.9200 is equivalent to --gpu-memory-utilization=0.9124 without CUDA graph memory "
        "profiling. To maintain the same effective KV cache size as before, increase "
        "--gpu-memory-utilization to 0.9276. To disable, set "
        "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0.\n"
        "(EngineCore_DP0 pid=6) INFO 06-02 16:00:20 [kv_cache_utils.py:1168] GPU KV cache size: "
        "350,272 tokens, Maximum concurrency for 40,960 tokens per request: 8.55x\n"
    )
    r = parse_startup(text)
    assert r.extensible_kv_cache is False
    assert r.kv_cache_gib == 48.1 and r.kv_reserve_gib == 48.1 and r.num_gpu_blocks is None
    assert r.gpu_memory_utilization == 0.92  # resolved default without the extensible cache
    # v1/executor/abstract.py: turned off at runtime (the reason is an illustrative VMM error)
    off = (
        "(EngineCore_DP0 pid=6) WARNING 06-02 16:00:19 [abstract.py:176] Disabling the "
        "extensible KV cache: cuMemCreate failed: CUDA_ERROR_NOT_SUPPORTED. The KV cache will "
        "be sized from profiling estimates instead of measured memory.\n"
    )
    r = parse_startup(off + text.split("\n", 1)[1])
    assert r.extensible_kv_cache is False and r.kv_cache_gib == 48.1
    assert any("Disabling the extensible KV cache" in w for w in r.warnings)


def test_older_releases_keep_the_available_figure() -> None:
    for log in (LOG_0_10, LOG_0_2X, LOG_0_33):
        r = parse_startup(log)
        assert r.kv_cache_gib == r.kv_reserve_gib and r.extensible_kv_cache is None
        assert r.free_after_warmup_gib is None and r.requested_gib is None
    assert parse_startup(LOG_0_33).num_gpu_blocks is None
    assert parse_startup(LOG_0_10).num_gpu_blocks == 11423
