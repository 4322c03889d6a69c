"""The aiter scaling of mem_fraction_static (planner.rules) against the releases themselves: each
case reads the release's PyPI wheel (tests.wheels: downloaded once, a skip without a registry),
finds the block that scales the fraction when the attention backend is aiter (ROCm's default),
and checks the planner's fraction on an MI355X against the block's own threshold and factor.

The record s15b-qwen3-30b-a3b-instruct-2507-fp8-mi355x-tp1 (0.5.15) is predicted with this
factor (0.911 x 0.85 = 0.77435); its sibling launch on the same GPU
(s15b-qwen3-30b-a3b-5-layers-mi355x-tp1: 287.20 GiB free before weights, 12.79 GiB loaded,
209.66 GiB of KV) shows the same fraction: (209.66 + 12.79) / 287.20 = 0.7745."""

from __future__ import annotations

import ast

import pytest

from autotune.hardware.gpus import get_gpu
from autotune.models.config_cards import config_card
from autotune.planner.sglang import plan_sglang
from tests.wheels import function_def, wheel_text

# Where each release keeps the block: model_runner until 0.5.4, server_args until 0.5.18,
# arg_groups/attention_hook after.
SOURCES = {
    "0.4.7": "sglang/srt/model_executor/model_runner.py",
    "0.5.3.post1": "sglang/srt/model_executor/model_runner.py",
    "0.5.4": "sglang/srt/model_executor/model_runner.py",
    "0.5.4.post1": "sglang/srt/server_args.py",
    "0.5.9": "sglang/srt/server_args.py",
    "0.5.10": "sglang/srt/server_args.py",
    "0.5.15": "sglang/srt/server_args.py",
    "0.5.19": "sglang/srt/arg_groups/attention_hook.py",
}


def _aiter_block(source: str) -> ast.If:
    """The if-statement testing `attention_backend == "aiter"` that scales the fraction."""
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.If)
            and "attention_backend" in ast.unparse(node.test)
            and "'aiter'" in ast.unparse(node.test)
            and "mem_fraction_static" in ast.unparse(node)
            and "context_len" in ast.unparse(node)
        ):
            return node
    raise AssertionError("no aiter block scaling mem_fraction_static: the release changed")


def _threshold_and_factor(block: ast.If) -> tuple[int, float]:
    """(context_len threshold, factor) the block states: `context_len > N` and a float literal
    multiplied with mem_fraction_static."""
    threshold = factor = None
    for node in ast.walk(block):
        if (
            isinstance(node, ast.Compare)
            and ast.unparse(node.left).endswith("context_len")
            and isinstance(node.ops[0], ast.Gt)
            and isinstance(node.comparators[0], ast.Constant)
        ):
            bound = node.comparators[0].value
            assert isinstance(bound, int), bound
            threshold = bound
        mult = (isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Mult)) or (
            isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult)
        )
        if mult and "mem_fraction_static" in ast.unparse(node):
            for part in ast.walk(node):
                if isinstance(part, ast.Constant) and isinstance(part.value, float):
                    factor = part.value
    assert threshold is not None and factor is not None, ast.unparse(block)
    return threshold, factor


@pytest.mark.parametrize("version", list(SOURCES))
def test_aiter_factor_is_the_releases(version: str) -> None:
    threshold, factor = _threshold_and_factor(
        _aiter_block(wheel_text("sglang", version, SOURCES[version]))
    )
    card = config_card("Qwen/Qwen3-30B-A3B-Instruct-2507-FP8")
    assert card is not None
    mi355x = get_gpu("mi355x-288g")
    for context, scaled in ((threshold, False), (threshold + 1, True), (262144, True)):
        cfg = {"mem_fraction_static": 0.8, "context_length": context}
        plan = plan_sglang(card, mi355x, cfg, version=version)
        want = 0.8 * factor if scaled else 0.8
        assert plan.mem_fraction_static == pytest.approx(want), (version, context)


# Where each release gives a DeepSeek sparse-attention (DSA) model with no attention backend its
# own one, in the model-specific adjustments that run before the aiter check (planner.rocm_backend).
DSA_FILL = {
    "0.5.6": ("sglang/srt/server_args.py", "nsa"),
    "0.5.9": ("sglang/srt/server_args.py", "nsa"),
    "0.5.13": ("sglang/srt/server_args.py", "dsa"),
    "0.5.19": ("sglang/srt/arg_groups/model_overrides/deepseek_v2.py", "dsa"),
}


