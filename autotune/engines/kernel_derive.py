"""An engine's block-FP8 kernel facts read from its own source (autotune.engines.kernel_facts'
catalog is generated with this from the PyPI wheels; an installed build that no catalogued
release matches, a nightly or a source build, is read with it where it is installed).

It reads the source with `ast` (the engine is never imported) and follows the dense block-FP8
Triton path the way the engine runs it:

1. the linear/dispatch module (SGLang: srt/layers/quantization/fp8_utils.py; vLLM:
   model_executor/kernels/linear/scaled_mm/triton.py, else the fp8_utils module itself)
   imports the launcher (`w8a8_block_fp8_matmul_triton`; vLLM `w8a8_triton_block_scaled_mm`,
   `w8a8_block_fp8_matmul` up to 0.11.0) from the kernel module, or defines and calls it;
2. the launcher calls `get_w8a8_block_fp8_configs`, defined in (or imported into) the kernel
   module: the lookup module. Its f-string gives the file name, its
   `os.path.join(os.path.dirname(os.path.realpath(__file__)), "configs", name)` the folder,
   its device-name expression the rule, and its BLOCK_SIZE_K clamp (if any) the sanitizing;
3. the launcher's branches give the @triton.jit kernels it can launch on CUDA (HIP/gfx/XPU
   branches and the `if _is_hip:` redefinitions left out), the kernel under an architecture
   guard (`get_platform().is_sm90 and (config.get("SWAP_AB", False) or ...)`) and the config
   keys each kernel takes (its constexpr parameters that `**config` fills, plus the Triton
   launch options of the default config). The default config is the launcher's dict literal
   for block [128, 128].

Anything that does not match these patterns raises LayoutError naming the release and what was
not recognized: that is how a new layout is caught.
"""

from __future__ import annotations

import ast
import functools
import posixpath
import re
import zipfile
from collections.abc import Iterable, Iterator, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path

from autotune.engines.kernel_facts import (
    ENGINE_DISTS,
    KernelFacts,
    facts_for,
    is_catalogued,
    known_versions,
)
from autotune.engines.kernel_source import definitions_fingerprint
from autotune.errors import ConfigError
from autotune.versions import Version, try_version

LOOKUP = "get_w8a8_block_fp8_configs"
# Per engine: the modules whose block-FP8 linear path calls the launcher (first present wins)
# and the launcher's names (newest first).
DISPATCH: dict[str, tuple[str, ...]] = {
    "sglang": ("sglang/srt/layers/quantization/fp8_utils.py",),
    "vllm": (
        "vllm/model_executor/kernels/linear/scaled_mm/triton.py",  # 0.32+
        "vllm/model_executor/layers/quantization/utils/fp8_utils.py",
    ),
}
LAUNCHERS: dict[str, tuple[str, ...]] = {
    "sglang": ("w8a8_block_fp8_matmul_triton",),
    "vllm": ("w8a8_triton_block_scaled_mm", "w8a8_block_fp8_matmul"),
}
# Branches for other vendors' GPUs: their kernels are not what runs on CUDA.
NON_CUDA = frozenset({"hip", "rocm", "xpu", "npu", "musa", "aiter", "amd", "mps"})
ARCH_TEST = re.compile(r"\bis_sm(\d+)\b|\b_is_sm(\d+)\b")
# Triton launch options a config dict may carry besides the kernel's constexpr parameters.
LAUNCH_OPTIONS = frozenset({"num_warps", "num_stages", "num_ctas", "maxnreg"})
# SPLIT_K: the source demands only a power of two (`assert split_k & (split_k - 1) == 0`; the
# reduce kernel's tl.arange(0, SPLITS) needs one too) and sets no upper bound. A split beyond
# cdiv(K, BLOCK_SIZE_K) tiles adds an empty fp32 partial of M x N, so we list the powers of two
# up to 64, where K <= 8192 at BLOCK_SIZE_K = 128 runs out of tiles and the partial buffer
# (SPLIT_K x M x N fp32) already dwarfs the output.
SPLIT_K_CAP = 64
BLOCK = 128  # the block shape [128, 128] the default config is resolved for


