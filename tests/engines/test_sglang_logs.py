"""Startup and batch-line parsing on verbatim SGLang log formats (reference §3, C1)."""

from __future__ import annotations

import ast

import pytest

from autotune.engines.sglang import parse_batch_line, parse_startup, split_prefix, strip_prefix
from autotune.engines.sglang.logs import free_after_weights_gib, free_before_pool_gib
from tests.wheels import wheel_text

# SGLang 0.5.9, TP=1 (no rank prefix): the C1 calibration figures (34 slots, 183,838 tokens).
LOG_0_5_9 = """\
[2026-03-01 12:00:00] server_args=ServerArgs(model_path='/models/q', ...)
[2026-03-01 12:00:01] Init torch distributed ends. elapsed=0.45 s, mem usage=0.31 GB
[2026-03-01 12:00:01] Load weight begin. avail mem=30.91 GB
[2026-03-01 12:00:09] Load weight end. elapsed=8.12 s, type=Qwen3_5ForConditionalGeneration, \
dtype=torch.bfloat16, avail mem=14.38 GB, mem usage=16.53 GB.
[2026-03-01 12:00:09] Mamba Cache is allocated. max_mamba_cache_size: 34, \
conv_state size: 0.10GB, ssm_state size: 4.92GB \n\
[2026-03-01 12:00:09] KV Cache is allocated. #tokens: 183838, K size: 2.81 GB, V size: 2.81 GB
[2026-03-01 12:00:09] Memory pool end. avail mem=3.62 GB
[2026-03-01 12:00:10] Capture cuda graph begin. This can take up to several minutes. \
avail mem=3.50 GB
[2026-03-01 12:00:10] Capture cuda graph bs [1, 2]
[2026-03-01 12:00:14] Capture cuda graph end. Time elapsed: 4.20 s. mem usage=0.21 GB. \
avail mem=3.29 GB.
[2026-03-01 12:00:15] Allocating 12.00 GB host memory for hierarchical KV cache.
[2026-03-01 12:00:15] max_total_num_tokens=183838, chunked_prefill_size=2048, \
max_prefill_tokens=16384, max_running_requests=2, context_len=131072, \
available_gpu_mem=3.29 GB
[2026-03-01 12:00:16] INFO:     Started server process [4242]
[2026-03-01 12:00:20] The server is fired up and ready to roll!
"""