def _filled_for(source: str, backend: str) -> set[str]:
    """The architectures whose unset attention backend the release sets to `backend`: the
    `model_arch in [...]` list around the assignment, or the `_register_for(...)` of the
    function that declares it."""
    tree = ast.parse(source)

    def fills(node: ast.AST) -> bool:
        return any(
            isinstance(n, ast.Assign)
            and ast.unparse(n.targets[0]).endswith(("attention_backend", "['attention_backend']"))
            and isinstance(n.value, ast.Constant)
            and n.value.value == backend
            for n in ast.walk(node)
        )

    def names(nodes: list[ast.expr]) -> set[str]:
        return {
            c.value
            for n in nodes
            for c in ast.walk(n)
            if isinstance(c, ast.Constant) and isinstance(c.value, str)
        }

    for node in ast.walk(tree):
        if isinstance(node, ast.If) and fills(node) and "model_arch in" in ast.unparse(node.test):
            return names([node.test])
        if isinstance(node, ast.FunctionDef) and fills(node) and node.decorator_list:
            return names(node.decorator_list)
    raise AssertionError(f"no {backend} fill for DSA models: the release changed")


@pytest.mark.parametrize("version", list(DSA_FILL))
def test_dsa_models_take_their_own_backend_not_aiter(version: str) -> None:
    path, backend = DSA_FILL[version]
    archs = _filled_for(wheel_text("sglang", version, path), backend)
    mi355x = get_gpu("mi355x-288g")
    for model in ("zai-org/GLM-5-FP8", "deepseek-ai/DeepSeek-V3.2-Exp"):
        card = config_card(model)
        assert card is not None
        filled = card.architecture in archs
        # Not filled: the MLA default, aiter at 16 KV heads per rank (DeepSeek-V3.2's 128 / 8),
        # triton at 8 (GLM-5's 64 / 8).
        scaled = not filled and card.num_kv_heads // 8 == 16
        unset = plan_sglang(card, mi355x, {"mem_fraction_static": 0.9}, version=version, tp=8)
        aiter = plan_sglang(
            card,
            mi355x,
            {"mem_fraction_static": 0.9, "attention_backend": "aiter"},
            version=version,
            tp=8,
        )
        assert unset.mem_fraction_static == pytest.approx(0.9 * 0.85 if scaled else 0.9), (
            version,
            model,
        )
        assert aiter.mem_fraction_static == pytest.approx(0.9 * 0.85), (version, model)


# Where each release picks the backend for an unset --attention-backend (planner.rocm_backend).
_RUNNER = "sglang/srt/model_executor/model_runner.py"
_ARGS = "sglang/srt/server_args.py"
_OVERRIDE = "sglang/srt/arg_groups/model_override_base.py"
DEFAULT_PICK = {
    **dict.fromkeys(
        ("0.4.7", "0.4.7.post1", "0.5.2", "0.5.3rc0", "0.5.3", "0.5.3.post1", "0.5.4"), _RUNNER
    ),
    **dict.fromkeys(
        ("0.5.4.post1", "0.5.5", "0.5.6", "0.5.6.post2", "0.5.7", "0.5.8", "0.5.9", "0.5.10"),
        _ARGS,
    ),
    **dict.fromkeys(tuple(f"0.5.{n}" for n in range(11, 19)), _ARGS),
    **dict.fromkeys(tuple(f"0.5.{n}" for n in range(19, 24)), _OVERRIDE),
}


def _chain(stmts: list[ast.stmt]) -> list[ast.If]:
    """The first if/elif chain in `stmts` (0.5.15 imports before it)."""
    out: list[ast.If] = []
    node: ast.stmt | None = next((s for s in stmts if isinstance(s, ast.If)), None)
    while isinstance(node, ast.If):
        out.append(node)
        node = node.orelse[0] if len(node.orelse) == 1 else None
    return out


def _backend(stmts: list[ast.stmt]) -> str:
    """The backend name `stmts` assign to attention_backend (an attribute, or an overrides
    dict's key from 0.5.15) or return."""
    for stmt in stmts:
        value = stmt.value if isinstance(stmt, (ast.Assign, ast.Return)) else None
        if isinstance(stmt, ast.Assign) and not ast.unparse(stmt.targets[0]).endswith(
            (".attention_backend", "['attention_backend']")
        ):
            continue
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            return value.value
    raise AssertionError([ast.unparse(s) for s in stmts])


