"""vLLM's startup failure texts against the releases' own code: each release's KV cache check
(v1/core/kv_cache_utils.py check_enough_kv_cache_memory / _check_enough_kv_cache_memory,
kv_cache_planning.py from 0.33.0 with 0.34.0's _more_kv_cache_memory_hint) and startup
free-memory check (v1/worker/gpu_worker.py init_device, v1/worker/utils.py request_memory from
0.14.0) run from its wheel with stubbed inputs, compared with what format_failure prints, and
classified by classify_failure; golden texts for the releases where the wording changed."""

from __future__ import annotations

import ast
import math
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from autotune.engines.base import FailureClass
from autotune.engines.vllm import classify_failure, format_failure, supported_versions
from autotune.engines.vllm.releases import at_least
from tests.wheels import function_def, rendered_fstrings, wheel_text

GIB = 1 << 30
VERSIONS = supported_versions()
# exact in binary, so `:.2f` (before 0.14.0) and format_gib (round(x, 2)) differ only in form
KV: dict[str, Any] = dict(
    max_model_len=262144, needed_gib=16.25, available_gib=3.5, estimated_max_len=44928
)
STARTUP: dict[str, Any] = dict(free_gib=70.5, total_gib=80.0, gpu_memory_utilization=0.9)
# 0.34.0's hint inputs: (extensible_kv_cache, resolved gpu_memory_utilization, after_warmup)
HINTS = [(True, 1.0, False), (True, 0.9, False), (True, 1.0, True), (True, 0.9, True)]
HINTS += [(False, 0.92, False)]


def _function(source: str, name: str, namespace: dict[str, Any]) -> Callable[..., Any]:
    """The release's function `name`, compiled alone (annotations dropped) over `namespace`."""
    node = function_def(source, name)
    for arg in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs):
        arg.annotation = None
    node.returns = None
    module = ast.fix_missing_locations(ast.Module(body=[node], type_ignores=[]))
    exec(compile(module, f"<{name}>", "exec"), namespace)
    return namespace[name]  # type: ignore[no-any-return]


def _format_gib(b: float) -> str:
    return f"{round(b / GIB, 2)}"


def _raised(call: Callable[[], Any]) -> str:
    with pytest.raises(ValueError) as info:
        call()
    return str(info.value)


def _kv_path(version: str) -> str:
    return f"vllm/v1/core/{'kv_cache_planning' if at_least(version, '0.33.0') else 'kv_cache_utils'}.py"


def wheel_kv_text(
    version: str,
    *,
    available_gib: float,
    needed_gib: float = 0.0,
    max_model_len: int = 0,
    estimated_max_len: int = 0,
    extensible: bool = True,
    utilization: float = 1.0,
    after_warmup: bool = False,
) -> str:
    """The ValueError the release's KV cache check raises for these figures."""
    source = wheel_text("vllm", version, _kv_path(version))
    avail, needed = int(available_gib * GIB), int(needed_gib * GIB)
    ns: dict[str, Any] = {"format_gib": _format_gib, "GiB_bytes": GIB}
    if not at_least(version, "0.14.0"):
        ns["max_memory_usage_bytes"] = lambda cfg, specs: needed
        ns["estimate_max_model_len"] = lambda cfg, spec, am: estimated_max_len
        check = _function(source, "check_enough_kv_cache_memory", ns)
        config = SimpleNamespace(model_config=SimpleNamespace(max_model_len=max_model_len))
        return _raised(lambda: check(config, {"layer": object()}, avail))
    check = _function(source, "_check_enough_kv_cache_memory", ns)
    args: list[Any] = [avail, lambda: needed, max_model_len, lambda am: estimated_max_len]
    if at_least(version, "0.34.0"):
        hint = _function(source, "_more_kv_cache_memory_hint", ns)
        cache = SimpleNamespace(
            enable_extensible_kv_cache=extensible, resolved_gpu_memory_utilization=utilization
        )
        args.append(hint(SimpleNamespace(cache_config=cache), after_warmup))
    return _raised(lambda: check(*args))


