"""KTransformers expert offload on SGLang: the rule against the 0.5.6.post2, 0.5.10.post1, 0.5.18
and 0.5.23 wheels' kt_ep_wrapper, the planner's arithmetic, the two public H100 launches it explains
(Qwen3-30B-A3B-FP8 and DeepSeek-R1-0528 with every routed expert on the CPU), and why the
RTX 3090 LLAMAFILE launch stays unpredicted (its GPU expert count, which has no default, is not
stated)."""

from __future__ import annotations

import ast
import zipfile
from pathlib import Path

import pytest

from autotune.calibration.records import load_records
from autotune.calibration.replay import NO_DEFAULT, replay
from autotune.hardware import get_gpu
from autotune.models.card import ModelCard
from autotune.models.config_cards import config_card
from autotune.models.hf.layer_params import card_layers
from autotune.planner.sglang import plan_sglang
from autotune.planner.sglang_kt import KT_SINCE, kt_card, routed_expert_bytes
from tests.wheels import engine_wheel_or_skip, function_def, wheel_text

RECORDS = Path(__file__).resolve().parents[1] / "data" / "real_launches"
WRAPPER = "sglang/srt/layers/moe/kt_ep_wrapper.py"


@pytest.mark.parametrize("version", ["0.5.6.post2", "0.5.10.post1", "0.5.18", "0.5.23"])
def test_gpu_builds_only_its_experts(version: str) -> None:
    src = wheel_text("sglang", version, WRAPPER)
    create = ast.unparse(function_def(src, "create_weights"))
    assert "self.gpu_method.create_weights(" in create
    assert "num_experts=self.num_gpu_experts" in create
    config = ast.unparse(function_def(src, "create_kt_config_from_server_args"))
    assert "kt_weight_path is None" in config and "return None" in config


@pytest.mark.parametrize(
    ("version", "has"), [("0.5.4.post1", False), ("0.5.5", False), ("0.5.6", True)]
)
def test_first_release_with_the_wrapper(version: str, has: bool) -> None:
    # 0.5.4.post1: a compressed-tensors-only AMX path; 0.5.5 the release just before KT_SINCE
    with zipfile.ZipFile(engine_wheel_or_skip("sglang", version)) as z:
        assert (WRAPPER in z.namelist()) is has
    v = tuple(int(p) for p in version.split(".")[:3])
    assert (v >= KT_SINCE) is has


def _qwen() -> ModelCard:
    card = config_card("Qwen/Qwen3-30B-A3B-Instruct-2507-FP8")
    assert card is not None and card.experts is not None
    return card


def test_expert_share_leaves_the_gpu() -> None:
    card, notes, reasons = _qwen(), list[str](), list[str]()
    e = card.experts
    assert e is not None
    routed = routed_expert_bytes(card)
    # 48 layers x 128 experts x 3 x 2048 x 768, one byte each (FP8) and a float32 scale per
    # 128 x 128 block
    assert routed == int(48 * 128 * 3 * 2048 * 768 * (1 + 4 / 128**2))
    none = kt_card(
        card, {"kt_weight_path": "/kt", "kt_num_gpu_experts": 0}, (0, 5, 18), reasons, notes
    )
    assert none.weights.decoder == card.weights.decoder - routed
    half = kt_card(card, {"kt_weight_path": "/kt", "kt_num_gpu_experts": 64}, (0, 5, 18), [], [])
    assert half.weights.decoder == card.weights.decoder - routed // 2
    assert not reasons and any("KTransformers" in n for n in notes)


@pytest.mark.parametrize(
    ("model", "per_weight", "outside_gb"),
    [
        ("openai/gpt-oss-120b", 0.5 + 1 / 32, 2.2),  # MXFP4: an E8M0 scale per 32 weights
        ("RedHatAI/Qwen3.6-35B-A3B-NVFP4", 0.5 + 1 / 16, 3.0),  # NVFP4: FP8 per 16
    ],
)
def test_routed_experts_carry_their_scales(
    model: str, per_weight: float, outside_gb: float
) -> None:
    """The experts' scales move and are read with them: counted at 4 bits, gpt-oss-120b's 3.6 GB
    of expert scales stayed in what every decode step reads (perf.PerfModel)."""
    card = config_card(model)
    assert card is not None
    params = sum(p.experts for p in card_layers(card))
    routed = routed_expert_bytes(card)
    assert routed == int(params * per_weight)
    assert (card.weights.decoder - routed) / 1e9 < outside_gb  # attention, router, norms


def test_without_the_weight_path_or_before_the_release_nothing_moves() -> None:
    card = _qwen()
    assert kt_card(card, {"kt_num_gpu_experts": 0}, (0, 5, 18), [], []) is card
    assert (
        kt_card(card, {"kt_weight_path": "/kt", "kt_num_gpu_experts": 0}, (0, 5, 4), [], [])
        is card
    )


