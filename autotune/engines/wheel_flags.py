"""Read the command-line flags an engine version accepts from its PyPI wheel's source, without
importing it (engines pull in CUDA libraries; reading the AST needs nothing).

Two registration styles are understood:
- `parser.add_argument("--flag", "--alias", ...)` calls (SGLang <= 0.5.1x, vLLM, and the
  flags SGLang 0.5.2x still registers by hand);
- SGLang 0.5.2x dataclass fields `name: A[T, Arg(...)]` / `A[T, "help"]`, whose flag is
  `Arg(cli_name=...)` or `--` + the field name with `-` for `_`, plus `Arg(aliases=[...])`;
  `Arg(no_cli=True)` registers nothing.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import zipfile
from collections.abc import Iterable
from pathlib import Path

from autotune.errors import ConfigError

# Which files of a wheel hold argument definitions, per engine.
SOURCES: dict[str, tuple[str, ...]] = {
    "sglang": ("sglang/srt/server_args.py", "sglang/srt/arg_groups/"),
    "vllm": ("vllm/engine/arg_utils.py", "vllm/entrypoints/openai/cli_args.py",
             "vllm/entrypoints/cli/serve.py", "vllm/config/"),
}


def flags_from_source(source: str) -> set[str]:
    """Every long flag one Python source file registers."""
    tree = ast.parse(source)
    flags: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _call_name(node) == "add_argument":
            flags.update(_long_flags(node.args))
        elif isinstance(node, ast.ClassDef):
            for stmt in node.body:
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                    flags.update(_annotated_field_flags(stmt.target.id, stmt.annotation))
    return flags


def flags_from_wheel(wheel: Path, engine: str) -> set[str]:
    """Flags of every argument-definition file of an engine wheel."""
    prefixes = SOURCES.get(engine)
    if prefixes is None:
        raise ConfigError(f"no flag sources known for engine {engine!r}; known: {sorted(SOURCES)}")
    flags: set[str] = set()
    with zipfile.ZipFile(wheel) as zf:
        for name in zf.namelist():
            if name.endswith(".py") and any(
                name == p or (p.endswith("/") and name.startswith(p)) for p in prefixes
            ):
                flags |= flags_from_source(zf.read(name).decode("utf-8", "replace"))
    return flags


def download_wheel(package: str, version: str, dest: Path) -> Path:
    """Download one wheel with pip (no dependencies) into dest, reusing a cached one."""
    dest.mkdir(parents=True, exist_ok=True)
    norm = package.replace("-", "_")
    cached = sorted(dest.glob(f"{norm}-{version}-*.whl"))
    if cached:
        return cached[0]
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "-q", "-d", str(dest), f"{package}=={version}"]
    subprocess.run(cmd, check=True, capture_output=True, timeout=900)
    found = sorted(dest.glob(f"{norm}-{version}-*.whl"))
    if not found:
        raise ConfigError(f"pip downloaded no wheel for {package}=={version} into {dest}")
    return found[0]


def _call_name(node: ast.Call) -> str | None:
    f = node.func
    if isinstance(f, ast.Attribute):
        return f.attr
    if isinstance(f, ast.Name):
        return f.id
    return None


def _long_flags(args: Iterable[ast.expr]) -> set[str]:
    return {
        a.value for a in args
        if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("--")
    }


def _annotated_field_flags(name: str, ann: ast.expr) -> set[str]:
    # A[T, Arg(...)] or A[T, "help"]
    if not (isinstance(ann, ast.Subscript) and isinstance(ann.value, ast.Name)
            and ann.value.id == "A" and isinstance(ann.slice, ast.Tuple)
            and len(ann.slice.elts) >= 2):
        return set()
    meta = ann.slice.elts[1]
    if isinstance(meta, ast.Constant) and isinstance(meta.value, str):
        return {"--" + name.replace("_", "-")}
    if not (isinstance(meta, ast.Call) and _call_name(meta) == "Arg"):
        return set()
    kw = {k.arg: k.value for k in meta.keywords if k.arg}
    no_cli = kw.get("no_cli")
    if isinstance(no_cli, ast.Constant) and no_cli.value is True:
        return set()
    cli = kw.get("cli_name")
    flags = {cli.value} if isinstance(cli, ast.Constant) and isinstance(cli.value, str) else {
        "--" + name.replace("_", "-")
    }
    aliases = kw.get("aliases")
    if isinstance(aliases, ast.List | ast.Tuple):
        flags |= _long_flags(aliases.elts)
    return flags