def wheel_startup_text(version: str, free_gib: float, total_gib: float, util: float) -> str:
    """The ValueError the release's startup free-memory check raises."""
    free, total = int(free_gib * GIB), int(total_gib * GIB)
    snapshot = SimpleNamespace(device_="cuda:0", free_memory=free, total_memory=total)
    cache = SimpleNamespace(
        gpu_memory_utilization=util,
        resolved_gpu_memory_utilization=util,
        enable_extensible_kv_cache=False,
    )
    if at_least(version, "0.14.0"):
        source = wheel_text("vllm", version, "vllm/v1/worker/utils.py")
        request = _function(source, "request_memory", {"math": math, "format_gib": _format_gib})
        return _raised(lambda: request(snapshot, cache))
    # init_device does much more: evaluate its raise's f-string in the method's names
    init = function_def(wheel_text("vllm", version, "vllm/v1/worker/gpu_worker.py"), "init_device")
    (exc,) = [
        n.exc
        for n in ast.walk(init)
        if isinstance(n, ast.Raise) and "on startup" in ast.unparse(n)
    ]
    assert isinstance(exc, ast.Call)
    names = {
        "GiB": lambda b: round(b / GIB, 2),
        "self": SimpleNamespace(
            init_snapshot=snapshot, cache_config=cache, requested_memory=total * util
        ),
    }
    return str(eval(compile(ast.Expression(exc.args[0]), "<raise>", "eval"), names))


def _error(lines: list[str]) -> str:
    """The ValueError's text in format_failure's lines."""
    (line,) = [ln for ln in lines if "ValueError: " in ln]
    return line.split("ValueError: ", 1)[1]


def _hint_values(hint: tuple[bool, float, bool]) -> dict[str, Any]:
    extensible, util, warm = hint
    return dict(extensible_kv_cache=extensible, gpu_memory_utilization=util, after_warmup=warm)


# -- every release -------------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_kv_texts_are_the_releases(version: str) -> None:
    hints = HINTS if at_least(version, "0.34.0") else HINTS[:1]
    for hint in hints:
        extra = _hint_values(hint) if at_least(version, "0.34.0") else {}
        wheel_hint: dict[str, Any] = dict(
            extensible=hint[0], utilization=hint[1], after_warmup=hint[2]
        )
        for est in (44928, 0):
            values = dict(KV, estimated_max_len=est)
            ours = _error(format_failure("kv_cache_too_small", version, **values, **extra))
            assert ours == wheel_kv_text(version, **values, **wheel_hint), (version, hint, est)
        ours = _error(format_failure("no_cache_memory", version, **extra))
        assert ours == wheel_kv_text(version, available_gib=0, **wheel_hint), (version, hint)


@pytest.mark.parametrize("version", VERSIONS)
def test_startup_free_memory_text_is_the_releases(version: str) -> None:
    ours = _error(format_failure("startup_free_memory", version, **STARTUP))
    want = wheel_startup_text(version, 70.5, 80.0, 0.9)
    assert ours == want


@pytest.mark.parametrize("version", VERSIONS)
def test_every_releases_texts_are_classified(version: str) -> None:
    """The wheel's own texts (run with figures, and every f-string of the raising functions
    rendered with placeholder numbers) read as the right failure."""
    texts = [(wheel_kv_text(version, **KV), FailureClass.KV_CACHE_OOM, "needs 16.25 GiB")]
    texts.append((wheel_kv_text(version, available_gib=0), FailureClass.KV_CACHE_OOM, "no memory"))
    texts.append(
        (wheel_startup_text(version, 70.5, 80.0, 0.9), FailureClass.CUDA_OOM, "70.5 of 80.0")
    )
    kv_source = wheel_text("vllm", version, _kv_path(version))
    kv_fn = "check_enough_kv_cache_memory"
    if at_least(version, "0.14.0"):
        kv_fn = "_" + kv_fn  # the helper that raises
    if at_least(version, "0.14.0"):
        startup = (wheel_text("vllm", version, "vllm/v1/worker/utils.py"), "request_memory")
    else:
        startup = (wheel_text("vllm", version, "vllm/v1/worker/gpu_worker.py"), "init_device")
    rendered = [
        *rendered_fstrings(ast.unparse(function_def(kv_source, kv_fn))),
        *rendered_fstrings(ast.unparse(function_def(*startup))),
    ]
    for text in rendered:
        if text.startswith("To serve at least one request"):
            texts.append((text, FailureClass.KV_CACHE_OOM, "max_model_len"))
        elif text.startswith("No available memory for the cache blocks"):
            texts.append((text, FailureClass.KV_CACHE_OOM, "no memory"))
        elif text.startswith("Free memory on device") and "on startup is less than" in text:
            texts.append((text, FailureClass.CUDA_OOM, "free memory at startup"))
    kinds = {cls for _, cls, _ in texts}
    assert len(texts) >= 5 and kinds == {FailureClass.KV_CACHE_OOM, FailureClass.CUDA_OOM}
    for text, cls, words in texts:
        failure = classify_failure(
            f"(EngineCore_DP0 pid=1) ValueError: {text}\n", 1, was_ready=False
        )
        assert failure.cls is cls, (version, text, failure)
        assert words in failure.reason, (version, text, failure.reason)