class LayoutError(Exception):
    """A release's source does not match the patterns this generator knows."""


# ---------------------------------------------------------------------------------------------
# an engine's sources


@dataclass
class Sources:
    """The Python files of one release (a wheel's, or an installed package's), parsed on
    demand; paths are relative to site-packages (`sglang/srt/...`)."""

    engine: str
    version: str
    files: MutableMapping[str, str]
    _trees: dict[str, ast.Module] = field(default_factory=dict)

    @classmethod
    def from_wheel(cls, wheel: Path, engine: str, version: str) -> Sources:
        with zipfile.ZipFile(wheel) as zf:
            files = {
                n: zf.read(n).decode("utf-8", "replace")
                for n in zf.namelist()
                if n.startswith(f"{engine}/") and n.endswith(".py")
            }
        return cls(engine, version, files)

    @classmethod
    def from_site(cls, site: Path, engine: str, version: str) -> Sources:
        """An installed package under `site` (site-packages): files read when first asked
        for, so a nightly's own source is read without walking the whole package."""
        return cls(engine, version, _SiteFiles(site, engine))

    def fail(self, what: str) -> LayoutError:
        return LayoutError(f"{self.engine} {self.version}: {what}")

    def tree(self, path: str) -> ast.Module:
        if path not in self._trees:
            if path not in self.files:
                raise self.fail(f"no file {path}")
            self._trees[path] = ast.parse(self.files[path])
        return self._trees[path]

    def module_file(self, dotted: str) -> str | None:
        base = dotted.replace(".", "/")
        for cand in (f"{base}.py", f"{base}/__init__.py"):
            if cand in self.files:
                return cand
        return None

    def resolve(self, importer: str, node: ast.ImportFrom) -> str | None:
        """The file an `from X import ...` in `importer` names (relative imports too)."""
        if node.level:
            pkg = posixpath.dirname(importer).split("/")
            pkg = pkg[: len(pkg) - (node.level - 1)]
            dotted = ".".join(pkg + ([node.module] if node.module else []))
        else:
            dotted = node.module or ""
        return self.module_file(dotted)


class _SiteFiles(MutableMapping[str, str]):
    """The .py files of `engine` under `site`, read on first access; a test may replace or
    remove one (the change stays in memory, the site is never written)."""

    def __init__(self, site: Path, engine: str) -> None:
        self.site, self.engine = site, engine
        self._read: dict[str, str] = {}
        self._gone: set[str] = set()

    def _on_disk(self, path: str) -> bool:
        parts = path.split("/")
        return (
            parts[0] == self.engine
            and path.endswith(".py")
            and ".." not in parts
            and (self.site / path).is_file()
        )

    def __getitem__(self, path: str) -> str:
        if path in self._gone:
            raise KeyError(path)
        if path not in self._read:
            if not self._on_disk(path):
                raise KeyError(path)
            text = (self.site / path).read_text(encoding="utf-8", errors="replace")
            self._read[path] = text
        return self._read[path]

    def __contains__(self, path: object) -> bool:
        return (
            isinstance(path, str)
            and path not in self._gone
            and (path in self._read or self._on_disk(path))
        )

    def __setitem__(self, path: str, text: str) -> None:
        self._gone.discard(path)
        self._read[path] = text

    def __delitem__(self, path: str) -> None:
        if path not in self:
            raise KeyError(path)
        self._read.pop(path, None)
        self._gone.add(path)

    def __iter__(self) -> Iterator[str]:
        root = self.site / self.engine
        on_disk = {p.relative_to(self.site).as_posix() for p in root.rglob("*.py")}
        return iter(sorted((on_disk | set(self._read)) - self._gone))

    def __len__(self) -> int:
        return sum(1 for _ in self)


