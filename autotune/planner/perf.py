"""Roofline performance model of an engine on a GPU, shared by `plan --perf`, the simulated
engine and the analytic workload evaluator.

Decode is bound by the bytes one step reads (weights that are read per token, not the embedding
table; the KV and state of every running request) over the GPU's bandwidth, plus the linear-layer
FLOPs of the tokens in the step and small fixed costs. Prefill is bound by FLOPs (linear layers at
an efficiency that grows with chunk size, plus causal attention). Speculative decoding turns a
decode step into a verify step of 1 + D tokens per request whose expected yield is the accept
length of the text kind.

The efficiency constants are calibrated on FIELD-NOTES C2 and C4 (RTX 4080 SUPER 32G, AWQ-INT4,
SGLang 0.5.17) and C5 (RDNA); other GPUs and models scale through their bandwidth, peak FLOP/s
(HBM parts at F3's H200 shares) and shapes. Fixed costs per forward that one machine cannot
show (a MoE layer's kernels, vLLM's own step, CDNA's stack) are each fitted on one public
benchmark run. `benchmarks/calibration.py` and `benchmarks/fidelity_speed.py` print predicted vs
measured, the fitted rows marked.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from autotune.hardware.gpus import GPUSpec
from autotune.hardware.interconnect import tp_link
from autotune.models.card import ModelCard
from autotune.models.hf.layer_params import active_projection_params
from autotune.planner import attention, hicache_perf, triton_splits
from autotune.planner.common import Plan
from autotune.planner.drafts import draft_model, launch_draft_path
from autotune.planner.sglang_kt import routed_expert_bytes
from autotune.planner.sglang_mamba import mamba_slot_bytes
from autotune.sources import CALIBRATION_SETUP

# --- calibration (C2, C4) -------------------------------------------------------------------
EFF_BANDWIDTH = 0.96  # decode traffic vs (measured or datasheet) bandwidth
EFF_DECODE_FLOPS = 0.45  # linear FLOPs of decode/verify tokens (small-M GEMMs)
EFF_PREFILL_MAX = 0.960  # linear FLOPs at large chunks (benchmarks/fit_c2_prefill.py) ...
PREFILL_HALF_CHUNK = 32  # ... reaching half of that at this many tokens per step
EFF_ATTENTION = 0.724  # causal attention FLOPs in prefill
STEP_OVERHEAD_S = 0.48e-3  # per forward step (launch, sampling, scheduler)
# Per running request per step (fitted on C2's two streams): the scheduler's share per request
# (SCHED_CPU_REQ_S below) and, for each linear-attention (GDN / mamba) layer, the recurrent state
# kernels' cost beyond their bytes: the rest of C2's 0.68 ms over its model's 48 GDN layers. A
# model without such layers pays the scheduler's share only (public dense decode steps stay flat
# from 1 to 16 requests: tests/data/real_speeds, benchmarks/fidelity_speed.py).
REQ_STEP_OVERHEAD_S = 0.68e-3
C2_LINEAR_LAYERS = 48
# MEASURED (benchmarks/gdn_prefill_probe.py --decode on our H200, SGLang 0.5.16's Triton
# fused_sigmoid_gating_delta_rule_update: benchmarks/results/gdn_prefill_probe/h200_decode.json):
# a GDN layer's decode step costs its requests' fp32 states at the bus rate plus 10-16 us a
# layer whether 1 or 1,024 requests run (past two requests each one adds its state bytes and
# nothing more), so the per-request share REQ_STEP_OVERHEAD_S fitted on C2's two streams is
# charged to the first GDN_REQ_CAP requests of a step, not to every one: 4, the largest batch
# where a measurement shows it still growing (FIELD-NOTES C5's four streams).
GDN_REQ_CAP = 4
REQUEST_OVERHEAD_S = 0.04  # per request: tokenize, schedule, detokenize (fits C2's pp512)
NGRAM_LOOKUP_S = 0.3e-3  # CPU n-gram trie lookup per verify step
# MODELLED (not fitted): the scheduler's CPU work per step (batch assembly, sampling
# bookkeeping, output processing) that an overlap scheduler runs while the GPU computes the
# previous step (SGLang's overlap schedule, vLLM's async scheduling). C2/C4 ran without it
# (mamba no_buffer switches it off), so the step overheads above include it and a launch with
# overlap on saves it.
SCHED_CPU_S = 0.30e-3
SCHED_CPU_REQ_S = 0.05e-3
# FITTED on FIELD-NOTES C5 by benchmarks/fit_c5.py (two RX 7900 XTX on ROCm SGLang, TP 2, the
# Triton backend): how fast a whole decode and prefill step runs on the vendor's stack against
# the CUDA-calibrated roofline, from C5's depth-0 decode and 4K prefill (whose eager share,
# PREFILL_LAYER_S, is the host's and is left out of it). A family without a fit runs at 1.0. The
# same script fits the RDNA Triton kernels' long-context prices (attention.py).
# CDNA (MI300X): decode FITTED on tests/data/real_speeds/sglang/s20c-pr31216-gemma-4-31b-mi300x-
# tp1 (ROCm SGLang 0.5.13.post1, TP 1), its concurrency-1 TPOTs; the other MI300X records (vLLM
# and SGLang) are the evidence (benchmarks/fidelity_speed.py). CDNA prefill is not fitted: that
# record's TTFT is no more than the eager prefill cost and the request overhead leave for the
# forward, so no vendor share can be read from it, and MI300X prefill runs at the roofline.
VENDOR_EFF: dict[str, tuple[float, float]] = {"rdna": (0.617, 0.841), "cdna": (0.642, 1.0)}
# FITTED on tests/data/real_speeds/sglang/s20a-qwen3-coder-next-b200-tp2 (SGLang, two B200 at
# TP 2, its three concurrency-1 TPOTs: 85 us a MoE layer over the roofline): what a forward pays
# per MoE layer beyond its bytes and FLOPs, whatever the batch: the router, top-k, block
# alignment, two grouped GEMMs, activation and reduce kernels that small batches leave latency-
# bound. Held-out MoE speeds in benchmarks/fidelity_speed.py are the evidence; a dense or hybrid
# model (C1-C5) pays none.
MOE_LAYER_S = 85e-6
# vLLM's V1 engine (graph-captured FlashInfer / Marlin MoE) FITTED on tests/data/real_speeds/vllm/
# s28d-qwen3.6-35b-a3b-nvfp4-rtx5090-tp1-612 (vLLM 0.24.0, one RTX 5090, one stream): the
# roofline's bytes and V1's engine step alone already come to 1.14x its measured step, so no
# per-layer cost fits (0). SGLang's 85 us had been applied to vLLM untested; it priced that
# record 2.3x too slow. The other vLLM MoE records are the evidence (fidelity_speed.py).
MOE_LAYER_BY_ENGINE: dict[str, float] = {"vllm-v1": 0.0}
# Per forward, by vLLM engine (vllm_history.engine_of, from the releases): the engine's own step
# cost beyond C2's STEP_OVERHEAD_S (SGLang's). FITTED each on one public record's single-stream
# decode step over the roofline: V0 on tests/data/real_speeds/vllm/s20e-qwen2.5-7b-a100-80g-tp1
# (vLLM 0.6.3, input 1), V1 on s20b-llama-3.1-8b-h100-tp1 (vLLM 0.10.1, batch 1). The other
# vLLM records are the evidence (benchmarks/fidelity_speed.py).
ENGINE_STEP_S: dict[str, float] = {"vllm-v0": 2.92e-3, "vllm-v1": 1.50e-3}
# What an SGLang prefill (extend) forward that runs eagerly, outside a prefill CUDA graph, pays
# per decoder layer beyond its FLOPs and bytes: the host issuing the layer's kernels one by one
# (attention metadata, norms, projections, routing, the expert or GDN kernels, all-reduces),
# which short prompts leave exposed. FITTED on tests/data/real_speeds/sglang/s20a-kimi-k2.5-h200-
# tp8 (SGLang 0.5.6.post2, eight H200): its two 610-token concurrency-1 TTFTs over the roofline,
# per layer. The other SGLang TTFT and bench_one_batch prefill figures are the evidence
# (benchmarks/fidelity_speed.py). Where the release captures a prefill graph (Plan.
# prefill_graph_tokens, planner.sglang_graphs) a forward within it does not pay this.
PREFILL_LAYER_S = 1.55e-3
# MEASURED (benchmarks/gdn_prefill_probe.py on our H200: SGLang 0.5.16's Triton
# chunk_gated_delta_rule replayed from a CUDA graph, 48 shapes of 256 to 32K tokens and 4 to 48
# value heads; fitted by benchmarks/fit_gdn_prefill.py on benchmarks/results/gdn_prefill_probe/
# h200.json, every point within 17 %): what a Gated DeltaNet layer's chunked recurrence (l2norm,
# gate cumsum, WY representation, the state carried over 64-token chunks, the output) costs in
# a prefill forward beyond its projections: a floor per layer, a part per token that the
# chunk-after-chunk state leaves exposed whatever the heads, and a part per token and value head
# of the rank that the SMs share. At 8K tokens and 48 heads it is 0.91 ms a layer, about half of
# a 5,120 x 16,384 GEMM's time there: latency-bound, not FLOP-bound, so another GPU runs the
# shared part at its SM count's share (GDN_REFERENCE_SMS / sm_count), not at its tensor rate.
# vLLM runs the same FLA kernels (model_executor/layers/fla). Mamba-2's SSD scan is not
# measured: not priced.
GDN_LAYER_S = 30e-6
GDN_TOKEN_S = 21.7e-9
GDN_TOKEN_HEAD_S = 1.76e-9
GDN_REFERENCE_SMS = 132
# MODELLED: a decode batch outside the captured CUDA-graph sizes runs eagerly: about eight
# kernel launches per layer at ~5 us each that the graph replay would have saved.
EAGER_LAYER_S = 40e-6
# Chain acceptance probability per draft position, by algorithm and text kind. NGRAM is
# calibrated on C4 (accept rates 0.110 code, 0.231 extraction, 0.062 prose at 6 draft tokens);
# the MTP/EAGLE and DFLASH figures are assumptions from public accept-length reports.
ACCEPT_P: dict[str, dict[str, float]] = {
    "NGRAM": {"code": 0.40, "extraction": 0.59, "prose": 0.275},
    "EAGLE": {"code": 0.85, "extraction": 0.90, "prose": 0.78},
    "DFLASH": {"code": 0.80, "extraction": 0.88, "prose": 0.72},
}
DFLASH_DRAFT_BYTES = 1.0e9  # MODELLED: a ~0.5 B-parameter bf16 drafter the draft list lacks
TEXT_KINDS = ("prose", "code", "extraction")


@dataclass(frozen=True)
class DecodeSeq:
    context_len: int
    tokens: int = 1  # 1, or 1 + draft tokens for a verify step


@dataclass(frozen=True)
class PrefillChunk:
    new_tokens: int
    offset: int  # tokens of this request already in the KV cache


def classify_text(text: str) -> str:
    """Guess the text kind that drives speculative acceptance (C4)."""
    head = text[:4000]
    lower = head.lower()
    if any(k in lower for k in ("repeat", "copy", "extract", "verbatim", "quote the")):
        return "extraction"
    code_marks = len(re.findall(r"[{};=()\[\]]|def |return |import |class ", head))
    if code_marks > max(8, len(head) // 60):
        return "code"
    return "prose"


class PerfModel:
    """Step times for one engine configuration on one GPU (per TP group)."""

    def __init__(
        self,
        card: ModelCard,
        gpu: GPUSpec,
        plan: Plan,
        *,
        config: dict[str, Any] | None = None,
        decode_eff: float = 1.0,
        prefill_eff: float = 1.0,
    ) -> None:
        cfg = config or {}
        self.card, self.gpu, self.plan = card, gpu, plan
        # a machine's measured speed over this model's (autotune calibrate on benchmark
        # outputs): decode and prefill step times are divided by them
        self.decode_eff, self.prefill_eff = decode_eff, prefill_eff
        self.vendor_decode, self.vendor_prefill = VENDOR_EFF.get(attention.family(gpu), (1.0, 1.0))
        tp = plan.tp
        self.tp = tp
        self.bandwidth = gpu.effective_bandwidth_gbs * 1e9 * EFF_BANDWIDTH
        self.peak_linear = self._linear_peak() * 1e12
        self.peak_attn = gpu.effective_fp16_tflops * 1e12
        w = card.weights
        self.weight_read_bytes = (w.decoder + w.lm_head) / tp
        linear_params = active_projection_params(card)
        self.flops_per_token = 2 * linear_params / tp
        self.lm_head_flops = 2 * card.vocab_size * card.hidden_size / tp
        self.attn_width = card.num_attention_heads * card.head_dim / tp
        self.n_full = len(card.full_attention_layers)
        per_layer = (REQ_STEP_OVERHEAD_S - SCHED_CPU_REQ_S) / C2_LINEAR_LAYERS
        self.req_linear_s = len(card.linear_layers) * per_layer
        self.req_step_s = SCHED_CPU_REQ_S + self.req_linear_s
        # MoE decode reads only the experts its tokens route to (MODELLED: uniform routing, so
        # a step of t tokens leaves each expert unread with probability (1 - k / E) ** t).
        e = card.experts
        self.routed_read_bytes = routed_expert_bytes(card) / tp if e else 0.0
        self.expert_miss_p = 1 - e.experts_per_token / e.num_experts if e else 0.0
        generation = _engine_generation(card, gpu, cfg, plan)
        per_layer = MOE_LAYER_BY_ENGINE.get(generation, MOE_LAYER_S)
        self.moe_fixed_s = e.moe_layers * per_layer if e else 0.0
        self.engine_step_s = ENGINE_STEP_S.get(generation, 0.0)
        # SGLang's eager prefill cost (no public vLLM prefill figure shows one)
        self.eager_prefill_s = (
            card.num_layers * PREFILL_LAYER_S if plan.engine == "sglang" else 0.0
        )
        # the measured GDN prefill kernel (both engines run FLA's); other linear layers: none
        lin = card.linear_attention
        self.gdn_layers = self.gdn_heads = 0
        if lin is not None and lin.kind == "gated_delta_net" and plan.engine in ("sglang", "vllm"):
            self.gdn_layers = len(card.linear_layers)
            self.gdn_heads = max(lin.num_value_heads // tp, 1)
        self.gdn_scale = GDN_REFERENCE_SMS / max(gpu.sm_count, 1)
        conv, ssm = mamba_slot_bytes(card, tp, cfg.get("mamba_ssm_dtype"))
        self.state_bytes = conv + ssm
        self.state_rw_bytes = 2 * self.state_bytes
        self.kv_cell = plan.kv_cell_bytes
        spec = sglang_speculation(plan.speculative)
        self.spec_algorithm: str | None = spec.get("algorithm")
        family = self.spec_algorithm
        if family in ("NEXTN", "EAGLE3", "MTP", "STANDALONE"):
            family = "EAGLE"
        self.spec_family = family
        # A DFlash draft reads its weights once per drafted block: the listed draft's own per-rank
        # bytes where the launch names one the planner knows, else a generic ~0.5 B bf16 drafter.
        listed = draft_model(launch_draft_path(cfg))
        self.draft_read_bytes = (
            listed.weights_per_rank(tp) if listed is not None else DFLASH_DRAFT_BYTES / tp
        )
        if family == "EAGLE":
            self.spec_draft_tokens = int(spec.get("num_steps") or 0)
        elif family == "DFLASH":
            self.spec_draft_tokens = max(int(spec.get("num_draft_tokens") or 1) - 1, 1)
        elif family == "NGRAM":
            self.spec_draft_tokens = int(spec.get("num_draft_tokens") or 0)
        else:
            self.spec_draft_tokens = 0
        self.request_overhead_s = REQUEST_OVERHEAD_S
        # attention kernels (planner/attention.py): the phase's own flag, else the common one
        common = cfg.get("attention_backend")
        self.decode_backend, self.decode_kernel = attention.kernel(
            gpu, cfg.get("decode_attention_backend") or common
        )
        self.prefill_backend, self.prefill_kernel = attention.kernel(
            gpu, cfg.get("prefill_attention_backend") or common
        )
        # the split cap: SGLang on ROCm sets 16 whatever is given (_handle_amd_specifics; the
        # space's rocm-kv-splits rule)
        self.kv_splits = (
            attention.ROCM_KV_SPLITS
            if gpu.vendor == "amd"
            else int(cfg.get("triton_attention_num_kv_splits") or attention.DEFAULT_KV_SPLITS)
        )
        self.kv_heads = max(card.num_kv_heads // tp, 1)
        self.q_heads = max(card.num_attention_heads // tp, 1)
        self.overlap = bool(plan.overlap_schedule)
        self.graph_sizes = _graph_sizes(cfg, plan)
        # The fabric, PCIe P2P, or host-staged where P2P is blocked (F3: Ada TP2 prefill ~2K).
        self.link = tp_link(gpu, tp)
        self.startup_s = self._startup_s()

    def with_efficiency(self, *, decode_eff: float, prefill_eff: float) -> PerfModel:
        """This model with a machine's calibrated efficiency factors."""
        m = copy.copy(self)
        m.decode_eff, m.prefill_eff = decode_eff, prefill_eff
        return m

    def _linear_peak(self) -> float:
        """The tensor rate the linear layers run at: NVFP4 on Blackwell's FP4 MMA where the
        catalog gives it (SGLang's ModelOptFp4LinearMethod quantizes the activations to FP4
        and calls fp4_gemm, which needs SM100+; before it, Marlin's W4A16), FP8 packs at the
        FP8 rate, the rest (bf16, W4A16 kernels that dequantize to fp16) at the fp16 rate."""
        scheme = self.card.quantization.scheme
        g = self.gpu
        if scheme == "nvfp4":
            return g.effective_fp4_tflops or g.effective_fp16_tflops
        if scheme in ("fp8_block", "fp8") and g.fp8_tflops:
            return g.effective_fp8_tflops or g.fp8_tflops
        return g.effective_fp16_tflops

    def _startup_s(self) -> float:
        load = self.card.weights.total / self.tp / 2.0e9  # ~2 GB/s from page cache / NVMe
        graphs = 0.15 * min(self.plan.cuda_graph_max_bs, 64)
        extra = 50.0 if self.spec_algorithm == "NGRAM" else 0.0  # C4: startup 50 s slower
        return 15.0 + load + graphs + extra

    # --- building blocks ---------------------------------------------------------------------
    def _allreduce_s(self, tokens: int) -> float:
        """Two all-reduces of the bf16 hidden states per decoder layer (attention or GDN output,
        MLP output), each over the TP group's link."""
        per = self.link.allreduce_s(tokens * self.card.hidden_size * 2, self.tp)
        return 2 * self.card.num_layers * per

    def _gdn_prefill_s(self, tokens: int) -> float:
        """The Gated DeltaNet layers' chunked recurrence over `tokens` new tokens (measured on
        an H200; the part the heads share scaled by SM count)."""
        if not self.gdn_layers:
            return 0.0
        shared = tokens * self.gdn_heads * GDN_TOKEN_HEAD_S * self.gdn_scale
        return self.gdn_layers * (GDN_LAYER_S + tokens * GDN_TOKEN_S + shared)

    def _prefill_eff(self, tokens: int) -> float:
        return EFF_PREFILL_MAX * tokens / (tokens + PREFILL_HALF_CHUNK)

    def _draft_s(self, batch: int) -> float:
        if self.spec_family == "NGRAM":
            return NGRAM_LOOKUP_S
        if self.spec_family == "EAGLE":
            mtp = self.card.weights.mtp / self.tp
            per = (mtp + self.card.weights.lm_head / self.tp) / self.bandwidth + STEP_OVERHEAD_S
            return self.spec_draft_tokens * per
        if self.spec_family == "DFLASH":
            return self.draft_read_bytes / self.bandwidth + STEP_OVERHEAD_S
        return 0.0

    # --- public step times -------------------------------------------------------------------
    def _kv_read_s(self, seq_lens: Sequence[int]) -> float:
        """Decode attention: the KV of every running sequence read by the decode backend. A
        split-KV kernel (Triton) splits each sequence as SGLang's get_num_kv_splits picks, up
        to the configured cap; its programs bound how much of the bus it draws."""
        k = self.decode_kernel
        bw = self.bandwidth * k.decode
        t = 0.0
        if k.split_kv:
            splits = triton_splits.decode_kv_splits(
                seq_lens,
                num_heads=self.q_heads,
                num_kv_heads=self.kv_heads,
                max_kv_splits=self.kv_splits,
                core_count=self.gpu.sm_count,
            )
            tiles = triton_splits.head_tiles(self.q_heads, self.kv_heads)
            bw *= attention.split_occupancy(self.gpu, sum(splits) * tiles)
            t += self.n_full * max(splits) * attention.SPLIT_COST_S
        return t + sum(seq_lens) * self.kv_cell / bw

    def _req_s(self, batch: int) -> float:
        """The running requests' own cost in a step: the scheduler's share of each, and the
        linear-attention kernels' cost beyond their state bytes for the first GDN_REQ_CAP of
        them (past those the decode kernel's extra stops growing)."""
        return batch * SCHED_CPU_REQ_S + min(batch, GDN_REQ_CAP) * self.req_linear_s

    def _sched_cpu_s(self, batch: int) -> float:
        """Scheduler CPU time a step exposes: none under an overlap scheduler."""
        return 0.0 if self.overlap else SCHED_CPU_S + batch * SCHED_CPU_REQ_S

    def _graph_s(self, batch: int) -> float:
        """Extra cost of a decode batch above the captured graphs (eager launches). A batch
        between two captured sizes is padded to the next; the padded rows ride along in a
        memory-bound step and are not priced."""
        if any(b >= batch for b in self.graph_sizes):
            return 0.0
        return self.card.num_layers * EAGER_LAYER_S

    def decode_step_s(self, batch: Sequence[DecodeSeq]) -> float:
        if not batch:
            return 0.0
        tokens = sum(s.tokens for s in batch)
        unread = self.routed_read_bytes * self.expert_miss_p**tokens
        mem = self.weight_read_bytes - unread + len(batch) * self.state_rw_bytes
        flops = tokens * self.flops_per_token + len(batch) * self.lm_head_flops
        t = mem / self.bandwidth + flops / (self.peak_linear * EFF_DECODE_FLOPS)
        t += self._kv_read_s([s.context_len for s in batch])
        t += STEP_OVERHEAD_S + self._req_s(len(batch)) + self._allreduce_s(tokens)
        t += self.moe_fixed_s
        t += self._graph_s(len(batch)) - SCHED_CPU_S - len(batch) * SCHED_CPU_REQ_S
        t += self._sched_cpu_s(len(batch))
        if tokens > len(batch):
            t += self._draft_s(len(batch))
        # the engine's own step cost is the host's, not the GPU stack's: not scaled by it
        return t / (self.decode_eff * self.vendor_decode) + self.engine_step_s

    def prefill_step_s(self, chunks: Sequence[PrefillChunk]) -> float:
        if not chunks:
            return 0.0
        n = sum(c.new_tokens for c in chunks)
        lin = n * self.flops_per_token / (self.peak_linear * self._prefill_eff(n))
        attn_flops = sum(
            4 * c.new_tokens * (c.offset + c.new_tokens / 2) * self.attn_width * self.n_full
            for c in chunks
        )
        attn = attn_flops / (self.peak_attn * EFF_ATTENTION * self.prefill_kernel.prefill)
        kv_read = sum(c.offset for c in chunks) * self.kv_cell / self.bandwidth
        compute = lin + attn + kv_read + self._gdn_prefill_s(n)
        # a short chunk is bound by reading the weights once
        t = max(compute, self.weight_read_bytes / self.bandwidth) + STEP_OVERHEAD_S
        t += self.moe_fixed_s
        t = (t + self._allreduce_s(n)) / (self.prefill_eff * self.vendor_prefill)
        # the host's costs, not the GPU stack's: not scaled by it
        if n > self.plan.prefill_graph_tokens:
            t += self.eager_prefill_s
        return t + self.engine_step_s

    def mixed_step_s(self, chunks: Sequence[PrefillChunk], batch: Sequence[DecodeSeq]) -> float:
        """One forward carrying a prefill chunk and the running decodes (mixed chunk)."""
        if not chunks:
            return self.decode_step_s(batch)
        if not batch:
            return self.prefill_step_s(chunks)
        extra = [PrefillChunk(s.tokens, s.context_len) for s in batch]
        state = len(batch) * self.state_rw_bytes / self.bandwidth
        return self.prefill_step_s([*chunks, *extra]) + state + self._req_s(len(batch))

    def _load_back(self, tokens: int, forward_s: float, states: int) -> tuple[float, float]:
        lb = hicache_perf.load_back(self.card, self.kv_cell, tokens, self.state_bytes, states)
        return hicache_perf.load_back_s(lb, self.gpu.pcie_gbs, forward_s)

    def restore_s(self, tokens: int, states: int = 1) -> float:
        """HiCache: how long the host -> device copy of `tokens` of KV and `states` host-only
        mamba states runs (hicache_perf: each such state is copied twice)."""
        return self._load_back(tokens, 0.0, states)[1]

    def load_back_s(self, tokens: int, forward_s: float, states: int = 1) -> float:
        """HiCache: what that copy adds to a forward of forward_s, which waits layer by layer
        for it (hicache_perf)."""
        return self._load_back(tokens, forward_s, states)[0]

    def accept_length(self, text_kind: str) -> float:
        """Expected tokens per verify step, bonus token included (1.0 without speculation)."""
        if not self.spec_family or self.spec_draft_tokens <= 0:
            return 1.0
        p = ACCEPT_P.get(self.spec_family, ACCEPT_P["EAGLE"]).get(text_kind, 0.5)
        return 1.0 + sum(p**i for i in range(1, self.spec_draft_tokens + 1))

    # --- closed-form summaries ---------------------------------------------------------------
    def decode_tok_s(self, streams: int = 1, context_len: int = 512, kind: str = "prose") -> float:
        q = 1 + self.spec_draft_tokens if self.spec_family else 1
        step = self.decode_step_s([DecodeSeq(context_len, q)] * streams)
        return streams * self.accept_length(kind) / step

    def prefill_s(self, prompt_len: int) -> float:
        """Time to first token of one prompt alone: chunked prefill plus request overhead."""
        cps = self.plan.chunked_prefill_size
        cps = prompt_len if cps <= 0 else cps
        t, done = self.request_overhead_s, 0
        while done < prompt_len:
            c = min(cps, prompt_len - done)
            t += self.prefill_step_s([PrefillChunk(c, done)])
            done += c
        return t

    def prefill_tok_s(self, prompt_len: int) -> float:
        return prompt_len / self.prefill_s(prompt_len)


