"""vLLM general plugin: vLLM's AWQ Triton GEMM runs our tuned W4A16 kernel where it is proven.

vLLM calls `register()` with no arguments in every process (entry point group
`vllm.general_plugins`, `pip install 'autotune[vllm]'`). It does nothing unless vLLM's AWQ
Triton path can run (VLLM_USE_TRITON_AWQ=1, or ROCm, where vLLM turns it on itself) and
AUTOTUNE_VLLM_AWQ is not `0`/`off`. Then it replaces `awq_gemm_triton` in vLLM's modules (vLLM
0.32's one call site, `vllm._custom_ops.awq_gemm`, imports it from `awq_triton` at each call)
with a wrapper that, per call (M = input rows, N = qweight.shape[1] * 8, K = qweight.shape[0]):

- runs `kernels_tuning.kernels.int4_w4a16.w4a16_matmul` (AWQ packing) with the config our INT4
  file gives for (N, K, this GPU) and the nearest M (`kernels_tuning.shim`, honouring
  $AUTOTUNE_KERNEL_CONFIG_DIR), when such a file exists and that config passed the correctness
  gate for (N, K, config, dtype, device) in this process (`awq_gate`);
- otherwise calls vLLM's own function with the arguments it was given: group size not 128,
  other dtypes or layouts, no tuned file for this GPU, a failed gate (one warning saying why),
  or a key first seen during CUDA-graph capture (no gate there: it synchronizes).

Gates run outside capture, once per key: on the first call of a (N, K, dtype, device), every
config the file gives for M = 1..PREGATE_MAX_M is gated, so that the warm-up runs vLLM does
before capturing its graphs gate the whole decode range. AUTOTUNE_VLLM_AWQ=deterministic takes
the ordered split-K sum instead of ATOMIC_REDUCE (bit-identical runs, like vLLM's own kernel).

The output is vLLM's: [M, N] in scales' dtype, which the wrapper requires to be the input's. vLLM
sums split-K partials rounded to fp16 (`result.sum(0)` over fp16 accumulators); ours adds fp32
partials and rounds once, so it is the more exact of the two, inside the gate either way.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import sys
import warnings
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from kernels_tuning.space import KernelConfig

ENV = "AUTOTUNE_VLLM_AWQ"
OFF_VALUES = frozenset({"0", "off", "false", "no"})
DETERMINISTIC = "deterministic"
AWQ_TRITON_MODULE = "vllm.model_executor.layers.quantization.awq_triton"
FUNCTION = "awq_gemm_triton"
ORIGINAL_ATTR = "__autotune_original__"
GROUP_SIZE = 128
# vLLM 0.32's AutoAWQLinearMethod calls awq_gemm only below 256 tokens (above: dequantize, then
# torch.matmul), so the decode range is gated up front.
PREGATE_MAX_M = 255
OP_NAME = "autotune::vllm_awq_gemm"
OP_SCHEMA = (
    "(Tensor input, Tensor qweight, Tensor scales, Tensor qzeros, SymInt split_k_iters, "
    "SymInt block_size_m, SymInt block_size_n, SymInt block_size_k) -> Tensor"
)

# vLLM's awq_gemm_triton(input, qweight, scales, qzeros, split_k_iters, block_size_m,
# block_size_n, block_size_k) and our wrapper of it
AwqGemm = Callable[..., "torch.Tensor"]
# (N, K, config, dtype, device): one gate's result
GateKey = tuple[int, int, "KernelConfig", "torch.dtype", str]


class AwqPluginWarning(UserWarning):
    """The plugin left a call to vLLM's own kernel for a reason the user should know."""


def triton_awq_in_use() -> bool:
    """vLLM's test: bool(int(VLLM_USE_TRITON_AWQ)); on ROCm vLLM sets it while verifying the
    quantization, possibly after this process loaded its plugins."""
    # a value that is not a number: vLLM's own int() would fail on it; only ROCm then decides
    with contextlib.suppress(ValueError):
        if int(os.environ.get("VLLM_USE_TRITON_AWQ", "0")):
            return True
    import torch

    return torch.version.hip is not None


def enabled() -> bool:
    if os.environ.get(ENV, "").strip().lower() in OFF_VALUES:
        return False
    return triton_awq_in_use()


def register() -> None:
    """The entry point. Never raises: vLLM calls plugins unguarded, an error would stop it."""
    try:
        if enabled():
            patch(importlib.import_module(AWQ_TRITON_MODULE))
    except Exception as exc:  # a vLLM without awq_triton, or one laid out differently
        _warn(f"not active: {type(exc).__name__}: {exc}")


def patch(module: ModuleType) -> AwqGemm:
    """Replace `awq_gemm_triton` in `module` and in every loaded vllm module holding it (a
    caller that imported the function itself resolves it there, not in `module`)."""
    original: AwqGemm = getattr(module, FUNCTION)
    if hasattr(original, ORIGINAL_ATTR):
        return original
    wrapper = make_wrapper(original)
    _replace(module, original, wrapper)
    return wrapper


