"""planner.sglang_graphs against the releases themselves: each case reads the release's PyPI
wheel (tests.wheels: downloaded once, a skip without a registry) and runs the code it ships,
the piecewise (prefill) graph's sizes and the default mem-fraction block, on the same inputs."""

from __future__ import annotations

import ast
import itertools
from types import SimpleNamespace
from typing import Any

import pytest

from autotune.planner import rules
from autotune.planner import sglang_graphs as g
from tests.wheels import function_def, wheel_text

PIECEWISE = ("0.5.10", "0.5.11", "0.5.12", "0.5.13", "0.5.14")
BREAKABLE_IN_SERVER_ARGS = ("0.5.15", "0.5.16", "0.5.17", "0.5.18")
BREAKABLE_IN_HOOKS = ("0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23")
HOOK = "sglang/srt/arg_groups/cuda_graph_hook.py"
GPUS_MIB = (24564, 46068, 81559, 97887, 143771, 183359)


def _source(version: str, path: str) -> str:
    return wheel_text("sglang", version, path)


def _sizes_fn(version: str) -> Any:
    """The release's own generator of captured token counts, as a function of the maximum."""
    if version in BREAKABLE_IN_HOOKS:
        fn = function_def(_source(version, HOOK), "generate_prefill_cuda_graph_batch_sizes")
        hook_ns: dict[str, Any] = {}
        exec(compile(ast.Module(body=[fn], type_ignores=[]), version, "exec"), hook_ns)
        return hook_ns[fn.name]
    src = _source(version, "sglang/srt/server_args.py")
    if version >= "0.5.14":
        fn = function_def(src, "_generate_prefill_cuda_graph_batch_sizes")
    else:
        fn = function_def(src, "_generate_piecewise_cuda_graph_tokens")
    ns: dict[str, Any] = {}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), version, "exec"), ns)
    method = ns[fn.name]
    if version >= "0.5.14":
        return lambda top: method(None, top)
    return lambda top: method(SimpleNamespace(piecewise_cuda_graph_max_tokens=top))


@pytest.mark.parametrize("version", PIECEWISE + BREAKABLE_IN_SERVER_ARGS + BREAKABLE_IN_HOOKS)
def test_capture_sizes_are_the_releases(version: str) -> None:
    sizes = _sizes_fn(version)
    for top in (512, 2048, 4096, 8192, 16384, 20000):
        assert g.capture_sizes(top) == sizes(top), (version, top)


def _mem_block(version: str) -> ast.If:
    """`if self.mem_fraction_static is None:` of the release's _handle_gpu_memory_settings."""
    fn = function_def(_source(version, "sglang/srt/server_args.py"), "_handle_gpu_memory_settings")
    for node in ast.walk(fn):
        if isinstance(node, ast.If) and "mem_fraction_static is None" in ast.unparse(node.test):
            return node
    raise AssertionError(f"{version}: no default mem-fraction block")


