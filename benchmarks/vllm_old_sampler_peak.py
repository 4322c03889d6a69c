"""Replay of vLLM V0's profiling-run sampler (0.4.1 .. 0.5.1: logits kept in the model dtype)
on CUDA, torch only: torch.cuda.max_memory_allocated / memory_reserved per phase, as JSON.

    python benchmarks/vllm_old_sampler_peak.py --rows 256 --vocab 128256 --dtype bfloat16 \
        --hidden 4096 --tokens 8192 [--version 0.4.1] [--forward-intermediate 14336 ...]

The profile run (worker/model_runner.py ModelRunner.profile_run) builds max_num_seqs dummy
prompts of max_num_batched_tokens // max_num_seqs tokens with SamplingParams(top_p=0.99,
top_k=vocab - 1) (temperature 1.0: random sampling, no penalties, no min_p, logprobs None),
runs execute_model, and worker.py determine_num_available_blocks takes the peak as CUDA's free
memory before minus after: the caching allocator's reserved pool, not the allocated peak. The
phases, each mirroring the wheel's code (vllm 0.4.1 and 0.5.0, identical unless noted):

- setup (not measured): the LM head weight [vocab, hidden] and the forward's output
  hidden_states [tokens, hidden] that execute_model holds while it samples.
- forward (optional, --forward-intermediate): the allocation order of LlamaModel.forward over
  `tokens` (models/llama.py: embedding, RMSNorm, qkv_proj, attention output, o_proj,
  fused_add_rms_norm in place, gate_up_proj, SiluAndMul, down_proj; LlamaMLP keeps gate_up
  through down_proj), as empty tensors of the wheel's shapes: it leaves the allocator's cached
  segments the sampler then reuses or grows past. Attention kernels' own workspace is not
  replayed.
- logits: LogitsProcessor.forward: _prune_hidden_states (index_select of the last token of
  each prompt, [rows, hidden]), _get_logits (torch.matmul with the LM head's transpose, then
  [:, :vocab]), `logits *= scale` (0.4.1 always; 0.5.0 only when scale != 1).
- temperature: Sampler.forward: SamplingTensors (temperatures, top_ps in the logits' dtype,
  top_ks int), logits.div_(temperatures.unsqueeze_(1)).
- sort .. gather: _apply_top_k_top_p step by step: logits.sort, top-k gather and mask,
  masked_fill_, softmax, cumsum, top-p mask, masked_fill_, arange/scatter_ of the inverse
  index, torch.gather. Every name stays bound until the function returns.
- probs, logprobs: torch.softmax / torch.log_softmax(dtype=torch.float).
- multinomial: _sample_with_torch (RANDOM): probs[long_sample_indices], _multinomial's
  empty_like + exponential_, div_, argmax.
- ranks: _get_logprobs: logprobs[[seq, token]], _get_ranks(logprobs[seq_indices]):
  (x > vals[:, None]).long().sum(1) in 0.4.1; without .long() from 0.5.0.
- topk: torch.topk(logprobs, 1).

Each phase reports the bytes allocated and reserved above the setup's, its own allocated peak,
and `expected_bytes_per_logit`: the tensors the wheel's code holds after the phase
(EXPECTED_ALIVE, counted from the code; the sort's own workspace is not in it), so the
measured peak minus expected x rows x vocab is what the kernels add.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

# Phase -> bytes per logit alive after it, as (constant, multiples of the logits' dtype size):
# caller's logits b; sort values b + indices 8; top-k mask 1; probs_sort b; probs_sum b; top-p
# mask 1; inverse index 8; gathered logits b (_apply_top_k_top_p). After it returns: the
# caller's and the gathered logits 2b, fp32 probs and logprobs 4 + 4.
EXPECTED_ALIVE: dict[str, tuple[int, int]] = {
    "logits": (0, 1),
    "temperature": (0, 1),
    "sort": (8, 2),
    "top_k_mask": (9, 2),
    "probs_sort": (9, 3),
    "probs_sum": (9, 4),
    "top_p_mask": (10, 4),
    "inverse_index": (18, 4),
    "gather": (18, 5),
    "probs": (4, 2),
    "logprobs": (8, 2),
    "multinomial": (8, 2),
    "ranks": (8, 2),
    "topk": (8, 2),
}
DTYPE_SIZES = {"bfloat16": 2, "float16": 2, "float32": 4}


def expected_bytes_per_logit(phase: str, dtype: str) -> int:
    """Bytes per logit the wheel's code holds after `phase` (EXPECTED_ALIVE)."""
    const, times_b = EXPECTED_ALIVE[phase]
    return const + times_b * DTYPE_SIZES[dtype]