# -- golden texts ---------------------------------------------------------------------------------

DOCS = " See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
HEAD_OLD = (
    "To serve at least one request with the models's max seq len (262144), (16.25 GiB KV cache is "
    "needed, which is larger than the available KV cache memory (3.50 GiB). "
)
HEAD = (
    "To serve at least one request with the model's max seq len (262144), (16.25 GiB KV cache is "
    "needed, which is larger than the available KV cache memory (3.5 GiB). "
)
EST = "Based on the available memory, the estimated maximum model length is 44928. "
CPU_HINT = (
    "Try increasing `gpu_memory_utilization` when initializing the engine (this flag also "
    "controls CPU memory reservation on the CPU backend, despite its name)."
)
REDUCE = " Decreasing `max_model_len` also reduces what is needed."
GRAPHS = " CUDA graphs take less with fewer or smaller capture sizes in the compilation config."
GOLDEN: list[tuple[str, str, dict[str, Any], str]] = [
    (
        "0.10.0",
        "kv_cache_too_small",
        KV,
        HEAD_OLD + EST + "Try increasing `gpu_memory_utilization` or decreasing `max_model_len` "
        "when initializing the engine.",
    ),
    (
        "0.10.0",
        "kv_cache_too_small",
        dict(KV, estimated_max_len=0),
        HEAD_OLD + " Try increasing `gpu_memory_utilization` or decreasing `max_model_len` "
        "when initializing the engine.",
    ),
    (
        "0.10.0",
        "no_cache_memory",
        {},
        "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
        "initializing the engine.",
    ),
    (
        "0.10.0",
        "startup_free_memory",
        STARTUP,
        "Free memory on device (70.5/80.0 GiB) on startup is less than desired GPU memory "
        "utilization (0.9, 72.0 GiB). Decrease GPU memory utilization or reduce GPU memory used "
        "by other processes.",
    ),
    (
        "0.22.0",
        "kv_cache_too_small",
        KV,
        HEAD + EST + "Try increasing `gpu_memory_utilization` (which also controls CPU memory on "
        "the CPU backend) or decreasing `max_model_len` when initializing the engine." + DOCS,
    ),
    (
        "0.22.0",
        "no_cache_memory",
        {},
        "No available memory for the cache blocks. " + CPU_HINT + DOCS,
    ),
    (
        "0.22.0",
        "startup_free_memory",
        STARTUP,
        "Free memory on device cuda:0 (70.5/80.0 GiB) on startup is less than desired GPU memory "
        "utilization (0.9, 72.0 GiB). Decrease GPU memory utilization or reduce GPU memory used "
        "by other processes.",
    ),
    (
        "0.33.0",
        "kv_cache_too_small",
        KV,
        HEAD + EST + "Try increasing `gpu_memory_utilization` (which also controls CPU memory on "
        "the CPU backend) or decreasing `max_model_len` when initializing the engine." + DOCS,
    ),
    (
        "0.33.0",
        "no_cache_memory",
        {},
        "No available memory for the cache blocks. " + CPU_HINT + DOCS,
    ),
    (  # extensible KV cache, gpu_memory_utilization unset (1.0)
        "0.34.0",
        "kv_cache_too_small",
        dict(KV, extensible_kv_cache=True, gpu_memory_utilization=1.0),
        HEAD
        + EST
        + "The extensible KV cache already takes all device memory left after the model "
        "and its activations; decrease `max_model_len` or `max_num_seqs`, or the model needs a "
        "device with more memory." + REDUCE + DOCS,
    ),
    (  # extensible, gpu_memory_utilization 0.9
        "0.34.0",
        "kv_cache_too_small",
        dict(KV, extensible_kv_cache=True, gpu_memory_utilization=0.9),
        HEAD + EST + "The KV cache gets what is left after the model and its activations within "
        "`gpu_memory_utilization`=0.9; increase it (with the extensible KV cache it defaults to "
        "1.0) or decrease `max_model_len` or `max_num_seqs`." + REDUCE + DOCS,
    ),
    (  # extensible, the size measured after warmup too small (shrink_kv_cache_configs)
        "0.34.0",
        "kv_cache_too_small",
        dict(KV, extensible_kv_cache=True, gpu_memory_utilization=1.0, after_warmup=True),
        HEAD + EST + "The extensible KV cache already takes all device memory left after the "
        "model, its activations, CUDA graphs and warmup; decrease `max_model_len` or "
        "`max_num_seqs`, or the model needs a device with more memory." + GRAPHS + REDUCE + DOCS,
    ),
    (  # --no-enable-extensible-kv-cache
        "0.34.0",
        "kv_cache_too_small",
        dict(KV, extensible_kv_cache=False, gpu_memory_utilization=0.92),
        HEAD + EST + CPU_HINT + REDUCE + DOCS,
    ),
    (
        "0.34.0",
        "no_cache_memory",
        dict(extensible_kv_cache=True, gpu_memory_utilization=0.9),
        "No available memory for the cache blocks. The KV cache gets what is left after the model "
        "and its activations within `gpu_memory_utilization`=0.9; increase it (with the "
        "extensible KV cache it defaults to 1.0) or decrease `max_model_len` or `max_num_seqs`."
        + DOCS,
    ),
    (
        "0.34.0",
        "no_cache_memory",
        dict(extensible_kv_cache=False),
        "No available memory for the cache blocks. " + CPU_HINT + DOCS,
    ),
]