def _release_mfs(
    version: str, gpu_mib: int, cps: int, max_bs: int, *, mla: bool, on: bool
) -> float:
    """The release's default mem_fraction_static, its block run on a text model at TP 1 with the
    piecewise (prefill) graph on or off and the sizes its own generator gives (0.5.16+: with
    its own reserve_for_graph_mb / reserve_for_deepep_a2a_mb methods)."""
    src = _source(version, "sglang/srt/server_args.py")
    sizes = _sizes_fn(version)(2048 if mla else cps)
    model = SimpleNamespace(is_multimodal=False)
    backend = SimpleNamespace(DISABLED="disabled", BREAKABLE="breakable")
    prefill = SimpleNamespace(
        backend=("tc_piecewise" if version == "0.5.14" else "breakable") if on else "disabled",
        bs=sizes,
    )
    decode = SimpleNamespace(backend="full", max_bs=max_bs)
    resolved = SimpleNamespace(enable_dp_attention=False, moe_a2a_backend="none")
    this = SimpleNamespace(
        mem_fraction_static=None,
        chunked_prefill_size=cps,
        max_prefill_tokens=16384,
        max_running_requests=None,
        speculative_num_draft_tokens=None,
        cuda_graph_max_bs=max_bs,
        cuda_graph_config=SimpleNamespace(decode=decode, prefill=prefill),
        tp_size=1,
        pp_size=1,
        dp_size=1,
        enable_dp_attention=False,
        disaggregation_mode="null",
        speculative_algorithm=None,
        language_only=False,
        language_model_only=False,
        disable_piecewise_cuda_graph=not on,
        piecewise_cuda_graph_tokens=sizes,
        use_mla_backend=lambda: mla,
        get_model_config=lambda: model,
        post_capture_kv_sizing_planned=lambda: False,
        _resolved=lambda: resolved,
    )
    ns: dict[str, Any] = {
        "self": this,
        "gpu_mem": gpu_mib,
        "Backend": backend,
        "resolved_view": lambda _: resolved,
        "decode_cuda_graph_config": decode,
        "prefill_cuda_graph_config": prefill,
    }
    for name in ("reserve_for_graph_mb", "reserve_for_deepep_a2a_mb"):
        if f"def {name}(" in src:
            fn = function_def(src, name)
            fn.body = [b for b in fn.body if not isinstance(b, ast.ImportFrom)]
            exec(compile(ast.Module(body=[fn], type_ignores=[]), version, "exec"), ns)
            setattr(this, name, lambda f=ns[name]: f(this))
    block = _mem_block(version)
    for node in ast.walk(block):  # module imports inside the block: their names are in `ns`
        for field in ("body", "orelse"):
            stmts = getattr(node, field, None)
            if isinstance(stmts, list):
                kept = [b for b in stmts if not isinstance(b, ast.ImportFrom)]
                setattr(node, field, kept or [ast.Pass()])
    module = ast.fix_missing_locations(ast.Module(body=[block], type_ignores=[]))
    exec(compile(module, version, "exec"), ns)
    return float(this.mem_fraction_static)


@pytest.mark.parametrize("version", PIECEWISE + BREAKABLE_IN_SERVER_ARGS)
def test_default_mem_fraction_with_the_prefill_graph_is_the_releases(version: str) -> None:
    """rules.resolve's default mem_fraction_static, prefill-graph reserve included, equals the
    release's own block on every GPU size, for an MLA and a non-MLA model, graph on and off."""
    v = rules.planning_version(version)
    for gpu_mib, mla, on in itertools.product(GPUS_MIB, (False, True), (True, False)):
        cps, max_bs = rules.gpu_size_defaults(gpu_mib, 1, v)
        config = {} if on else {"disable_piecewise_cuda_graph": True}
        if on is False and version >= "0.5.14":
            config = {"disable_prefill_cuda_graph": True}
        if on and mla and "0.5.15" <= version <= "0.5.17":
            continue  # the breakable graph is off for (non-DSA) MLA there: below
        r = rules.resolve(
            config,
            gpu_mem_mib=gpu_mib,
            tp=1,
            hybrid=False,
            version=version,
            context_default=32768,
            vision_factor=None,
            architecture="GptOssForCausalLM",
            mla=mla,
        )
        want = _release_mfs(version, gpu_mib, cps, max_bs, mla=mla, on=on)
        assert r.mem_fraction_static == pytest.approx(want), (version, gpu_mib, mla, on)


@pytest.mark.parametrize("version", PIECEWISE)
def test_disabled_architectures_are_the_releases(version: str) -> None:
    src = _source(version, "sglang/srt/configs/model_config.py")
    for node in ast.walk(ast.parse(src)):
        if (
            isinstance(node, ast.Assign)
            and ast.unparse(node.targets[0]) == "piecewise_cuda_graph_disabled_model_archs"
        ):
            listed = set(ast.literal_eval(node.value))
            break
    else:
        raise AssertionError(f"{version}: no disabled-architecture list")
    assert listed == g.disabled_archs(rules.planning_version(version))
    # DeepSeek NSA (DSA) models joined the disabled models beside the list until 0.5.13.
    assert ("or is_deepseek_nsa(self.hf_text_config)" in src) is (version < "0.5.13")


@pytest.mark.parametrize("version", PIECEWISE[:4])
def test_only_0_5_10_turns_it_off_for_speculative_decoding(version: str) -> None:
    fn = function_def(
        _source(version, "sglang/srt/server_args.py"), "_handle_piecewise_cuda_graph"
    )
    assert ("self.speculative_algorithm is not None" in ast.unparse(fn)) is (version == "0.5.10")
    off = g.prefill_graph_reserve_mib(
        {"speculative_algorithm": "EAGLE"}, rules.planning_version(version), 8192, g.GraphFacts()
    )
    assert (off == 0.0) is (version == "0.5.10")


