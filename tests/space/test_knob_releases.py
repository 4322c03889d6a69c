"""The engine facts behind the knobs of the built-in spaces, read from the releases themselves
(the PyPI wheels): the attention kernels' GPU limits the rules encode, the defaults the
simulator prices against, and the flag the SGLang space leaves out because nothing reads it."""

from __future__ import annotations

import re
import zipfile

import pytest

from autotune.space import builtin_space
from tests.wheels import engine_wheel_or_skip

SRT = "sglang/srt/"


def _files(engine: str, version: str) -> dict[str, str]:
    prefix = SRT if engine == "sglang" else "vllm/"
    with zipfile.ZipFile(engine_wheel_or_skip(engine, version)) as z:
        return {
            n: z.read(n).decode(errors="replace")
            for n in z.namelist()
            if n.startswith(prefix) and n.endswith(".py")
        }


@pytest.mark.parametrize("version", ["0.5.9", "0.5.17", "0.5.23"])
def test_sglang_kernel_limits_and_defaults(version: str) -> None:
    files = _files("sglang", version)
    # rules fa3-arch*: the FA3 backend's own assertion
    registry = files[SRT + "layers/attention/attention_registry.py"]
    assert "FlashAttention v3 Backend requires SM>=80 and SM<=90" in registry
    # the simulator's lpm: fcfs above 128 waiting requests
    policy = files[SRT + "managers/schedule_policy.py"]
    assert re.search(r"len\(waiting_queue\) > 128|WAITING_QUEUE_PREFIX_MATCH_MAX = 128", policy)
    # a cuda_graph_bs_decode list sets the largest captured size (planner graph_max_bs)
    graphs = files.get(SRT + "arg_groups/memory_hook.py", "") + files.get(
        SRT + "server_args.py", ""
    )
    assert re.search(r"max_bs = max\((self\.cuda_graph_bs|decode_cuda_graph_config\.bs)\)", graphs)
    # rule rocm-kv-splits: ROCm forces 16 splits
    amd = files.get(SRT + "arg_groups/platform_hook.py", "") + files.get(
        SRT + "server_args.py", ""
    )
    assert re.search(r"triton_attention_num_kv_splits\s*=\s*16", amd)


@pytest.mark.parametrize("version", ["0.5.9", "0.5.17", "0.5.23"])
def test_num_continuous_decode_steps_is_never_read(version: str) -> None:
    """Why the SGLang space does not search it: only the argument definitions name it."""
    files = _files("sglang", version)
    readers = sorted(
        n
        for n, text in files.items()
        if "num_continuous_decode_steps" in text
        and not n.startswith(SRT + "arg_groups/")
        and n != SRT + "server_args.py"
    )
    assert readers == []
    assert "num_continuous_decode_steps" not in builtin_space("sglang").parameters


def test_sglang_trtllm_mha_and_gdn_kernel_limits() -> None:
    hook = _files("sglang", "0.5.23")[SRT + "arg_groups/attention_hook.py"]
    assert "requires Hopper (SM90), Blackwell (SM100), or SM120 GPUs" in hook  # trtllm-mha-arch
    gdn = _files("sglang", "0.5.17")[SRT + "layers/attention/linear/kernels/gdn_flashinfer.py"]
    assert re.search(r"get_device_capability\(\)\[0\] >= 9", gdn)  # linear-attn-flashinfer-arch


@pytest.mark.parametrize(
    ("version", "low"),
    [("0.19.0", "DeviceCapability(7, 5)"), ("0.24.0", "DeviceCapability(8, 0)")],
)
def test_vllm_attention_capabilities(version: str, low: str) -> None:
    files = _files("vllm", version)
    flashinfer = files["vllm/v1/attention/backends/flashinfer.py"]
    body = flashinfer[flashinfer.index("def supports_compute_capability") :][:900]
    body = re.sub(r"\s+", "", body)  # the releases wrap the bound differently
    assert f"capability>={low}".replace(" ", "") in body  # flashinfer-arch
    assert "<=DeviceCapability(12,1)" in body
    flash = files["vllm/v1/attention/backends/flash_attn.py"]
    assert "capability >= DeviceCapability(8, 0)" in flash  # flash-attn-arch


@pytest.mark.parametrize(
    ("version", "default"), [("0.13.0", "bool = False"), ("0.19.0", "bool | None = None")]
)
def test_vllm_async_scheduling_default(version: str, default: str) -> None:
    """The planner's async_scheduling: off up to 0.13.0, automatic (None) from 0.14.0."""
    scheduler = _files("vllm", version)["vllm/config/scheduler.py"]
    assert f"async_scheduling: {default}" in scheduler


def test_sglang_hybrid_gdn_blackwell_backends() -> None:
    """Rules hybrid-gdn-*: the backends each release allows a hybrid GDN model on Blackwell."""
    reg = SRT + "layers/attention/attention_registry.py"
    old = _files("sglang", "0.5.9")[reg]
    assert "triton or trtllm_mha backend are the only supported backends on Blackwell" in old
    mid = _files("sglang", "0.5.17")[reg]
    assert 'allowed = {"triton", "trtllm_mha", "flashinfer"}' in mid  # sm_120
    assert 'allowed = {"triton", "trtllm_mha", "fa4"}' in mid  # sm_100
    new = _files("sglang", "0.5.23")[reg]
    assert 'HYBRID_GDN_SM100_BACKENDS = {"triton", "trtllm_mha", "fa4", "flashinfer"}' in new


def test_sglang_speculative_tree_and_no_buffer_rules() -> None:
    """Rules spec-topk-page (triton from 0.5.13) and mamba-no-buffer-trtllm (0.5.14+)."""
    files = _files("sglang", "0.5.23")
    hooks = "".join(v for k, v in files.items() if k.startswith(SRT + "arg_groups/"))
    assert '_PAGE_TREE_SPEC_BACKENDS = ("flashinfer", "fa3", "triton")' in hooks
    assert "no_buffer do not support trtllm_mha attention backend" in hooks


def test_vllm_flash_attention_fp8_kv() -> None:
    """Rules flash-attn-fp8-kv and fp8-kv-0.10: FlashAttention checks fp8 KV support (FA3 on
    Hopper) in every release, and 0.10.x refuses it at init off Hopper."""
    old = _files("vllm", "0.10.1.1")["vllm/v1/attention/backends/flash_attn.py"]
    assert "flash_attn_supports_fp8" in old
    fa = _files("vllm", "0.19.0")
    utils = fa["vllm/v1/attention/backends/fa_utils.py"]
    body = utils[utils.index("def flash_attn_supports_fp8") :][:300]
    assert "get_flash_attn_version() == 3" in body and "is_device_capability_family(90)" in body
