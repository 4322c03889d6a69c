"""An engine's kernel module rebuilt standalone, for a release that is not installed or whose
module does not import here (kernels_tuning/engine_kernel.py loads it): the launcher
(`facts.kernel_function`), the @triton.jit kernels and every top-level helper they reach, copied
verbatim from the engine's source (the kernels' fingerprint is checked against the catalog, so
what runs is that release's code), plus the standard imports it has and stand-ins for the
engine's own helpers (`_is_cuda`, `get_platform().is_sm90`, loggers). Names it needs that no
stand-in covers are an error naming them (a release whose launcher grew a new dependency).
"""

from __future__ import annotations

import ast
import symtable
from typing import TYPE_CHECKING

from autotune.engines.kernel_source import definitions_fingerprint
from autotune.errors import ConfigError

if TYPE_CHECKING:
    from autotune.engines.kernel_facts import KernelFacts

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


def check_fingerprint(facts: KernelFacts, source: str, where: str) -> None:
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
    check_fingerprint(facts, source, where)
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