def unconditional_defs(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    """Top-level functions defined outside any `if` (those are the ones CUDA runs: the
    engines redefine helpers under `if _is_hip:`); of a name defined twice, the last one, as
    at run time."""
    return {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}


def is_jit(fn: ast.FunctionDef) -> bool:
    return any(ast.unparse(d) in ("triton.jit", "jit") for d in fn.decorator_list)


def imports_of(tree: ast.AST, name: str) -> list[ast.ImportFrom]:
    return [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom)
        and any(a.name == name and a.asname is None for a in n.names)
    ]


def calls_to(tree: ast.AST, name: str) -> list[ast.Call]:
    return [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == name
    ]


def uses(tree: ast.Module, name: str) -> bool:
    """`name` is called or handed on (vLLM <= 0.11.0 returns it from a dispatch function)
    outside its own definition."""
    own = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
    inner = {id(x) for d in own for x in ast.walk(d)}
    return any(
        isinstance(n, ast.Name)
        and n.id == name
        and isinstance(n.ctx, ast.Load)
        and id(n) not in inner
        for n in ast.walk(tree)
    )


def definition(src: Sources, module: str, name: str, depth: int = 0) -> str:
    """The file that defines `name` as seen from `module` (following re-exports)."""
    tree = src.tree(module)
    if name in unconditional_defs(tree):
        return module
    found = {src.resolve(module, imp) for imp in imports_of(tree, name)}
    found.discard(None)
    if len(found) != 1 or depth > 4:
        raise src.fail(
            f"cannot tell where {module} gets {name} from (imports resolve to {sorted(map(str, found))})"
        )
    target = found.pop()
    assert target is not None
    return definition(src, target, name, depth + 1)


# ---------------------------------------------------------------------------------------------
# the lookup function


@dataclass
class Lookup:
    module: str
    config_dir: str
    file_name: str
    device_name_rule: str
    block_k_clamp: str


def read_lookup(src: Sources, module: str) -> Lookup:
    fn = unconditional_defs(src.tree(module)).get(LOOKUP)
    if fn is None:
        raise src.fail(f"{module} does not define {LOOKUP} at top level")
    params = [a.arg for a in fn.args.args]
    if len(params) != 4:
        raise src.fail(f"{module}:{LOOKUP} takes {params}, expected (N, K, block_n, block_k)")
    names = dict(zip(params, ("N", "K", "block_n", "block_k"), strict=True))
    assigns = {
        n.targets[0].id: n.value
        for n in ast.walk(fn)
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
    }
    _no_env(src, module, fn)
    # the file name: the f-string holding block_shape
    fstrings = [
        (var, v)
        for var, v in assigns.items()
        if isinstance(v, ast.JoinedStr) and "block_shape" in ast.unparse(v)
    ]
    if len(fstrings) != 1:
        raise src.fail(f"{module}:{LOOKUP}: no single file-name f-string with block_shape")
    name_var, fstring = fstrings[0]
    template, device_var = "", None
    for part in fstring.values:
        if isinstance(part, ast.Constant):
            template += str(part.value).replace("{", "{{").replace("}", "}}")
        elif isinstance(part, ast.FormattedValue) and isinstance(part.value, ast.Name):
            if part.conversion != -1 or part.format_spec is not None:
                raise src.fail(f"{module}:{LOOKUP}: formatted placeholder {ast.unparse(part)}")
            var = part.value.id
            if var in names:
                template += "{" + names[var] + "}"
            elif var in assigns and device_var in (None, var):
                device_var = var
                template += "{device_name}"
            else:
                raise src.fail(
                    f"{module}:{LOOKUP}: unknown placeholder {{{var}}} in the file name"
                )
        else:
            raise src.fail(f"{module}:{LOOKUP}: file-name part {ast.unparse(part)}")
    if device_var is None:
        raise src.fail(f"{module}:{LOOKUP}: the file name has no device name")
    rule = device_rule(src, module, assigns[device_var])
    # the folder: os.path.join(os.path.dirname(os.path.realpath(__file__)), "configs", name)
    joins = [
        v
        for v in assigns.values()
        if isinstance(v, ast.Call)
        and ast.unparse(v.func) == "os.path.join"
        and any(isinstance(a, ast.Name) and a.id == name_var for a in v.args)
    ]
    if len(joins) != 1:
        raise src.fail(f"{module}:{LOOKUP}: no single os.path.join(..., {name_var})")
    args = joins[0].args
    here = ("os.path.dirname(os.path.realpath(__file__))", "os.path.dirname(__file__)")
    if not (
        len(args) == 3
        and ast.unparse(args[0]) in here
        and isinstance(args[1], ast.Constant)
        and isinstance(args[1].value, str)
    ):
        raise src.fail(f"{module}:{LOOKUP}: config path {ast.unparse(joins[0])} not recognized")
    config_dir = posixpath.join(posixpath.dirname(module), str(args[1].value))
    return Lookup(module, config_dir, template, rule, block_k_clamp(src, module, fn, names))


