"""The committed engine kernel catalog (autotune/data/kernel_facts.json) and its generator.

The offline tests check what the catalog says per release range; the wheel tests read SGLang
0.5.15, 0.5.17, 0.5.23 and vLLM 0.32.0 again with tests/engines/regen_kernel_facts.py and
compare (AUTOTUNE_KERNEL_FACTS_ALL=1: every catalogued release). Wheels are cached in
$AUTOTUNE_WHEEL_CACHE or ~/.cache/autotune/wheels; the wheel tests skip only when PyPI cannot be
reached.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from packaging.version import Version

from autotune.engines.kernel_derive import (
    LayoutError,
    Sources,
    facts_from_sources,
    facts_from_wheel,
    facts_of,
)
from autotune.engines.kernel_facts import (
    facts_for,
    known_versions,
    normalize_arch,
    releases_with_fingerprint,
)
from autotune.errors import ConfigError
from tests.installs import dist_info
from tests.wheels import engine_wheel_or_skip

from .regen_kernel_facts import SGLANG_RELEASES, VLLM_RELEASES

HOPPER = ("SPLIT_K", "SWAP_AB")
CHECKED = {("sglang", "0.5.15"), ("sglang", "0.5.17"), ("sglang", "0.5.23"), ("vllm", "0.32.0")}


def _sglang(lo: str, hi: str) -> list[str]:
    return [v for v in SGLANG_RELEASES if Version(lo) <= Version(v) <= Version(hi)]


def test_catalog_holds_every_release() -> None:
    assert known_versions("sglang") == SGLANG_RELEASES
    assert known_versions("vllm") == VLLM_RELEASES
    assert {"0.5.10.post1", "0.5.12.post1", "0.5.13.post1", "0.5.15.post1"} <= set(
        known_versions("sglang")
    )


@pytest.mark.parametrize(
    ("versions", "folder"),
    [
        (_sglang("0.5.9", "0.5.15.post1"), "sglang/srt/layers/quantization"),
        (_sglang("0.5.16", "0.5.20"), "sglang/kernels/ops/quantization"),
        (_sglang("0.5.21", "0.5.23"), "sglang/kernels/ops/gemm"),
    ],
)
def test_sglang_folder_layouts(versions: list[str], folder: str) -> None:
    assert versions
    for v in versions:
        f = facts_for("sglang", v)
        assert f.config_dir == f"{folder}/configs", v
        assert f.lookup_module == f.kernel_module == f"{folder}/fp8_kernel.py", v
        assert f.lookup_function == "get_w8a8_block_fp8_configs"
        assert f.kernel_function == "w8a8_block_fp8_matmul_triton"
        assert f.env_config_dir is None


def test_vllm_reads_one_folder_and_names_its_launcher() -> None:
    for v in VLLM_RELEASES:
        f = facts_for("vllm", v)
        assert f.config_dir == "vllm/model_executor/layers/quantization/utils/configs", v
        old = Version(v) <= Version("0.11.0")
        assert f.kernel_function == (
            "w8a8_block_fp8_matmul" if old else "w8a8_triton_block_scaled_mm"
        ), v
        assert f.jit_kernels == (
            ("_w8a8_block_fp8_matmul",) if old else ("_w8a8_triton_block_scaled_mm",)
        ), v
        assert f.arch_keys == {} and f.split_k_values == ()


def test_swap_ab_and_split_k_only_from_0_5_21_and_only_on_sm_90() -> None:
    plain = (
        "BLOCK_SIZE_M",
        "BLOCK_SIZE_N",
        "BLOCK_SIZE_K",
        "GROUP_SIZE_M",
        "num_warps",
        "num_stages",
    )
    for v in SGLANG_RELEASES:
        f = facts_for("sglang", v)
        assert f.keys == plain, v
        for arch in ("sm_80", "sm_89", "sm_100", "sm_120", None):
            assert f.honoured_keys(arch) == plain, (v, arch)
        new = Version(v) >= Version("0.5.21")
        assert set(f.honoured_keys("sm_90")) == set(plain) | (set(HOPPER) if new else set()), v
        if new:
            assert dict(f.arch_keys) == {"SPLIT_K": ("sm_90",), "SWAP_AB": ("sm_90",)}
            assert dict(f.arch_key_defaults) == {"SPLIT_K": 1, "SWAP_AB": 0}
            assert f.split_k_values == (1, 2, 4, 8, 16, 32, 64)
            assert "_w8a8_block_fp8_matmul_hopper" in f.jit_kernels
            assert "_reduce_block_fp8_split_k" in f.jit_kernels
        else:
            assert f.arch_keys == {} and f.split_k_values == (), v
        # HIP-only kernels are not what runs on CUDA
        assert not any("gfx" in k or "unrolled" in k for k in f.jit_kernels), v


def test_default_configs() -> None:
    base = {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 32}
    for v in SGLANG_RELEASES:
        assert dict(facts_for("sglang", v).default_config) == {
            **base,
            "num_warps": 4,
            "num_stages": 3,
        }
    for v in VLLM_RELEASES:
        assert dict(facts_for("vllm", v).default_config) == {
            **base,
            "num_warps": 4,
            "num_stages": 2,
        }


def test_file_names_and_device_names() -> None:
    sg = facts_for("sglang", "0.5.23")
    vl = facts_for("vllm", "0.32.0")
    assert sg.file_name_for(5120, 6144, "NVIDIA_H200") == (
        "N=5120,K=6144,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128].json"
    )
    assert vl.file_name_for(5120, 6144, "NVIDIA_H200") == (
        "N=5120,K=6144,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128].json"
    )
    for v in VLLM_RELEASES:
        assert "[{block_n},{block_k}]" in facts_for("vllm", v).file_name
    for v in SGLANG_RELEASES:
        assert "[{block_n}, {block_k}]" in facts_for("sglang", v).file_name
    name = sg.file_name_for(7168, 5120, "NVIDIA_H100_80GB_HBM3", (64, 32))
    assert sg.parse_file_name(name) == (7168, 5120, "NVIDIA_H100_80GB_HBM3", (64, 32))
    assert vl.parse_file_name(name) is None  # the space: vLLM never reads SGLang's name
    # vLLM >= 0.26 squeezes runs of blanks and slashes (get_device_name_as_file_name)
    assert facts_for("vllm", "0.25.1").device_file_name("A/B  C") == "A/B__C"
    assert vl.device_file_name("A/B  C") == "A_B_C"
    assert sg.device_file_name("NVIDIA H200") == "NVIDIA_H200"


def test_unknown_release_names_the_known_ones() -> None:
    with pytest.raises(ConfigError) as exc:
        facts_for("sglang", "0.5.99")
    msg = str(exc.value)
    assert "sglang 0.5.99" in msg and "0.5.9," in msg and "0.5.23" in msg
    assert "regen_kernel_facts.py" in msg
    with pytest.raises(ConfigError) as exc:  # a nightly has no wheel: where it is installed
        facts_for("vllm", "0.34.1.dev5+g0123abc")
    assert "kernels install" in str(exc.value) and "regen" not in str(exc.value)
    with pytest.raises(ConfigError, match="known: sglang, vllm"):
        facts_for("llama", "1.0")
    with pytest.raises(ConfigError, match="not a version"):
        facts_for("vllm", "latest")


def test_post_releases_compare_as_versions() -> None:
    assert facts_for("sglang", "0.5.15.post1").version == "0.5.15.post1"
    assert facts_for("sglang", "0.5.15post1").version == "0.5.15.post1"
    assert facts_for("vllm", "0.10.1.1").version == "0.10.1.1"


def test_fingerprint_groups() -> None:
    hopper = facts_for("sglang", "0.5.23").kernel_fingerprint
    assert releases_with_fingerprint("sglang", hopper) == ("0.5.21", "0.5.22", "0.5.23")
    plain = facts_for("sglang", "0.5.17").kernel_fingerprint
    assert releases_with_fingerprint("sglang", plain) == tuple(_sglang("0.5.10", "0.5.18"))
    assert releases_with_fingerprint("sglang", "0" * 64) == ()
    for v in VLLM_RELEASES:
        assert len(facts_for("vllm", v).kernel_fingerprint) == 64
    # 0.34.0 launches the same Triton kernel as 0.32.0 and 0.33.0
    newest = facts_for("vllm", "0.34.0").kernel_fingerprint
    assert releases_with_fingerprint("vllm", newest)[-3:] == ("0.32.0", "0.33.0", "0.34.0")


def test_entry_problems() -> None:
    f = facts_for("sglang", "0.5.23")
    base = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1}
    base |= {"num_warps": 4, "num_stages": 4}
    assert f.entry_problems(base, "sm_80") == []
    assert f.entry_problems({**base, "SWAP_AB": 1, "SPLIT_K": 4}, "sm_90a") == []
    (p,) = f.entry_problems({**base, "SWAP_AB": 1}, "sm_80")
    assert "SWAP_AB" in p and "sm_80" in p
    (p,) = f.entry_problems({**base, "SWAP_AB": 0, "SPLIT_K": 1}, "sm_90")
    assert "do not select" in p
    (p,) = f.entry_problems({**base, "SPLIT_K": 3}, "sm_90")
    assert "SPLIT_K=3" in p
    assert facts_for("sglang", "0.5.17").entry_problems({**base, "SWAP_AB": 1}, "sm_90")
    assert f.entry_problems({**base, "TMA": 1}, "sm_90")


def test_block_k_clamp() -> None:
    assert facts_for("sglang", "0.5.11").clamped_block_k(64) == 64  # no clamp
    assert facts_for("sglang", "0.5.12").clamped_block_k(64) == 128  # every BK < block_k
    assert facts_for("sglang", "0.5.13.post1").block_k_clamp == "below"
    late = facts_for("sglang", "0.5.15")
    assert late.block_k_clamp == "below_non_divisor"
    assert late.clamped_block_k(64) == 64 and late.clamped_block_k(96) == 128
    assert facts_for("vllm", "0.33.0").clamped_block_k(32) == 32
    assert facts_for("vllm", "0.34.0").clamped_block_k(32) == 32


def test_arch_names() -> None:
    assert normalize_arch("sm_90a") == normalize_arch("SM90") == normalize_arch("9.0") == "sm_90"
    assert normalize_arch("sm_100") == "sm_100"


# ---------------------------------------------------------------------------------------------
# the generator on sources it must read, and on sources it must refuse

KERNEL = """
import functools, json, os
import triton
import triton.language as tl

