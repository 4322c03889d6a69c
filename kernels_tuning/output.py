"""Tuned-config files, named the way each engine looks them up, and their provenance sidecars.

Layout under an output folder:

    sglang/N={N},K={K},device_name={DEV},dtype=fp8_w8a8,block_shape=[128, 128].json
    vllm/N={N},K={K},device_name={DEV},dtype=fp8_w8a8,block_shape=[128,128].json
    autotune/N={N},K={K},device_name={DEV},dtype=fp8_w8a8,block_shape=[128,128],split_k.json
    autotune/N={N},K={K},device_name={DEV},dtype=int4_w4a16,group_size=128,packing=awq.json
    <each file>.provenance.json  (sidecar: <name without .json>.provenance.json)

SGLang builds its name with Python's list repr (`[128, 128]`, with a space); vLLM writes
`[{block_n},{block_k}]` (no space): a file under the other name is silently never read.
DEV is `torch.cuda.get_device_name().replace(" ", "_")`, e.g. NVIDIA_H200. Keys are M as strings,
values the Triton config dicts. The engine files hold only the keys the engines' kernels read
(no SPLIT_K, SWAP_AB, FOLD_SCALES or TMA); the `autotune/` files are ours: FP8 with those allowed
(read by `kernels_tuning.shim`), and INT4 W4A16, which no engine loads from JSON. Our files carry
SPLIT_K always, SWAP_AB, FOLD_SCALES, TMA and ATOMIC_REDUCE only where 1 (older files without
them stay valid).

Every write goes to a temporary file in the same folder and is renamed over the target
(os.replace), so a reader never sees half a file and a killed run leaves the old file intact.
Writing merges with an existing file: keys this run did not tune are kept.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import logging
import os
import tempfile
import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from autotune.engines.kernel_source import code_fingerprint
from autotune.errors import ConfigError

log = logging.getLogger(__name__)
T = TypeVar("T")

ENGINES = ("sglang", "vllm")
PROVENANCE_SUFFIX = ".provenance.json"
# Provenance fields whose change makes a tuned file suspect (kernel-tuning-anchors §5.1, §5.3).
CHECKED_FIELDS = ("gpu_name", "sm_count", "cuda", "torch", "triton", "kernel_sha256")


class ProvenanceWarning(UserWarning):
    """A tuned file was made on a different GPU or software stack than the current one."""


def device_name_from(torch_name: str) -> str:
    """'NVIDIA H200' -> 'NVIDIA_H200' (both engines' rule)."""
    return torch_name.replace(" ", "_")


def current_device_name(device: int = 0) -> str:
    import torch

    return device_name_from(torch.cuda.get_device_name(device))


def sglang_filename(
    n: int,
    k: int,
    device_name: str,
    block_shape: tuple[int, int] = (128, 128),
    dtype: str = "fp8_w8a8",
) -> str:
    bn, bk = block_shape
    return f"N={n},K={k},device_name={device_name},dtype={dtype},block_shape=[{bn}, {bk}].json"


def vllm_filename(
    n: int,
    k: int,
    device_name: str,
    block_shape: tuple[int, int] = (128, 128),
    dtype: str = "fp8_w8a8",
) -> str:
    bn, bk = block_shape
    return f"N={n},K={k},device_name={device_name},dtype={dtype},block_shape=[{bn},{bk}].json"


def fp8_splitk_filename(
    n: int, k: int, device_name: str, block_shape: tuple[int, int] = (128, 128)
) -> str:
    """Our FP8 file: configs may carry SPLIT_K, which only our kernel reads."""
    return vllm_filename(n, k, device_name, block_shape)[: -len(".json")] + ",split_k.json"


def int4_filename(
    n: int, k: int, device_name: str, group_size: int = 128, packing: str = "awq"
) -> str:
    return (
        f"N={n},K={k},device_name={device_name},dtype=int4_w4a16,group_size={group_size},"
        f"packing={packing}.json"
    )


def provenance_path(config_path: Path) -> Path:
    name = config_path.name
    stem = name[: -len(".json")] if name.endswith(".json") else name
    return config_path.with_name(stem + PROVENANCE_SUFFIX)


# Refactors of the host code of kernel sources that files were tuned on: the refactored sources'
# hash -> the tuned sources', so those files stay valid and new sidecars name the same kernel.
# Only for changes that leave every @triton.jit function, the constants they read and the
# arguments of every launch as they were; any other change to the sources is a new kernel.
SAME_KERNEL: dict[str, str] = {
    # Issue 25 (the house): w8a8_block_fp8_matmul / w4a16_matmul as named steps, tensors typed,
    # the INT4 Triton code moved to int4_w4a16_jit.py.
    "5b55fef56a2c99e9153edf684f827c460a62d8ed391accf5558d5b03cd32726a": "496c2728ba91f1b225b76d7b4ccaec77a2fddc4d617ec4a846b3878b30538677",
    "76e0ffb746f1144d6395cb5799404a93ee6ae5f58948763ddde7ba806192f426": "eea5d981bf52bd34f701afe507d6fd1addb9d60578383dd6aa70a61f66df3d4d",
}


def kernel_source_sha256(kind: str) -> str:
    """Hash of the kernel's code (its module and the shared Triton helpers): a changed kernel
    invalidates tuned files. It hashes the syntax tree without docstrings, so reformatting or
    editing comments does not change it; a refactor listed in SAME_KERNEL gives the hash of the
    source it refactors."""
    here = Path(__file__).parent / "kernels"
    files = {
        "fp8": ["fp8_block.py", "_common.py"],
        "int4": [
            "int4_w4a16.py",
            "int4_w4a16_jit.py",
            "int4_awq_planes.py",
            "_atomic.py",
            "_common.py",
        ],
    }
    if kind not in files:
        raise ConfigError(f"unknown kernel kind {kind!r}; valid: {sorted(files)}", field="kind")
    h = hashlib.sha256()
    for f in files[kind]:
        h.update(code_fingerprint((here / f).read_text()).encode())
    return SAME_KERNEL.get(h.hexdigest(), h.hexdigest())


@dataclass
class Provenance:
    gpu_name: str
    sm_count: int | None = None
    smem_per_block: int | None = None
    l2_bytes: int | None = None
    driver: str | None = None
    cuda: str | None = None
    torch: str | None = None
    triton: str | None = None
    kernel: str = ""  # fp8 | int4
    kernel_sha256: str = ""
    # Files tuned on an engine's own kernel (`kernels tune --engine`): which release's kernel,
    # its fingerprint (autotune.engines.kernel_facts) and the GPU architecture, e.g. sm_90
    # (the keys an engine honours can depend on it).
    engine: str | None = None
    engine_version: str | None = None
    engine_kernel_fingerprint: str | None = None
    arch: str | None = None
    date: str = ""
    tool: str = "autotune kernels tune"
    timing: str = (
        "CUDA graph of back-to-back launches, L2 cold (rotating input sets >= 3x L2), "
        "median of 5 replays, bf16 output"
    )
    entries: dict[str, dict[str, Any]] = field(default_factory=dict)  # M -> us, evaluations...

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Provenance:
        known = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        return cls(**known)


def current_provenance(kind: str, device: int = 0) -> Provenance:
    """Facts about this machine (needs torch with CUDA)."""
    import torch
    import triton

    p = torch.cuda.get_device_properties(device)
    return Provenance(
        gpu_name=str(p.name),
        sm_count=int(p.multi_processor_count),
        smem_per_block=int(getattr(p, "shared_memory_per_block_optin", 0) or 0) or None,
        l2_bytes=int(getattr(p, "L2_cache_size", 0) or 0) or None,
        driver=_driver_version(),
        cuda=str(torch.version.cuda),
        torch=str(torch.__version__),
        triton=str(triton.__version__),
        kernel=kind,
        kernel_sha256=kernel_source_sha256(kind),
        arch=f"sm_{p.major}{p.minor}",
        date=_dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    )


def _driver_version() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            v = pynvml.nvmlSystemGetDriverVersion()
            return v.decode() if isinstance(v, bytes) else str(v)
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no NVML here: the field stays empty, nothing depends on it
        return None


def atomic_write_json(path: Path, obj: Any) -> None:
    """Write JSON to `path` via a temporary file in the same folder and os.replace."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(obj, f, indent=4)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_config_file(path: Path) -> dict[int, dict[str, int]]:
    """An engine-format file -> {M: config}. Bad content raises ConfigError naming the file."""
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError("no such file", source=str(path)) from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"not valid JSON ({exc})", source=str(path)) from None
    if not isinstance(raw, dict):
        raise ConfigError("expected an object of M -> config", source=str(path))
    out: dict[int, dict[str, int]] = {}
    for key, val in raw.items():
        try:
            m = int(key)
        except ValueError:
            raise ConfigError(
                f"key {key!r} is not an integer batch size", source=str(path)
            ) from None
        if not isinstance(val, dict):
            raise ConfigError(f"value of {key!r} is not a config object", source=str(path))
        out[m] = val
    return out


def merge_write(path: Path, entries: Mapping[int, Mapping[str, int]]) -> dict[int, dict[str, int]]:
    """Merge `entries` into the file at `path` (this run's keys win) and write atomically, keys
    sorted by M and stored as strings."""
    merged: dict[int, dict[str, int]] = {}
    if path.exists():
        merged.update(read_config_file(path))
    merged.update({int(m): dict(c) for m, c in entries.items()})
    atomic_write_json(path, {str(m): merged[m] for m in sorted(merged)})
    return merged


def write_provenance(config_path: Path, prov: Provenance) -> Path:
    """Write the sidecar, merging the per-M entries of an existing one."""
    side = provenance_path(config_path)
    entries: dict[str, dict[str, Any]] = {}
    if side.exists():
        try:
            entries.update(json.loads(side.read_text()).get("entries", {}))
        except (json.JSONDecodeError, AttributeError):
            log.warning("ignoring unreadable provenance sidecar %s", side)
    entries.update(prov.entries)
    data = prov.to_json()
    data["entries"] = {k: entries[k] for k in sorted(entries, key=int)}
    atomic_write_json(side, data)
    return side


def read_provenance(config_path: Path) -> Provenance | None:
    side = provenance_path(config_path)
    if not side.exists():
        return None
    try:
        return Provenance.from_json(json.loads(side.read_text()))
    except (json.JSONDecodeError, TypeError) as exc:
        raise ConfigError(f"unreadable provenance sidecar ({exc})", source=str(side)) from None


def provenance_differences(recorded: Provenance, current: Provenance) -> list[str]:
    """'field: recorded -> current' for each checked field that differs (unknowns skipped)."""
    out = []
    for f in CHECKED_FIELDS:
        a, b = getattr(recorded, f), getattr(current, f)
        if a in (None, "") or b in (None, ""):
            continue
        if a != b:
            out.append(f"{f}: {a} -> {b}")
    return out


def check_provenance(config_path: Path, current: Provenance | None = None) -> list[str]:
    """Differences between the file's sidecar and this machine; warns (ProvenanceWarning and
    the log) when there are any. Without a sidecar: one difference saying so."""
    recorded = read_provenance(config_path)
    if recorded is None:
        diffs = ["no provenance sidecar (made by another tool?)"]
    else:
        if current is None:
            try:
                current = current_provenance(recorded.kernel or "fp8")
            except Exception as exc:  # no CUDA here: nothing to compare against
                log.debug("provenance of %s not checked: %s", config_path.name, exc)
                return []
        diffs = provenance_differences(recorded, current)
    if diffs:
        msg = f"{config_path.name}: tuned under different conditions: " + "; ".join(diffs)
        warnings.warn(msg, ProvenanceWarning, stacklevel=2)
        log.warning("%s", msg)
    return diffs


def load_config_file(
    path: Path, *, current: Provenance | None = None, check: bool = True
) -> dict[int, dict[str, int]]:
    """Read a tuned file, warning when its provenance differs from this machine."""
    configs = read_config_file(path)
    if check:
        check_provenance(path, current)
    return configs


def nearest(configs: Mapping[int, T], m: int) -> T:
    """The engines' rule: the key nearest to M by absolute distance (ties: the smaller key)."""
    if not configs:
        raise ConfigError("empty config table")
    return configs[min(sorted(configs), key=lambda x: abs(x - m))]