def unpatch(module: ModuleType) -> None:
    current = getattr(module, FUNCTION)
    original = getattr(current, ORIGINAL_ATTR, None)
    if original is not None:
        _replace(module, current, original)


def _replace(module: ModuleType, old: AwqGemm, new: AwqGemm) -> None:
    for name, mod in list(sys.modules.items()):
        if (name == "vllm" or name.startswith("vllm.")) and getattr(mod, FUNCTION, None) is old:
            setattr(mod, FUNCTION, new)
    setattr(module, FUNCTION, new)


def make_wrapper(original: AwqGemm) -> AwqGemm:
    @functools.wraps(original)
    def awq_gemm_triton(
        input: torch.Tensor,
        qweight: torch.Tensor,
        scales: torch.Tensor,
        qzeros: torch.Tensor,
        split_k_iters: int,
        block_size_m: int = 32,
        block_size_n: int = 32,
        block_size_k: int = 32,
    ) -> torch.Tensor:
        args = (input, qweight, scales, qzeros, split_k_iters, block_size_m, block_size_n)
        if not handles(input, qweight, scales, qzeros):
            return original(*args, block_size_k)
        import torch

        if torch.compiler.is_compiling():
            # Under torch.compile (vLLM compiles the model) the per-call choice must not be
            # traced: an opaque custom op makes it at run time, on real tensors.
            return op(*args, block_size_k)
        return STATE.dispatch(original, *args, block_size_k)

    setattr(awq_gemm_triton, ORIGINAL_ATTR, original)
    STATE.original = original  # what the custom op falls back to
    op = custom_op()  # defined here: torch.compile cannot trace an op definition
    return awq_gemm_triton