def _hip_branch(stmts: list[ast.stmt]) -> ast.If:
    (hip,) = [b for b in _chain(stmts) if "is_hip" in ast.unparse(b.test)]
    return hip


def _default_pick(source: str) -> tuple[str, set[int], bool]:
    """(MHA's ROCm backend, the per-rank KV head counts that give an MLA model aiter, whether
    that needs no speculative algorithm) from the `if not use_mla_backend:` split."""
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.If)
            and ast.unparse(node.test).replace("self.", "") == "not use_mla_backend"
            and "get_num_kv_heads" in ast.unparse(node)
        ):
            mha = _backend(_hip_branch(node.body).body)
            mla = _hip_branch(node.orelse)
            (call,) = [
                c
                for c in ast.walk(mla)
                if isinstance(c, ast.Call) and ast.unparse(c.func).endswith("get_num_kv_heads")
            ]
            assert ast.unparse(call.args[0]).endswith("tp_size"), ast.unparse(call)
            (check,) = [s for s in mla.body if isinstance(s, ast.If)]
            assert _backend(check.body) == "aiter" and _backend(check.orelse) == "triton"
            heads = {
                int(c.value)
                for c in ast.walk(check.test)
                if isinstance(c, ast.Constant) and isinstance(c.value, int)
            }
            return mha, heads, "spec_algorithm" in ast.unparse(check.test)
    raise AssertionError("no MHA/MLA default-backend split: the release changed")


@pytest.mark.parametrize("version", list(DEFAULT_PICK))
def test_rocm_default_backend_is_the_releases(version: str) -> None:
    from autotune.planner import sglang_history as history
    from autotune.planner.rocm_backend import (
        AITER_MLA_HEADS,
        MLA_SPEC_IGNORED_FROM,
        mla_default_is_aiter,
    )

    mha, heads, needs_no_spec = _default_pick(wheel_text("sglang", version, DEFAULT_PICK[version]))
    rel = history.release(version)
    assert rel is not None
    assert mha == "aiter"
    assert heads == set(AITER_MLA_HEADS), version
    assert needs_no_spec == (rel < MLA_SPEC_IGNORED_FROM), version
    for per_rank in (1, 8, 16, 32, 64, 128):
        assert mla_default_is_aiter(per_rank * 8, 8, None, rel) == (per_rank in heads)
        with_spec = per_rank in heads and not needs_no_spec
        assert mla_default_is_aiter(per_rank * 8, 8, "NEXTN", rel) == with_spec
    # The per-rank count is get_num_kv_heads: max(1, heads // tp).
    config = wheel_text("sglang", version, "sglang/srt/configs/model_config.py")
    body = ast.unparse(function_def(config, "get_num_kv_heads"))
    assert "max(1, total_num_kv_heads // " in body, body


@pytest.mark.parametrize("version", ["0.4.6.post5"])
def test_no_aiter_scaling_before_047(version: str) -> None:
    """0.4.6.post5 already defaults MHA to aiter on ROCm but does not scale the fraction."""
    source = wheel_text("sglang", version, _RUNNER)
    with pytest.raises(AssertionError, match="no aiter block"):
        _aiter_block(source)
    card = config_card("Qwen/Qwen3-30B-A3B-Instruct-2507-FP8")
    assert card is not None
    cfg = {"mem_fraction_static": 0.8, "context_length": 32768}
    plan = plan_sglang(card, get_gpu("mi355x-288g"), cfg, version=version)
    assert plan.mem_fraction_static == pytest.approx(0.8)


# Where each release keeps the model-specific backend fills (planner.rocm_backend.NOT_AITER_FILLS).
def _fill_sources(version: str, module: str) -> list[str]:
    rel = history_release(version)
    if rel < (5, 15, 0):
        return [_ARGS]
    if rel < (5, 19, 0):
        return ["sglang/srt/arg_groups/overrides.py"]
    return [f"sglang/srt/arg_groups/model_overrides/{module}.py"]