def test_the_default_switched_on_in_0_5_10_and_to_breakable_in_0_5_15() -> None:
    """0.5.9 needs --enable-piecewise-cuda-graph (nothing reserved); 0.5.10 .. 0.5.13 have it on
    unless --disable-piecewise-cuda-graph; 0.5.14's prefill graph defaults to tc_piecewise and
    0.5.15's to breakable on CUDA."""
    assert "enable_piecewise_cuda_graph: bool = False" in _source(
        "0.5.9", "sglang/srt/server_args.py"
    )
    for version in PIECEWISE[:4]:
        src = _source(version, "sglang/srt/server_args.py")
        assert "disable_piecewise_cuda_graph: bool = False" in src, version
    cfg = "sglang/srt/model_executor/cuda_graph_config.py"
    assert "PhaseConfig(backend=Backend.TC_PIECEWISE)" in " ".join(_source("0.5.14", cfg).split())
    assert "return Backend.BREAKABLE if is_cuda()" in _source("0.5.15", cfg)
    v9 = rules.planning_version("0.5.9")
    assert g.prefill_graph_reserve_mib({}, v9, 8192, g.GraphFacts()) == 0.0
    v15 = rules.planning_version("0.5.15")
    assert g.prefill_graph_reserve_mib({}, v15, 8192, g.GraphFacts()) == 58 * 8


@pytest.mark.parametrize("version", BREAKABLE_IN_HOOKS)
def test_hook_reserve_is_the_releases(version: str) -> None:
    """0.5.19+: memory_hook.reserve_for_graph_mb, run on a breakable prefill graph, holds back
    what prefill_graph_reserve_mib gives beside the decode graph's 2 MiB per batch size."""
    fn = function_def(
        _source(version, "sglang/srt/arg_groups/memory_hook.py"), "reserve_for_graph_mb"
    )
    floor = _source(version, "sglang/srt/arg_groups/memory_hook.py")
    assert floor.index("reserve_for_graph_mb(server_args)") < floor.index("10 * 1024)")
    v = rules.planning_version(version)
    for mla, a2a, cps in itertools.product((False, True), ("none", "deepep"), (2048, 8192, 16384)):
        top = 2048 if mla else cps
        cfg = SimpleNamespace(
            disaggregation_mode="null",
            attn_dp_size=1,
            cuda_graph_config=SimpleNamespace(
                decode=SimpleNamespace(backend="full", max_bs=256),
                prefill=SimpleNamespace(backend="breakable", bs=_sizes_fn(version)(top)),
            ),
        )
        ns: dict[str, Any] = {
            "Any": Any,
            "Backend": SimpleNamespace(DISABLED="disabled", BREAKABLE="breakable"),
            "resolving_view": lambda _, cfg=cfg: cfg,
            "resolved_view": lambda _, a2a=a2a: SimpleNamespace(
                moe_a2a_backend=a2a, enable_dp_attention=False
            ),
            "attn_dp_enabled_of": lambda _: False,
            "use_mla_backend": lambda _, mla=mla: mla,
        }
        exec(compile(ast.Module(body=[fn], type_ignores=[]), version, "exec"), ns)
        got = ns["reserve_for_graph_mb"](None) - 256 * 2
        model = g.GraphFacts(architecture="X", mla=mla, dsa=mla)
        want = g.prefill_graph_reserve_mib({"moe_a2a_backend": a2a}, v, cps, model)
        assert got == pytest.approx(want), (version, mla, a2a, cps)


def _breakable_rules(version: str) -> list[str]:
    """The names of the release's breakable-graph auto-disable rules."""
    path = HOOK if version in BREAKABLE_IN_HOOKS else "sglang/srt/server_args.py"
    for fn in ast.walk(ast.parse(_source(version, path))):
        if isinstance(fn, ast.FunctionDef) and fn.name.endswith(
            "disable_breakable_cudagraph_if_incompatible"
        ):
            for node in ast.walk(fn):
                if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "rules":
                    assert isinstance(node.value, ast.List)
                    return [ast.unparse(e) for e in node.value.elts]
    raise AssertionError(f"{version}: no breakable rules")