def _no_env(src: Sources, module: str, fn: ast.FunctionDef) -> None:
    """No known release lets an environment variable move this lookup; a new one that does is
    a new layout (its pattern must be taught here and recorded in env_config_dir)."""
    for node in ast.walk(fn):
        text = ast.unparse(node) if isinstance(node, ast.Attribute | ast.Call) else ""
        if re.search(r"\bos\.environ\b|\bgetenv\b|\benvs\.|_env_var\b", text):
            raise src.fail(
                f"{module}:{LOOKUP} reads the environment ({text}): not a known pattern"
            )


def device_rule(src: Sources, module: str, expr: ast.expr, depth: int = 0) -> str:
    text = ast.unparse(expr)
    if re.fullmatch(r"[\w.]*get_device_name\(\)\.replace\(' ', '_'\)", text):
        return "replace_space"
    if re.fullmatch(r"re\.sub\('\[\\\\s/\]\+', '_', \w+\)", text):
        return "sub_space_slash"
    if (
        isinstance(expr, ast.Call)
        and isinstance(expr.func, ast.Name)
        and not expr.args
        and depth < 2
    ):
        where = definition(src, module, expr.func.id)
        fn = unconditional_defs(src.tree(where))[expr.func.id]
        rules = {
            device_rule(src, where, n.value, depth + 1)
            for n in ast.walk(fn)
            if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call)
            and ("replace" in ast.unparse(n.value) or "re.sub" in ast.unparse(n.value))
        }  # fmt: skip
        if len(rules) == 1:
            return rules.pop()
    raise src.fail(f"{module}: device name {text} not recognized")


def block_k_clamp(src: Sources, module: str, fn: ast.FunctionDef, names: dict[str, str]) -> str:
    """The condition under which the lookup raises BLOCK_SIZE_K to block_k (two known forms)."""
    block_k = next(p for p, n in names.items() if n == "block_k")
    tests = [
        ast.unparse(n.test) for n in ast.walk(fn) if isinstance(n, ast.If) and "BLOCK_SIZE_K" in ast.unparse(n.test)
    ]  # fmt: skip
    if not tests:
        if "BLOCK_SIZE_K" in ast.unparse(fn):
            raise src.fail(f"{module}:{LOOKUP} handles BLOCK_SIZE_K in an unknown way")
        return "none"
    below = rf"(\w+)\['BLOCK_SIZE_K'\] < {block_k}"
    if len(tests) == 1 and re.fullmatch(below, tests[0]):
        return "below"
    if len(tests) == 1 and re.fullmatch(
        below + rf" and \(not _is_cuda or {block_k} % \1\['BLOCK_SIZE_K'\] != 0\)", tests[0]
    ):
        return "below_non_divisor"
    raise src.fail(f"{module}:{LOOKUP}: BLOCK_SIZE_K clamp {tests} not recognized")


# ---------------------------------------------------------------------------------------------
# the launcher and its kernels


@dataclass
class Launch:
    kernels: list[str]  # the jit kernels the launched object can be
    arch: str | None  # architecture guard of the branch that chose it
    takes_config: bool  # launched with **config
    positional: int
    keywords: set[str]


