"""A sliding-window EXAONE launch and its attention backend (planner.rocm_backend.
exaone_backend_reason) against the releases: which architectures the model-specific adjustments
assert fa3 / triton / trtllm_mha for, that those adjustments run before the default backend is
filled (so an unset backend is None there), and the 0.5.22 fill that sets one first."""

from __future__ import annotations

import ast
import re
import zipfile

import pytest

from autotune.hardware.gpus import get_gpu
from autotune.models.config_cards import config_card
from autotune.planner import sglang_history as history
from autotune.planner.rocm_backend import EXAONE_BACKENDS, EXAONE_CHECKED
from autotune.planner.sglang import plan_sglang
from tests.wheels import engine_wheel_or_skip

VERSIONS = ("0.5.8", "0.5.9", "0.5.14", "0.5.15", "0.5.18", "0.5.19", "0.5.21", "0.5.22", "0.5.23")
ASSERT_LINE = 'accepted_backends = ["fa3", "triton", "trtllm_mha"]'


def _sources(version: str) -> dict[str, str]:
    with zipfile.ZipFile(engine_wheel_or_skip("sglang", version)) as z:
        return {
            n: z.read(n).decode()
            for n in z.namelist()
            if n == "sglang/srt/server_args.py" or n.startswith("sglang/srt/arg_groups/")
        }


def _checked_architectures(sources: dict[str, str]) -> set[str]:
    """The architectures of the `elif model_arch in [...]` branch holding the assertion."""
    for text in sources.values():
        if ASSERT_LINE not in text:
            continue
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.If) and ASSERT_LINE.replace('"', "'") in ast.unparse(
                node.body[0]
            ):
                test = node.test
                assert isinstance(test, ast.Compare) and ast.unparse(test.left) == "model_arch"
                return set(ast.literal_eval(test.comparators[0]))
    return set()


def _runs_before_default(sources: dict[str, str]) -> bool:
    """Whether the model-specific adjustments run before the attention-backend defaults
    (ServerArgs.__post_init__, from 0.5.19 arg_groups/pipeline.py)."""
    text = sources.get("sglang/srt/arg_groups/pipeline.py") or sources["sglang/srt/server_args.py"]

    def call(name: str) -> int:
        found = re.search(
            rf"(self\._{name}\(\)|{name}\(server_args\)|{name}, server_args\))", text
        )
        assert found is not None, name
        return found.start()

    return call("handle_model_specific_adjustments") < call(
        "handle_attention_backend_compatibility"
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_exaone_backend_check_is_the_releases(version: str) -> None:
    rel = history.release(version)
    assert rel is not None
    sources = _sources(version)
    checked = _checked_architectures(sources)
    for arch, since in EXAONE_CHECKED.items():
        assert (arch in checked) is (rel >= since), (version, arch)
    assert checked <= set(EXAONE_CHECKED)
    if checked:
        assert _runs_before_default(sources), version
        assert set(EXAONE_BACKENDS) == {"fa3", "triton", "trtllm_mha"}
    fill = sources.get("sglang/srt/arg_groups/model_overrides/exaone.py", "")
    fills = 'overrides["attention_backend"] = "triton"' in fill
    assert fills is (rel >= (5, 22, 0)), version

    # The planner: a Gemma 3-shaped card (sliding and full layers) under EXAONE's architecture.
    gemma3 = config_card("google/gemma-3-4b-it")
    assert gemma3 is not None and gemma3.local_attention is not None
    exaone = gemma3.model_copy(update={"architecture": "Exaone4ForCausalLM"})
    for gpu in (get_gpu("mi355x-288g"), get_gpu("h100-80g")):
        for backend, fails in (
            (None, bool(checked) and not fills),
            ("triton", False),
            ("flashinfer", bool(checked)),
        ):
            cfg = {} if backend is None else {"attention_backend": backend}
            plan = plan_sglang(exaone, gpu, cfg, version=version)
            refused = any("--attention-backend" in reason for reason in plan.reasons)
            assert refused is fails, (version, gpu.name, backend, plan.reasons)
    dense = gemma3.model_copy(
        update={"architecture": "Exaone4ForCausalLM", "local_attention": None}
    )
    assert not any(
        "--attention-backend" in x for x in plan_sglang(dense, gpu, {}, version=version).reasons
    )
