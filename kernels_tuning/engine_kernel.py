"""The engine's own block-FP8 Triton GEMM for one release, run with its config lookup fed each
candidate (what SGLang's and vLLM's own tuning scripts do), so a tuned file is timed on the
kernel that release really launches.

Where the code comes from, in this order:
0. another environment's install (`site`: `kernels tune --engine-python` / `--site-packages`):
   its kernel module file, never imported here;
1. an installed engine of that release that imports: its kernel module itself;
2. the installed engine's module file, when importing it fails (missing GPU libraries);
3. that release's PyPI wheel (`pip download --no-deps`, cached; never committed), or its kernel
   module extracted earlier into the engine-kernel cache (a machine without a registry).

For 0, 2 and 3 the module is rebuilt standalone (kernels_tuning/engine_standalone.py) and written
into the cache so Triton can read its source.

The launcher reads its config through the module global `facts.lookup_function`; `run()`
replaces that global for the call with one that returns {M: candidate} (or None: the engine's
default config). For the correctness gate, the output the launcher allocates is filled with
NaN before the kernel writes it (`poison=True`), so an output element the kernel leaves
unwritten fails the gate instead of passing on stale memory.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import os
import sys
import zipfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from autotune.errors import ConfigError
from kernels_tuning.engine_standalone import check_fingerprint, standalone_source

if TYPE_CHECKING:
    import torch

    from autotune.engines.kernel_facts import KernelFacts
    from kernels_tuning.kernel_config import KernelConfig


def cache_root() -> Path:
    env = os.environ.get("AUTOTUNE_ENGINE_KERNEL_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "autotune" / "engine-kernels"


@dataclass
class EngineKernel:
    """One release's launcher, callable with a candidate config."""

    facts: KernelFacts
    module: ModuleType
    origin: str  # "import", "installed source" or "wheel"
    source_path: Path  # the engine's module file the code was taken from (cached copy for wheels)

    @property
    def label(self) -> str:
        return f"{self.facts.engine} {self.facts.version}"

    def facts_default(self) -> KernelConfig:
        """The config this release runs without a file."""
        from kernels_tuning.kernel_config import KernelConfig

        return KernelConfig.from_dict(dict(self.facts.default_config))

    def run(
        self,
        A: torch.Tensor,
        B: torch.Tensor,
        As: torch.Tensor,
        Bs: torch.Tensor,
        config: Mapping[str, int] | None,
        *,
        out_dtype: torch.dtype | None = None,
        poison: bool = False,
    ) -> torch.Tensor:
        """C = A @ B^T with block scales through the engine's launcher, fed `config`."""
        import torch

        launcher: Callable[..., torch.Tensor] = getattr(self.module, self.facts.kernel_function)
        feed = dict(config) if config is not None else None
        dtype = out_dtype or torch.bfloat16
        like = None
        if poison and "prepare_block_fp8_matmul_inputs" not in self.module.__dict__:
            like = torch.empty(
                (A.numel() // A.shape[-1], B.shape[0]), dtype=dtype, device=A.device
            )
        with self._fed(feed), self._poisoned(poison, like):
            del like
            return launcher(A, B, As, Bs, [128, 128], dtype)

    @contextlib.contextmanager
    def _fed(self, config: dict[str, int] | None) -> Iterator[None]:
        name = self.facts.lookup_function
        before = self.module.__dict__.get(name)

        def lookup(*_args: object) -> dict[int, dict[str, int]] | None:
            return {1: config} if config is not None else None

        setattr(self.module, name, lookup)
        try:
            yield
        finally:
            setattr(self.module, name, before)

    @contextlib.contextmanager
    def _poisoned(self, on: bool, like: torch.Tensor | None = None) -> Iterator[None]:
        """NaN-fill the output the launcher allocates. SGLang allocates it in
        `prepare_block_fp8_matmul_inputs`, which is wrapped; launchers that allocate inline
        (vLLM) get a freed NaN-filled block of the output's size on CUDA, which the caching
        allocator hands to the next allocation of that size."""
        prep_name = "prepare_block_fp8_matmul_inputs"
        prep = self.module.__dict__.get(prep_name)
        if not on:
            yield
            return
        if prep is None:
            if like is not None and like.is_cuda:
                like.fill_(float("nan"))
                del like
            yield
            return

        def poisoned(*args: Any, **kwargs: Any) -> Any:
            out = prep(*args, **kwargs)
            out[-1].fill_(float("nan"))
            return out

        setattr(self.module, prep_name, poisoned)
        try:
            yield
        finally:
            setattr(self.module, prep_name, prep)


def load_engine_kernel(
    engine: str,
    version: str,
    *,
    site: Path | None = None,
    allow_import: bool = True,
    cache: Path | None = None,
) -> EngineKernel:
    """The launcher of `engine` `version` (module docstring: where it comes from); `site`:
    another environment's site-packages that has it installed."""
    from autotune.engines.kernel_derive import facts_of  # a nightly: read where installed

    facts = facts_of(engine, version, site=site)
    if site is not None:
        path = site / facts.kernel_module
        if not path.is_file():
            raise ConfigError(
                f"{site} has no {facts.kernel_module}: not an install of {engine} {version}",
                field="--site-packages",
            )
        return _standalone(facts, path.read_text(), path, "installed source", cache)
    installed = _installed_module_file(facts)
    if installed is not None:
        if allow_import:
            mod = _try_import(facts)
            if mod is not None:
                check_fingerprint(facts, installed.read_text(), str(installed))
                return EngineKernel(facts, mod, "import", installed)
        return _standalone(facts, installed.read_text(), installed, "installed source", cache)
    src_path = _cached_source(facts, cache) or _source_from_wheel(facts, cache)
    return _standalone(facts, src_path.read_text(), src_path, "wheel", cache)


def _installed_module_file(facts: KernelFacts) -> Path | None:
    """The installed module file of this very release (another installed release: None)."""
    from autotune.engines.kernel_derive import installed_site
    from autotune.versions import try_version

    wanted = try_version(facts.version)
    site = None if wanted is None else installed_site(facts.engine, wanted)
    path = None if site is None else site / facts.kernel_module
    return path if path is not None and path.is_file() else None


def _try_import(facts: KernelFacts) -> ModuleType | None:
    name = facts.kernel_module.removesuffix(".py").replace("/", ".")
    try:
        return importlib.import_module(name)
    except Exception:  # noqa: BLE001 - any failure to import the engine: use its source instead
        return None


def _release_dir(facts: KernelFacts, cache: Path | None) -> Path:
    return (cache or cache_root()) / f"{facts.engine}-{facts.version}"


def _cached_source(facts: KernelFacts, cache: Path | None) -> Path | None:
    path = _release_dir(facts, cache) / Path(facts.kernel_module).name
    return path if path.is_file() else None


def _source_from_wheel(facts: KernelFacts, cache: Path | None) -> Path:
    from autotune.engines.wheels import engine_wheel

    try:
        wheel = engine_wheel(facts.engine, facts.version)
    except Exception as exc:
        raise ConfigError(
            f"{facts.engine} {facts.version} is not installed here and its wheel could not be "
            f"fetched ({type(exc).__name__}: {str(exc)[:200]}); install that release, or put "
            f"its {facts.kernel_module} into {_release_dir(facts, cache)}/",
            field="--engine-version",
        ) from exc
    with zipfile.ZipFile(wheel) as zf:
        try:
            text = zf.read(facts.kernel_module).decode()
        except KeyError as exc:
            raise ConfigError(
                f"{wheel.name} has no {facts.kernel_module}: the catalogued layout does not "
                "match this wheel",
                field="--engine-version",
            ) from exc
    dest = _release_dir(facts, cache) / Path(facts.kernel_module).name
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(text)
    return dest


def _standalone(
    facts: KernelFacts, source: str, where: Path, origin: str, cache: Path | None
) -> EngineKernel:
    text = standalone_source(facts, source, str(where))
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    out = _release_dir(facts, cache) / f"autotune_{_ident(facts)}_{digest}.py"
    if not out.is_file():
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(out)
    name = out.stem
    mod = sys.modules.get(name)
    if mod is None:
        spec = importlib.util.spec_from_file_location(name, out)
        if spec is None or spec.loader is None:
            raise ConfigError(f"cannot load the rebuilt kernel module {out}")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod  # Triton's JIT looks functions' modules up by name
        spec.loader.exec_module(mod)
    return EngineKernel(facts, mod, origin, where)


def _ident(facts: KernelFacts) -> str:
    return f"{facts.engine}_{facts.version}".replace(".", "_").replace("-", "_")


def honoured_config(cfg: Mapping[str, int], facts: KernelFacts, arch: str) -> dict[str, int]:
    """`cfg` as the engine file holds it: only the keys this release honours on `arch`, in the
    engine's spelling (SGLang's own files write SWAP_AB as true), defaults left out."""
    keys = facts.honoured_keys(arch)
    out: dict[str, int] = {}
    for key, value in cfg.items():
        if key not in keys:
            if key in ("SPLIT_K",) and int(value) == 1:
                continue
            if key in ("SWAP_AB", "FOLD_SCALES", "TMA", "ATOMIC_REDUCE") and not value:
                continue
            raise ConfigError(
                f"{facts.engine} {facts.version} does not honour {key} on {arch}; "
                f"honoured keys: {list(keys)}"
            )
        if key == "SWAP_AB":
            if value:
                out[key] = True
            continue
        if key == "SPLIT_K" and int(value) == 1:
            continue
        out[key] = int(value)
    return out


def main(argv: list[str] | None = None) -> None:
    """`python -m kernels_tuning.engine_kernel ENGINE VERSION [DIR]`: put that release's kernel
    module into the engine-kernel cache (DIR, default $AUTOTUNE_ENGINE_KERNEL_CACHE or
    ~/.cache/autotune/engine-kernels), from its wheel, for a machine without a registry."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (2, 3):
        raise SystemExit(main.__doc__)
    from autotune.engines.kernel_facts import facts_for

    cache = Path(args[2]) if len(args) == 3 else None
    facts = facts_for(args[0], args[1])
    path = _cached_source(facts, cache) or _source_from_wheel(facts, cache)
    check_fingerprint(facts, path.read_text(), str(path))
    print(path)


if __name__ == "__main__":
    main()