def walk(
    stmts: Iterable[ast.stmt], arch: str | None, guards: dict[str, str]
) -> Iterator[tuple[ast.AST, str | None]]:
    """Every node of the launcher with the architecture guard it runs under; branches for other
    vendors are left out."""
    for stmt in stmts:
        if isinstance(stmt, ast.If):
            test = ast.unparse(stmt.test)
            if non_cuda(test):
                yield from walk(stmt.orelse, arch, guards)
                continue
            guard = guards.get(test) or _arch_of(test)
            yield stmt.test, arch
            yield from walk(stmt.body, guard or arch, guards)
            yield from walk(stmt.orelse, arch, guards)
            continue
        if isinstance(stmt, ast.FunctionDef):
            yield from walk(stmt.body, arch, guards)
            continue
        children = [c for c in ast.iter_child_nodes(stmt) if isinstance(c, ast.stmt)]
        if children and isinstance(stmt, ast.For | ast.While | ast.With | ast.Try):
            for node in ast.iter_child_nodes(stmt):
                if not isinstance(node, ast.stmt):
                    yield from ((n, arch) for n in ast.walk(node))
            yield from walk(children, arch, guards)
            continue
        yield from ((n, arch) for n in ast.walk(stmt))


def non_cuda(test: str) -> bool:
    """A branch test naming another vendor's platform (`_is_hip`, `on_gfx1250()`, ...)."""
    words = {w.lower() for w in re.split(r"[^A-Za-z0-9]+|_", test) if w}
    return bool(words & NON_CUDA) or any(w.startswith("gfx") for w in words)


def _arch_of(text: str) -> str | None:
    m = ARCH_TEST.search(text)
    return f"sm_{m[1] or m[2]}" if m else None


def returned_kernels(
    src: Sources, module: str, name: str, jit: set[str], depth: int = 0
) -> list[str]:
    """The jit kernels a helper such as select_w8a8_block_fp8_matmul_kernel returns on CUDA."""
    fn = unconditional_defs(src.tree(module)).get(name)
    if fn is None or depth > 3:
        raise src.fail(f"{module}: cannot follow {name} to a kernel")
    out: list[str] = []
    for node, _ in walk(fn.body, None, {}):
        if isinstance(node, ast.Return) and node.value is not None:
            out += kernels_of(src, module, node.value, jit, depth + 1)
    return out


def kernels_of(
    src: Sources, module: str, expr: ast.expr, jit: set[str], depth: int = 0
) -> list[str]:
    if isinstance(expr, ast.Name) and expr.id in jit:
        return [expr.id]
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name):
        return returned_kernels(src, module, expr.func.id, jit, depth)
    raise src.fail(f"{module}: kernel chosen by {ast.unparse(expr)} not recognized")


def read_launches(
    src: Sources, module: str, fn: ast.FunctionDef, jit: set[str]
) -> tuple[list[Launch], dict[str, str]]:
    guards: dict[str, str] = {}  # variable -> architecture, e.g. hopper_tuned -> sm_90
    guard_exprs: dict[str, ast.expr] = {}
    for node in ast.walk(fn):
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
        ):
            a = _arch_of(ast.unparse(node.value))
            if a:
                guards[node.targets[0].id] = a
                guard_exprs[node.targets[0].id] = node.value
    nodes = list(walk(fn.body, None, guards))
    launched = {
        n.func.value.id
        for n, _ in nodes
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Subscript)
        and isinstance(n.func.value, ast.Name)
        and n.func.value.id not in jit
    }
    chosen: dict[str, list[tuple[list[str], str | None]]] = {}
    for node, arch in nodes:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id in launched
        ):
            kernels = kernels_of(src, module, node.value, jit)
            chosen.setdefault(node.targets[0].id, []).append((kernels, arch))
    launches: list[Launch] = []
    for node, arch in nodes:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript):
            target = node.func.value
            if not isinstance(target, ast.Name):
                raise src.fail(f"{module}: launch of {ast.unparse(target)} not recognized")
            takes = any(k.arg is None for k in node.keywords)
            kw = {k.arg for k in node.keywords if k.arg}
            if target.id in jit:
                launches.append(Launch([target.id], arch, takes, len(node.args), kw))
            elif target.id in chosen:
                for kernels, a in chosen[target.id]:
                    launches.append(Launch(kernels, a or arch, takes, len(node.args), kw))
            else:
                raise src.fail(f"{module}: launch of {target.id} not recognized")
    if not any(launch.takes_config for launch in launches):
        raise src.fail(f"{module}:{fn.name} launches no kernel with **config")
    return launches, {k: ast.unparse(v) for k, v in guard_exprs.items()}