def expected_peak_per_logit(dtype: str) -> int:
    """The largest EXPECTED_ALIVE entry: the end of _apply_top_k_top_p (5 b + 18)."""
    return max(expected_bytes_per_logit(p, dtype) for p in EXPECTED_ALIVE)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, required=True, help="min(max_num_seqs, tokens)")
    ap.add_argument("--vocab", type=int, required=True, help="the card's vocab_size")
    ap.add_argument("--dtype", choices=sorted(DTYPE_SIZES), default="bfloat16")
    ap.add_argument("--hidden", type=int, required=True, help="hidden_size")
    ap.add_argument("--tokens", type=int, required=True, help="max_num_batched_tokens")
    ap.add_argument("--version", choices=["0.4.1", "0.5.0"], default="0.4.1")
    ap.add_argument("--pad-to", type=int, default=64, help="LM head vocab padding")
    ap.add_argument("--forward-intermediate", type=int, default=0, help="0: no forward")
    ap.add_argument("--forward-q", type=int, default=0, help="heads x head_dim / tp")
    ap.add_argument("--forward-kv", type=int, default=0, help="kv heads x head_dim / tp")
    ap.add_argument("--forward-layers", type=int, default=2)
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args(argv)
    if args.rows > args.tokens:
        ap.error("rows is min(max_num_seqs, tokens): it cannot exceed tokens")
    return args