def test_missing_gpu_expert_count_is_a_reason() -> None:
    h100 = get_gpu("h100-80g")
    plan = plan_sglang(_qwen(), h100, {"kt_weight_path": "/kt"}, version="0.5.18")
    assert not plan.fits and any("--kt-num-gpu-experts" in r for r in plan.reasons)


@pytest.mark.parametrize(
    ("name", "weights_tol"),
    [
        ("s16f-qwen3-30b-a3b-fp8-kt-amxint8-h100-tp1", 0.12),
        ("s16f-deepseek-r1-0528-kt-amxint4-h100-tp8", 0.02),
    ],
)
def test_public_launches(name: str, weights_tol: float) -> None:
    r = replay(next(rec for rec in load_records(RECORDS) if rec.name == name))
    assert r.plan is not None and r.observed.weights_gib is not None
    assert r.plan.weights_gib == pytest.approx(r.observed.weights_gib, abs=weights_tol)
    assert r.kv_ratio == pytest.approx(1.0, abs=0.05)


def _call_to(tree: ast.AST, name: str) -> ast.Call:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and ast.unparse(node.func).endswith(name):
            return node
    raise AssertionError(f"no call to {name}: the release changed its code")


def test_method_only_picks_the_cpu_backend() -> None:
    # 0.5.10.post1: kt_method (AMXINT4, AMXINT8, LLAMAFILE, ...) reaches KTMoEWrapper (kt-kernel's
    # CPU side) and nothing else; the GPU method builds the same experts whatever it is.
    src = wheel_text("sglang", "0.5.10.post1", WRAPPER)
    create = function_def(src, "create_weights")
    gpu = _call_to(create, "gpu_method.create_weights")
    cpu = _call_to(create, "KTMoEWrapper")
    assert "method" not in {k.arg for k in gpu.keywords}
    assert "method=self.kt_config.method" in ast.unparse(cpu)
    layer = wheel_text("sglang", "0.5.10.post1", "sglang/srt/layers/moe/fused_moe_triton/layer.py")
    assert "kt_method" not in layer
    card = _qwen()
    llamafile = {"kt_weight_path": "/kt", "kt_num_gpu_experts": 8, "kt_method": "LLAMAFILE"}
    amx = {**llamafile, "kt_method": "AMXINT4"}
    ours = kt_card(card, llamafile, (0, 5, 10), [], []).weights
    assert ours == kt_card(card, amx, (0, 5, 10), [], []).weights


@pytest.mark.parametrize(
    ("version", "explicit", "path"),
    [
        ("0.5.6.post2", True, "server_args.py"),
        ("0.5.10.post1", True, "server_args.py"),
        ("0.5.18", False, "server_args.py"),
        ("0.5.23", False, "arg_groups/fields/exec_.py"),
    ],
)
def test_gpu_expert_count_has_no_default(version: str, explicit: bool, path: str) -> None:
    src = wheel_text("sglang", version, f"sglang/srt/{path}")
    tree = ast.parse(src)
    field = next(
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.AnnAssign) and ast.unparse(n.target) == "kt_num_gpu_experts"
    )
    assert field.value is not None and ast.unparse(field.value) == "None"
    # An explicit add_argument without default= (0.5.6 .. 0.5.10.post1), or (0.5.18) a flag
    # built from the annotated field, whose default is the one above.
    flags = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
        and any(isinstance(a, ast.Constant) and a.value == "--kt-num-gpu-experts" for a in n.args)
    ]
    assert all("default" not in {k.arg for k in f.keywords} for f in flags)
    assert bool(flags) is explicit
    assert "kt_num_gpu_experts" in NO_DEFAULT["sglang"]


def test_llamafile_launch_without_its_gpu_expert_count() -> None:
    name = "field-qwen3-30b-a3b-kt-llamafile-rtx3090-tp1"
    rec = next(r for r in load_records(RECORDS) if r.name == name)
    assert "kt_num_gpu_experts" in rec.unstated and not rec.unmodelled
    r = replay(rec)
    assert r.plan is None and r.unstated
    assert r.skipped is not None and "kt_num_gpu_experts" in r.skipped


def test_a_packs_unquantized_experts_count_at_their_dtype() -> None:
    """Laguna's NVFP4 pack keeps layers 40-47's experts in bf16 (its ignore list): the card's own
    count stores them so (WeightBytes.experts), and the routed bytes are that count, not the
    scheme's 0.5625 bytes a weight for every expert."""
    card = config_card("poolside/Laguna-S-2.1-NVFP4")
    assert card is not None and card.experts is not None
    params = sum(p.experts for p in card_layers(card))
    routed = routed_expert_bytes(card)
    assert routed == card.weights.experts
    assert routed > 1.3 * params * (0.5 + 1 / 16)  # bf16 experts in the mix
    offloaded = kt_card(
        card, {"kt_weight_path": "/kt", "kt_num_gpu_experts": 0}, (0, 5, 18), [], []
    )
    assert offloaded.weights.decoder == card.weights.decoder - routed
    assert offloaded.weights.experts == 0