# SGLang 0.5.23, TP=2 with ms timestamps: dtype in the KV line, role graph lines, host pool tokens.
LOG_0_5_23 = """\
[2026-03-01 12:00:01.123 TP0] Load weight begin. avail mem=30.50 GB
[2026-03-01 12:00:01.124 TP1] Load weight begin. avail mem=30.60 GB
[2026-03-01 12:00:08.000 TP0] Load weight end. elapsed=7.00 s, type=Qwen3_5ForCausalLM, \
quant=compressed-tensors, avail mem=22.28 GB, mem usage=8.22 GB.
[2026-03-01 12:00:08.001 TP1] Load weight end. elapsed=7.00 s, type=Qwen3_5ForCausalLM, \
quant=compressed-tensors, avail mem=22.38 GB, mem usage=9.99 GB.
[2026-03-01 12:00:08.100 TP0] Load weight end. elapsed=0.40 s, type=Qwen3_5MTP, \
avail mem=21.78 GB, mem usage=0.50 GB.
[2026-03-01 12:00:09.000 TP0] Mamba Cache is allocated. max_mamba_cache_size: 20, \
conv_state size: 0.03GB, ssm_state size: 1.48GB intermediate_ssm_state_cache size: 2.25GB \
intermediate_conv_window_cache size: 0.02GB \n\
[2026-03-01 12:00:09.001 TP1] Mamba Cache is allocated. max_mamba_cache_size: 99, \
conv_state size: 9.99GB, ssm_state size: 9.99GB \n\
[2026-03-01 12:00:09.100 TP0] KV Cache is allocated. dtype: torch.float8_e4m3fn, \
#tokens: 356237, K size: 2.72 GB, V size: 2.72 GB
[2026-03-01 12:00:09.101 TP1] KV Cache is allocated. dtype: torch.float8_e4m3fn, \
#tokens: 999999, K size: 9.99 GB, V size: 9.99 GB
[2026-03-01 12:00:09.200 TP0] MiniMax MSA-v1 main NVFP4 KV Cache is allocated. \
dtype: torch.uint8, #tokens: 77, K size: 0.01 GB, V size: 0.01 GB
[2026-03-01 12:00:12.000 TP0] Capture target verify CUDA graph end. bs=[1, 2, 3, 4], \
elapsed=3.00 s, mem usage=0.42 GB, avail mem=5.10 GB.
[2026-03-01 12:00:13.000 TP0] Capture target prefill CUDA graph end. elapsed=1.00 s, \
mem usage=0.31 GB, avail mem=4.79 GB.
[2026-03-01 12:00:13.500 TP0] Capture draft decode CUDA graph end. elapsed=0.50 s, \
mem usage=0.05 GB, avail mem=4.74 GB.
[2026-03-01 12:00:14.000 TP0] Allocating kv hierarchical KV host pool: 712474 tokens, \
5.84 GB host memory.
[2026-03-01 12:00:14.001 TP0] Allocating 6.16 GB host memory for hierarchical Mamba cache \
(40 state slots, layout=page_first).
[2026-03-01 12:00:14.100] Max running requests is reset to 48 for speculative decoding. You \
can override this by explicitly setting --max-running-requests.
[2026-03-01 12:00:14.200 TP0] max_running_requests is capped to 4 by the mamba state cache \
(max_mamba_cache_size=20, 5 state slots per request). To raise it: increase \
--mamba-full-memory-ratio or --max-mamba-cache-size, or halve the state size with \
--mamba-ssm-dtype bfloat16.
[2026-03-01 12:00:14.201 TP1] max_running_requests is capped to 4 by the mamba state cache \
(max_mamba_cache_size=20, 5 state slots per request). To raise it: increase \
--mamba-full-memory-ratio or --max-mamba-cache-size, or halve the state size with \
--mamba-ssm-dtype bfloat16.
[2026-03-01 12:00:15.000 TP0] max_total_num_tokens=356237, chunked_prefill_size=2048, \
max_prefill_tokens=16384, max_running_requests=4, context_len=262144, \
available_gpu_mem=4.74 GB
[2026-03-01 12:00:20.000] The server is fired up and ready to roll!
"""


def test_prefix_variants() -> None:
    assert split_prefix("[2026-03-01 12:00:00] KV x") == ({}, "KV x")
    assert split_prefix("[2026-03-01 12:00:00.123 DP1 TP3 EP3] m") == (
        {"DP": 1, "TP": 3, "EP": 3},
        "m",
    )
    assert split_prefix("[2026-03-01 12:00:00 ATTN_CP0 MOE_DP2 TP0] m")[0] == {
        "ATTN_CP": 0,
        "MOE_DP": 2,
        "TP": 0,
    }
    assert (
        strip_prefix("Traceback (most recent call last):") == "Traceback (most recent call last):"
    )


def test_parse_0_5_9_calibration_log() -> None:
    r = parse_startup(LOG_0_5_9)
    assert r.weights_gib == 16.53
    assert (r.kv_pool_tokens, r.kv_k_gib, r.kv_v_gib, r.kv_dtype) == (183838, 2.81, 2.81, None)
    assert (r.mamba_slots, r.mamba_conv_gib, r.mamba_ssm_gib) == (34, 0.10, 4.92)
    assert r.mamba_spec_gib is None
    assert r.graph_gib == 0.21
    assert (r.max_total_num_tokens, r.chunked_prefill_size, r.max_prefill_tokens) == (
        183838,
        2048,
        16384,
    )
    assert (r.max_running_requests, r.context_len, r.available_gpu_mem_gib) == (2, 131072, 3.29)
    assert (r.host_pool_gb, r.host_pool_tokens) == (12.0, None)
    assert r.ready and not r.simulated and r.warnings == []