def padded(vocab: int, pad_to: int) -> int:
    """VocabParallelEmbedding's padded size (pad_vocab_size)."""
    return -(-vocab // pad_to) * pad_to


def last_token_indices(rows: int, tokens: int) -> list[int]:
    """selected_token_indices of the dummy prompts: profile_run gives group i
    tokens // rows + (i < tokens % rows) tokens; each prompt samples at its last token."""
    out, start = [], 0
    for i in range(rows):
        start += tokens // rows + (1 if i < tokens % rows else 0)
        out.append(start - 1)
    return out


def forward_replay(torch: Any, args: argparse.Namespace, dt: Any, dev: str) -> Any:
    """LlamaModel.forward's allocations over `tokens` (module docstring); returns the final
    hidden states (the last down_proj output, normed in place)."""
    t, h, i = args.tokens, args.hidden, args.forward_intermediate
    q = args.forward_q or h
    kv = args.forward_kv or q

    def new(cols: int) -> Any:
        return torch.empty((t, cols), dtype=dt, device=dev)

    hidden = new(h)  # embedding output
    residual = None
    for _ in range(args.forward_layers):
        normed = new(h) if residual is None else hidden  # input_layernorm (fused in place)
        residual = hidden if residual is None else residual
        qkv = new(q + 2 * kv)
        attn = new(q)  # attention output
        out = new(h)  # o_proj
        del qkv, attn
        gate_up = new(2 * i)
        act = new(i)
        down = new(h)
        del gate_up, act, normed
        hidden = down  # the model's loop rebinds hidden_states; out (MLP input) goes too
        del out
    return hidden


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Replay the phases (module docstring) and measure them."""
    import torch

    dev, dt = args.device, getattr(torch, args.dtype)
    cuda = dev.startswith("cuda")
    v, r = args.vocab, args.rows
    lm_head = torch.randn((padded(v, args.pad_to), args.hidden), dtype=dt, device=dev) * 0.02
    phases: list[dict[str, Any]] = []
    base = {"alloc": 0, "reserved": 0}

    def stats() -> tuple[int, int, int]:
        if not cuda:
            return 0, 0, 0
        torch.cuda.synchronize()
        return (
            torch.cuda.memory_allocated() - base["alloc"],
            torch.cuda.memory_reserved() - base["reserved"],
            torch.cuda.max_memory_allocated() - base["alloc"],
        )

    def phase(name: str, fn: Callable[[], None]) -> None:
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        fn()
        alloc, reserved, peak = stats()
        row: dict[str, Any] = {
            "phase": name,
            "allocated": alloc,
            "reserved": reserved,
            "phase_peak_allocated": peak,
        }
        if name in EXPECTED_ALIVE:
            row["expected_bytes_per_logit"] = expected_bytes_per_logit(name, args.dtype)
            row["measured_peak_bytes_per_logit"] = round(peak / (r * v), 3)
        phases.append(row)

    if cuda:
        torch.cuda.empty_cache()  # determine_num_available_blocks empties the cache first
        torch.cuda.synchronize()
        base["alloc"], base["reserved"] = (
            torch.cuda.memory_allocated(),
            torch.cuda.memory_reserved(),
        )
        torch.cuda.reset_peak_memory_stats()
    s: dict[str, Any] = {}
    if args.forward_intermediate:
        phase("forward", lambda: s.update(hidden=forward_replay(torch, args, dt, dev)))
        base_hidden = stats()[0]
    else:
        s["hidden"] = torch.randn((args.tokens, args.hidden), dtype=dt, device=dev)
        base_hidden = stats()[0]
    idx = torch.tensor(last_token_indices(r, args.tokens), device=dev)

    def logits() -> None:
        pruned = s["hidden"].index_select(0, idx)
        lg = torch.matmul(pruned, lm_head.t())[:, :v]
        if args.version == "0.4.1":
            lg *= 1.0
        s["caller_logits"] = lg  # execute_model holds it while sampling

    def temperature() -> None:
        s["temps"] = torch.ones(r, dtype=dt, device=dev)
        s["top_ps"] = torch.full((r,), 0.99, dtype=dt, device=dev)
        s["top_ks"] = torch.full((r,), v - 1, dtype=torch.int, device=dev)
        s["caller_logits"].div_(s["temps"].unsqueeze_(dim=1))

    def sort() -> None:
        s["logits_sort"], s["logits_idx"] = s["caller_logits"].sort(dim=-1, descending=False)

    def top_k_mask() -> None:
        ls = s["logits_sort"]
        m = ls.size(1) - s["top_ks"].to(torch.long)
        m = ls.gather(1, m.unsqueeze(dim=1))
        s["top_k_mask"] = ls < m
        ls.masked_fill_(s["top_k_mask"], -float("inf"))

    def probs_sort() -> None:
        s["probs_sort"] = s["logits_sort"].softmax(dim=-1)

    def probs_sum() -> None:
        s["probs_sum"] = s["probs_sort"].cumsum(dim=-1)

    def top_p_mask() -> None:
        mask = s["probs_sum"] <= 1 - s["top_ps"].unsqueeze(dim=1)
        mask[:, -1] = False
        s["logits_sort"].masked_fill_(mask, -float("inf"))
        s["top_p_mask"] = mask

    def inverse_index() -> None:
        li = s["logits_idx"]
        src = torch.arange(li.shape[-1], device=dev).expand_as(li)
        s["logits_idx_inv"] = torch.empty_like(li).scatter_(dim=-1, index=li, src=src)

    def gather() -> None:
        s["logits"] = torch.gather(s["logits_sort"], dim=-1, index=s["logits_idx_inv"])
        for name in ("logits_sort", "logits_idx", "top_k_mask", "probs_sort", "probs_sum"):
            del s[name]  # _apply_top_k_top_p returns: its locals go
        del s["top_p_mask"], s["logits_idx_inv"]

    def probs() -> None:
        s["probs"] = torch.softmax(s["logits"], dim=-1, dtype=torch.float)

    def logprobs() -> None:
        s["logprobs"] = torch.log_softmax(s["logits"], dim=-1, dtype=torch.float)

    rows = torch.arange(r, device=dev)

    def multinomial() -> None:
        p = s["probs"][rows.long()]
        q = torch.empty_like(p)
        q.exponential_()
        s["tokens"] = p.div_(q).argmax(dim=1).view(-1, 1)

    def ranks() -> None:
        lp, tok = s["logprobs"], s["tokens"].view(-1)
        s["selected"] = lp[rows, tok]  # logprobs[[seq, token]]
        x = lp[rows]
        vals = x[torch.arange(0, len(x), device=dev, dtype=tok.dtype), tok]
        result = x > vals[:, None]
        if args.version == "0.4.1":
            result = result.long()
        s["ranks"] = result.sum(1).add_(1)

    def topk() -> None:
        s["top"] = torch.topk(s["logprobs"], 1, dim=-1)

    steps: list[tuple[str, Callable[[], None]]] = [
        ("logits", logits),
        ("temperature", temperature),
        ("sort", sort),
        ("top_k_mask", top_k_mask),
        ("probs_sort", probs_sort),
        ("probs_sum", probs_sum),
        ("top_p_mask", top_p_mask),
        ("inverse_index", inverse_index),
        ("gather", gather),
        ("probs", probs),
        ("logprobs", logprobs),
        ("multinomial", multinomial),
        ("ranks", ranks),
        ("topk", topk),
    ]
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    for name, fn in steps:
        phase(name, fn)
    peak_alloc = max(p["phase_peak_allocated"] for p in phases)
    peak_reserved = max(p["reserved"] for p in phases)
    logits_n = r * v
    return {
        "args": vars(args),
        "torch": torch.__version__,
        "device_name": torch.cuda.get_device_name() if cuda else dev,
        "hidden_states_bytes": base_hidden,
        "phases": phases,
        "peak_allocated": peak_alloc,
        "peak_reserved": peak_reserved,
        "sampler_peak_allocated_bytes_per_logit": round((peak_alloc - base_hidden) / logits_n, 3),
        "sampler_peak_reserved_bytes_per_logit": round(
            (peak_reserved - base_hidden) / logits_n, 3
        ),
        "expected_peak_bytes_per_logit": expected_peak_per_logit(args.dtype),
    }


def main(argv: list[str] | None = None) -> None:
    print(json.dumps(run(parse_args(argv)), indent=1))


if __name__ == "__main__":
    main()