# vLLM's SpeculativeConfig methods whose drafts the roofline prices as another SGLang family
# than EAGLE's one draft pass per speculative token (MTP layers, EAGLE heads, draft models):
# host-side lookups as NGRAM, DFlash and DSpark blocks (one drafter pass a block) as DFLASH.
VLLM_SPEC_FAMILY: dict[str, str] = {
    "ngram": "NGRAM",
    "ngram_gpu": "NGRAM",
    "suffix": "NGRAM",
    "dflash": "DFLASH",
    "dspark": "DFLASH",
}


def sglang_speculation(spec: dict[str, Any]) -> dict[str, Any]:
    """A plan's speculative settings in SGLang's terms (algorithm, num_steps, eagle_topk,
    num_draft_tokens), which the roofline and the simulator's scheduler read: an SGLang plan's
    as they are; a vLLM plan's SpeculativeConfig (method, num_speculative_tokens) through
    VLLM_SPEC_FAMILY, every other method in the EAGLE family with one draft step a token."""
    if "algorithm" in spec or "method" not in spec:
        return spec
    n = int(spec.get("num_speculative_tokens") or 0)
    if not spec.get("method") or n <= 0:
        return {}
    family = VLLM_SPEC_FAMILY.get(str(spec["method"]), "EAGLE")
    if family == "NGRAM":
        return {"algorithm": "NGRAM", "num_draft_tokens": n}
    if family == "DFLASH":  # SGLang counts a block with its bonus token
        return {"algorithm": "DFLASH", "num_draft_tokens": n + 1}
    return {"algorithm": "EAGLE", "num_steps": n, "eagle_topk": 1, "num_draft_tokens": n + 1}