def constexpr_params(fn: ast.FunctionDef) -> tuple[list[str], dict[str, int]]:
    """(all parameter names in order, defaults of the constexpr ones that have one)."""
    args = fn.args.args
    names = [a.arg for a in args]
    defaults: dict[str, int] = {}
    for a, d in zip(args[len(args) - len(fn.args.defaults) :], fn.args.defaults, strict=True):
        if isinstance(d, ast.Constant) and isinstance(d.value, bool | int):
            defaults[a.arg] = int(d.value)
    return names, defaults


def default_config(src: Sources, module: str, fn: ast.FunctionDef) -> tuple[str, dict[str, int]]:
    found: list[tuple[str, dict[str, int]]] = []
    for node, _ in walk(fn.body, None, {}):
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Dict)
            and all(isinstance(k, ast.Constant) for k in node.value.keys)
        ):
            cfg: dict[str, int] = {}
            for k, v in zip(node.value.keys, node.value.values, strict=True):
                assert isinstance(k, ast.Constant)
                cfg[str(k.value)] = _resolve_int(src, module, v)
            found.append((node.targets[0].id, cfg))
    if len(found) != 1:
        raise src.fail(f"{module}:{fn.name}: expected one default config dict, found {len(found)}")
    return found[0]


def _resolve_int(src: Sources, module: str, v: ast.expr) -> int:
    text = ast.unparse(v)
    if isinstance(v, ast.Constant) and isinstance(v.value, int):
        return v.value
    if text in ("block_size[0]", "block_size[1]", "block_n", "block_k"):
        return BLOCK
    raise src.fail(f"{module}: default config value {text} not recognized")


def config_reads(fn: ast.FunctionDef, var: str) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(fn):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id in (var, "META")
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            out.add(str(node.args[0].value))
        elif (
            isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Name)
            and node.value.id in (var, "META")
            and isinstance(node.slice, ast.Constant)
        ):
            out.add(str(node.slice.value))
    return out


def check_selection(src: Sources, guard: str, arch_defaults: dict[str, int], var: str) -> None:
    """The arch kernel must be chosen exactly when an arch key is off its default:
    `<arch test> and (config.get("A", d) or config.get("B", d) > d ...)`."""
    try:
        expr = ast.parse(guard, mode="eval").body
    except SyntaxError as exc:
        raise src.fail(f"architecture guard {guard!r}: {exc}") from None
    if not (
        isinstance(expr, ast.BoolOp) and isinstance(expr.op, ast.And) and len(expr.values) == 2
    ):
        raise src.fail(f"architecture guard {guard!r} not recognized")
    sel = expr.values[1]
    terms = sel.values if isinstance(sel, ast.BoolOp) and isinstance(sel.op, ast.Or) else [sel]
    seen: set[str] = set()
    for t in terms:
        m = re.fullmatch(rf"{var}\.get\('(\w+)', (\w+)\)(?: > (\d+))?", ast.unparse(t))
        if not m:
            raise src.fail(f"architecture guard term {ast.unparse(t)!r} not recognized")
        key, default, bound = m[1], m[2], m[3]
        want = arch_defaults.get(key)
        got = {"False": 0, "True": 1}.get(default, int(default) if default.isdigit() else -1)
        if want is None or got != want or (bound is not None and int(bound) != want):
            raise src.fail(
                f"architecture guard term {ast.unparse(t)!r} does not match the kernel default {key}={want}"
            )
        if bound is None and want != 0:
            raise src.fail(
                f"architecture guard term {ast.unparse(t)!r}: truthiness of a non-zero default"
            )
        seen.add(key)
    if seen != set(arch_defaults):
        raise src.fail(
            f"architecture guard {guard!r} selects by {sorted(seen)}, kernel has {sorted(arch_defaults)}"
        )


