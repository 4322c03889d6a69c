"""The release facts planner.sglang_draft, planner.vllm_draft and rules.speculative_reserve_mib
rest on, read from the engines' own wheels."""

from __future__ import annotations

import ast
import re
import zipfile

import pytest

from tests.wheels import engine_wheel_or_skip, function_def


def _source(engine: str, version: str, path: str) -> str:
    with zipfile.ZipFile(engine_wheel_or_skip(engine, version)) as z:
        return z.read(path).decode()


def _spec_reserve_block(text: str) -> str:
    """The speculative branch of the mem-fraction heuristic, '' when there is none."""
    pattern = r"if self\.speculative_algorithm is not None:\n(?:\s+.*\n){1,8}"
    blocks = [m.group(0) for m in re.finditer(pattern, text)]
    return next((b for b in blocks if "reserved_mem +=" in b), "")


@pytest.mark.parametrize(
    ("version", "other_mib"),
    [("0.5.9", "2 * 1024"), ("0.5.10", "4 * 1024"), ("0.5.13", "4 * 1024"), ("0.5.14", None)],
)
def test_sglang_speculative_reserve(version: str, other_mib: str | None) -> None:
    block = _spec_reserve_block(_source("sglang", version, "sglang/srt/server_args.py"))
    if other_mib is None:
        assert block == ""
    else:
        assert "reserved_mem += 6 * 1024" in block and f"reserved_mem += {other_mib}" in block


@pytest.mark.parametrize("version", ["0.5.14", "0.5.19"])
def test_sglang_loads_the_draft_before_the_target_pool(version: str) -> None:
    text = _source("sglang", version, "sglang/srt/managers/scheduler.py")
    body = text[text.index("def init_model_worker") :]
    assert body.index("self.maybe_init_draft_worker()") < body.index("self.init_memory_pools()")


@pytest.mark.parametrize(("version", "exact"), [("0.5.16", False), ("0.5.18", True)])
def test_sglang_dflash_cell(version: str, exact: bool) -> None:
    text = _source("sglang", version, "sglang/srt/model_executor/pool_configurator.py")
    assert "scale_kv_cell_size_per_token_for_dflash" in text
    assert ("draft_cell_size_per_token=" in text) is exact


@pytest.mark.parametrize(("version", "sliding"), [("0.20.2", False), ("0.25.1", True)])
def test_vllm_dflash_layers(version: str, sliding: bool) -> None:
    text = _source("vllm", version, "vllm/model_executor/models/qwen3_dflash.py")
    assert "Attention(" in text
    assert ("sliding" in text.lower()) is sliding


# An MTP draft (NEXTN without a draft path) builds its own embedding and LM head, and swaps in
# the target's only after the target's pool is sized (planner.sglang_draft docstring).
MTP_HEAD_RELEASES = ["0.5.14", "0.5.18", "0.5.23"]


@pytest.mark.parametrize("version", MTP_HEAD_RELEASES)
def test_sglang_sizes_the_target_pool_before_the_draft_shares_its_head(version: str) -> None:
    sched = _source("sglang", version, "sglang/srt/managers/scheduler.py")
    pools = sched[sched.index("def init_memory_pools") :]
    pools = pools[: pools.index("\n    def ", 1)]
    target = pools.index("self.init_target_memory_pool()")
    assert target < pools.index("self.draft_worker.alloc_memory_pool(")
    eagle = _source("sglang", version, "sglang/srt/speculative/eagle_worker_v2.py")
    alloc = function_def(eagle, "alloc_memory_pool")
    calls = [ast.unparse(n.func) for n in ast.walk(alloc) if isinstance(n, ast.Call)]
    assert calls.index("self.draft_worker.alloc_memory_pool") < calls.index("self.init_lm_head")
    head = ast.unparse(function_def(eagle, "init_lm_head"))
    assert "self.draft_runner.model.set_embed_and_head(embed, head)" in head


@pytest.mark.parametrize("version", MTP_HEAD_RELEASES)
def test_sglang_qwen3_5_mtp_builds_its_own_embedding_and_head(version: str) -> None:
    mtp = _source("sglang", version, "sglang/srt/models/qwen3_5_mtp.py")
    init = ast.unparse(function_def(mtp, "__init__"))
    assert "self.model = Qwen3_5ForCausalLM(" in init
    assert "self.lm_head = ParallelLMHead(" in init and "tie_word_embeddings" in init
    swap = ast.unparse(function_def(mtp, "set_embed_and_head"))
    assert "del self.model.embed_tokens.weight" in swap and "empty_cache" in swap
    text = _source("sglang", version, "sglang/srt/models/qwen3_5.py")
    model = next(
        n
        for n in ast.walk(ast.parse(text))
        if isinstance(n, ast.ClassDef) and n.name == "Qwen3_5ForCausalLM"
    )
    # the embedding is built in __init__ (0.5.23: through _build_embed_tokens)
    built = ast.unparse(model)
    assert "self.embed_tokens = " in ast.unparse(function_def(built, "__init__"))
    assert "VocabParallelEmbedding(" in built