def test_parse_0_5_23_tp2_log_reads_rank0_only() -> None:
    r = parse_startup(LOG_0_5_23)
    assert r.weights_gib == pytest.approx(8.72)  # target 8.22 + MTP draft 0.50, rank 0 only
    assert (r.kv_pool_tokens, r.kv_dtype, r.kv_k_gib, r.kv_v_gib) == (
        356237,
        "torch.float8_e4m3fn",
        2.72,
        2.72,
    )
    assert (r.mamba_slots, r.mamba_conv_gib, r.mamba_ssm_gib) == (20, 0.03, 1.48)
    assert r.mamba_spec_gib == pytest.approx(2.27)
    assert r.graph_gib == pytest.approx(0.78)  # verify + prefill + draft
    assert (r.host_pool_tokens, r.host_pool_gb) == (712474, pytest.approx(12.0))
    assert (r.max_total_num_tokens, r.max_running_requests, r.context_len) == (356237, 4, 262144)
    assert r.available_gpu_mem_gib == 4.74
    assert r.ready
    assert len(r.warnings) == 2  # the TP1 copy of the capped warning is not repeated
    assert r.warnings[0].startswith("Max running requests is reset to 48")
    assert r.warnings[1].startswith("max_running_requests is capped to 4 by the mamba")


def test_mla_kv_line_and_va_upper_bound() -> None:
    r = parse_startup(
        "[2026-03-01 12:00:00] KV Cache is allocated. #tokens: 1000, KV size: 0.50 GB\n"
    )
    assert (r.kv_pool_tokens, r.kv_k_gib, r.kv_v_gib) == (1000, 0.5, None)
    r = parse_startup(
        "[2026-03-01 12:00:00] KV Cache VA upper bound. dtype: torch.bfloat16, #tokens: 64, "
        "K size: 0.01 GB, V size: 0.01 GB\n"
    )
    assert (r.kv_pool_tokens, r.kv_dtype) == (64, "torch.bfloat16")


def test_piecewise_graph_and_cpu_summary() -> None:
    r = parse_startup(
        "[2026-03-01 12:00:00] Capture cuda graph end. Time elapsed: 4.20 s. mem usage=0.21 GB. "
        "avail mem=3.29 GB.\n"
        "[2026-03-01 12:00:01] Capture piecewise CUDA graph end. Time elapsed: 9.00 s. "
        "mem usage=0.30 GB. avail mem=2.99 GB.\n"
        "[2026-03-01 12:00:02] max_total_num_tokens=10, chunked_prefill_size=-1, "
        "max_prefill_tokens=16384, max_running_requests=5, context_len=4096, "
        "available_cpu_mem=100.50 GB\n"
    )
    assert r.graph_gib == pytest.approx(0.51)
    assert (r.chunked_prefill_size, r.available_gpu_mem_gib) == (-1, 100.5)
    assert not r.ready


def test_empty_and_unrelated_logs() -> None:
    r = parse_startup("")
    assert r.model_dump(exclude={"warnings"}) == {
        **{k: None for k in r.model_dump() if k not in ("ready", "simulated", "warnings")},
        "ready": False,
        "simulated": False,
    }
    assert parse_startup("hello\nworld\n").kv_pool_tokens is None


def test_decode_batch_hybrid_with_spec() -> None:
    b = parse_batch_line(
        "[2026-03-01 12:01:00] Decode batch, #running-req: 2, #full token: 70123, "
        "full token usage: 0.20, mamba num: 4, mamba usage: 0.67, accept len: 2.41, "
        "accept rate: 0.47, cuda graph: True, gen throughput (token/s): 74.80, #queue-req: 0"
    )
    assert b is not None and b.kind == "decode"
    assert (b.running_req, b.num_tokens, b.token_usage) == (2, 70123, 0.20)
    assert (b.mamba_num, b.mamba_usage, b.accept_len, b.accept_rate) == (4, 0.67, 2.41, 0.47)
    assert (b.cuda_graph, b.gen_throughput, b.queue_req) == (True, 74.8, 0)


