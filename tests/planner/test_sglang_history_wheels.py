"""planner.sglang_history and the SGLang log parser against the releases themselves: each case
reads the release's PyPI wheel (tests.wheels: downloaded once, a skip without a registry),
runs the default-mem-fraction code it ships on the same inputs, and renders its startup-log
f-strings for the parser."""

from __future__ import annotations

import ast
import itertools
import re
import zipfile
from types import SimpleNamespace

import pytest

from autotune.engines.sglang.logs import parse_startup
from autotune.planner import sglang_history as h
from tests.wheels import engine_wheel_or_skip, rendered_fstrings

# One release per range of the rules and log formats (module docstrings).
TP_TABLE = {"0.3.3": 0.83, "0.4.3.post2": 0.81, "0.4.5.post2": 0.81}
RESERVE_TABLE = ("0.4.7.post1", "0.5.2")
LOGS = ("0.3.3", "0.4.1.post6", "0.4.3.post2", "0.4.3.post3", "0.4.7.post1", "0.5.2", "0.5.8")
GPUS_MIB = (15360, 24564, 40960, 46068, 81559, 97871, 143771, 183359, 196592)


def _source(version: str, path: str) -> str:
    with zipfile.ZipFile(engine_wheel_or_skip("sglang", version)) as z:
        return z.read(path).decode()


def _if_chain(source: str, marker: str) -> ast.If:
    """The first if-statement whose condition reads `marker` (the branch chain to run)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.If) and marker in ast.unparse(node.test):
            return node
    raise AssertionError(f"no `if` testing {marker!r}: the release changed its code")


@pytest.mark.parametrize("version", list(TP_TABLE))
def test_tp_table_is_the_releases(version: str) -> None:
    chain = ast.unparse(_if_chain(_source(version, "sglang/srt/server_args.py"), "tp_size >= 16"))
    rel = h.release(version)
    assert rel is not None
    for tp in (1, 2, 4, 8, 16):
        ns = {"self": SimpleNamespace(tp_size=tp, mem_fraction_static=None)}
        exec(chain, ns)  # the release's own branch chain: constants only
        assert h.default_mem_fraction(rel, 81559, tp, 8192, 160, None) == pytest.approx(
            ns["self"].mem_fraction_static
        ), (version, tp)


@pytest.mark.parametrize("version", RESERVE_TABLE)
def test_reserve_table_is_the_releases(version: str) -> None:
    chain = ast.unparse(_if_chain(_source(version, "sglang/srt/server_args.py"), "gpu_mem < 20"))
    rel = h.release(version)
    assert rel is not None
    for gpu_mib, tp in itertools.product(GPUS_MIB, (1, 2, 4, 8)):
        ns: dict[str, object] = {"gpu_mem": gpu_mib, "parallel_size": tp}
        exec(chain, ns)
        reserved = float(ns["reserved_mem"])  # type: ignore[arg-type]
        expected = round((gpu_mib - reserved) / gpu_mib, 3)
        got = h.default_mem_fraction(rel, gpu_mib, tp, 8192, 160, None)
        assert got == pytest.approx(expected), (version, gpu_mib, tp)


# Startup messages the parser reads, and what each must give.
MESSAGES = {
    "Load weight begin": "free_before_weights_gib",
    "Load weight end": "weights_gib",
    "KV Cache is allocated": "kv_k_gib",
    "max_total_num_tokens=": "max_total_num_tokens",
}


def _rendered(source: str, marker: str) -> list[str]:
    """Every f-string of `source` starting with `marker`, with numbers in its fields."""
    return [t for t in rendered_fstrings(source) if t.startswith(marker)]


def _srt_sources(version: str) -> str:
    with zipfile.ZipFile(engine_wheel_or_skip("sglang", version)) as z:
        names = [
            n
            for n in z.namelist()
            if n.startswith("sglang/srt/")
            and n.endswith(".py")
            and any(
                part in n for part in ("model_runner", "memory_pool", "scheduler", "tp_worker")
            )
        ]
        return "\n".join(z.read(n).decode() for n in names)


@pytest.mark.parametrize("version", LOGS)
def test_startup_lines_of_the_release_parse(version: str) -> None:
    sources = _srt_sources(version)
    found = {m: _rendered(sources, m) for m in MESSAGES}
    begin = found["Load weight begin"]
    assert begin and found["Load weight end"] and found["max_total_num_tokens="], version
    for marker, field in MESSAGES.items():
        for line in found[marker]:
            log = f"[2025-01-01 00:00:00] {begin[0]}\n[2025-01-01 00:00:01] {line}\n"
            report = parse_startup(log)
            assert getattr(report, field) is not None, (version, line)


@pytest.mark.parametrize("version", ["0.5.9"])
def test_dsa_cells_are_the_releases(version: str) -> None:
    """planner.sglang: tokens = budget / get_cell_size_per_token (latent + rope at the KV dtype,
    plus the indexer key with its fp32 scales); the pool allocates calculate_mla_kv_cache_dim
    (fp8: scales per 128 and a bf16 rope key), the difference out of the slack."""
    src = _source(version, "sglang/srt/model_executor/model_runner_kv_cache_mixin.py")
    compact = " ".join(src.replace("(", "( ").replace(")", " )").split())
    assert "( self.model_config.kv_lora_rank + self.model_config.qk_rope_head_dim )" in compact
    assert "index_head_dim + index_head_dim // NSATokenToKVPool.quant_block_size * 4" in compact
    assert (
        "kv_lora_rank + kv_lora_rank // quant_block_size * 4 "
        "+ qk_rope_head_dim * rope_storage_dtype.itemsize"
    ) in compact


def _profile_source(version: str) -> str:
    """ModelRunner.profile_max_num_token's source: the cell SGLang divides its budget by."""
    src = _source(version, "sglang/srt/model_executor/model_runner.py")
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.FunctionDef) and node.name == "profile_max_num_token":
            return ast.unparse(node)
    raise AssertionError(f"{version}: no profile_max_num_token")