def test_sglang_0_5_18_budget_is_the_free_memory_with_the_draft_resident() -> None:
    text = _source("sglang", "0.5.18", "sglang/srt/mem_cache/kv_cache_configurator.py")
    body = ast.unparse(function_def(text, "_profile_available_bytes"))
    assert "available_gpu_memory = get_available_gpu_memory(" in body
    assert "rest_memory = available_gpu_memory - slack_gb" in body


def test_sglang_0_5_18_qwen3_5_nextn_draft_kv_stays_out_of_the_cell() -> None:
    # No draft path for Qwen3.5 NEXTN (only DeepSeek-style archs get the model path), so
    # eagle_draft_num_layers stays None and DefaultPoolConfigurator does not scale the cell:
    # the draft's pool comes from the slack (planner.sglang_draft.mtp_kv_in_cell).
    hook = _source("sglang", "0.5.18", "sglang/srt/arg_groups/speculative_hook.py")
    listed = ast.unparse(_if_testing(function_def(hook, "_handle_eagle_family"), "model_arch in"))
    assert "DeepseekV3ForCausalLM" in listed and "Qwen3_5" not in listed
    aux = _source(
        "sglang",
        "0.5.18",
        "sglang/srt/model_executor/model_runner_components/spec_aux_hidden_state.py",
    )
    gate = _if_testing(function_def(aux, "_resolve_eagle_aux_hidden_state"), "is_draft_worker")
    assert "server_args.speculative_draft_model_path" in ast.unparse(gate.test)


def _if_testing(fn: ast.FunctionDef, marker: str) -> ast.If:
    for node in ast.walk(fn):
        if isinstance(node, ast.If) and marker in ast.unparse(node.test):
            return node
    raise AssertionError(f"no `if` testing {marker!r}: the release changed its code")


@pytest.mark.parametrize("version", ["0.24.0", "0.25.0", "0.25.1", "0.33.0", "0.34.0"])
def test_vllm_laguna_dflash_keeps_full_kv(version: str) -> None:
    """Laguna's drafter clears its layers' sliding window from the release FULL_KV_DRAFTS names
    (models/laguna_dflash.py; before it, no Laguna drafter)."""
    from autotune.planner.vllm_draft import FULL_KV_DRAFTS
    from autotune.planner.vllm_history import at_least

    path = "vllm/model_executor/models/laguna_dflash.py"
    with zipfile.ZipFile(engine_wheel_or_skip("vllm", version)) as z:
        text = z.read(path).decode() if path in z.namelist() else ""
    since = FULL_KV_DRAFTS["DFlashLagunaForCausalLM"]
    assert ("layer.self_attn.attn.sliding_window = None" in text) is at_least(version, since)
    assert ("LagunaDecoderLayer(" in text) is at_least(version, since)


# vLLM 0.24.0's EAGLE heads (planner.drafts docstring, _eagle_head): what each module builds and
# what the loader keeps of it, read from the release.
VLLM_EAGLE = "0.24.0"


def test_vllm_eagle3_head_shapes() -> None:
    text = _source("vllm", VLLM_EAGLE, "vllm/model_executor/models/llama_eagle3.py")
    assert "qkv_input_size = 2 * self.hidden_size if layer_idx == 0 else self.hidden_size" in text
    assert "self.hidden_norm = RMSNorm(config.hidden_size" in text
    assert "self.num_aux_hidden_states = len(layer_ids) if layer_ids else 3" in text
    assert "self.fc_input_size = target_hidden_size * self.num_aux_hidden_states" in text
    assert "self.fc = ReplicatedLinear(" in text
    head = text[text.index("class Eagle3LlamaForCausalLM") :]
    assert "self.lm_head = ParallelLMHead(\n            self.config.draft_vocab_size," in head
    assert "torch.zeros(self.config.draft_vocab_size, dtype=torch.long)" in head


def test_vllm_eagle_head_shapes() -> None:
    text = _source("vllm", VLLM_EAGLE, "vllm/model_executor/models/llama_eagle.py")
    fc = text[text.index("self.fc = ReplicatedLinear(") :][:300]
    assert "input_size=self.config.hidden_size * 2" in fc and "bias=False" in fc
    assert "self.input_layernorm = nn.Identity()" in text


def test_vllm_eagle_shares_embedding_and_head_inside_the_profiled_load() -> None:
    utils = _source("vllm", VLLM_EAGLE, "vllm/v1/worker/gpu/spec_decode/eagle/utils.py")
    load = ast.unparse(function_def(utils, "load_eagle_model"))
    assert "del draft_inner.embed_tokens" in load and "del eagle_model.lm_head" in load
    share = ast.unparse(function_def(utils, "_should_share"))
    assert "torch.equal" in share  # an own head of another vocabulary is kept
    runner = _source("vllm", VLLM_EAGLE, "vllm/v1/worker/gpu/model_runner.py")
    body = ast.unparse(function_def(runner, "load_model"))
    profiled = body[body.index("with DeviceMemoryProfiler() as m:") :]
    assert profiled.index("self.speculator.load_model(self.model)") < profiled.index(
        "self.model_memory_usage = m.consumed_memory"
    )