@triton.jit
def _kernel(A, B, C, M, N, K, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr,
            BLOCK_SIZE_K: tl.constexpr, GROUP_SIZE_M: tl.constexpr):
    pass

@functools.lru_cache
def get_w8a8_block_fp8_configs(N, K, block_n, block_k):
    device_name = get_device_name().replace(" ", "_")
    json_file_name = f"N={N},K={K},device_name={device_name},dtype=fp8_w8a8,block_shape=[{block_n}, {block_k}].json"
    config_file_path = os.path.join(os.path.dirname(os.path.realpath(__file__)), "configs", json_file_name)
    if os.path.exists(config_file_path):
        with open(config_file_path) as f:
            return {int(key): val for key, val in json.load(f).items()}
    return None

def w8a8_block_fp8_matmul_triton(A, B, As, Bs, block_size, output_dtype=None):
    M, N, K = 1, 2, 3
    configs = get_w8a8_block_fp8_configs(N, K, block_size[0], block_size[1])
    if configs:
        config = configs[min(configs.keys(), key=lambda x: abs(x - M))]
    else:
        config = {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": block_size[0], "BLOCK_SIZE_K": block_size[1],
                  "GROUP_SIZE_M": 32, "num_warps": 4, "num_stages": 3}
    _kernel[(1,)](A, B, None, M, N, K, **config)