@pytest.mark.parametrize(("version", "indexer"), [("0.5.3", False), ("0.5.3.post1", True)])
def test_the_dsa_indexer_joined_the_budget_cell_in_0_5_3_post1(
    version: str, indexer: bool
) -> None:
    """planner.sglang: before 0.5.3.post1 (sglang PR #11309) the budget's cell left the indexer
    key out, though 0.5.3 already had DeepSeek-V3.2's NSA pool holding it."""
    body = _profile_source(version)
    assert ("is_deepseek_nsa" in body) is indexer
    assert ("indexer_size_per_token" in body) is indexer
    pool = _source(version, "sglang/srt/mem_cache/memory_pool.py")
    assert "class NSATokenToKVPool" in pool  # the pool exists in both


def _extra_buffer_archs_of(version: str) -> set[str]:
    """The architectures a release's `auto` mamba strategy may buffer: 0.5.14's
    ServerArgs._support_mamba_cache_extra_buffer list, then _MAMBA_EXTRA_BUFFER_ARCHS."""
    for path in ("sglang/srt/arg_groups/overrides.py", "sglang/srt/server_args.py"):
        try:
            tree = ast.parse(_source(version, path))
        except KeyError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and any(
                getattr(t, "id", None) == "_MAMBA_EXTRA_BUFFER_ARCHS" for t in node.targets
            ):
                assert isinstance(node.value, ast.Call)
                return set(ast.literal_eval(node.value.args[0]))
            if (
                isinstance(node, ast.FunctionDef)
                and node.name == "_support_mamba_cache_extra_buffer"
            ):
                for n in ast.walk(node):
                    if isinstance(n, ast.Compare) and isinstance(n.comparators[0], ast.List):
                        return set(ast.literal_eval(n.comparators[0]))
    raise AssertionError(f"{version}: no extra_buffer architecture list")


@pytest.mark.parametrize("version", [f"0.5.{n}" for n in range(14, 24)])
def test_the_buffered_mamba_architectures_are_the_releases(version: str) -> None:
    """rules.EXTRA_BUFFER_SINCE: the architectures whose `auto` strategy resolves to extra_buffer
    (with overlap or pages > 1, on the Triton linear backend) at each release."""
    from autotune.planner.rules import extra_buffer_archs, planning_version

    assert extra_buffer_archs(planning_version(version)) == _extra_buffer_archs_of(version)