@pytest.mark.parametrize("version", BREAKABLE_IN_SERVER_ARGS + BREAKABLE_IN_HOOKS)
def test_breakable_rules_are_the_releases(version: str) -> None:
    """Which switches and models the breakable prefill graph's rules turn it off for, per
    release (the module docstring's list), and the multimodal models it keeps."""
    v = rules.planning_version(version)
    found = " ".join(_breakable_rules(version))
    text = g.GraphFacts(architecture="LlamaForCausalLM")
    checks = {
        "LoRA": ({"enable_lora": True}, text),
        "DP attention": ({"enable_dp_attention": True}, text),
        "NemotronH": ({}, g.GraphFacts(architecture="NemotronHForCausalLM")),
        "KDA": ({}, g.GraphFacts(architecture="KimiLinearForCausalLM")),
        "two-batch overlap": ({"enable_two_batch_overlap": True}, text),
        "DeepSeek-V4": ({}, g.GraphFacts(architecture="DeepseekV4ForCausalLM")),
        "MLA attention": ({}, g.GraphFacts(architecture="DeepseekV3ForCausalLM", mla=True)),
    }
    for name, (config, model) in checks.items():
        off = g.prefill_graph_reserve_mib(config, v, 8192, model) == 0.0
        assert off is (name in found), (version, name)
    src = _source(version, "sglang/srt/configs/model_config.py")
    listed: set[str] = set()
    for node in ast.walk(ast.parse(src)):
        if (
            isinstance(node, ast.Assign)
            and ast.unparse(node.targets[0])
            == "multimodal_breakable_cuda_graph_supported_model_archs"
        ):
            listed = set(ast.literal_eval(node.value))
    for arch in listed | {"LlavaForConditionalGeneration"}:
        vision = g.GraphFacts(architecture=arch, multimodal=True)
        assert (g.prefill_graph_reserve_mib({}, v, 8192, vision) > 0) is (arch in listed), arch
    assert "return Backend.BREAKABLE if is_cuda()" in _source(
        version, "sglang/srt/model_executor/cuda_graph_config.py"
    )


def _tc_piecewise_rules(version: str) -> str | None:
    """The release's tc_piecewise auto-disable code (None: it has none)."""
    path = HOOK if version in BREAKABLE_IN_HOOKS else "sglang/srt/server_args.py"
    for fn in ast.walk(ast.parse(_source(version, path))):
        if isinstance(fn, ast.FunctionDef) and (
            fn.name.endswith("disable_tc_piecewise_cudagraph_if_incompatible")
            or fn.name == "_handle_piecewise_cuda_graph"
        ):
            return ast.unparse(fn)
    return None


@pytest.mark.parametrize("version", PIECEWISE + BREAKABLE_IN_SERVER_ARGS + BREAKABLE_IN_HOOKS)
def test_dp_attention_is_a_switch_only_where_the_default_backends_rules_read_it(
    version: str,
) -> None:
    """DP attention turns the prefill graph off on CUDA where the default backend's rules read
    it: the tc_piecewise rules (0.5.10 .. 0.5.14), the breakable ones of 0.5.15 .. 0.5.16. From
    0.5.22 the tc_piecewise rules are gone and --attn-dp-size is no switch either."""
    v = rules.planning_version(version)
    tc = _tc_piecewise_rules(version)
    assert (tc is None) is (v >= (0, 5, 22))
    default = tc if version in PIECEWISE else " ".join(_breakable_rules(version))
    assert default is not None
    text = g.GraphFacts(architecture="LlamaForCausalLM")
    dp = {"enable_dp_attention": True, "dp_size": 2}
    off = g.prefill_graph_reserve_mib(dp, v, 8192, text) == 0.0
    assert off is ("enable_dp_attention" in default), version
    if v >= (0, 5, 22):
        assert "attn_dp_size" not in default
        assert g.prefill_graph_reserve_mib({"attn_dp_size": 2}, v, 8192, text) > 0


EAGLE_RULE = PIECEWISE[1:] + BREAKABLE_IN_SERVER_ARGS + BREAKABLE_IN_HOOKS