def test_decode_batch_plain() -> None:
    b = parse_batch_line(
        "Decode batch, #running-req: 1, #token: 512, token usage: 0.01, cuda graph: True, "
        "gen throughput (token/s): 41.40, #queue-req: 0"
    )
    assert b is not None
    assert (b.num_tokens, b.token_usage, b.accept_len, b.mamba_usage) == (512, 0.01, None, None)


def test_prefill_batch_both_generations() -> None:
    old = parse_batch_line(
        "[2026-03-01 12:01:00] Prefill batch, #new-seq: 1, #new-token: 8192, #cached-token: 0, "
        "full token usage: 0.05, mamba usage: 0.33, #running-req: 0, #queue-req: 1, "
        "input throughput (token/s): 1884.00, cuda graph: False"
    )
    assert old is not None and old.kind == "prefill"
    assert (old.new_seq, old.new_token, old.cached_token) == (1, 8192, 0)
    assert (old.token_usage, old.mamba_usage, old.queue_req) == (0.05, 0.33, 1)
    assert (old.input_throughput, old.cuda_graph) == (1884.0, False)
    new = parse_batch_line(
        "[2026-03-01 12:01:00 TP0] Prefill batch [42], #new-seq: 2, #new-token: 100, "
        "#cached-token: 16384, token usage: 0.10, #running-req: 3, #queue-req: 0, "
        "#pending-token: 0, CUDA graph: True, input throughput (token/s): 1736.80"
    )
    assert new is not None
    assert (new.cached_token, new.running_req, new.input_throughput) == (16384, 3, 1736.8)
    assert new.cuda_graph is True and new.extra == {"#pending-token": "0"}


def test_non_batch_lines() -> None:
    assert parse_batch_line("[2026-03-01 12:00:00] Load weight begin. avail mem=30 GB") is None
    assert parse_batch_line("") is None


# Older releases: OLD_03, OLD_043 and DOCKER as public logs show them (tests/data/real_launches
# has their sources); OLD_041 rendered from 0.4.1.post6's f-strings (model_runner, scheduler).
OLD_03 = """\
[22:30:32 TP0] Load weight begin. avail mem=191.33 GB
[22:30:52 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=176.33 GB
[22:30:53 TP0] Memory pool end. avail mem=22.83 GB
max_total_num_tokens=1256440
"""
OLD_043 = """\
[2025-03-07 09:25:11 TP0] Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, avail mem=36.51 GB
[2025-03-07 09:31:43 TP0] max_total_num_tokens=201681, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=2049, context_len=163840
"""  # noqa: E501
OLD_041 = """\
[2025-01-02 10:00:00 TP0] KV Cache is allocated. K size: 3.00 GB, V size: 3.00 GB.
[2025-01-02 10:00:01 TP0] max_total_num_tokens=196608, max_prefill_tokens=16384, max_running_requests=2049, context_len=8192
"""  # noqa: E501
DOCKER = (
    "2026-07-14T13:17:53.242583140+08:00 [2026-07-14 13:17:53] Load weight end. elapsed=31.02 s, "
    "type=Qwen3_5ForConditionalGeneration, avail mem=22.09 GB, mem usage=8.62 GB.\n"
    "qwen-1  | [2026-07-14 13:17:53] KV Cache is allocated. dtype: torch.bfloat16, #tokens: "
    "327852, K size: 5.00 GB, V size: 5.00 GB\n"
)


def test_old_release_lines() -> None:
    r = parse_startup(OLD_03)  # 0.3: time-only prefix, weights = begin - end, bench summary
    assert r.weights_gib == 15.0 and r.free_before_weights_gib == 191.33
    assert r.max_total_num_tokens == 1_256_440
    r = parse_startup(OLD_043)  # 0.4.3: no mem usage, summary without available_gpu_mem
    assert r.weights_gib is None and r.max_running_requests == 2049
    assert r.max_total_num_tokens == 201_681 and r.available_gpu_mem_gib is None
    r = parse_startup(OLD_041)  # 0.4.1: KV line without #tokens, summary without cps
    assert r.kv_pool_tokens is None and r.kv_k_gib == 3.0 and r.chunked_prefill_size is None
    assert r.max_total_num_tokens == 196_608