def split_k_values(src: Sources, module: str, fn: ast.FunctionDef) -> tuple[int, ...]:
    asserts = [ast.unparse(n.test) for n in ast.walk(fn) if isinstance(n, ast.Assert)]
    if any(re.fullmatch(r"(\w+) & \(?\1 - 1\)? == 0", a) for a in asserts):
        return tuple(2**i for i in range(SPLIT_K_CAP.bit_length()))
    raise src.fail(f"{module}:{fn.name} takes SPLIT_K but its allowed values are not recognized")


# ---------------------------------------------------------------------------------------------


def facts_from_sources(src: Sources) -> KernelFacts:
    engine = src.engine
    found = [
        (d, name)
        for d in DISPATCH[engine]
        if d in src.files
        for name in LAUNCHERS[engine]
        if imports_of(src.tree(d), name) or uses(src.tree(d), name)
    ]
    if not found:
        raise src.fail(
            f"none of the dispatch modules {DISPATCH[engine]} imports or uses any of "
            f"{LAUNCHERS[engine]}"
        )
    dispatch, launcher = found[0]
    tree = src.tree(dispatch)
    kernel_module = definition(src, dispatch, launcher)
    if kernel_module == dispatch and not uses(tree, launcher):
        raise src.fail(f"{dispatch} defines {launcher} but never uses it")
    ktree = src.tree(kernel_module)
    defs = unconditional_defs(ktree)
    fn = defs[launcher]
    if not calls_to(fn, LOOKUP):
        raise src.fail(f"{kernel_module}:{launcher} does not call {LOOKUP}")
    lookup = read_lookup(src, definition(src, kernel_module, LOOKUP))

    jit = {name for name, f in defs.items() if is_jit(f)}
    launches, guard_exprs = read_launches(src, kernel_module, fn, jit)
    var, default = default_config(src, kernel_module, fn)
    options = {k for k in default if k in LAUNCH_OPTIONS}
    fed: dict[str, set[str]] = {}  # kernel -> keys **config can fill
    defaults: dict[str, dict[str, int]] = {}
    for launch in launches:
        for k in launch.kernels:
            names, dflt = constexpr_params(defs[k])
            defaults[k] = dflt
            if launch.takes_config:
                fed[k] = set(names[launch.positional :]) - launch.keywords
    plain = [
        k
        for launch in launches
        if launch.takes_config and launch.arch is None
        for k in launch.kernels
    ]
    guarded = [
        (k, launch.arch)
        for launch in launches
        if launch.takes_config and launch.arch
        for k in launch.kernels
    ]
    if not plain:
        raise src.fail(f"{kernel_module}:{launcher}: no kernel runs without an architecture guard")
    common = set.intersection(*(fed[k] for k in plain)) | options
    missing = set(default) - common
    if missing:
        raise src.fail(
            f"{kernel_module}:{launcher}: default config keys {sorted(missing)} are not kernel parameters"
        )
    keys = tuple(k for k in default if k in common) + tuple(sorted(common - set(default)))
    arch_keys: dict[str, set[str]] = {}
    arch_defaults: dict[str, int] = {}
    for k, arch in guarded:
        assert arch is not None
        for key in (fed[k] | options) - common:
            arch_keys.setdefault(key, set()).add(arch)
            if key not in defaults[k]:
                raise src.fail(f"{k}: arch key {key} has no default")
            arch_defaults[key] = defaults[k][key]
    if arch_keys:
        for guard_var, expr in guard_exprs.items():
            check_selection(src, expr, arch_defaults, var)
            del guard_var
    unread = config_reads(fn, var) - common - set(arch_keys)
    if unread:
        raise src.fail(
            f"{kernel_module}:{launcher} reads config keys {sorted(unread)} no kernel takes"
        )
    split = split_k_values(src, kernel_module, fn) if "SPLIT_K" in common | set(arch_keys) else ()
    jit_kernels = sorted({k for launch in launches for k in launch.kernels})
    return KernelFacts(
        engine=engine,
        version=src.version,
        lookup_module=lookup.module,
        lookup_function=LOOKUP,
        config_dir=lookup.config_dir,
        file_name=lookup.file_name,
        device_name_rule=lookup.device_name_rule,  # type: ignore[arg-type]
        block_k_clamp=lookup.block_k_clamp,  # type: ignore[arg-type]
        kernel_module=kernel_module,
        kernel_function=launcher,
        jit_kernels=tuple(jit_kernels),
        keys=keys,
        arch_keys={k: tuple(sorted(v)) for k, v in sorted(arch_keys.items())},
        arch_key_defaults=dict(sorted(arch_defaults.items())),
        split_k_values=split,
        default_config=default,
        kernel_fingerprint=definitions_fingerprint(
            src.files[kernel_module], [*jit_kernels, launcher]
        ),
        env_config_dir=None,
    )