"""
DISPATCH = "from sglang.ops.fp8 import w8a8_block_fp8_matmul_triton\n"


def _synthetic(kernel: str) -> Sources:
    files = {
        "sglang/srt/layers/quantization/fp8_utils.py": DISPATCH,
        "sglang/ops/fp8.py": kernel,
    }
    return Sources("sglang", "9.9.9", files)


def test_generator_reads_a_known_layout() -> None:
    f = facts_from_sources(_synthetic(KERNEL))
    assert f.config_dir == "sglang/ops/configs" and f.lookup_module == "sglang/ops/fp8.py"
    assert f.jit_kernels == ("_kernel",) and not f.arch_keys
    assert f.keys[:4] == ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M")


def test_generator_reads_an_installed_package(tmp_path: Path) -> None:
    """The same reading from a site-packages folder (a nightly where it is installed): files
    are read when the path is followed, nothing else of the package is walked."""
    for path, text in _synthetic(KERNEL).files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    (tmp_path / "sglang" / "unrelated.py").write_text("this is not python (\n")
    src = Sources.from_site(tmp_path, "sglang", "9.9.9")
    assert facts_from_sources(src) == facts_from_sources(_synthetic(KERNEL))
    assert "sglang/unrelated.py" in src.files and "sglang/gone.py" not in src.files
    assert "other/fp8.py" not in src.files  # only the engine's own package


def test_facts_of_a_nightly_this_interpreter_has_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`kernels tune --engine sglang --engine-version BUILD` on a nightly: no catalogued release
    and no wheel, so its facts are read from the installed package that this interpreter sees
    (never imported), and only when its metadata names that very build."""
    for path, text in _synthetic(KERNEL).files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    (tmp_path / "sglang" / "__init__.py").write_text("raise ImportError('never imported')\n")
    dist_info(tmp_path, "sglang", "0.5.24.dev1+g0123abc")
    monkeypatch.syspath_prepend(str(tmp_path))
    f = facts_of("sglang", "0.5.24.dev1")  # the public version names the local build too
    assert f.config_dir == "sglang/ops/configs" and f.version == "0.5.24.dev1"
    assert f.kernel_fingerprint == facts_from_sources(_synthetic(KERNEL)).kernel_fingerprint
    with pytest.raises(ConfigError, match="no kernel facts for sglang 0.5.24.dev2"):
        facts_of("sglang", "0.5.24.dev2")  # another build than the installed one