# 0.1.17 and 0.2.7 .. 0.2.13 rendered from their wheels' f-strings (managers/controller and
# model_executor model_runner.py, tp_worker.py): the rank opens the message, no time prefix.
EARLY_0117 = "".join(
    f"{line}\n"
    for line in (
        "[gpu_id=0] Load weight begin. avail mem=77.50 GB",
        "[gpu_id=1] Load weight begin. avail mem=77.60 GB",
        "[gpu_id=0] Load weight end. type=LlamaForCausalLM, avail mem=70.00 GB",
        "[gpu_id=1] Load weight end. type=LlamaForCausalLM, avail mem=69.00 GB",
        "[gpu_id=0] Memory pool end. avail mem=8.00 GB",
        "[gpu_id=1] max_total_num_tokens=999, max_prefill_tokens=4096, context_len=4096, ",
        "[gpu_id=0] max_total_num_tokens=123456, max_prefill_tokens=4096, context_len=4096, ",
    )
)
EARLY_0213 = """\
[gpu=0] Load weight begin. avail mem=23.10 GB
[gpu=0] Load weight end. type=Qwen2ForCausalLM, dtype=torch.bfloat16, avail mem=8.60 GB
[gpu=0] Memory pool end. avail mem=2.40 GB
[gpu=0] max_total_num_tokens=113600, max_prefill_tokens=16384, max_running_requests=2047, context_len=32768
"""  # noqa: E501


# sgl-project/sglang#744 (2024-07-26, 0.1.24 .. 0.2.6 by its format), both ranks as pasted.
ISSUE_744 = """\
[gpu_id=0] Load weight end. type=Qwen2ForCausalLM, dtype=torch.bfloat16, avail mem=15.61 GB
[gpu_id=1] Load weight end. type=Qwen2ForCausalLM, dtype=torch.bfloat16, avail mem=15.95 GB
[gpu_id=0] Memory pool end. avail mem=6.12 GB
[gpu_id=1] Memory pool end. avail mem=6.46 GB
[gpu_id=1] Capture cuda graph begin. This can take up to several minutes.
[gpu_id=0] Capture cuda graph begin. This can take up to several minutes.
[gpu_id=0] max_total_num_tokens=328021, max_prefill_tokens=16384, max_running_requests=5124, context_len=32768
[gpu_id=1] max_total_num_tokens=328021, max_prefill_tokens=16384, max_running_requests=5124, context_len=32768
"""  # noqa: E501


def test_real_early_lines() -> None:
    r = parse_startup(ISSUE_744)  # rank 0's free memory after weights, not rank 1's
    assert free_after_weights_gib(ISSUE_744) == 15.61
    assert r.max_total_num_tokens == 328_021 and r.max_running_requests == 5124
    assert r.context_len == 32768 and r.weights_gib is None


def test_early_release_lines() -> None:
    r = parse_startup(EARLY_0117)  # rank 1's copies are left out; no max_running_requests
    assert r.free_before_weights_gib == 77.5 and r.weights_gib == 7.5
    assert r.max_total_num_tokens == 123_456 and r.max_running_requests is None
    assert r.context_len == 4096
    r = parse_startup(EARLY_0213)
    assert r.weights_gib == 14.5 and r.max_total_num_tokens == 113_600
    assert r.max_running_requests == 2047 and r.max_prefill_tokens == 16384
    assert split_prefix("[gpu=3] Init nccl begin.") == ({"GPU": 3}, "Init nccl begin.")


def test_collector_prefixes_and_free_memory_from_the_end_line() -> None:
    r = parse_startup(DOCKER)
    assert r.kv_pool_tokens == 327_852 and r.weights_gib == 8.62
    assert r.free_before_weights_gib == pytest.approx(22.09 + 8.62)