def facts_from_wheel(wheel: Path, engine: str, version: str) -> KernelFacts:
    return facts_from_sources(Sources.from_wheel(wheel, engine, version))


# ---------------------------------------------------------------------------------------------
# an installed build's facts


def facts_of(engine: str, version: str, *, site: Path | None = None) -> KernelFacts:
    """`facts_for` (the catalog), and for a build no release is (a nightly, a source build)
    that this interpreter has installed, or that `site` (another environment's site-packages)
    holds, its facts read from its installed source: so `kernels tune --engine-version BUILD`
    tunes the build's own kernel where it is installed.

    Raises:
        ConfigError: neither catalogued nor installed here (facts_for's error), or installed
            with a kernel path autotune cannot follow.
    """
    if site is not None:
        return installed_facts(engine, version, site)
    wanted = try_version(version) if isinstance(version, str) else None
    if wanted is None or is_catalogued(engine, version):
        return facts_for(engine, version)
    site = installed_site(engine, wanted)
    return facts_for(engine, version) if site is None else _derived(engine, version, site)


def installed_facts(engine: str, version: str, site: Path) -> KernelFacts:
    """The facts of the `engine` `version` installed under `site` (site-packages): a
    catalogued release's from the catalog; any other build (a nightly, a source build, a
    release candidate) read from its own installed source the way the catalog is generated,
    so its folder, file names, keys and kernel fingerprint are its own.

    Raises:
        ConfigError: the build's kernel path is not a layout autotune reads, naming it.
    """
    if is_catalogued(engine, version):
        return facts_for(engine, version)
    return _derived(engine, version, site.resolve())


def installed_site(engine: str, wanted: Version) -> Path | None:
    """The site-packages folder of the `engine` this interpreter has installed when its
    metadata names `wanted` (a version without a local part matches any local build of it);
    the engine is not imported."""
    import importlib.util
    from importlib import metadata

    try:
        spec = importlib.util.find_spec(engine)
    except (ImportError, ValueError):
        return None
    installed = None
    for dist in ENGINE_DISTS.get(engine, (engine,)):
        try:
            installed = try_version(metadata.version(dist))
            break
        except metadata.PackageNotFoundError:
            continue
    if spec is None or not spec.submodule_search_locations or installed is None:
        return None
    if installed != wanted and (wanted.local is not None or installed.public != wanted.public):
        return None
    return Path(next(iter(spec.submodule_search_locations))).parent.resolve()


@functools.cache
def _derived(engine: str, version: str, site: Path) -> KernelFacts:
    try:
        return facts_from_sources(Sources.from_site(site, engine, version))
    except LayoutError as exc:
        raise ConfigError(
            f"{engine} {version} at {site} is not a catalogued release "
            f"({', '.join(known_versions(engine))}) and its block-FP8 kernel path is not one "
            f"autotune reads: {exc}",
            source=str(site),
        ) from None
