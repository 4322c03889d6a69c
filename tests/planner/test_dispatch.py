"""One planner entry point for every engine: models (card or GGUF), the CPU target, default
versions, the rule facts a target can state, the perf model's view of a vLLM plan, and
`autotune plan` / the service helper for vllm and llamacpp."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autotune.engines.llamacpp.binary import PINNED_VERSION
from autotune.engines.vllm import supported_versions
from autotune.errors import ConfigError, ModelLoadError
from autotune.hardware import get_gpu
from autotune.models import load_card
from autotune.planner import (
    CPU_TARGET,
    default_version,
    load_target_model,
    plan_for,
    plan_target,
    resolve_target_gpu,
    scheduler_plan,
    target_facts,
)
from autotune.planner.llamacpp import GGUFModel, LlamaPlan, plan_llamacpp
from autotune.planner.sglang import plan_sglang
from autotune.planner.vllm import VLLMPlan, plan_vllm
from autotune.testing.gguf_models import SPECS, write_gguf, write_synthetic_vocab

FP8, AWQ = "qwen3.8-27b-fp8", "qwen3.8-27b-awq-int4"
H100, G4080 = get_gpu("h100-80g"), get_gpu("rtx-4080-super-32g")


@pytest.fixture(scope="module")
def gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("gguf")
    vocab = write_synthetic_vocab(root / "vocab.gguf", n_vocab=32000)
    return write_gguf(SPECS["tiny"], root / "tiny.gguf", vocab=vocab)


def test_default_versions_per_engine() -> None:
    assert default_version("sglang") == "0.5.17"
    assert default_version("vllm") == supported_versions()[-1]
    assert default_version("llamacpp") == PINNED_VERSION
    with pytest.raises(LookupError, match="unknown engine 'trt'"):
        default_version("trt")


def test_models_per_engine(gguf: Path) -> None:
    assert load_target_model("vllm", FP8) is load_card(FP8)
    model = load_target_model("llamacpp", str(gguf))
    assert isinstance(model, GGUFModel) and model.n_layer == SPECS["tiny"].n_layer
    with pytest.raises(ModelLoadError, match="loads one GGUF file"):
        load_target_model("llamacpp", FP8)  # a card name is no GGUF file
    with pytest.raises(ModelLoadError):
        load_target_model("sglang", str(gguf))  # a file is no model folder


def test_cpu_target_only_for_engines_that_run_on_a_cpu() -> None:
    assert resolve_target_gpu("llamacpp", "cpu") is None
    assert resolve_target_gpu("llamacpp", "h100-80g") == H100
    for engine in ("sglang", "vllm"):
        with pytest.raises(ConfigError, match=r"needs a GPU; `cpu` .* only for llamacpp"):
            resolve_target_gpu(engine, CPU_TARGET)


def test_plan_for_dispatches_to_each_planner(gguf: Path) -> None:
    card = load_card(AWQ)
    cfg = {"mem_fraction_static": 0.9}
    assert plan_for("sglang", card, G4080, cfg, version="0.5.17") == plan_sglang(
        card, G4080, cfg, version="0.5.17"
    )
    v = plan_for("vllm", FP8, H100, {"max_num_seqs": 8}, version="0.33.0")
    assert isinstance(v, VLLMPlan)
    assert v == plan_vllm(load_card(FP8), H100, {"max_num_seqs": 8}, version="0.33.0")
    cpu = plan_for("llamacpp", str(gguf), None, {"parallel": 2}, version="0.3.36", host_free_gib=8)
    assert isinstance(cpu, LlamaPlan) and cpu.gpu == "cpu" and cpu.max_running_requests == 2
    assert cpu == plan_llamacpp(gguf, {"parallel": 2}, version="0.3.36", host_free_gib=8)
    with pytest.raises(ConfigError, match="needs a GPU"):
        plan_for("vllm", FP8, None, {}, version="0.33.0")
    with pytest.raises(ConfigError, match="no tensor parallelism"):
        plan_for("llamacpp", str(gguf), None, {}, version="0.3.36", tp=2)
    with pytest.raises(ConfigError, match="plans from a GGUF file"):
        plan_for("llamacpp", card, None, {}, version="0.3.36")


def test_scheduler_plan_maps_vllm_speculation() -> None:
    card = load_card(FP8)
    mtp = plan_vllm(
        card,
        H100,
        {"speculative_method": "mtp", "num_speculative_tokens": 2},
        version="0.33.0",
    )
    assert scheduler_plan(mtp).speculative == {
        "algorithm": "EAGLE",
        "num_steps": 2,
        "eagle_topk": 1,
        "num_draft_tokens": 3,
    }
    ngram = plan_vllm(
        card,
        H100,
        {"speculative_method": "ngram", "num_speculative_tokens": 4},
        version="0.33.0",
    )
    assert scheduler_plan(ngram).speculative == {"algorithm": "NGRAM", "num_draft_tokens": 4}
    dflash = {"method": "dflash", "num_speculative_tokens": 5}
    mapped = scheduler_plan(ngram.model_copy(update={"speculative": dflash})).speculative
    assert mapped == {"algorithm": "DFLASH", "num_draft_tokens": 6}
    plain = plan_vllm(card, H100, {}, version="0.33.0")
    assert scheduler_plan(plain).speculative == {}
    sglang = plan_sglang(load_card(AWQ), G4080, {}, version="0.5.17")
    assert scheduler_plan(sglang) is sglang  # already in the perf model's terms


def test_target_facts_leave_out_what_the_target_cannot_state(gguf: Path) -> None:
    ctx, unknown = target_facts("sglang", load_card(AWQ), G4080, "0.5.17")
    assert not unknown and ctx.gpu_arch == G4080.arch and ctx.quantization == "awq"
    ctx, unknown = target_facts(
        "llamacpp", load_target_model("llamacpp", str(gguf)), None, "0.3.36"
    )
    assert unknown == {"gpu.name", "gpu.memory_gib", "gpu.arch", "gpu.vendor"} | {
        "model.mtp",
        "model.quantization",
    }
    assert ctx.engine_version == "0.3.36" and ctx.model_hybrid is False


def test_plan_target_is_the_cli_and_service_resolution(gguf: Path) -> None:
    v = plan_target("vllm", FP8, "h100-80g", {"max_num_seqs": 8}, tp=1, perf=True)
    assert v.engine == "vllm" and v.engine_version == supported_versions()[-1]
    assert v.perf is not None and v.perf["decode_tok_s"] > 0
    cpu = plan_target("llamacpp", str(gguf), "cpu", {"parallel": 4}, host_free_gib=4)
    assert cpu.engine_version == PINNED_VERSION and cpu.max_running_requests == 4
    with pytest.raises(ConfigError, match="needs a model card and a GPU"):
        plan_target("llamacpp", str(gguf), "cpu", {}, host_free_gib=4, perf=True)
    with pytest.raises(LookupError, match="page_size"):  # the adapter refuses SGLang's field
        plan_target("vllm", FP8, "h100-80g", {"page_size": 16})


def test_cli_plan_for_vllm_and_llamacpp(gguf: Path) -> None:
    from autotune.cli import app

    runner = CliRunner()
    done = runner.invoke(
        app, ["plan", "--engine", "vllm", "--model", FP8, "--gpu", "h100-80g", "--json"]
    )
    assert done.exit_code == 0, done.output
    out = json.loads(done.output)
    assert out["engine"] == "vllm" and out["engine_version"] == supported_versions()[-1]
    assert out["fits"] and out["block_size"] > 16  # hybrid: vLLM raises the block size
    done = runner.invoke(
        app,
        ["plan", "--engine", "llamacpp", "--model", str(gguf), "--gpu", "cpu"]
        + ["--host-free-gib", "8", "--set", "parallel=2"],
    )
    assert done.exit_code == 0, done.output
    assert f"on cpu (TP1), llama.cpp {PINNED_VERSION}: fits" in done.output
    done = runner.invoke(app, ["plan", "--engine", "sglang", "--model", AWQ, "--gpu", "cpu"])
    assert done.exit_code != 0 and "SGLang needs a GPU" in str(done.exception)