def test_swa_pools_give_the_full_pools_tokens() -> None:
    # sglang PR 19718's comment (gpt-oss-120b, 0.5.9): the window pool's line comes first.
    log = """[2026-03-06 08:43:46] Use sliding window memory pool. full_layer_tokens=318715, swa_layer_tokens=254972
[2026-03-06 08:43:46] KV Cache is allocated. #tokens: 254972, K size: 4.38 GB, V size: 4.38 GB
[2026-03-06 08:43:46] KV Cache is allocated. #tokens: 318715, K size: 5.47 GB, V size: 5.47 GB
"""
    report = parse_startup(log)
    assert report.kv_pool_tokens == 318715
    assert parse_startup("\n".join(log.splitlines()[1:])).kv_pool_tokens == 254972


def test_no_op_pool_line_gives_the_logical_pool() -> None:
    r = parse_startup(
        "Load weight end. elapsed=24.47 s, type=EmbeddingGemmaModel, avail mem=77.88 GB, "
        "mem usage=0.59 GB.\n"
        "KV Cache skipped (no-op pool). Logical #tokens: 1686301, physical K/V size: ~24.0 KB "
        "placeholder\n"
    )
    assert (r.kv_pool_tokens, r.kv_k_gib, r.weights_gib) == (1686301, None, 0.59)


@pytest.mark.parametrize("version", ["0.5.15", "0.5.23"])
def test_no_op_pool_line_as_the_release_prints_it(version: str) -> None:
    """NoOpMHATokenToKVPool's log f-string, rendered from the release's own source."""
    source = wheel_text("sglang", version, "sglang/srt/mem_cache/memory_pool.py")
    (fstring,) = [
        node
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.JoinedStr)
        and any(
            isinstance(v, ast.Constant) and "KV Cache skipped" in str(v.value) for v in node.values
        )
    ]
    line = eval(  # noqa: S307 - the release's own f-string, rendered with two numbers
        compile(ast.Expression(fstring), "<memory_pool>", "eval"),
        {"num_tokens": 1686301, "placeholder_bytes": 24576},
    )
    assert parse_startup(f"[2026-08-22 10:00:00] {line}\n").kv_pool_tokens == 1686301


# sostrowsk/dgx-spark-local-llm sglang-versuch2.log (SGLang 0.5.16, GB10): a DFLASH draft loads
# after the target and before the pools (tests/data/real_launches/sglang/repo-laguna-s-2.1-nvfp4-gb10-tp1.yaml).
LAGUNA_DFLASH = """\
[2026-08-01 22:06:28] Load weight begin. avail mem=114.99 GB
[2026-08-01 22:15:37] Load weight end. elapsed=548.90 s, type=LagunaForCausalLM, quant=compressed-tensors, avail mem=22.03 GB, mem usage=92.96 GB.
[2026-08-01 22:15:41] Load weight begin. avail mem=21.89 GB
[2026-08-01 22:15:54] Load weight end. elapsed=12.63 s, type=DFlashLagunaForCausalLM, avail mem=19.14 GB, mem usage=2.75 GB.
[2026-08-01 22:15:55] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 27277, K size: 1.87 GB, V size: 1.87 GB
[2026-08-01 22:15:55] Memory pool end. avail mem=13.07 GB
"""  # noqa: E501


def test_free_before_pool_is_the_last_weights_line_ahead_of_the_pool() -> None:
    """A draft loaded ahead of the pool reads after it (the DFLASH line); one loaded after the
    pool (EAGLE draft workers in most releases) leaves the target's reading."""
    assert free_after_weights_gib(LAGUNA_DFLASH) == 22.03
    assert free_before_pool_gib(LAGUNA_DFLASH) == 19.14
    begin, target, draft_begin, draft, pool, end = LAGUNA_DFLASH.splitlines()
    after_pool = "\n".join([begin, target, pool, end, draft_begin, draft])
    assert free_before_pool_gib(after_pool) == 22.03
    assert free_before_pool_gib(ISSUE_744) == 15.61  # rank 0's, as free_after_weights_gib
    assert (
        free_before_pool_gib("[2026-08-01 22:06:28] Load weight begin. avail mem=1.0 GB") is None
    )