def test_auto_mamba_strategy_before_the_list_was_no_buffer() -> None:
    """0.5.13 and earlier: `auto` resolves to no_buffer (the TODO in ServerArgs)."""
    src = _source("0.5.13", "sglang/srt/server_args.py")
    assert 'self.mamba_scheduler_strategy = "no_buffer"' in src
    assert "_support_mamba_cache_extra_buffer" not in src


@pytest.mark.parametrize(("version", "whole"), [("0.5.7", True), ("0.5.8", False)])
def test_dp_attention_embedding_layout_is_the_releases(version: str, whole: bool) -> None:
    """planner.sglang_dp.dp_attention_weights: under DP attention DeepSeek-V2's input embedding is
    whole on every rank up to 0.5.7 and split over the attention-TP group from 0.5.8."""
    src = _source(version, "sglang/srt/models/deepseek_v2.py")
    assert ("enable_tp=not is_dp_attention_enabled()" in src) is whole
    assert ("use_attn_tp_group=is_dp_attention_enabled()" in src) is not whole


@pytest.mark.parametrize(
    ("version", "path"),
    [
        ("0.5.9", "sglang/srt/server_args.py"),
        ("0.5.18", "sglang/srt/server_args.py"),
        ("0.5.19", "sglang/srt/arg_groups/platform_hook.py"),
        ("0.5.23", "sglang/srt/arg_groups/platform_hook.py"),
    ],
)
def test_rocm_forces_sixteen_kv_splits(version: str, path: str) -> None:
    """attention.ROCM_KV_SPLITS (the roofline) and the space's rocm-kv-splits rule: on HIP,
    _handle_amd_specifics sets triton_attention_num_kv_splits to 16 whatever is given."""
    from autotune.planner.attention import ROCM_KV_SPLITS

    src = " ".join(_source(version, path).split())
    assert "_handle_amd_specifics" in src
    assert (
        f"self.triton_attention_num_kv_splits = {ROCM_KV_SPLITS}" in src
        or f"triton_attention_num_kv_splits={ROCM_KV_SPLITS}" in src
    )


@pytest.mark.parametrize(
    ("version", "by_bytes"), [("0.5.7", False), ("0.5.8", False), ("0.5.9", True)]
)
def test_swa_pool_split_is_the_releases(version: str, by_bytes: bool) -> None:
    """planner.sglang_swa: 0.5.7 and 0.5.8 split the profiled tokens between the full and the
    window pool by layer counts; 0.5.9 divides by F n_full + S n_swa and splits by bytes."""
    src = " ".join(
        _source(version, "sglang/srt/model_executor/model_runner_kv_cache_mixin.py").split()
    )
    by_layers = "denominator = swa_full_tokens_ratio * swa_layers_num + full_layers_num"
    assert (by_layers in src) is not by_bytes
    cell = "full_per_token * full_layers_num + swa_per_token * swa_layers_num"
    split = (
        "full_per_token * full_layers_num + swa_full_tokens_ratio * swa_per_token * swa_layers_num"
    )
    assert (cell in src and split in src) is by_bytes


@pytest.mark.parametrize("version", ["0.5.3", "0.5.4.post1", "0.5.9"])
def test_dsa_kv_is_fp8_on_blackwell(version: str) -> None:
    """planner.sglang_kv.resolve_kv_dtype: for DSA (NSA) models SGLang picks fp8_e4m3 KV on
    compute capability 10 and up (0.5.3 .. 0.5.4.post1 whatever is given; 0.5.9 when auto)."""
    src = " ".join(_source(version, "sglang/srt/server_args.py").split())
    forced = 'if major >= 10: self.kv_cache_dtype = "fp8_e4m3"' in src
    auto = 'self.kv_cache_dtype = "fp8_e4m3" if major >= 10 else "bfloat16"' in src
    assert forced or auto


