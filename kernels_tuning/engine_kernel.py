"""The engine's own block-FP8 Triton GEMM for one release, run with its config lookup fed each
candidate (what SGLang's and vLLM's own tuning scripts do), so a tuned file is timed on the
kernel that release really launches.

Where the code comes from, in this order:
1. an installed engine of that release that imports: its kernel module itself;
2. the installed engine's module file, when importing it fails (missing GPU libraries);
3. that release's PyPI wheel (`pip download --no-deps`, cached; never committed), or its kernel
   module extracted earlier into the engine-kernel cache (a machine without a registry).

For 2 and 3 the module is rebuilt standalone: the launcher (`facts.kernel_function`), the
@triton.jit kernels and every top-level helper they reach, copied verbatim from the engine's
source (the kernels' fingerprint is checked against the catalog, so what runs is that
release's code), plus the standard imports it has and stand-ins for the engine's own helpers
(`_is_cuda`, `get_platform().is_sm90`, loggers). Names it needs that no stand-in covers are an
error naming them (a release whose launcher grew a new dependency). The module is written into
the cache so Triton can read its source.

The launcher reads its config through the module global `facts.lookup_function`; `run()`
replaces that global for the call with one that returns {M: candidate} (or None: the engine's
default config). For the correctness gate, the output the launcher allocates is filled with
NaN before the kernel writes it (`poison=True`), so an output element the kernel leaves
unwritten fails the gate instead of passing on stale memory.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib
import importlib.util
import os
import symtable
import sys
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from autotune.engines.kernel_source import definitions_fingerprint
from autotune.errors import ConfigError

if TYPE_CHECKING:
    from autotune.engines.kernel_facts import KernelFacts
    from kernels_tuning.space import KernelConfig

# Standard and GPU-stack modules the rebuilt module may import as the engine does.
KEPT_IMPORTS = frozenset(
    {"torch", "triton", "functools", "json", "logging", "os", "typing", "math", "itertools"}
)
# Stand-ins for the engine helpers its launcher and lookup reach (CUDA, not ROCm/MUSA/NPU).
STAND_INS = '''
import logging
import os

import torch
import triton
import triton.language as tl

_is_cuda = True
_is_hip = False
_is_gfx1250 = False
_is_musa = False
_is_npu = False
_is_cpu = False
_use_aiter = False
logger = logging.getLogger("autotune.engine_kernel")


def log_info_on_rank0(logger, msg):
    logger.info(msg)


def get_device_name(device_id=0):
    return torch.cuda.get_device_name(device_id)


def get_device_name_as_file_name():
    return torch.cuda.get_device_name().replace(" ", "_")


def get_device_core_count(device_id=0):
    return torch.cuda.get_device_properties(device_id).multi_processor_count


class _AutotunePlatform:
    """What the launcher asks of SGLang's platform object. AUTOTUNE_ENGINE_ARCH (e.g. sm_90)
    answers for tests under Triton's interpreter, where no GPU can be asked."""

    @property
    def is_sm90(self):
        forced = os.environ.get("AUTOTUNE_ENGINE_ARCH")
        if forced:
            return forced == "sm_90"
        return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


def get_platform():
    return _AutotunePlatform()


class _AutotuneVllmPlatform:
    """What vLLM's launcher asks of `current_platform` on CUDA."""

    def is_rocm(self):
        return False

    def is_cuda(self):
        return True

    def fp8_dtype(self):
        return torch.float8_e4m3fn

    def get_device_name(self, device_id=0):
        return torch.cuda.get_device_name(device_id)


current_platform = _AutotuneVllmPlatform()


class envs:
    """vLLM's environment switches, at their defaults (a batch-invariant run skips the file)."""

    VLLM_BATCH_INVARIANT = False