@pytest.mark.parametrize(
    ("old", "new", "what"),
    [
        (
            'os.path.join(os.path.dirname(os.path.realpath(__file__)), "configs", json_file_name)',
            'os.path.join(CONFIG_ROOT, "configs", json_file_name)',
            "config path",
        ),
        (
            'device_name = get_device_name().replace(" ", "_")',
            "device_name = os.environ['GPU']",
            "reads the environment",
        ),
        ("**config)", "**config, USE_TMA=config.get('USE_TMA'))", "no kernel takes"),
        ('"num_stages": 3}', '"num_stages": 3, "EXTRA": 2}', "not kernel param"),
        ("_kernel[(1,)]", "pick()[(1,)]", "not recognized"),
    ],
)
def test_generator_fails_loudly_on_an_unknown_layout(old: str, new: str, what: str) -> None:
    assert old in KERNEL
    with pytest.raises(LayoutError) as exc:
        facts_from_sources(_synthetic(KERNEL.replace(old, new)))
    assert "sglang 9.9.9" in str(exc.value) and what in str(exc.value)


def test_generator_fails_when_the_launcher_moved() -> None:
    src = _synthetic(KERNEL)
    src.files[next(iter(src.files))] = DISPATCH.replace("sglang.ops.fp8", "sglang.ops.gone")
    with pytest.raises(LayoutError, match="sglang 9.9.9: cannot tell where"):
        facts_from_sources(src)


# ---------------------------------------------------------------------------------------------
# the catalog against the wheels


def wheel(engine: str, version: str) -> Path:
    return engine_wheel_or_skip(engine, version)


ALL = [("sglang", v) for v in SGLANG_RELEASES] + [("vllm", v) for v in VLLM_RELEASES]


@pytest.mark.parametrize(("engine", "version"), ALL, ids=[f"{e}-{v}" for e, v in ALL])
def test_catalog_matches_the_wheel(engine: str, version: str) -> None:
    if (engine, version) not in CHECKED and not os.environ.get("AUTOTUNE_KERNEL_FACTS_ALL"):
        pytest.skip("set AUTOTUNE_KERNEL_FACTS_ALL=1 to check every release")
    assert facts_from_wheel(wheel(engine, version), engine, version) == facts_for(engine, version)
