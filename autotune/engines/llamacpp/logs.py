"""Read llama-server's startup log: readiness and the figures of a launch (LaunchReport).

The lines are llama.cpp's own format strings (0.3.36 sdist; the 0.3.16 server's differ where
noted), printed by the library (`llama_context:`, `llama_kv_cache:`, `load_tensors:`) and the
server (`srv  load_model:`, `slot ...`):

    load_tensors:   CPU_Mapped model buffer size =    10.25 MiB       (one per buffer type;
    load_tensors:        CUDA0 model buffer size =   950.00 MiB        summed into weights)
    llama_context: n_seq_max = 4 / n_ctx = 4096 / n_ctx_seq = 4096 / n_batch / n_ubatch
    llama_context: flash_attn = auto / kv_unified = true
    llama_kv_cache:        CPU KV buffer size =    64.00 MiB
    llama_kv_cache: size =   64.00 MiB (  4096 cells,   2 layers,  4/1 seqs), K (f16): 32.00 MiB, V (f16): 32.00 MiB
    llama_memory_recurrent: size = 1.50 MiB (4 cells, 6 layers, 4 seqs 0 rs_seq), R (f32): ..., S (f32): ...
    llama_context:        CPU compute buffer size =    10.01 MiB
    srv    load_model: initializing, n_slots = 4, n_ctx_slot = 4096, kv_unified = 'true'
    srv          main: model loaded            (0.3.16: `main: model loaded`)
    srv          main: listening on http://127.0.0.1:8080   (0.3.16: `main: server is listening on`)

The HTTP server answers /health with 503 while the model loads and 200 once it is ready, so the
log's "model loaded" and a 200 from /health mean the same thing. Note 0.3.16 prints
`HTTP server is listening, hostname: ...` before loading the model: that line is not readiness.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from autotune.engines.base import LaunchReport

MIB = 2**20
GIB = 2**30

# Ready: the model is loaded and the slots exist.
_READY_RE = re.compile(
    r"(?:^|\s)(?:main|llama_server): "
    r"(?:model loaded\s*$|listening on \S+|server is listening on \S+)"
)
_MODEL_BUF_RE = re.compile(r"(?P<dev>\S+) model buffer size =\s*(?P<mib>\d+(?:\.\d+)?) MiB")
_KV_BUF_RE = re.compile(r"(?P<dev>\S+) KV buffer size =\s*(?P<mib>\d+(?:\.\d+)?) MiB")
_RS_BUF_RE = re.compile(r"(?P<dev>\S+) RS buffer size =\s*(?P<mib>\d+(?:\.\d+)?) MiB")
_COMPUTE_BUF_RE = re.compile(r"(?P<dev>\S+) compute buffer size =\s*(?P<mib>\d+(?:\.\d+)?) MiB")
_OUTPUT_BUF_RE = re.compile(r"(?P<dev>\S+)\s+output buffer size =\s*(?P<mib>\d+(?:\.\d+)?) MiB")
_KV_SIZE_RE = re.compile(
    r"llama_kv_cache(?:_unified)?: size =\s*(?P<mib>\d+(?:\.\d+)?) MiB \(\s*(?P<cells>\d+) cells,"
    r"\s*(?P<layers>\d+) layers,\s*(?P<seqs>\d+)/(?P<streams>\d+) seqs\), "
    r"K \((?P<kt>\w+)\):\s*(?P<k>\d+(?:\.\d+)?) MiB, V \((?P<vt>\w+)\):\s*(?P<v>\d+(?:\.\d+)?) MiB"
)
_RS_SIZE_RE = re.compile(
    r"llama_memory_recurrent: size =\s*(?P<mib>\d+(?:\.\d+)?) MiB \(\s*(?P<cells>\d+) cells,"
    r"\s*(?P<layers>\d+) layers,\s*(?P<seqs>\d+) seqs.*?\), R \((?P<rt>\w+)\):\s*"
    r"(?P<r>\d+(?:\.\d+)?) MiB, S \((?P<st>\w+)\):\s*(?P<s>\d+(?:\.\d+)?) MiB"
)
_CTX_RE = re.compile(
    r"llama_context: (?P<key>n_seq_max|n_ctx|n_ctx_seq|n_ctx_per_seq|n_batch"
    r"|n_ubatch|flash_attn|kv_unified)\s*=\s*(?P<value>\S+)"
)
_SLOTS_RE = re.compile(
    r"initializing(?: slots)?, n_slots = (?P<n>\d+)(?:, n_ctx_slot = (?P<ctx>\d+))?"
)
_SLOT_CTX_RE = re.compile(r"new slot,? n_ctx(?:_slot)? = (?P<ctx>\d+)")
_OFFLOAD_RE = re.compile(r"offloaded (?P<n>\d+)/(?P<total>\d+) layers to GPU")
_TRAIN_CTX_RE = re.compile(r"print_info: n_ctx_train\s*=\s*(?P<n>\d+)")
_VERSION_RE = re.compile(r"\bbuild:? (?P<num>\d+) \((?P<commit>[0-9a-f]+)\)")
# Startup warnings worth keeping with the trial (they explain a surprising capacity).
_WARNING_MARKERS = (
    "n_ctx is not divisible by n_seq_max",
    "exceeds the training context of the model",
    "possible training context overflow",
    "is not supported by this context, it will be disabled",
    "speculative decoding not supported by this context",
    "does not support partial sequence removal",
    "retrying without pipeline parallelism",
    "llama_params_fit",
)


# common/log.cpp's prefix with timestamps on (the default since 0.3.30): `0.00.061.174 I `.
_PREFIX_RE = re.compile(r"^\s*\d+\.\d{2}\.\d{3}\.\d{3} [A-Z] ")


def strip_prefix(line: str) -> str:
    return _PREFIX_RE.sub("", line, count=1)


def is_ready_line(line: str) -> bool:
    return _READY_RE.search(line.rstrip()) is not None


# ggml-cpu's extra buffer types (ggml_backend_cpu_get_extra_buffer_types of the pinned llama.cpp): the
# weights they take are repacked copies of tensors whose file range the mapped CPU buffer can
# still span (llama_model_loader::get_mapping_range maps first..last of the CPU context's
# tensors), so the two overlap rather than add up.
REPACK_BUFFERS = frozenset({"AMX", "CPU_REPACK", "CPU_KLEIDIAI", "CPU_RISCV64_SPACEMIT"})


@dataclass
class Buffers:
    """MiB per buffer name (`CPU`, `CPU_Mapped`, `CUDA0`, `CUDA_Host`) of one kind."""

    by_device: dict[str, float] = field(default_factory=dict)

    def add(self, device: str, mib: float) -> None:
        self.by_device[device] = self.by_device.get(device, 0.0) + mib

    @property
    def total_mib(self) -> float:
        return sum(self.by_device.values())

    def device_mib(self) -> float:
        """MiB on accelerators (CUDA0, ...; not CPU* or repack buffers nor pinned `*_Host`
        memory)."""
        return sum(
            v
            for k, v in self.by_device.items()
            if not k.upper().startswith("CPU")
            and not k.endswith("_Host")
            and k not in REPACK_BUFFERS
        )

    def weights_mib(self) -> float:
        """The model's weights: device buffers plus the host's, where a repacked copy (AMX on
        an AMX CPU, CPU_REPACK) and the mapped file range it overlaps count once (the larger)."""
        repack = sum(v for k, v in self.by_device.items() if k in REPACK_BUFFERS)
        if not repack:
            return self.total_mib
        device = self.device_mib()
        host = self.total_mib - device - repack
        return device + max(host, repack)


@dataclass
class LlamaStartup:
    """Everything the startup log says about memory and capacity (None/empty when absent)."""

    model: Buffers = field(default_factory=Buffers)
    kv: Buffers = field(default_factory=Buffers)
    rs: Buffers = field(default_factory=Buffers)
    compute: Buffers = field(default_factory=Buffers)
    output: Buffers = field(default_factory=Buffers)
    kv_cells: int | None = None  # per stream
    kv_streams: int | None = None  # 1 when unified, else one per slot
    kv_layers: int | None = None
    kv_type_k: str | None = None
    kv_type_v: str | None = None
    kv_k_mib: float | None = None
    kv_v_mib: float | None = None
    rs_cells: int | None = None
    rs_layers: int | None = None
    rs_r_mib: float | None = None
    rs_s_mib: float | None = None
    n_seq_max: int | None = None
    n_ctx: int | None = None
    n_ctx_seq: int | None = None
    n_batch: int | None = None
    n_ubatch: int | None = None
    flash_attn: str | None = None
    kv_unified: bool | None = None
    n_slots: int | None = None
    n_ctx_slot: int | None = None
    n_ctx_train: int | None = None
    gpu_layers: tuple[int, int] | None = None  # (offloaded, total)
    build: tuple[int, str] | None = None  # (build number, commit)
    ready: bool = False
    warnings: list[str] = field(default_factory=list)

    @property
    def kv_pool_tokens(self) -> int | None:
        if self.kv_cells is None:
            return None
        return self.kv_cells * (self.kv_streams or 1)


def parse_startup_details(log_text: str) -> LlamaStartup:
    """Every startup figure of a llama-server log (unknown lines ignored; first context only:
    a draft model's context repeats the lines later and is not the target's)."""
    s = LlamaStartup()
    contexts = 0  # `llama_context: n_seq_max` opens each context (target, then a draft's)
    for raw in log_text.splitlines():
        line = raw.rstrip("\r")
        if is_ready_line(line):
            s.ready = True
        if m := _MODEL_BUF_RE.search(line):
            s.model.add(m["dev"], float(m["mib"]))
        elif m := _CTX_RE.search(line):
            key, value = m["key"], m["value"]
            if key == "n_seq_max":
                contexts += 1
            if contexts > 1:
                continue
            if key == "flash_attn":
                s.flash_attn = value
            elif key == "kv_unified":
                s.kv_unified = value == "true"
            elif value.isdigit():
                attr = "n_ctx_seq" if key == "n_ctx_per_seq" else key
                setattr(s, attr, int(value))
        elif m := _SLOTS_RE.search(line):
            s.n_slots = int(m["n"])
            if m["ctx"] is not None:
                s.n_ctx_slot = int(m["ctx"])
        elif (m := _SLOT_CTX_RE.search(line)) and s.n_ctx_slot is None:
            s.n_ctx_slot = int(m["ctx"])
        elif contexts > 1:  # the draft model's context: its buffers are not the target's
            continue
        elif m := _KV_BUF_RE.search(line):
            s.kv.add(m["dev"], float(m["mib"]))
        elif m := _RS_BUF_RE.search(line):
            s.rs.add(m["dev"], float(m["mib"]))
        elif m := _COMPUTE_BUF_RE.search(line):
            s.compute.add(m["dev"], float(m["mib"]))
        elif m := _OUTPUT_BUF_RE.search(line):
            s.output.add(m["dev"], float(m["mib"]))
        elif (m := _KV_SIZE_RE.search(line)) and s.kv_cells is None:
            s.kv_cells, s.kv_layers = int(m["cells"]), int(m["layers"])
            s.kv_streams = int(m["streams"])
            s.kv_type_k, s.kv_type_v = m["kt"], m["vt"]
            s.kv_k_mib, s.kv_v_mib = float(m["k"]), float(m["v"])
        elif (m := _RS_SIZE_RE.search(line)) and s.rs_cells is None:
            s.rs_cells, s.rs_layers = int(m["cells"]), int(m["layers"])
            s.rs_r_mib, s.rs_s_mib = float(m["r"]), float(m["s"])
        elif m := _OFFLOAD_RE.search(line):
            s.gpu_layers = (int(m["n"]), int(m["total"]))
        elif m := _TRAIN_CTX_RE.search(line):
            s.n_ctx_train = int(m["n"])
        elif (m := _VERSION_RE.search(line)) and s.build is None:
            s.build = (int(m["num"]), m["commit"])
        elif any(marker in line for marker in _WARNING_MARKERS):
            text = strip_prefix(line).strip()
            if text not in s.warnings:
                s.warnings.append(text)
    return s


def _gib(mib: float | None) -> float | None:
    return None if mib is None else round(mib / 1024, 6)


def parse_startup(log_text: str) -> LaunchReport:
    """What a launch got, as the engine-neutral LaunchReport.

    Mapping: weights_gib = every model buffer (host and device; a repacked host copy and the
    mapped range it overlaps once, Buffers.weights_mib); kv_* from the KV cache size line
    (kv_pool_tokens = cells x streams); mamba_* from the recurrent-state cache of hybrid models
    (slots = its cells, conv = R, ssm = S); context_len = the context of one slot;
    max_running_requests = slots; max_total_num_tokens = the context's n_ctx. Compute buffers
    have no LaunchReport field; `parse_startup_details` has them.
    """
    s = parse_startup_details(log_text)
    weights = s.model.weights_mib() if s.model.by_device else None
    return LaunchReport(
        weights_gib=_gib(weights),
        kv_dtype=s.kv_type_k if s.kv_type_k == s.kv_type_v else _pair(s.kv_type_k, s.kv_type_v),
        kv_pool_tokens=s.kv_pool_tokens,
        kv_k_gib=_gib(s.kv_k_mib),
        kv_v_gib=_gib(s.kv_v_mib),
        mamba_slots=s.rs_cells,
        mamba_conv_gib=_gib(s.rs_r_mib),
        mamba_ssm_gib=_gib(s.rs_s_mib),
        max_total_num_tokens=s.n_ctx,
        max_prefill_tokens=s.n_batch,
        max_running_requests=s.n_slots if s.n_slots is not None else s.n_seq_max,
        context_len=s.n_ctx_slot if s.n_ctx_slot is not None else s.n_ctx_seq,
        ready=s.ready,
        warnings=s.warnings,
    )


def _pair(k: str | None, v: str | None) -> str | None:
    return None if k is None and v is None else f"{k}/{v}"
