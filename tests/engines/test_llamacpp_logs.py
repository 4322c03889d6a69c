"""llama-server startup-log parsing and failure classes, on lines captured from real runs of the
0.3.36 build (CPU, -lv 4) and on the 0.3.16 server's format strings."""

from __future__ import annotations

import pytest

from autotune.engines.base import FailureClass
from autotune.engines.llamacpp import (
    LlamaCppAdapter,
    classify_failure,
    is_ready_line,
    parse_startup,
    parse_startup_details,
)
from autotune.engines.llamacpp.binary import PINNED_VERSION, cache_root
from autotune.engines.llamacpp.logs import REPACK_BUFFERS, strip_prefix

# tiny-hybrid (Qwen3.5 layout), --parallel 3 --ctx-size 1536 --kv-unified (lines trimmed)
HYBRID = """\
0.00.003.051 I cmn  common_param: common_params_print_info: build 1 (0c1e570) with GNU 12.2.0 for Linux x86_64
0.00.004.818 I srv    load_model: loading model 'autotune-tiny-hybrid-s0.gguf'
0.00.052.305 I print_info: n_ctx_train           = 4096
0.00.054.019 I load_tensors:   CPU_Mapped model buffer size =     4.23 MiB
0.00.054.735 I llama_context: n_seq_max             = 3
0.00.054.742 I llama_context: n_ctx                 = 1536
0.00.054.748 I llama_context: n_ctx_seq             = 1536
0.00.054.755 I llama_context: n_batch               = 1536
0.00.054.761 I llama_context: n_ubatch              = 512
0.00.054.767 I llama_context: causal_attn           = 1
0.00.054.774 I llama_context: flash_attn            = auto
0.00.054.780 I llama_context: kv_unified            = true
0.00.054.820 I llama_context: n_ctx_seq (1536) < n_ctx_train (4096) -- the full capacity of the model will not be utilized
0.00.054.980 I llama_context:        CPU  output buffer size =     0.37 MiB
0.00.055.044 I llama_kv_cache:        CPU KV buffer size =     0.38 MiB
0.00.055.232 I llama_kv_cache: size =    0.38 MiB (  1536 cells,   2 layers,  3/1 seqs), K (f16):    0.19 MiB, V (f16):    0.19 MiB
0.00.055.282 I llama_memory_recurrent:        CPU RS buffer size =     0.03 MiB
0.00.055.298 I llama_memory_recurrent: size =    0.03 MiB (     3 cells,   4 layers,  3 seqs  0 rs_seq), R (f32):    0.01 MiB, S (f32):    0.02 MiB, P (f32):    0.00 MiB
0.00.062.932 I sched_reserve:        CPU compute buffer size =     2.66 MiB
0.00.909.060 I cmn  common_conte: the context does not support partial sequence removal
0.00.909.161 I srv    load_model: initializing, n_slots = 3, n_ctx_slot = 1536, kv_unified = 'true'
0.00.909.203 I slot   load_model: id  0 | task -1 | new slot, n_ctx = 1536
0.00.917.964 I srv  llama_server: model loaded
0.00.917.975 I srv  llama_server: listening on http://127.0.0.1:18933
"""

# a split cache with a CUDA offload (formats as above; the buffer names a CUDA build prints)
SPLIT_GPU = """\
load_tensors: offloaded 17/17 layers to GPU
load_tensors:        CUDA0 model buffer size =   950.50 MiB
load_tensors:   CPU_Mapped model buffer size =   125.00 MiB
llama_context: n_seq_max             = 4
llama_context: n_ctx                 = 8192
llama_context: n_ctx_seq             = 2048
llama_context: flash_attn            = enabled
llama_context: kv_unified            = false
llama_context:  CUDA_Host  output buffer size =     0.49 MiB
llama_kv_cache:      CUDA0 KV buffer size =   136.00 MiB
llama_kv_cache: size =  136.00 MiB (  2048 cells,  16 layers,  4/4 seqs), K (q8_0):   68.00 MiB, V (q8_0):   68.00 MiB
sched_reserve:      CUDA0 compute buffer size =   300.00 MiB
sched_reserve:  CUDA_Host compute buffer size =    20.00 MiB
llama_context: n_seq_max             = 4
llama_context: n_ctx                 = 99999
llama_kv_cache:      CUDA0 KV buffer size =    10.00 MiB
srv    load_model: initializing, n_slots = 4, n_ctx_slot = 2048, kv_unified = 'false'
"""

# 0.3.16's server (tools/server/server.cpp format strings)
OLD = """\
main: HTTP server is listening, hostname: 127.0.0.1, port: 8080, http threads: 5
llama_context: n_ctx_per_seq = 1024
llama_kv_cache_unified: size =   16.00 MiB (  1024 cells,   2 layers,  2/2 seqs), K (f16):    8.00 MiB, V (f16):    8.00 MiB
srv          init: initializing slots, n_slots = 2
slot         init: id  0 | task -1 | new slot n_ctx_slot = 1024
main: model loaded
main: server is listening on http://127.0.0.1:8080 - starting the main loop
"""


