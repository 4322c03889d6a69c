"""What the simulated engine's scheduler keeps and reports: a request as it sees it
(`SimRequest`, virtual-time progress and cache bookkeeping), what one step did (`StepResult`),
and its cumulative counters in SGLang's metric semantics (`Stats`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from autotune.sim.radix import Node
from autotune.sim.tokens import IdArray


@dataclass(eq=False)
class SimRequest:
    """One request as the scheduler sees it. Times are virtual seconds."""

    rid: str
    prompt: IdArray
    output_len: int
    kind: str = "prose"
    seed: int = 0
    output_ids: IdArray | None = None  # generated lazily at finish when None
    arrival: float | None = None
    ctx: object = None  # the caller's handle (the server's job or health-probe waiters)
    internal: bool = False  # health probes: not counted in the metrics
    # progress
    ready_at: float = 0.0
    admitted_at: float | None = None
    prefilled: int = 0
    cached: int = 0
    cached_device: int = 0
    cached_host: int = 0
    generated: int = 0
    first_token_at: float | None = None
    finished_at: float | None = None
    decode_steps: int = 0
    decode_time: float = 0.0
    spec_steps: int = 0
    spec_accepted: int = 0
    aborted: bool = False
    # internal
    _alloc: int = 0
    _node: Node | None = None
    _in_tree: int = 0
    _restore: tuple[int, int] | None = None  # host KV tokens, host-only mamba states
    _ckpts: list[int] = field(default_factory=list)

    @property
    def prompt_len(self) -> int:
        return len(self.prompt)

    @property
    def finished(self) -> bool:
        return self.finished_at is not None


@dataclass
class StepResult:
    kind: str  # prefill / decode / mixed
    duration: float
    steps: int  # forward passes covered (1 unless fused)
    emitted: list[tuple[SimRequest, int]]  # (request, new tokens) in this step
    finished: list[SimRequest]
    prefill_tokens: int = 0


@dataclass
class Stats:
    """Cumulative counters in SGLang's metric semantics (sglang-internals §4.1)."""

    num_requests: int = 0
    prompt_tokens: int = 0  # at request completion
    generation_tokens: int = 0  # at request completion
    cached_device: int = 0
    cached_host: int = 0
    spec_verify_ct: int = 0
    spec_accepted: int = 0
    forward_steps: int = 0
    prefill_steps: int = 0
    decode_steps: int = 0
    busy_s: float = 0.0
    load_back_tokens: int = 0
    gen_throughput: float = 0.0
    spec_accept_length: float = 0.0
    spec_accept_rate: float = 0.0
    # decode-log window
    _win_steps: int = 0
    _win_tokens: int = 0
    _win_time: float = 0.0
    _win_verify: int = 0
    _win_accepted: int = 0


class RequestTooLong(ValueError):
    """The request can never fit in the KV pool."""
