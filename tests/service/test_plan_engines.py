"""The service's plan resolves as `autotune plan` does (one helper, planner.dispatch.plan_target):
the engine's default version, vLLM's planner, and `cpu` refused for engines that need a GPU."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from autotune.engines.vllm import supported_versions
from autotune.errors import ConfigError
from autotune.service.core import Service
from autotune.service.schemas import PlanRequest


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    svc = Service.open(tmp_path / "state", db=str(tmp_path / "autotune.db"))
    yield svc
    svc.store.close()


def test_plan_uses_the_engines_planner_and_default_version(service: Service) -> None:
    plan = service.plan(
        PlanRequest(
            model="qwen3.8-27b-fp8",
            gpu="h100-80g",
            engine="vllm",
            config={"max_num_seqs": 8},
        )
    )
    assert plan.engine == "vllm" and plan.engine_version == supported_versions()[-1]
    assert plan.fits and plan.max_running_requests == 8
    sglang = service.plan(PlanRequest(model="qwen3.8-27b-awq-int4", gpu="rtx-4080-super-32g"))
    assert sglang.engine == "sglang" and sglang.engine_version == "0.5.17"


def test_cpu_is_refused_for_a_gpu_engine(service: Service) -> None:
    with pytest.raises(ConfigError, match="vLLM needs a GPU"):
        service.plan(PlanRequest(model="qwen3.8-27b-fp8", gpu="cpu", engine="vllm"))