def test_hybrid_startup() -> None:
    report = parse_startup(HYBRID)
    assert report.ready
    assert report.weights_gib == pytest.approx(4.23 / 1024, abs=1e-6)
    assert (report.kv_pool_tokens, report.kv_dtype, report.context_len) == (1536, "f16", 1536)
    assert (report.max_running_requests, report.max_total_num_tokens) == (3, 1536)
    assert report.mamba_slots == 3
    assert report.mamba_conv_gib == pytest.approx(0.01 / 1024, abs=1e-6)
    assert report.mamba_ssm_gib == pytest.approx(0.02 / 1024, abs=1e-6)
    # hybrids cannot drop part of a sequence: speculation rolls back through checkpoints
    assert report.warnings == [
        "cmn  common_conte: the context does not support partial sequence removal"
    ]
    d = parse_startup_details(HYBRID)
    assert d.build == (1, "0c1e570") and d.n_ctx_train == 4096 and d.kv_unified is True
    assert d.compute.by_device == {"CPU": 2.66} and d.output.total_mib == 0.37
    assert (d.kv_streams, d.kv_layers, d.rs_layers, d.n_ubatch) == (1, 2, 4, 512)


def test_split_cache_on_a_gpu() -> None:
    d = parse_startup_details(SPLIT_GPU)
    assert d.gpu_layers == (17, 17)
    assert d.model.device_mib() == 950.5 and d.model.total_mib == 1075.5
    assert d.compute.device_mib() == 300.0 and d.compute.total_mib == 320.0
    assert d.kv_pool_tokens == 2048 * 4
    # a second context (a draft model's) repeats the lines: only the first counts
    assert d.n_ctx == 8192 and d.kv.total_mib == 136.0
    report = parse_startup(SPLIT_GPU)
    assert (report.kv_dtype, report.context_len, report.max_running_requests) == ("q8_0", 2048, 4)
    assert report.kv_k_gib == pytest.approx(68 / 1024, abs=1e-6)
    assert not report.ready


def test_old_server_format() -> None:
    assert not is_ready_line(OLD.splitlines()[0])  # listening before the model is loaded
    report = parse_startup(OLD)
    assert report.ready and report.max_running_requests == 2 and report.context_len == 1024
    assert report.kv_pool_tokens == 2048


def test_ready_lines() -> None:
    assert is_ready_line("0.00.917.964 I srv  llama_server: model loaded")
    assert is_ready_line("srv  llama_server: listening on http://127.0.0.1:8080")
    assert not is_ready_line("srv    load_model: loading model 'x'")
    assert not is_ready_line("srv  llama_server: exiting due to model loading error")
    assert strip_prefix("0.08.267.524 E srv    load_model: x") == "srv    load_model: x"


# Real failure output of the 0.3.36 build (stderr, trimmed)
BAD_FLAG = "error: invalid argument: --no-such-flag\n"
BAD_VALUE = (
    'error while handling argument "--parallel": error: invalid value for n_parallel\n\n\n'
    "usage:\n-np,   --parallel N   number of server slots (default: -1, -1 = auto)\n"
)
REMOVED = (
    'error while handling argument "--draft-max": the argument has been removed. use '
    "--spec-draft-n-max or --spec-ngram-mod-n-max\n"
)
KV_OOM = """\
0.08.001.477 E ggml_aligned_malloc: insufficient memory (attempted to allocate 65536.00 MB)
0.08.001.541 E ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer of size 68719476736
0.08.001.556 E alloc_tensor_range: failed to allocate CPU buffer of size 68719476736
0.08.267.420 E llama_init_from_model: failed to initialize the context: failed to allocate buffer for kv cache
0.08.267.524 E srv    load_model: failed to create_context with model '/tmp/m.gguf'
0.08.274.802 E srv  llama_server: exiting due to model loading error
"""
PORT = """\
0.00.006.434 E srv         start: couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 52807
0.00.006.500 E srv  llama_server: exiting due to HTTP server error
"""
HEAD_SIZE = """\
0.00.072.510 I llama_init_from_model: enabling flash_attn since it is required for quantized V cache
0.00.072.520 E llama_init_from_model: K cache type q8_0 with block size 32 does not divide n_embd_head_k=16
0.00.072.550 E srv    load_model: failed to create_context with model '/tmp/m.gguf'
"""
NO_MODEL = """\
0.00.007.279 E llama_model_load_from_file_impl: failed to load model
0.00.007.282 E srv    load_model: failed to load model, '/nonexistent.gguf'
0.00.007.607 E srv  llama_server: exiting due to model loading error
"""
COMPUTE_OOM = """\
ggml_backend_cuda_buffer_type_alloc_buffer: allocating 30000.00 MiB on device 0: cudaMalloc failed: out of memory
llama_init_from_model: failed to initialize the context: failed to allocate compute pp buffers
"""