@pytest.mark.parametrize(("version", "kind", "values", "text"), GOLDEN)
def test_golden_texts(version: str, kind: str, values: dict[str, Any], text: str) -> None:
    ours = _error(format_failure(kind, version, **values))
    assert ours == text
    if kind == "startup_free_memory":
        assert text == wheel_startup_text(version, 70.5, 80.0, 0.9)
        return
    wheel = dict(
        extensible=values.get("extensible_kv_cache", True),
        utilization=values.get("gpu_memory_utilization", 1.0),
        after_warmup=values.get("after_warmup", False),
    )
    figures = {k: v for k, v in values.items() if k in KV} if kind == "kv_cache_too_small" else {}
    assert text == wheel_kv_text(version, **{"available_gib": 0, **figures}, **wheel)


def test_0_34_defaults_and_frames() -> None:
    """0.34.0 defaults to the extensible KV cache at 1.0; a check failing after warmup is raised
    from shrink_kv_cache_configs; the startup check is skipped with the extensible cache."""
    plain = format_failure("kv_cache_too_small", "0.34.0", **KV)
    assert plain == format_failure(
        "kv_cache_too_small", "0.34.0", **KV, extensible_kv_cache=True, gpu_memory_utilization=1.0
    )
    assert "get_kv_cache_configs" in "\n".join(plain)
    warm = "\n".join(format_failure("kv_cache_too_small", "0.34.0", **KV, after_warmup=True))
    assert "in shrink_kv_cache_configs" in warm and "finalize_extensible_kv_cache" in warm
    # after_warmup means nothing without the extensible cache
    off = dict(KV, extensible_kv_cache=False)
    assert format_failure("kv_cache_too_small", "0.34.0", **off, after_warmup=True) == (
        format_failure("kv_cache_too_small", "0.34.0", **off)
    )
    old = "\n".join(format_failure("kv_cache_too_small", "0.13.0", **KV))
    assert 'kv_cache_utils.py", line 1, in check_enough_kv_cache_memory' in old
    with pytest.raises(Exception, match="skips the startup free-memory check"):
        format_failure("startup_free_memory", "0.34.0", **STARTUP, extensible_kv_cache=True)
    assert format_failure("startup_free_memory", "0.34.0", **STARTUP, extensible_kv_cache=False)
