"""The sweep's target per engine, through the planner dispatch: versions by engine, the CPU
target, which engines the simulator impersonates, a GGUF model in the gate (rules it cannot
decide are skipped), one request limited by its context, and the simulator's argv for vLLM."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from autotune.engines import get_adapter
from autotune.errors import ConfigError
from autotune.planner import load_target_model
from autotune.space import builtin_space
from autotune.space.loader import parse_space
from autotune.sweep.executors import gpu_groups
from autotune.sweep.planning import TrialPlanner
from autotune.sweep.spec import parse_spec
from autotune.sweep.trial import TrialSpec, engine_command
from autotune.testing.gguf_models import SPECS, write_gguf, write_synthetic_vocab
from tests.sweep.conftest import DROP, make_spec


@pytest.fixture(scope="module")
def gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("gguf")
    vocab = write_synthetic_vocab(root / "vocab.gguf", n_vocab=32000)
    return write_gguf(SPECS["tiny"], root / "tiny.gguf", vocab=vocab)


def cpu_spec(model: str, **changes: object) -> dict[str, object]:
    return make_spec(
        **{
            "target.engine": "llamacpp",
            "target.engine_version": DROP,
            "target.model": model,
            "target.gpu": "cpu",
            "simulate": DROP,
            "space.overrides": {},
            **changes,
        }
    )


def test_engine_version_defaults_per_engine() -> None:
    from autotune.engines.llamacpp.binary import PINNED_VERSION
    from autotune.engines.vllm import supported_versions

    sg = parse_spec(make_spec(**{"target.engine_version": DROP}))
    assert sg.target.engine_version == "0.5.17"
    vl = parse_spec(
        make_spec(
            **{"target.engine": "vllm", "target.engine_version": DROP, "space.overrides": {}}
        )
    )
    assert vl.target.engine_version == supported_versions()[-1] and vl.simulated
    lc = parse_spec(cpu_spec("/m.gguf"))
    assert lc.target.engine_version == PINNED_VERSION and lc.target.cpu and not lc.simulated


def test_cpu_target_and_simulator_engines_are_checked() -> None:
    with pytest.raises(ConfigError, match=r"target\.gpu: sglang needs a GPU; gpu `cpu`"):
        parse_spec(make_spec(**{"target.gpu": "cpu", "simulate": DROP}))
    with pytest.raises(ConfigError, match=r"simulate: the simulated engine impersonates"):
        parse_spec(cpu_spec("/m.gguf", simulate={"time_scale": 10}, **{"target.gpu": "h100-80g"}))
    with pytest.raises(ConfigError, match=r"target\.gpu: the simulated engine needs a named GPU"):
        parse_spec(make_spec(**{"target.gpu": "cpu"}))


def test_gpu_groups_for_a_cpu_target() -> None:
    assert gpu_groups(3, 1, simulate=False, cpu=True) == [None, None, None]


def test_gate_on_a_gguf_cpu_target(gguf: Path) -> None:
    """No gpu.* or model-card facts: rules that test them are skipped, not guessed; the others
    still prune. A slot's context limits one request even when the pool could hold it."""
    data = builtin_space("llamacpp").to_dict()
    data["rules"].append(
        {
            "id": "needs-hopper",
            "source": "test",
            "reason": "decided by a GPU fact",
            "when": {"gpu.arch": "sm_90"},
            "require": {"parallel": 1},
        }
    )
    space = parse_space(yaml.safe_dump(data), source="test")
    model = load_target_model("llamacpp", str(gguf))
    planner = TrialPlanner(
        card=model,
        gpu=None,
        space=space,
        version="0.3.36",
        host_free_gib=8,
        need_tokens=2000,
        engine="llamacpp",
    )
    assert planner.skipped_rules == ["needs-hopper"]
    assert "gpu.arch" in planner.unknown_facts
    base = {"ctx_size": 4096, "kv_unified": False, "cache_type_k": "f16", "cache_type_v": "f16"}
    ok = planner.assess({**base, "parallel": 2})  # 2048 tokens per slot
    assert ok.fits, ok.reasons
    assert ok.plan is not None and ok.plan["gpu"] == "cpu"
    short = planner.assess({**base, "parallel": 4})  # 1024 per slot, 4096 in the pool
    assert not short.fits and short.reasons[0].startswith("context too short for the workload")
    assert short.constraints["kv_fit"] > 0
    rule = planner.assess({**base, "parallel": 2, "cache_type_v": "q8_0", "flash_attn": "off"})
    assert not rule.fits and rule.rule_ids == ["fa-for-quantized-v"]


def test_simulated_vllm_trial_runs_the_simulator_as_vllm() -> None:
    spec = TrialSpec(
        sweep="s",
        number=0,
        config={"max_num_seqs": 8},
        engine="vllm",
        engine_version="0.33.0",
        model="qwen3.8-27b-fp8",
        gpu="h100-80g",
        simulate=True,
        sim_time_scale=20,
        scenarios=[],
        log_dir="/tmp/x",
    )
    argv, _ = engine_command(spec, get_adapter("vllm"), 1234)
    assert argv[1:5] == ["-m", "autotune.sim", "--sim-engine", "vllm"]
    assert argv[5:7] == ["--model", "qwen3.8-27b-fp8"]
    assert "--max-num-seqs" in argv and argv[argv.index("--sim-gpu") + 1] == "h100-80g"
    sglang = spec.model_copy(update={"engine": "sglang", "config": {}, "engine_version": "0.5.17"})
    argv, _ = engine_command(sglang, get_adapter("sglang"), 1234)
    assert argv[1:3] == ["-m", "autotune.sim"] and "--sim-engine" not in argv