@pytest.mark.parametrize(
    ("log", "cls", "words"),
    [
        (BAD_FLAG, FailureClass.BAD_ARGUMENTS, "--no-such-flag"),
        (BAD_VALUE, FailureClass.BAD_ARGUMENTS, "n_parallel"),
        (REMOVED, FailureClass.BAD_ARGUMENTS, "removed"),
        (KV_OOM, FailureClass.KV_CACHE_OOM, "lower ctx_size"),
        (PORT, FailureClass.PORT_IN_USE, "port"),
        (HEAD_SIZE, FailureClass.BAD_ARGUMENTS, "does not divide n_embd_head_k=16"),
        (NO_MODEL, FailureClass.CRASH, "could not be loaded"),
        (COMPUTE_OOM, FailureClass.CUDA_OOM, "ubatch_size"),
    ],
)
def test_failure_classes(log: str, cls: FailureClass, words: str) -> None:
    failure = classify_failure(log, 1, was_ready=False)
    assert failure.cls is cls
    assert words in failure.reason
    assert failure.evidence and not failure.evidence[0].isdigit()  # timestamp stripped


def test_generic_outcomes() -> None:
    hang = classify_failure(
        "srv    load_model: loading model 'x'\n", None, was_ready=False, timed_out=True
    )
    assert hang.cls is FailureClass.NEVER_READY
    died = classify_failure("GGML_ASSERT(x) failed\n", -6, was_ready=True)
    assert died.cls is FailureClass.CRASH_AFTER_READY and "SIGABRT" in died.reason
    assert died.evidence == "GGML_ASSERT(x) failed"
    crash = classify_failure("", 1, was_ready=False)
    assert crash.cls is FailureClass.CRASH and crash.evidence == "exit code 1"
    late = classify_failure(KV_OOM, 1, was_ready=True)
    assert late.cls is FailureClass.KV_CACHE_OOM and late.reason.endswith("(after it was serving)")


def test_adapter_delegates() -> None:
    adapter = LlamaCppAdapter(binary="llama-server")
    assert adapter.parse_startup(HYBRID) == parse_startup(HYBRID)
    assert adapter.is_ready_line("main: model loaded")
    assert adapter.classify_failure(PORT, 1, was_ready=False).cls is FailureClass.PORT_IN_USE


def test_a_repacked_host_copy_counts_once() -> None:
    """On a CPU with AMX the pinned llama.cpp repacks the weights into an AMX buffer while the
    mapped CPU buffer still spans their file range (lines from the CPU integration test's tiny
    model on such a host): the weights are 4.09 MiB, not the 8.18 the two lines add up to."""
    amx = (
        "0.00.055.281 I load_tensors:          AMX model buffer size =     4.09 MiB\n"
        "0.00.055.287 I load_tensors:   CPU_Mapped model buffer size =     4.09 MiB\n"
    )
    d = parse_startup_details(amx)
    assert d.model.total_mib == pytest.approx(8.18)
    assert d.model.device_mib() == 0 and d.model.weights_mib() == pytest.approx(4.09)
    assert parse_startup(amx).weights_gib == pytest.approx(4.09 / 1024, abs=1e-6)
    # offloaded layers on a GPU stay on top of the host's share
    gpu = amx + "0.00.055.290 I load_tensors:        CUDA0 model buffer size =   100.00 MiB\n"
    assert parse_startup_details(gpu).model.weights_mib() == pytest.approx(104.09)


def _pinned(name: str) -> str:
    path = cache_root() / PINNED_VERSION / "share" / name
    if not path.is_file():
        pytest.skip(
            f"no {path}: rerun scripts/build-llama-server (llama.cpp source is not in git)"
        )
    return path.read_text(encoding="utf-8")


@pytest.mark.llamacpp
def test_repack_buffers_are_the_pinned_ggml_cpus_extra_buffer_types() -> None:
    """REPACK_BUFFERS are the names of the buffer types the pinned ggml-cpu lists as extra
    (ggml_backend_cpu_get_extra_buffer_types), and the loader maps the whole file range of a
    CPU context's tensors (first..last offset), which is why a repacked copy overlaps it."""
    import re

    cpu = _pinned("ggml-cpu.cpp")
    body = cpu[cpu.index("ggml_backend_cpu_get_extra_buffer_types() {") :]
    body = body[: body.index("return bufts;\n    }();")]
    extra = set(re.findall(r"bufts\.push_back\((ggml_backend_\w+)_buffer_type\(\)\)", body))
    assert extra  # the list is read
    names = set()
    for file in ("amx.cpp", "repack.cpp", "kleidiai.cpp", "ime.cpp"):
        for fn, name in re.findall(
            r"static const char \* (ggml_backend_\w+)_buffer_type_get_name\([^)]*\)\s*\{"
            r"[^}]*?return \"([A-Z0-9_]+)\"",
            _pinned(file),
        ):
            if fn in extra:
                names.add(name)
    assert names == REPACK_BUFFERS
    loader = _pinned("llama-model-loader.cpp")
    mapping = loader[loader.index("void llama_model_loader::get_mapping_range") :][:900]
    assert re.search(r"\*first = std::min\(\*first, weight->offs\)", mapping)
    assert re.search(r"\*last\s*= std::max\(\*last,\s*weight->offs \+ ggml_nbytes", mapping)