def handles(
    input: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, qzeros: torch.Tensor
) -> bool:
    """Calls our kernel can serve with vLLM's semantics; shapes and dtypes only (no M, which
    torch.compile keeps symbolic). Anything else goes to vLLM's function unchanged."""
    import torch

    if input.dim() != 2 or qweight.dim() != 2 or qzeros.dim() != 2 or scales.dim() != 2:
        return False
    k = input.shape[1]
    n = qweight.shape[1] * 8
    dev = input.device
    return (
        input.dtype in (torch.float16, torch.bfloat16)
        and scales.dtype == input.dtype
        and qweight.dtype == torch.int32
        and qzeros.dtype == torch.int32
        and qweight.shape[0] == k
        and k % GROUP_SIZE == 0
        and tuple(qzeros.shape) == (k // GROUP_SIZE, n // 8)
        and tuple(scales.shape) == (k // GROUP_SIZE, n)
        and all(t.device == dev for t in (qweight, scales, qzeros))
        and (dev.type == "cuda" or (dev.type == "cpu" and _interpreting()))
        # vLLM's kernel indexes all four as dense row-major; keep its results for anything else
        and all(t.is_contiguous() for t in (input, qweight, scales, qzeros))
    )


@dataclass
class _Gate:
    ok: bool
    detail: str


@dataclass
class Router:
    """Per-process state: tuned configs per (N, K, device, M), gate results, warnings given."""

    original: AwqGemm | None = None
    configs: dict[tuple[int, int, str, int], KernelConfig | None] = field(default_factory=dict)
    gates: dict[GateKey, _Gate] = field(default_factory=dict)
    warned: set[tuple[Hashable, ...]] = field(default_factory=set)

    def dispatch(
        self,
        original: AwqGemm,
        input: torch.Tensor,
        qweight: torch.Tensor,
        scales: torch.Tensor,
        qzeros: torch.Tensor,
        split_k_iters: int,
        block_size_m: int,
        block_size_n: int,
        block_size_k: int,
    ) -> torch.Tensor:
        args = (input, qweight, scales, qzeros, split_k_iters, block_size_m, block_size_n)
        cfg = self.route(input, qweight) if input.shape[0] > 0 else None
        if cfg is None:
            return original(*args, block_size_k)
        from autotune.errors import ConfigError
        from kernels_tuning.kernels.int4_w4a16 import w4a16_matmul

        try:
            out: torch.Tensor = w4a16_matmul(
                input, qweight, qzeros, scales, group_size=GROUP_SIZE, packing="awq", config=cfg
            )
        except ConfigError as exc:  # checks made before any launch, e.g. a split-K buffer limit
            self.warn_once(("call", cfg, input.shape[0]), f"M={input.shape[0]}: {exc}")
            return original(*args, block_size_k)
        return out

    def route(self, input: torch.Tensor, qweight: torch.Tensor) -> KernelConfig | None:
        """Our config for this call when it exists and passed its gate, else None."""
        n, k, m = qweight.shape[1] * 8, qweight.shape[0], input.shape[0]
        dev = input.device
        cfg = self.config(n, k, dev, m)
        if cfg is None:
            return None
        key: GateKey = (n, k, cfg, input.dtype, str(dev))
        gate = self.gates.get(key)
        if gate is None:
            if capturing(dev):
                self.warn_once(
                    ("capture", *key),
                    f"N={n} K={k} M={m} {input.dtype}: config {cfg.key()} was first needed "
                    "during CUDA-graph capture, where the gate cannot run; vLLM's own kernel is "
                    "in this graph",
                )
                return None
            self.gate_shape(n, k, input.dtype, dev, m)
            gate = self.gates[key]
        return cfg if gate.ok else None

    def config(self, n: int, k: int, dev: torch.device, m: int) -> KernelConfig | None:
        """Our tuned config for (N, K, device) at M; None without a file for this GPU."""
        ck = (n, k, str(dev), m)
        if ck in self.configs:
            return self.configs[ck]
        from kernels_tuning import shim

        name = device_name(dev)
        cfg: KernelConfig | None = None
        try:
            if shim.find_config_file("int4", n, k, name, group_size=GROUP_SIZE) is not None:
                det = os.environ.get(ENV, "").strip().lower() == DETERMINISTIC
                cfg = shim.get_config(
                    "int4", n, k, m, device_name=name, group_size=GROUP_SIZE, deterministic=det
                )
        except Exception as exc:  # a malformed or foreign file: vLLM's kernel, say why once
            self.warn_once(("file", n, k, name), f"N={n} K={k}: tuned file not usable: {exc}")
        self.configs[ck] = cfg
        return cfg

    def gate_shape(self, n: int, k: int, dtype: torch.dtype, dev: torch.device, m: int) -> None:
        """Gate every config the file gives for M = 1..PREGATE_MAX_M and for this M, each at the
        smallest and largest M it serves there (partial tiles; split-K buffers sized before
        any capture needs them)."""
        from autotune.plugins.awq_gate import run_gate

        serves: dict[KernelConfig, list[int]] = {}
        for mm in sorted({*range(1, PREGATE_MAX_M + 1), m}):
            cfg = self.config(n, k, dev, mm)
            if cfg is not None:
                serves.setdefault(cfg, []).append(mm)
        for cfg, ms in serves.items():
            key: GateKey = (n, k, cfg, dtype, str(dev))
            if key in self.gates:
                continue
            res = run_gate(cfg, n, k, sorted({min(ms), max(ms)}), dtype, dev)
            self.gates[key] = _Gate(res.ok, res.detail)
            if not res.ok:
                self.warn_once(
                    ("gate", *key),
                    f"N={n} K={k} {dtype}: config {cfg.key()} failed the correctness gate "
                    f"({res.detail}); vLLM's own kernel runs where the file gives it",
                )
        _release_cached_memory(dev)

    def warn_once(self, key: tuple[Hashable, ...], message: str) -> None:
        if key not in self.warned:
            self.warned.add(key)
            _warn(message)


STATE = Router()


def reset() -> None:
    """Forget configs, gates and warnings (tests; a changed $AUTOTUNE_KERNEL_CONFIG_DIR)."""
    STATE.configs.clear()
    STATE.gates.clear()
    STATE.warned.clear()


def device_name(dev: torch.device) -> str:
    """The GPU name our files carry (`NVIDIA_H200`); `CPU` under Triton's interpreter."""
    if dev.type != "cuda":
        return str(dev.type).upper()
    import torch

    from kernels_tuning.output import current_device_name

    return current_device_name(dev.index if dev.index is not None else torch.cuda.current_device())


def capturing(dev: torch.device) -> bool:
    if dev.type != "cuda":
        return False
    import torch

    return bool(torch.cuda.is_current_stream_capturing())


@functools.cache
def custom_op() -> AwqGemm:
    """`autotune::vllm_awq_gemm`: the per-call choice as an op torch.compile does not trace."""
    import torch

    def impl(*args: Any) -> torch.Tensor:  # awq_gemm_triton's arguments, as OP_SCHEMA
        assert STATE.original is not None
        return STATE.dispatch(STATE.original, *args)

    def fake(input: torch.Tensor, qweight: torch.Tensor, *_: object) -> torch.Tensor:
        return input.new_empty((input.shape[0], qweight.shape[1] * 8))

    op = torch.library.custom_op(OP_NAME, impl, mutates_args=(), schema=OP_SCHEMA)
    op.register_fake(fake)
    return op


def _release_cached_memory(dev: torch.device) -> None:
    """Give the gate's temporaries back to the driver: the engine sized its KV cache already."""
    if dev.type == "cuda":
        import torch

        torch.cuda.empty_cache()


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _warn(message: str) -> None:
    warnings.warn(f"autotune vLLM AWQ plugin: {message}", AwqPluginWarning, stacklevel=3)
