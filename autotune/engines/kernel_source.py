"""An engine's kernel code as source text: fingerprints and top-level definitions, read with `ast`
(the engine is never imported here: it pulls in CUDA libraries and pins torch).

A fingerprint hashes the syntax tree without docstrings, so a release that only reformats or
re-documents a kernel keeps its fingerprint, and one that changes the code does not. The engine
kernel catalog (`autotune.engines.kernel_facts`) records, per release, the fingerprint of the
Triton kernels and the Python launcher that SGLang or vLLM runs for block-FP8 GEMMs; a tuned file
carries the fingerprint of the kernel it was timed on, and `autotune kernels install` compares it
with the installed release's.
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Iterable
from typing import Any

_VERSION_FIELDS = {"type_params", "type_comment", "kind", "ctx"}


def code_fingerprint(source: str | ast.AST) -> str:
    """A serialization of the syntax tree without docstrings that does not depend on the Python
    version (ast.dump does: 3.12 added FunctionDef.type_params)."""
    tree = ast.parse(source) if isinstance(source, str) else source

    def ser(node: object) -> str:
        if isinstance(node, ast.AST):
            fields = [f for f in node._fields if f not in _VERSION_FIELDS]
            body = getattr(node, "body", None)
            parts = []
            for f in fields:
                v = getattr(node, f, None)
                if f == "body" and isinstance(body, list) and _is_docstring(body):
                    v = body[1:]
                parts.append(f"{f}={ser(v)}")
            return f"{type(node).__name__}({','.join(parts)})"
        if isinstance(node, list):
            return "[" + ",".join(ser(x) for x in node) + "]"
        return repr(node)

    return ser(tree)


def _is_docstring(body: list[ast.stmt]) -> bool:
    first = body[0] if body else None
    return (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    )


def top_level(source: str) -> dict[str, ast.stmt]:
    """Top-level function and class definitions by name. An unconditional definition wins over
    one under a top-level `if` (the engines redefine helpers under `if _is_hip:`); among
    either kind the last one wins, as at run time."""
    conditional: dict[str, ast.stmt] = {}
    plain: dict[str, ast.stmt] = {}

    def visit(body: Iterable[ast.stmt], out: dict[str, ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                out[node.name] = node
            elif isinstance(node, ast.If):
                visit(node.body, conditional)
                visit(node.orelse, conditional)

    visit(ast.parse(source).body, plain)
    return {**conditional, **plain}


# Module flags that are False on an NVIDIA GPU in SGLang and vLLM (ROCm, MI355/gfx1250, MUSA,
# Ascend, CPU, AITER): branches they guard never run on CUDA.
NOT_ON_CUDA = frozenset(
    {"_is_hip", "_is_gfx1250", "_is_musa", "_is_npu", "_is_cpu", "_use_aiter", "_is_xpu"}
)


class _CudaView(ast.NodeTransformer):
    """Drops `if FLAG:` branches for flags in NOT_ON_CUDA, keeping their `else`."""

    def visit_If(self, node: ast.If) -> Any:
        self.generic_visit(node)
        if isinstance(node.test, ast.Name) and node.test.id in NOT_ON_CUDA:
            return node.orelse or None
        return node


def cuda_view(node: ast.stmt) -> ast.stmt:
    """`node` as it runs on CUDA: branches that only ROCm and other back ends take are gone, so
    a release that only adds such a branch keeps the fingerprint of the kernel CUDA runs."""
    import copy

    out = _CudaView().visit(copy.deepcopy(node))
    assert isinstance(out, ast.stmt)
    return out


def definitions_fingerprint(source: str, names: Iterable[str]) -> str:
    """sha256 over the named top-level definitions of `source` (sorted by name), as they run on
    CUDA (`cuda_view`)."""
    defs = top_level(source)
    h = hashlib.sha256()
    for name in sorted(set(names)):
        node = defs.get(name)
        if node is None:
            raise KeyError(name)
        h.update(name.encode())
        h.update(b"\0")
        body = [cuda_view(node)]
        h.update(code_fingerprint(ast.Module(body=body, type_ignores=[])).encode())
        h.update(b"\0")
    return h.hexdigest()


def unconditional_function(source: str, name: str) -> ast.FunctionDef | None:
    """The top-level `def name` outside any `if` (what runs on CUDA: the engines redefine some
    helpers under `if _is_hip:`), the last one when defined twice, as at run time."""
    found = [
        n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == name
    ]
    return found[-1] if found else None


def free_names(fn: ast.FunctionDef) -> set[str]:
    """Names a function reads from its module or the builtins: every name it loads (decorators,
    annotations and defaults included) that it does not bind itself."""
    bound = {a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)}
    bound |= {a.arg for a in (fn.args.vararg, fn.args.kwarg) if a is not None}
    loaded: set[str] = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)  # lambda and nested function parameters
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            if node is not fn:
                bound.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return loaded - bound