FILL_MODULES = {
    "GptOssForCausalLM": "gpt_oss",
    "Olmo2ForCausalLM": "olmo2",
    "Gemma4ForConditionalGeneration": "gemma4",
    "Gemma4ForCausalLM": "gemma4",
    "Gemma4UnifiedForConditionalGeneration": "gemma4",
    "Exaone4ForCausalLM": "exaone",
    "ExaoneMoEForCausalLM": "exaone",
    "FalconH1ForCausalLM": "falcon_h1",
    "Lfm2ForCausalLM": "lfm2",
    "NemotronHForCausalLM": "nemotron_h",
    "GraniteMoeHybridForCausalLM": "granitemoehybrid",
}
# Predicates that are false on ROCm in the fills' conditions (calls, or get_platform() fields).
_NOT_HIP = (
    "is_sm100",
    "is_sm90",
    "is_sm120",
    "is_cuda",
    "is_xpu",
    "is_cpu",
    "is_npu",
    "has_amx",
    "is_blackwell",
)
_UNSET = ("attention_backend is None", "backend_not_set")


def history_release(version: str) -> tuple[int, int, int]:
    from autotune.planner import sglang_history as history

    rel = history.release(version)
    assert rel is not None
    return rel


def _on_hip(test: ast.expr) -> bool | None:
    """A condition's value on ROCm with no --attention-backend: is_hip() true, CUDA/XPU/CPU
    predicates false, the unset-backend tests true; None where it reads the model's config."""
    if isinstance(test, ast.BoolOp):
        values = [_on_hip(v) for v in test.values]
        stop = isinstance(test.op, ast.Or)
        if stop in values:
            return stop
        return None if None in values else not stop
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _on_hip(test.operand)
        return None if inner is None else not inner
    text = ast.unparse(test)
    if any(p in text for p in _NOT_HIP):
        return False
    if "is_hip" in text or any(u in text for u in _UNSET):
        return True
    return None


