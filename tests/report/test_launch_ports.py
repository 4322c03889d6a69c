"""launch.sh's PORT default is the engine's own (its adapter's build_command default): SGLang
30000, vLLM 8000, llama-server 8080; a port the sweep fixed wins."""

from __future__ import annotations

import pytest

from autotune.report.launch import build_launch, render_launch_sh


@pytest.mark.parametrize(
    ("engine", "version", "config", "port"),
    [
        ("sglang", "0.5.17", {"mem_fraction_static": 0.9}, 30000),
        ("vllm", "0.33.0", {"max_num_seqs": 8}, 8000),
        ("llamacpp", "0.3.36", {"parallel": 2}, 8080),
    ],
)
def test_default_port_per_engine(engine: str, version: str, config: dict, port: int) -> None:
    spec = build_launch(config, engine=engine, engine_version=version, sweep="s", model_path="/m")
    assert spec.port == port
    assert f"PORT={port}\n" in render_launch_sh(spec)
    fixed = build_launch(
        config, engine=engine, engine_version=version, sweep="s", model_path="/m", port=9001
    )
    assert fixed.port == 9001