def _dp_reserve_body(version: str) -> list[ast.stmt]:
    """The statements the release's mem-fraction heuristic runs under DP attention."""
    for path in ("sglang/srt/arg_groups/memory_hook.py", "sglang/srt/server_args.py"):
        try:
            tree = ast.parse(_source(version, path))
        except KeyError:
            continue
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.If)
                and re.search(r"enable_dp_attention|attn_dp_enabled", ast.unparse(node.test))
                and "reserved_mem +=" in ast.unparse(node)
            ):
                return node.body
    raise AssertionError(f"{version}: no DP-attention reserve in the mem-fraction heuristic")


@pytest.mark.parametrize("version", ["0.5.3", "0.5.9", "0.5.19", "0.5.23"])
def test_dp_attention_reserve_is_the_releases(version: str) -> None:
    """sglang_history.dp_attention_reserve_mib (both heuristics, rules and history): what the
    default mem fraction holds back under DP attention, run from the release's own code."""
    body = ast.Module(body=_dp_reserve_body(version), type_ignores=[])
    code = compile(body, version, "exec")
    for max_bs, dp in itertools.product((80, 256, 512), (2, 4, 8)):
        graphs = SimpleNamespace(max_bs=max_bs)
        cfg = SimpleNamespace(dp_size=dp, attn_dp_size=dp)
        this = SimpleNamespace(cuda_graph_max_bs=max_bs, dp_size=dp)
        ns: dict[str, object] = {
            "reserved_mem": 0.0,
            "self": this,
            "cfg": cfg,
            "decode_cuda_graph_config": graphs,
        }
        exec(code, ns)
        assert h.dp_attention_reserve_mib(dp, max_bs) == pytest.approx(ns["reserved_mem"])


def test_dp_attention_reserve_began_in_0_5_3() -> None:
    """0.5.3rc0's heuristic (the reserve table) has no DP-attention term; 0.5.3's has."""
    assert "dp_size * 3" not in _source("0.5.3rc0", "sglang/srt/server_args.py")
    assert "dp_size * 3" in _source("0.5.3", "sglang/srt/server_args.py")
    # B200 (183,359 MiB), TP 8 = DP 8, the release's defaults (16K chunks, graphs to 512):
    # 0.852 without DP attention, 0.751 with it.
    assert h.default_mem_fraction((5, 3, 0), 183359, 8, 16384, 512, None) == 0.852
    assert h.default_mem_fraction((5, 3, 0), 183359, 8, 16384, 512, None, 8) == 0.751


@pytest.mark.parametrize(("version", "fixed"), [("0.5.3", True), ("0.5.3.post1", False)])
def test_nsa_mem_fraction_fixed_only_in_0_5_3(version: str, fixed: bool) -> None:
    """rules.resolve: 0.5.3 sets mem_fraction_static to 0.8 for DeepSeek NSA models (the user's
    value too); 0.5.3.post1 keeps the heuristic. The architectures are is_deepseek_nsa's."""
    from autotune.planner.rules import NSA_ARCHITECTURES, resolve

    src = _source(version, "sglang/srt/server_args.py")
    nsa = _if_chain(src, "is_deepseek_nsa(hf_config)")
    assert ("self.mem_fraction_static = 0.8" in ast.unparse(nsa)) is fixed
    config = _source(version, "sglang/srt/configs/model_config.py")
    fn = next(
        n
        for n in ast.walk(ast.parse(config))
        if isinstance(n, ast.FunctionDef) and n.name == "is_deepseek_nsa"
    )
    listed = next(n for n in ast.walk(fn) if isinstance(n, ast.List))
    assert set(ast.literal_eval(listed)) == NSA_ARCHITECTURES
    for mfs in (None, 0.9):
        r = resolve(
            {"mem_fraction_static": mfs, "enable_dp_attention": True, "dp_size": 8},
            gpu_mem_mib=183359,
            tp=8,
            hybrid=False,
            version=version,
            context_default=163840,
            vision_factor=None,
            architecture="DeepseekV32ForCausalLM",
            dsa=True,
        )
        expected = 0.8 if fixed else (mfs or 0.751)
        assert r.mem_fraction_static == pytest.approx(expected), (version, mfs)