def _engine_generation(card: ModelCard, gpu: GPUSpec, cfg: dict[str, Any], plan: Plan) -> str:
    """The engine whose step costs apply: SGLang, or vLLM's V0 or V1 engine for the release."""
    if plan.engine != "vllm":
        return plan.engine
    from autotune.planner.vllm_history import engine_of

    return f"vllm-{engine_of(card, gpu, cfg, plan.engine_version, [])}"


def _graph_sizes(cfg: dict[str, Any], plan: Plan) -> tuple[int, ...]:
    """Decode batch sizes replayed from CUDA graphs: the configured list (SGLang
    cuda_graph_bs_decode, vLLM cudagraph_capture_sizes), else sizes up to the plan's largest
    (SGLang's default list; a vLLM plan passes its own capture sizes); none when graphs are off."""
    if cfg.get("disable_cuda_graph") or cfg.get("enforce_eager"):
        return ()
    given = cfg.get("cuda_graph_bs_decode") or cfg.get("cuda_graph_bs")
    given = given or cfg.get("cudagraph_capture_sizes")
    if isinstance(given, list | tuple) and given:
        return tuple(sorted(int(b) for b in given))
    top = int(plan.cuda_graph_max_bs or 0)
    if top <= 0:
        return ()
    # SGLang's default decode list (generate_decode_cuda_graph_batch_sizes, non-speculative),
    # its max appended as 0.5.10+ does
    sizes = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16), *range(512, top + 1, 32)]
    return tuple(sorted({b for b in sizes if b <= top} | {top}))


PERF_PROMPT_LENGTHS = (512, 8192, 32768, 65536)


def perf_summary(model: PerfModel) -> dict[str, Any]:
    """The `perf` object of `autotune plan --perf --json`."""
    return {
        "decode_tok_s": round(model.decode_tok_s(1), 2),
        "decode_tok_s_2streams": round(model.decode_tok_s(2), 2),
        "prefill_tok_s": {str(n): round(model.prefill_tok_s(n), 1) for n in PERF_PROMPT_LENGTHS},
        "decode_ceiling_tok_s": round(
            model.gpu.effective_bandwidth_gbs * 1e9 / model.weight_read_bytes, 1
        ),
        "accept_length": {k: round(model.accept_length(k), 3) for k in TEXT_KINDS},
        "simulated": True,
        "model": f"roofline, calibrated on speeds {CALIBRATION_SETUP} and on public "
        "SGLang and vLLM benchmark runs",
    }


__all__ = [
    "PERF_PROMPT_LENGTHS",
    "DecodeSeq",
    "PerfModel",
    "PrefillChunk",
    "classify_text",
    "perf_summary",
]