@pytest.mark.parametrize("version", EAGLE_RULE)
def test_an_eagle_target_asks_for_every_hidden_state(version: str) -> None:
    """The EAGLE worker's target prefill asks for FULL hidden states (STANDALONE's, whose worker
    subclasses it, for none from 0.5.12), and the algorithms the planner treats so are the
    release's is_eagle() ones (NEXTN is resolved to EAGLE before the worker sees it)."""
    src = _source(version, "sglang/srt/speculative/eagle_worker_v2.py")
    at = src.index("# Target prefill")
    target = src[at : at + 400]
    assert "CaptureHiddenMode.FULL" in target
    assert ("is_standalone()" in target) is (version >= "0.5.12")
    is_eagle = ast.unparse(
        function_def(_source(version, "sglang/srt/speculative/spec_info.py"), "is_eagle")
    )
    for name in g._EAGLE_FULL_TARGET - {"NEXTN"}:
        assert f"SpeculativeAlgorithm.{name}" in is_eagle, (version, name)
    assert "STANDALONE" not in is_eagle
    v = rules.planning_version(version)
    standalone = g.prefill_graph_tokens(
        {"speculative_algorithm": "STANDALONE"}, v, 8192, g.GraphFacts()
    )
    assert (standalone == 0) is (version == "0.5.11")


@pytest.mark.parametrize("version", PIECEWISE[1:4])
def test_0_5_11_to_0_5_13_capture_no_hidden_state_and_refuse_a_full_batch(version: str) -> None:
    src = _source(version, "sglang/srt/model_executor/piecewise_cuda_graph_runner.py")
    init = ast.unparse(function_def(src, "__init__"))
    assert "self.capture_hidden_mode = CaptureHiddenMode.NULL" in init
    assert "is_eagle" not in init  # FULL only with --enable-return-hidden-states
    can_run = ast.unparse(function_def(src, "can_run"))
    assert "forward_batch.capture_hidden_mode != self.capture_hidden_mode" in can_run
    v = rules.planning_version(version)
    assert g.prefill_graph_tokens({"speculative_algorithm": "NEXTN"}, v, 8192, g.GraphFacts()) == 0
    assert g.prefill_graph_tokens({}, v, 8192, g.GraphFacts()) == 8192


def _eagle_skip(version: str) -> str:
    """The test of the release's `if` that routes an EAGLE target to the eager runner."""
    path = (
        "sglang/srt/model_executor/model_runner.py"
        if version < "0.5.16"
        else "sglang/srt/model_executor/model_runner_components/cuda_graph_setup.py"
    )
    for node in ast.walk(ast.parse(_source(version, path))):
        if isinstance(node, ast.If) and "spec_algorithm.is_eagle()" in ast.unparse(node.test):
            if "Phase.PREFILL" in ast.unparse(node.test) and "eager_runner" in ast.unparse(node):
                return ast.unparse(node.test)
    raise AssertionError(f"{version}: no EAGLE prefill-graph skip")


@pytest.mark.parametrize("version", EAGLE_RULE[3:])
def test_from_0_5_14_an_eagle_target_runs_eagerly_off_the_graphs_that_capture_null(
    version: str,
) -> None:
    test = _eagle_skip(version)
    assert "not self.is_draft_worker" in test or "not model_runner.is_draft_worker" in test
    if version < "0.5.17":
        assert "not self.server_args.enable_return_hidden_states" in test or (
            "not model_runner.server_args.enable_return_hidden_states" in test
        )
    else:
        assert (
            "get_server_return_hidden_states_mode(" in test and "< CaptureHiddenMode.FULL" in test
        )
    if version < "0.5.19":
        assert "not check_cuda_graph_backend(Phase.PREFILL, Backend.BREAKABLE)" in test
    else:
        assert "check_cuda_graph_backend(Phase.PREFILL, Backend.TC_PIECEWISE)" in test
    runner = _source(version, "sglang/srt/model_executor/runner/prefill_cuda_graph_runner.py")
    assert "CaptureHiddenMode.FULL" in runner and "is_eagle()" in runner  # breakable: FULL
    v = rules.planning_version(version)
    eagle = {"speculative_algorithm": "EAGLE"}

    def tokens(backend: str | None = None, **extra: Any) -> int:
        cfg = {**eagle, **extra} | ({"cuda_graph_backend_prefill": backend} if backend else {})
        return g.prefill_graph_tokens(cfg, v, 8192, g.GraphFacts())

    assert tokens("tc_piecewise") == 0
    assert tokens("breakable") == 8192
    assert (tokens("full") == 0) is (version < "0.5.19")
    # the default backend: tc_piecewise in 0.5.14, breakable on CUDA from 0.5.15
    assert (tokens() == 0) is (version == "0.5.14")
    if version >= "0.5.17":  # the server returning every hidden state captures FULL
        assert tokens("tc_piecewise", return_hidden_states_mode="full") == 8192