'''
_MODULE_NAMES = frozenset({"__file__", "__name__", "__doc__"})
_STAND_IN_NAMES = frozenset(top for top in compile(STAND_INS, "<stand-ins>", "exec").co_names)


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
        from kernels_tuning.space import KernelConfig

        return KernelConfig.from_dict(dict(self.facts.default_config))

    def run(
        self,
        A: Any,
        B: Any,
        As: Any,
        Bs: Any,
        config: Mapping[str, Any] | None,
        *,
        out_dtype: Any = None,
        poison: bool = False,
    ) -> Any:
        """C = A @ B^T with block scales through the engine's launcher, fed `config`."""
        import torch

        launcher = getattr(self.module, self.facts.kernel_function)
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
    def _fed(self, config: dict[str, Any] | None) -> Iterator[None]:
        name = self.facts.lookup_function
        before = self.module.__dict__.get(name)

        def lookup(*_args: Any) -> dict[int, Any] | None:
            return {1: config} if config is not None else None

        setattr(self.module, name, lookup)
        try:
            yield
        finally:
            setattr(self.module, name, before)

    @contextlib.contextmanager
    def _poisoned(self, on: bool, like: Any = None) -> Iterator[None]:
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
    engine: str, version: str, *, allow_import: bool = True, cache: Path | None = None
) -> EngineKernel:
    """The launcher of `engine` `version` (module docstring: where it comes from)."""
    from autotune.engines.kernel_facts import facts_for

    facts = facts_for(engine, version)
    installed = _installed_module_file(facts)
    if installed is not None:
        if allow_import:
            mod = _try_import(facts)
            if mod is not None:
                _check_fingerprint(facts, installed.read_text(), str(installed))
                return EngineKernel(facts, mod, "import", installed)
        return _standalone(facts, installed.read_text(), installed, "installed source", cache)
    src_path = _cached_source(facts, cache) or _source_from_wheel(facts, cache)
    return _standalone(facts, src_path.read_text(), src_path, "wheel", cache)


def _installed_module_file(facts: KernelFacts) -> Path | None:
    """The installed module file of this very release (another installed release: None)."""
    from importlib import metadata

    try:
        spec = importlib.util.find_spec(facts.engine)
        installed_version = metadata.version(facts.engine)
    except (ImportError, ValueError, metadata.PackageNotFoundError):
        return None
    if spec is None or not spec.submodule_search_locations or installed_version != facts.version:
        return None
    site = Path(next(iter(spec.submodule_search_locations))).parent
    path = site / facts.kernel_module
    return path if path.is_file() else None


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


def _check_fingerprint(facts: KernelFacts, source: str, where: str) -> None:
    names = [*facts.jit_kernels, facts.kernel_function]
    try:
        fp = definitions_fingerprint(source, names)
    except KeyError as exc:
        raise ConfigError(
            f"{where} does not define {exc.args[0]!r}, which the catalog lists for "
            f"{facts.engine} {facts.version}"
        ) from exc
    if fp != facts.kernel_fingerprint:
        raise ConfigError(
            f"{where}: the kernel code differs from {facts.engine} {facts.version}'s as "
            f"catalogued (fingerprint {fp[:12]}, catalog {facts.kernel_fingerprint[:12]}); "
            "a patched or mislabelled install"
        )


def standalone_source(facts: KernelFacts, source: str, where: str) -> str:
    """The rebuilt module's text: kept imports, stand-ins, then the engine's definitions."""
    _check_fingerprint(facts, source, where)
    tree = ast.parse(source)
    imports = [n for n in tree.body if _kept_import(n)]
    imported = {
        (a.asname or a.name).split(".")[0]
        for n in imports
        for a in n.names  # type: ignore[attr-defined]
    }
    defs = _unconditional_defs(tree)
    assigns = _simple_assigns(tree)
    table = symtable.symtable(source, where, "exec")
    order: list[str] = []
    missing: list[str] = []
    pending = [*facts.jit_kernels, facts.kernel_function]
    seen: set[str] = set()
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in defs or name in assigns:
            order.append(name)
            pending.extend(_globals_used(table, name, defs.get(name) or assigns[name]))
        elif (
            name in imported
            or name in _STAND_IN_NAMES
            or _is_builtin(name)
            or name in _MODULE_NAMES
        ):
            continue
        elif name == facts.lookup_function:
            continue  # fed per call
        else:
            missing.append(name)
    if missing:
        raise ConfigError(
            f"{facts.engine} {facts.version}: the launcher {facts.kernel_function} reaches "
            f"{sorted(missing)}, which the standalone loader cannot provide; install that "
            "release so its module imports"
        )
    lines = [ast.get_source_segment(source, n) or "" for n in imports]
    body = [n for n in tree.body if _name_of(n) in order]  # in the engine's own order
    parts = [
        f"# Rebuilt by autotune from {where} ({facts.engine} {facts.version}); generated.",
        *lines,
        STAND_INS,
    ]
    for node in body:
        seg = _segment_with_decorators(source, node)
        parts.append(seg)
    return "\n\n".join(parts) + "\n"


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


def _kept_import(node: ast.stmt) -> bool:
    if isinstance(node, ast.Import):
        return all(a.name.split(".")[0] in KEPT_IMPORTS for a in node.names)
    if isinstance(node, ast.ImportFrom):
        return node.level == 0 and (node.module or "").split(".")[0] in KEPT_IMPORTS
    return False


def _name_of(node: ast.stmt) -> str | None:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return node.name
    if isinstance(node, ast.Assign) and len(node.targets) == 1:
        t = node.targets[0]
        return t.id if isinstance(t, ast.Name) else None
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return node.target.id
    return None


def _unconditional_defs(tree: ast.Module) -> dict[str, ast.stmt]:
    """Top-level definitions outside any `if` (the CUDA path: `if _is_hip:` variants excluded)."""
    return {
        n.name: n
        for n in tree.body
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    }


def _simple_assigns(tree: ast.Module) -> dict[str, ast.stmt]:
    """Top-level `NAME = expr` whose value calls nothing from the engine (constants, dtypes)."""
    out: dict[str, ast.stmt] = {}
    for n in tree.body:
        name = _name_of(n)
        if name is None or isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        if not any(isinstance(x, ast.Call) for x in ast.walk(n)):
            out[name] = n
    return out


def _globals_used(table: symtable.SymbolTable, name: str, node: ast.stmt) -> set[str]:
    """Module-level names a definition uses: its body's globals (nested scopes included), and
    its decorators', annotations' and defaults' names (evaluated at module level)."""
    used: set[str] = set()
    for child in table.get_children():
        # by line too: `if _is_hip:` may define the same name again
        if child.get_name() == name and child.get_lineno() == node.lineno:
            used |= _table_globals(child)
    for part in _module_level_parts(node):
        used |= {x.id for x in ast.walk(part) if isinstance(x, ast.Name)}
    return used


def _table_globals(t: symtable.SymbolTable) -> set[str]:
    out = {s.get_name() for s in t.get_symbols() if s.is_global() and s.is_referenced()}
    for child in t.get_children():
        out |= _table_globals(child)
    return out


def _module_level_parts(node: ast.stmt) -> list[ast.AST]:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        a = node.args
        parts: list[ast.AST] = [*node.decorator_list, *a.defaults]
        parts += [d for d in a.kw_defaults if d is not None]
        parts += [x.annotation for x in [*a.posonlyargs, *a.args, *a.kwonlyargs] if x.annotation]
        if node.returns is not None:
            parts.append(node.returns)
        return parts
    if isinstance(node, ast.ClassDef):
        return [*node.decorator_list, *node.bases]
    return [node]


def _segment_with_decorators(source: str, node: ast.stmt) -> str:
    lines = source.splitlines()
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
    end = node.end_lineno or node.lineno
    return "\n".join(lines[first - 1 : end])


def _is_builtin(name: str) -> bool:
    import builtins

    return hasattr(builtins, name)


def honoured_config(cfg: Mapping[str, Any], facts: KernelFacts, arch: str) -> dict[str, Any]:
    """`cfg` as the engine file holds it: only the keys this release honours on `arch`, in the
    engine's spelling (SGLang's own files write SWAP_AB as true), defaults left out."""
    keys = facts.honoured_keys(arch)
    out: dict[str, Any] = {}
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
    _check_fingerprint(facts, path.read_text(), str(path))
    print(path)


if __name__ == "__main__":
    main()