def _value(node: ast.expr, names: dict[str, object]) -> object:
    """A backend name: a literal, a local set before, or `a if cond else b` decided on ROCm."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.IfExp):
        taken = _on_hip(node.test)
        if taken is not None:
            return _value(node.body if taken else node.orelse, names)
        body, orelse = _value(node.body, names), _value(node.orelse, names)
        return body if body == orelse else None
    return None


_STOP = "<returned without a fill>"


def _assign(stmt: ast.Assign, names: dict[str, object]) -> None:
    """Record local names (`a = ...`, `a, b = x, y`) for _value."""
    target = stmt.targets[0]
    if isinstance(target, ast.Name):
        names[target.id] = _value(stmt.value, names)
    elif isinstance(target, ast.Tuple) and isinstance(stmt.value, ast.Tuple):
        for t, v in zip(target.elts, stmt.value.elts, strict=False):
            if isinstance(t, ast.Name):
                names[t.id] = _value(v, names)


def _run(stmts: list[ast.stmt], names: dict[str, object], conds: list[str]) -> object:
    """The attention backend `stmts` fill on ROCm (an attribute, an overrides key, a returned
    dict); _STOP where they return without one, None where they fall through. `conds` collects
    the config conditions the filling path passed; a config-dependent branch that returns
    without a fill is passed over (it is not the path that fills)."""
    for stmt in stmts:
        if isinstance(stmt, ast.If):
            taken = _on_hip(stmt.test)
            if taken is None:
                got = _run(stmt.body, names, conds)
                if got is not None and got != _STOP:
                    conds.append(ast.unparse(stmt.test))
                    return got
                got = _run(stmt.orelse, names, conds)
            else:
                got = _run(stmt.body if taken else stmt.orelse, names, conds)
            if got is not None:
                return got
        elif isinstance(stmt, ast.Assign):
            target = ast.unparse(stmt.targets[0])
            if target.endswith(("attention_backend", "['attention_backend']")) and not any(
                side in target for side in ("prefill", "decode")
            ):
                return _value(stmt.value, names)
            _assign(stmt, names)
        elif isinstance(stmt, ast.Return):
            if isinstance(stmt.value, ast.Dict):
                for key, val in zip(stmt.value.keys, stmt.value.values, strict=True):
                    if isinstance(key, ast.Constant) and key.value == "attention_backend":
                        return _value(val, names)
            return _STOP
    return None


def _fill_on_hip(source: str, architecture: str) -> tuple[str | None, list[str]]:
    """The backend the release's fill for `architecture` sets on ROCm when none is set (None
    without a fill) and the config conditions it needs: the fill's own function, or the
    `model_arch` branch that names the architecture."""
    for scope in ast.walk(ast.parse(source)):
        decorated = isinstance(scope, ast.FunctionDef) and any(
            f"'{architecture}'" in ast.unparse(d) for d in scope.decorator_list
        )
        branch = isinstance(scope, ast.If) and f"'{architecture}'" in ast.unparse(scope.test)
        if not (decorated or branch):
            continue
        assert isinstance(scope, (ast.FunctionDef, ast.If))
        conds: list[str] = []
        got = _run(scope.body, {}, conds)
        if got is not None and got != _STOP:
            assert isinstance(got, str), (architecture, got)
            return got, conds
    return None, []


FILL_VERSIONS = [
    "0.5.2",
    "0.5.3.post1",
    "0.5.4",
    "0.5.4.post1",
    "0.5.8",
    "0.5.9",
    "0.5.10",
    "0.5.11",
    "0.5.12",
    "0.5.13",
    "0.5.14",
    "0.5.15",
    "0.5.18",
    "0.5.19",
    "0.5.21",
    "0.5.22",
    "0.5.23",
]


@pytest.mark.parametrize("version", FILL_VERSIONS)
def test_model_fills_on_rocm_are_the_releases(version: str) -> None:
    from autotune.planner.rocm_backend import SLIDING_FILLS, fill_not_aiter

    rel = history_release(version)
    for architecture, module in FILL_MODULES.items():
        found = [
            _fill_on_hip(wheel_text("sglang", version, path), architecture)
            for path in _fill_sources(version, module)
        ]
        backend, conds = next((f for f in found if f[0] is not None), (None, []))
        filled = backend not in (None, "aiter")
        # A fill that needs the config's sliding-window pattern is planned only for such models.
        sliding = any("sliding_window_pattern" in c for c in conds)
        assert all("sliding_window_pattern" in c for c in conds), (version, architecture, conds)
        assert sliding == (filled and architecture in SLIDING_FILLS), (version, architecture)
        assert fill_not_aiter(architecture, rel, sliding=True) == filled, (
            version,
            architecture,
            backend,
        )
        assert fill_not_aiter(architecture, rel) == (filled and not sliding), (
            version,
            architecture,
        )
    # The planner on a gpt-oss card, backend unset: scaled only where the fill gives aiter.
    card = config_card("openai/gpt-oss-20b")
    assert card is not None and card.architecture == "GptOssForCausalLM"
    cfg = {"mem_fraction_static": 0.8, "context_length": 32768}
    plan = plan_sglang(card, get_gpu("mi355x-288g"), cfg, version=version)
    factor = 0.90 if version == "0.5.4.post1" else 0.85
    want = 0.8 if fill_not_aiter(card.architecture, rel) else 0.8 * factor
    assert plan.mem_fraction_static == pytest.approx(want), version


@pytest.mark.parametrize("version", ["0.5.11", "0.5.15", "0.5.21", "0.5.22"])
def test_planner_follows_the_model_fills_on_rocm(version: str) -> None:
    """Gemma 4 (triton from 0.5.11, the first release that runs it) and a sliding-window EXAONE 4
    (triton from 0.5.22): with the backend unset the fraction is not scaled where the release's
    fill gives triton. The EXAONE case reuses the Gemma 3 card's shape (sliding and full layers) under EXAONE's architecture."""
    mi355x = get_gpu("mi355x-288g")
    cfg = {"mem_fraction_static": 0.8, "context_length": 32768}
    gemma4 = config_card("google/gemma-4-26B-A4B-it")
    gemma3 = config_card("google/gemma-3-4b-it")
    assert gemma4 is not None and gemma3 is not None and gemma3.local_attention is not None
    exaone = gemma3.model_copy(update={"architecture": "Exaone4ForCausalLM"})
    rel = history_release(version)
    for card, triton in ((gemma4, True), (exaone, rel >= (5, 22, 0))):
        plan = plan_sglang(card, mi355x, cfg, version=version)
        assert plan.mem_fraction_static == pytest.approx(0.8 if triton else 0.8 * 0.85), (
            version,
            card.architecture,
        )
