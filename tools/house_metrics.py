"""Figures of the code's shape (issue 25, "the house"): import circles among autotune's and
kernels_tuning's modules (imports inside functions count), the largest modules and functions,
uses of `Any`, and lines under reports/ and benchmarks/.

    .venv/bin/python tools/house_metrics.py [--json]
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("autotune", "kernels_tuning")
# Generated tables and catalogs: data in code form, exempt from the size rules.
GENERATED = ("_catalog.py", "engine_fields.py")


def modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = path.relative_to(ROOT).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def from_module(name: str, path: Path, node: ast.ImportFrom) -> str:
    """The absolute name of the module a `from ... import` in module `name` (file `path`) reads
    from, relative imports resolved."""
    if not node.level:
        return node.module or ""
    base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """Internal modules `name` imports anywhere in its body (a package import counts as its
    __init__; `from pkg import mod` counts as pkg.mod when that is a module)."""
    tree = ast.parse(path.read_text(), str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name in known:
                    found.add(a.name)
        elif isinstance(node, ast.ImportFrom):
            mod = from_module(name, path, node)
            if mod in known:
                found.add(mod)
            for a in node.names:
                sub = f"{mod}.{a.name}"
                if sub in known:
                    found.add(sub)
    found.discard(name)
    # A module importing its own package's __init__ is Python's normal loading order.
    return {m for m in found if not name.startswith(m + ".")}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                elif nxt in on:
                    low[v] = min(low[v], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return sorted(out)


def functions(path: Path) -> list[tuple[str, int]]:
    tree = ast.parse(path.read_text(), str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno:
            out.append((node.name, node.end_lineno - node.lineno + 1))
    return out


def lines_under(folder: Path) -> int:
    total = 0
    for p in folder.rglob("*"):
        if p.is_file():
            try:
                total += p.read_text().count("\n")
            except (UnicodeDecodeError, OSError):
                continue
    return total


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--top", type=int, default=10)
    a = ap.parse_args()
    mods = modules()
    known = set(mods)
    graph = {m: imports_of(m, p, known) for m, p in mods.items()}
    circles = cycles(graph)
    sizes = sorted(
        (
            (p.read_text().count("\n"), m)
            for m, p in mods.items()
            if not p.name.endswith(GENERATED)
        ),
        reverse=True,
    )
    funcs = sorted(
        ((n, f"{m}.{f}") for m, p in mods.items() for f, n in functions(p)), reverse=True
    )
    any_count = sum(p.read_text().count("Any") for p in mods.values())
    result = {
        "import_circles": len(circles),
        "circles": circles,
        "modules_over_500_lines": sum(1 for n, _ in sizes if n > 500),
        "largest_modules": sizes[: a.top],
        "functions_over_60_lines": sum(1 for n, _ in funcs if n > 60),
        "largest_functions": funcs[: a.top],
        "any_uses": any_count,
        "lines_reports": lines_under(ROOT / "reports"),
        "lines_benchmarks": lines_under(ROOT / "benchmarks"),
        "bytes_reports": sum(
            p.stat().st_size for p in (ROOT / "reports").rglob("*") if p.is_file()
        ),
    }
    if a.json:
        print(json.dumps(result, indent=1))
        return 0
    print(f"import circles: {len(circles)}")
    for c in circles:
        print("  " + " <-> ".join(c))
    print(f"modules over 500 lines: {result['modules_over_500_lines']}")
    for n, m in sizes[: a.top]:
        print(f"  {n:5d}  {m}")
    print(f"functions over 60 lines: {result['functions_over_60_lines']}")
    for n, f in funcs[: a.top]:
        print(f"  {n:5d}  {f}")
    print(f"uses of Any: {any_count}")
    print(f"lines in reports/: {result['lines_reports']} ({result['bytes_reports'] / 1e6:.1f} MB)")
    print(f"lines in benchmarks/: {result['lines_benchmarks']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
