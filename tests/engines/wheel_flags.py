"""Read the command-line flags an engine version accepts from its PyPI wheel's source, without
importing it (engines pull in CUDA libraries; reading the AST needs nothing).

A developer tool, not shipped with the package: the reader behind the vLLM flag catalogue's
generator (tests/engines/regen_vllm_catalog.py) and the tests that check the committed catalogues
against real wheels. The wheels come from autotune.engines.wheels.

Two registration styles are understood:
- `parser.add_argument("--flag", "--alias", ...)` calls (SGLang <= 0.5.1x, vLLM, and the
  flags SGLang 0.5.2x still registers by hand);
- SGLang 0.5.2x dataclass fields `name: A[T, Arg(...)]` / `A[T, "help"]`, whose flag is
  `Arg(cli_name=...)` or `--` + the field name with `-` for `_`, plus `Arg(aliases=[...])`;
  `Arg(no_cli=True)` registers nothing.

vLLM (0.10 .. 0.3x) registers most flags as `group.add_argument("--flag", **X_kwargs["field"])`
with `X_kwargs = get_kwargs(SomeConfig)` (vllm/engine/arg_utils.py), whose argparse behaviour
comes from the dataclass field's annotation (`_compute_kwargs`: bool -> BooleanOptionalAction,
so `--no-flag` exists although no source spells it; list -> nargs "+"; Literal -> choices),
and registers the frontend's `--host`, `--port`, ... in a loop over a dataclass's fields
(`for key, value in frontend_kwargs.items(): add_argument(f"--{key.replace('_', '-')}", ...)`,
vllm/entrypoints/{openai,common}/cli_args.py). `flag_table_from_wheel(wheel, "vllm")` resolves
both across the wheel's files and says how each flag behaves (FlagInfo); `flags_from_wheel`
returns its keys for vLLM.

Choices are read where they are spelt: the field's Literal; `choices=` a literal list,
`get_args(LiteralAlias)`, `[f.value for f in SomeEnum]` or `list(Manager.registry[.keys()])`
(a registry filled by `@Manager.register_module("name")` decorators in the package's own
modules: vllm/reasoning/, vllm/entrypoints/openai/tool_parsers/, DEFINITIONS); and changed
before `add_argument` by `V["field"]["choices"] = ...`, `.remove(x)` / `.append(x)` /
`.extend([...])` / `+= [...]` on `V["field"]["choices"]` or on `kw = V["field"]` (a change the
reader cannot evaluate drops the choices: the flag is read as free). Choices not spelt as a
literal list are sorted (vLLM's literal_to_kwargs sorts; argparse only tests membership).
`for arg, type in [("--flag", str), ...]: add_argument(arg, type=type, ...)` registers each
listed flag.
"""

from __future__ import annotations

import ast
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from autotune.errors import ConfigError

# Which files of a wheel hold argument definitions, per engine.
SOURCES: dict[str, tuple[str, ...]] = {
    "sglang": ("sglang/srt/server_args.py", "sglang/srt/arg_groups/"),
    # The `vllm serve` parser (make_arg_parser: frontend + AsyncEngineArgs) and the config
    # dataclasses whose fields decide each flag's argparse behaviour (vllm/config.py up to
    # 0.10.x, the vllm/config/ package from 0.11); argparse_utils for EnableDisableAction.
    "vllm": (
        "vllm/engine/arg_utils.py",
        "vllm/entrypoints/openai/cli_args.py",  # .. 0.28
        "vllm/entrypoints/launchers/cli_args.py",  # 0.29 .. 0.32
        "vllm/entrypoints/common/cli_args.py",  # 0.33+
        "vllm/entrypoints/cli/serve.py",
        "vllm/config.py",
        "vllm/config/",
        "vllm/utils/argparse_utils.py",
    ),
}

# Files read for definitions only (enums, constants, registry decorators that `choices=` refers
# to), never for `add_argument` calls; names already defined by SOURCES take precedence.
DEFINITIONS: dict[str, tuple[str, ...]] = {
    "vllm": (
        "vllm/transformers_utils/config.py",  # ConfigFormat (0.10.x)
        "vllm/reasoning/",  # ReasoningParserManager registrations
        "vllm/entrypoints/openai/tool_parsers/",  # ToolParserManager registrations (.. 0.11)
    ),
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
    if engine in _TABLE_ENGINES:
        return set(flag_table_from_wheel(wheel, engine))
    flags: set[str] = set()
    for text in wheel_sources(wheel, engine).values():
        flags |= flags_from_source(text)
    return flags


def wheel_sources(
    wheel: Path, engine: str, table: Mapping[str, tuple[str, ...]] = SOURCES
) -> dict[str, str]:
    """The argument-definition files of an engine wheel (or, with table=DEFINITIONS, the files
    read for definitions only): path in the wheel -> source text."""
    prefixes = table.get(engine)
    if prefixes is None:
        raise ConfigError(f"no flag sources known for engine {engine!r}; known: {sorted(table)}")
    out: dict[str, str] = {}
    with zipfile.ZipFile(wheel) as zf:
        for name in zf.namelist():
            if name.endswith(".py") and any(
                name == p or (p.endswith("/") and name.startswith(p)) for p in prefixes
            ):
                out[name] = zf.read(name).decode("utf-8", "replace")
    return out


def flag_table_from_wheel(wheel: Path, engine: str) -> dict[str, FlagInfo]:
    """Every long flag of the engine's server parser and how it behaves (vLLM only)."""
    if engine not in _TABLE_ENGINES:
        raise ConfigError(
            f"flag tables are read for {sorted(_TABLE_ENGINES)} only, not {engine!r}"
        )
    return flag_table_from_sources(
        wheel_sources(wheel, engine), wheel_sources(wheel, engine, DEFINITIONS)
    )


def _call_name(node: ast.Call) -> str | None:
    f = node.func
    if isinstance(f, ast.Attribute):
        return f.attr
    if isinstance(f, ast.Name):
        return f.id
    return None


def _long_flags(args: Iterable[ast.expr]) -> set[str]:
    return {
        a.value
        for a in args
        if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("--")
    }


def _annotated_field_flags(name: str, ann: ast.expr) -> set[str]:
    # A[T, Arg(...)] or A[T, "help"]
    if not (
        isinstance(ann, ast.Subscript)
        and isinstance(ann.value, ast.Name)
        and ann.value.id == "A"
        and isinstance(ann.slice, ast.Tuple)
        and len(ann.slice.elts) >= 2
    ):
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
    flags = (
        {cli.value}
        if isinstance(cli, ast.Constant) and isinstance(cli.value, str)
        else {"--" + name.replace("_", "-")}
    )
    aliases = kw.get("aliases")
    if isinstance(aliases, ast.List | ast.Tuple):
        flags |= _long_flags(aliases.elts)
    return flags


# ---------------------------------------------------------------------------------------------
# vLLM: flags whose behaviour comes from config dataclass fields

FlagKind = Literal["v", "b", "n", "l", "o"]
_TABLE_ENGINES = frozenset({"vllm"})
_SWITCH_ACTIONS = {"store_true", "store_false", "store_const", "append_const", "count"}
_COLLECTIONS = {"list", "List", "tuple", "Tuple", "set", "Set"}
_DELETED = object()
# Override key holding the in-place changes of a field's choices: [(method, values | None)].
_CHOICE_OPS = "choices.ops"
_ENUM_BASES = {"Enum", "StrEnum", "IntEnum"}


@dataclass(frozen=True)
class FlagInfo:
    """How one long flag behaves in argparse.

    kind: v takes one value; b a switch without value (store_true/const, and the `--no-` or
    `--disable-` twin of a boolean flag); n the positive flag of a BooleanOptionalAction; l a
    list (nargs + / * / N); o an optional value (nargs ?). choices: the values argparse
    accepts (empty: free). dest: the attribute argparse stores it in.
    """

    kind: FlagKind
    dest: str
    choices: tuple[str, ...] = ()
    deprecated: bool = False


@dataclass
class _Class:
    bases: list[str]
    fields: dict[str, ast.expr]
    is_config: bool


@dataclass
class _Index:
    classes: dict[str, _Class] = field(default_factory=dict)
    aliases: dict[str, ast.expr] = field(default_factory=dict)
    # Module-level string constants (`PASSTHROUGH: Final = "passthrough"`).
    constants: dict[str, str] = field(default_factory=dict)
    # Enum class -> its members' constant values, in definition order.
    enums: dict[str, list[str]] = field(default_factory=dict)
    # Manager class -> the names its `register_module` decorators / calls register.
    registries: dict[str, list[str]] = field(default_factory=dict)
    # vLLM >= 0.3x: `bool | str | None` fields take an optional value (nargs "?").
    optional_bool_str: bool = False
    # FlexibleArgumentParser registers EnableDisableAction for BooleanOptionalAction.
    enable_disable: bool = False


def flag_table_from_sources(
    sources: Mapping[str, str], definitions: Mapping[str, str] | None = None
) -> dict[str, FlagInfo]:
    """Resolve every `add_argument` of vLLM-style sources (path -> text) into a flag table.
    definitions: more files (path -> text) whose enums, constants and registry decorators
    `choices=` may name; their `add_argument` calls are not read."""
    trees = [ast.parse(text) for text in sources.values()]
    extra = [ast.parse(text) for text in (definitions or {}).values()]
    index = _build_index(trees, "\n".join(sources.values()), extra)
    table: dict[str, FlagInfo] = {}
    for tree in trees:
        functions = _functions(tree)
        # `V["field"]["action"] = ...` may sit in a helper (FrontendArgs._customize_cli_kwargs)
        # rather than beside the add_argument calls: collect them per file, by variable name.
        overrides: dict[tuple[str, str], dict[str, object]] = {}
        for _, func in functions:
            _collect_overrides(func, overrides, index)
        for owner, func in functions:
            _read_function(func, owner, index, overrides, table)
    return table


def _name(node: ast.expr | None) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Subscript):
        return _name(node.value)
    if isinstance(node, ast.Call):
        return _name(node.func)
    return None


def _build_index(trees: list[ast.Module], text: str, extra: Iterable[ast.Module] = ()) -> _Index:
    index = _Index(
        optional_bool_str="type_hints == {bool, str, type(None)}" in text,
        enable_disable="class EnableDisableAction" in text,
    )
    _index_trees(index, trees, replace=True)
    _index_trees(index, extra, replace=False)
    for tree in [*trees, *extra]:
        _index_registrations(index, tree)
    return index


def _index_trees(index: _Index, trees: Iterable[ast.Module], replace: bool) -> None:
    """Classes, type aliases, enums and string constants defined at module level; with
    replace=False (definition-only files) a name already indexed is kept."""
    for tree in trees:
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                bases = [b for b in map(_name, node.bases) if b]
                if replace or node.name not in index.classes:
                    index.classes[node.name] = _Class(
                        bases=bases,
                        fields=_class_fields(node),
                        is_config=any(
                            _name(d) in ("dataclass", "config") for d in node.decorator_list
                        ),
                    )
                if set(bases) & _ENUM_BASES and (replace or node.name not in index.enums):
                    index.enums[node.name] = [
                        str(stmt.value.value)
                        for stmt in node.body
                        if isinstance(stmt, ast.Assign)
                        and isinstance(stmt.value, ast.Constant)
                        and all(isinstance(t, ast.Name) for t in stmt.targets)
                    ]
                continue
            if (
                isinstance(node, ast.Assign | ast.AnnAssign)
                and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)
            ):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    if isinstance(t, ast.Name):
                        index.constants.setdefault(t.id, node.value.value)
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Subscript | ast.BinOp | ast.Name)
            ):
                index.aliases.setdefault(node.targets[0].id, node.value)
            elif (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and _name(node.annotation) == "TypeAlias"
                and node.value is not None
            ):
                index.aliases.setdefault(node.target.id, node.value)
            elif type(node).__name__ == "TypeAlias":  # `type X = ...` (Python 3.12 syntax)
                name, value = getattr(node, "name", None), getattr(node, "value", None)
                if isinstance(name, ast.Name) and isinstance(value, ast.expr):
                    index.aliases.setdefault(name.id, value)


def _index_registrations(index: _Index, tree: ast.Module) -> None:
    """`@M.register_module("a")` / `(["a", "b"])` / `()` (the class's name) on a class, and
    `M.register_module("a", module=C)` calls: the names registry M holds once the package is
    imported (vLLM's reasoning and tool-parser packages import every such module)."""

    def names(call: ast.Call, default: str | None) -> list[str] | None:
        kw = {k.arg: k.value for k in call.keywords if k.arg}
        arg = call.args[0] if call.args else kw.get("name")
        if arg is None or (isinstance(arg, ast.Constant) and arg.value is None):
            return [default] if default else None
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            return [arg.value]
        if isinstance(arg, ast.List | ast.Tuple) and all(
            isinstance(e, ast.Constant) and isinstance(e.value, str) for e in arg.elts
        ):
            return [str(e.value) for e in arg.elts if isinstance(e, ast.Constant)]
        return None

    def manager(call: ast.AST) -> str | None:
        if (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and call.func.attr == "register_module"
            and isinstance(call.func.value, ast.Name)
        ):
            return call.func.value.id
        return None

    decorators: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for d in node.decorator_list:
                if isinstance(d, ast.Call) and (m := manager(d)) is not None:
                    decorators.add(id(d))
                    index.registries.setdefault(m, []).extend(names(d, node.name) or [])
    for node in ast.walk(tree):
        if id(node) not in decorators and isinstance(node, ast.Call):
            if (m := manager(node)) is not None:
                index.registries.setdefault(m, []).extend(names(node, None) or [])


def _class_fields(node: ast.ClassDef) -> dict[str, ast.expr]:
    out: dict[str, ast.expr] = {}
    for stmt in node.body:
        if (
            isinstance(stmt, ast.AnnAssign)
            and isinstance(stmt.target, ast.Name)
            and _name(stmt.annotation) not in ("ClassVar", "InitVar")
        ):
            out[stmt.target.id] = stmt.annotation
    return out


def _fields(index: _Index, cls: str, depth: int = 0) -> dict[str, ast.expr]:
    """A class's dataclass fields, inherited ones first (bases outside the sources add none)."""
    info = index.classes.get(cls)
    if info is None or depth > 10:
        return {}
    out: dict[str, ast.expr] = {}
    for base in info.bases:
        out.update(_fields(index, base, depth + 1))
    out.update(info.fields)
    return out


def _subclasses(index: _Index, cls: str) -> list[str]:
    """cls and every class of the sources deriving from it."""
    found = [cls]
    changed = True
    while changed:
        changed = False
        for name, info in index.classes.items():
            if name not in found and any(b in found for b in info.bases):
                found.append(name)
                changed = True
    return found


def _members(index: _Index, ann: ast.expr, depth: int = 0) -> list[ast.expr]:
    """Top-level members of a field annotation: unions flattened, aliases and Annotated
    resolved (vllm.engine.arg_utils.get_type_hints)."""
    if depth > 10:
        return [ann]
    if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
        try:
            ann = ast.parse(ann.value, mode="eval").body
        except SyntaxError:
            return [ann]
    if isinstance(ann, ast.BinOp) and isinstance(ann.op, ast.BitOr):
        return _members(index, ann.left, depth + 1) + _members(index, ann.right, depth + 1)
    if isinstance(ann, ast.Subscript):
        head = _name(ann.value)
        elts = list(ann.slice.elts) if isinstance(ann.slice, ast.Tuple) else [ann.slice]
        if head == "Optional":
            return _members(index, elts[0], depth + 1) + [ast.Constant(None)]
        if head == "Union":
            return [m for e in elts for m in _members(index, e, depth + 1)]
        if head in ("Annotated", "SkipValidation"):  # pydantic SkipValidation[T] is Annotated
            return _members(index, elts[0], depth + 1)
        return [ann]
    if isinstance(ann, ast.Name) and ann.id in index.aliases:
        return _members(index, index.aliases[ann.id], depth + 1)
    return [ann]


def _head(member: ast.expr) -> str:
    if isinstance(member, ast.Constant) and member.value is None:
        return "None"
    return _name(member) or ""


def _field_kwargs(index: _Index, ann: ast.expr) -> dict[str, object]:
    """The argparse kwargs vLLM's `_compute_kwargs` derives from a field annotation (only the
    keys that decide the flag's shape: action, nargs, choices)."""
    members = _members(index, ann)
    heads = {_head(m) for m in members}
    if any(index.classes.get(h, _Class([], {}, False)).is_config for h in heads):
        return {}  # a config dataclass: one JSON value
    if index.optional_bool_str and heads == {"bool", "str", "None"}:
        return {"nargs": "?"}
    if "bool" in heads:
        return {"action": "BooleanOptionalAction"}
    if "Literal" in heads:
        if "str" in heads:
            return {}  # literal_to_kwargs: metavar, not choices
        values = [v for m in members for v in _literal_values(index, m)]
        return {"choices": tuple(sorted(set(values)))}
    if heads & _COLLECTIONS:
        return {"nargs": "+"}
    return {}


def _literal_values(index: _Index, member: ast.expr, depth: int = 0) -> list[str]:
    """Values of `Literal[...]`, nested Literal aliases flattened (Literal["eagle", MTPTypes])."""
    if depth > 10:
        return []
    if isinstance(member, ast.Name) and member.id in index.aliases:
        return _literal_values(index, index.aliases[member.id], depth + 1)
    if isinstance(member, ast.BinOp) and isinstance(member.op, ast.BitOr):
        return _literal_values(index, member.left, depth + 1) + _literal_values(
            index, member.right, depth + 1
        )
    if not (isinstance(member, ast.Subscript) and _head(member) == "Literal"):
        return []
    elts = member.slice.elts if isinstance(member.slice, ast.Tuple) else [member.slice]
    out: list[str] = []
    for e in elts:
        if isinstance(e, ast.Constant):
            out.append(str(e.value))
        elif isinstance(e, ast.Name) and e.id in index.aliases:
            out += _literal_values(index, index.aliases[e.id], depth + 1)
    return out


def settable_fields_from_wheel(wheel: Path, engine: str, cls: str) -> tuple[str, ...]:
    """The keys a config dataclass takes from JSON (vLLM's CompilationConfig for
    `--compilation-config`): its annotated fields less ClassVar / InitVar, private names and
    those declared `init=False` or as a PrivateAttr, read from the wheel's source."""
    sources = wheel_sources(wheel, engine)
    found: dict[str, None] = {}
    for text in sources.values():
        for node in ast.walk(ast.parse(text)):
            if not (isinstance(node, ast.ClassDef) and node.name == cls):
                continue
            for stmt in node.body:
                if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
                    continue
                name = stmt.target.id
                if name.startswith("_") or _name(stmt.annotation) in ("ClassVar", "InitVar"):
                    continue
                value = stmt.value
                if isinstance(value, ast.Call) and (
                    _call_name(value) == "PrivateAttr"
                    or any(
                        k.arg == "init"
                        and isinstance(k.value, ast.Constant)
                        and k.value.value is False
                        for k in value.keywords
                    )
                ):
                    continue
                found[name] = None
    if not found:
        raise ConfigError(f"{wheel.name} has no class {cls} with fields")
    return tuple(sorted(found))


def field_choices_from_wheel(wheel: Path, engine: str, cls: str, name: str) -> tuple[str, ...]:
    """The Literal values a config dataclass field accepts (vLLM's SpeculativeConfig.method),
    read from the wheel's source; empty when the field is not a Literal."""
    sources = wheel_sources(wheel, engine)
    trees = [ast.parse(text) for text in sources.values()]
    index = _build_index(trees, "\n".join(sources.values()))
    ann = _fields(index, cls).get(name)
    if ann is None:
        raise ConfigError(f"{wheel.name} has no field {cls}.{name}")
    return tuple(sorted({v for m in _members(index, ann) for v in _literal_values(index, m)}))


def _literal(node: ast.expr) -> object:
    """A keyword value the flag table cares about, or None when it is not a constant."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name | ast.Attribute):
        return _name(node)
    if isinstance(node, ast.List | ast.Tuple) and all(
        isinstance(e, ast.Constant) for e in node.elts
    ):
        return tuple(str(e.value) for e in node.elts if isinstance(e, ast.Constant))
    return None


def _choices(
    node: ast.expr, index: _Index, local: Mapping[str, ast.expr], depth: int = 0
) -> tuple[str, ...] | None:
    """The values a `choices=` expression holds, or None when it cannot be read statically:
    a literal list; a local variable; list()/tuple()/sorted() of a readable value;
    `get_args(LiteralAlias)`; `[f.value for f in SomeEnum]`; `Manager.registry` or
    `Manager.registry.keys()` of a registry filled by `register_module` decorators."""
    if depth > 10:
        return None
    if isinstance(node, ast.List | ast.Tuple):
        items = [_value(e, index) for e in node.elts]
        if all(v is not None for v in items):
            return tuple(v for v in items if v is not None)
        return None
    if isinstance(node, ast.Name) and node.id in local:
        return _choices(local[node.id], index, local, depth + 1)
    if isinstance(node, ast.Call) and not node.keywords:
        head = _call_name(node)
        if isinstance(node.func, ast.Name) and head in ("list", "tuple", "sorted") and node.args:
            inner = _choices(node.args[0], index, local, depth + 1)
            return tuple(sorted(inner)) if inner is not None and head == "sorted" else inner
        if head == "get_args" and len(node.args) == 1:
            values = _literal_values(index, node.args[0])
            return tuple(sorted(set(values))) if values else None
        if (
            head == "keys"
            and not node.args
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Attribute)
        ):
            return _choices(node.func.value, index, local, depth + 1)
    if (
        isinstance(node, ast.ListComp)
        and len(node.generators) == 1
        and not node.generators[0].ifs
        and isinstance(node.generators[0].target, ast.Name)
        and isinstance(node.generators[0].iter, ast.Name)
        and node.generators[0].iter.id in index.enums
        and isinstance(node.elt, ast.Attribute)
        and node.elt.attr == "value"
        and isinstance(node.elt.value, ast.Name)
        and node.elt.value.id == node.generators[0].target.id
    ):
        return tuple(sorted(set(index.enums[node.generators[0].iter.id])))
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id in index.registries
    ):
        return tuple(sorted(set(index.registries[node.value.id])))
    return None


def _value(node: ast.expr, index: _Index) -> str | None:
    """One choice: a constant, or a module-level string constant's name."""
    if isinstance(node, ast.Constant):
        return str(node.value)
    if isinstance(node, ast.Name) and node.id in index.constants:
        return index.constants[node.id]
    return None


def _locals(func: ast.FunctionDef) -> dict[str, ast.expr]:
    """`name = expr` assignments of a function (the last one wins)."""
    out: dict[str, ast.expr] = {}
    for node in ast.walk(func):
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
        ):
            out[node.targets[0].id] = node.value
    return out


def _field_alias(value: ast.expr) -> tuple[str, str] | None:
    """`V["field"]` -> (V, field); `get_kwargs(Cls)["field"]` -> ("get_kwargs(Cls)", field)."""
    if not (
        isinstance(value, ast.Subscript)
        and isinstance(value.slice, ast.Constant)
        and isinstance(value.slice.value, str)
    ):
        return None
    if isinstance(value.value, ast.Name):
        return value.value.id, value.slice.value
    if isinstance(value.value, ast.Call) and _call_name(value.value) == "get_kwargs":
        return ast.unparse(value.value), value.slice.value
    return None


def _field_aliases(func: ast.FunctionDef) -> dict[str, tuple[str, str]]:
    """`kw = V["field"]` assignments of a function: kw -> (V, field)."""
    out: dict[str, tuple[str, str]] = {}
    for node in ast.walk(func):
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and (alias := _field_alias(node.value)) is not None
        ):
            out[node.targets[0].id] = alias
    return out


def _apply_choice_ops(kw: dict[str, object]) -> dict[str, object]:
    """Apply the recorded `.remove` / `.append` / `.extend` / `+=` changes to kw["choices"]."""
    ops = kw.pop(_CHOICE_OPS, None)
    if not isinstance(ops, list):
        return kw
    choices = kw.get("choices")
    for method, values in ops:
        if not isinstance(choices, tuple):
            break  # free (or unreadable) choices stay free
        if values is None:
            choices = None  # a change the reader cannot evaluate: do not guess
        elif method == "remove":
            if values[0] not in choices:  # list.remove would raise: the parser cannot be built
                raise ValueError(f"choices {choices} have no {values[0]!r} to remove")
            items = list(choices)
            items.remove(values[0])
            choices = tuple(items)
        else:
            choices = choices + tuple(values)
    if choices is None:
        kw.pop("choices", None)
    else:
        kw["choices"] = choices
    return kw


def _functions(tree: ast.Module) -> list[tuple[str | None, ast.FunctionDef]]:
    """(enclosing class name, function) for every function, methods included."""
    out: list[tuple[str | None, ast.FunctionDef]] = []

    def visit(node: ast.AST, owner: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, child.name)
            elif isinstance(child, ast.FunctionDef):
                out.append((owner, child))
                visit(child, owner)
            else:
                visit(child, owner)

    visit(tree, None)
    return out


def _kwargs_source(call: ast.expr, owner: str | None) -> list[str] | None:
    """`get_kwargs(Cls)` (possibly wrapped) -> [Cls]; `get_kwargs(cls)` in a classmethod ->
    the owner class (its subclasses are added by the caller)."""
    if isinstance(call, ast.Call) and _call_name(call) == "get_kwargs" and call.args:
        arg = call.args[0]
        if isinstance(arg, ast.Name) and arg.id == "cls" and owner is not None:
            return ["cls:" + owner]
        target = _name(arg)
        return [target] if target else None
    return None


def _collect_overrides(
    func: ast.FunctionDef,
    overrides: dict[tuple[str, str], dict[str, object]],
    index: _Index,
) -> None:
    """`V["f"]["k"] = x`, `del V["f"]["k"]` and the same through `kw = V["f"]` (`kw["k"] = x`);
    in-place changes of `V["f"]["choices"]` (or `kw["choices"]`) in source order."""
    aliases = _field_aliases(func)
    local = _locals(func)

    def value(k: str, node: ast.expr) -> object:
        return _choices(node, index, local) if k == "choices" else _literal(node)

    nodes = sorted(_own_statements(func), key=lambda n: (n.lineno, n.col_offset))
    for node in nodes:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            if (key := _override_key(node.targets[0], aliases)) is not None:
                entry = overrides.setdefault(key[:2], {})
                entry[key[2]] = value(key[2], node.value)
                if key[2] == "choices":  # a new list: earlier in-place changes are gone
                    entry.pop(_CHOICE_OPS, None)
        elif isinstance(node, ast.Delete):
            for target in node.targets:
                if (key := _override_key(target, aliases)) is not None:
                    entry = overrides.setdefault(key[:2], {})
                    entry[key[2]] = _DELETED
                    if key[2] == "choices":
                        entry.pop(_CHOICE_OPS, None)
        elif isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add):
            key = _override_key(node.target, aliases)
            if key is not None and key[2] == "choices":
                values = _choices(node.value, index, local)
                _choice_op(overrides, key, "extend", values)
        elif (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Attribute)
            and node.value.func.attr in ("remove", "append", "extend")
            and len(node.value.args) == 1
            and not node.value.keywords
        ):
            key = _override_key(node.value.func.value, aliases)
            if key is None or key[2] != "choices":
                continue
            method, arg = node.value.func.attr, node.value.args[0]
            if method == "extend":
                values = _choices(arg, index, local)
            else:
                one = _value(arg, index)
                values = (one,) if one is not None else None
            _choice_op(overrides, key, method, values)


def _own_statements(func: ast.FunctionDef) -> list[ast.stmt]:
    """The statements of a function, not those of functions or classes nested in it (those
    are read on their own)."""
    out: list[ast.stmt] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                continue
            if isinstance(child, ast.stmt):
                out.append(child)
            visit(child)

    visit(func)
    return out


def _choice_op(
    overrides: dict[tuple[str, str], dict[str, object]],
    key: tuple[str, str, str],
    method: str,
    values: tuple[str, ...] | None,
) -> None:
    entry = overrides.setdefault(key[:2], {})
    ops = entry.setdefault(_CHOICE_OPS, [])
    assert isinstance(ops, list)
    ops.append((method, values))


def _read_function(
    func: ast.FunctionDef,
    owner: str | None,
    index: _Index,
    overrides: Mapping[tuple[str, str], Mapping[str, object]],
    table: dict[str, FlagInfo],
) -> None:
    kw_classes: dict[str, list[str]] = {}
    for node in ast.walk(func):
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
        ):
            target = node.targets[0]
            src = _kwargs_source(node.value, owner)
            if src is not None:
                kw_classes[target.id] = src
            elif isinstance(node.value, ast.Name) and node.value.id in kw_classes:
                kw_classes[target.id] = kw_classes[node.value.id]
    aliases = _field_aliases(func)
    for var, _ in aliases.values():  # kw = get_kwargs(Cls)["field"]
        if var not in kw_classes:
            src = _kwargs_source(ast.parse(var, mode="eval").body, owner)
            if src is not None:
                kw_classes[var] = src
    local = _locals(func)

    def classes_of(var: str) -> list[str]:
        out: list[str] = []
        for c in kw_classes.get(var, []):
            out += _subclasses(index, c[4:]) if c.startswith("cls:") else [c]
        return out

    def field_ann(var: str, field_name: str) -> ast.expr | None:
        for cls in classes_of(var):
            ann = _fields(index, cls).get(field_name)
            if ann is not None:
                return ann
        return None

    def visit(
        node: ast.AST, loop: tuple[str, str, str] | None, binds: Mapping[str, ast.expr]
    ) -> None:
        if isinstance(node, ast.For):
            it = node.iter
            # for arg, type in [("--flag", str), ...]: add_argument(arg, type=type, ...)
            rows = _literal_rows(it, node.target)
            if rows is not None:
                for row in rows:
                    for stmt in node.body:
                        visit(stmt, loop, {**binds, **row})
                return
            if (
                isinstance(it, ast.Call)
                and isinstance(it.func, ast.Attribute)
                and it.func.attr == "items"
                and isinstance(it.func.value, ast.Name)
                and it.func.value.id in kw_classes
                and isinstance(node.target, ast.Tuple)
                and len(node.target.elts) == 2
                and all(isinstance(e, ast.Name) for e in node.target.elts)
            ):
                k, v = (e.id for e in node.target.elts if isinstance(e, ast.Name))
                for stmt in node.body:
                    visit(stmt, (it.func.value.id, k, v), binds)
                return
        if isinstance(node, ast.Call) and _call_name(node) == "add_argument":
            _add_call(node, loop, binds)
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, ast.FunctionDef):
                visit(child, loop, binds)

    def _add_call(
        call: ast.Call, loop: tuple[str, str, str] | None, binds: Mapping[str, ast.expr]
    ) -> None:
        def bound(node: ast.expr) -> ast.expr:
            return binds[node.id] if isinstance(node, ast.Name) and node.id in binds else node

        fstring = any(isinstance(a, ast.JoinedStr) for a in call.args)
        if loop is not None and fstring:
            var = loop[0]
            fields: dict[str, ast.expr] = {}
            for cls in classes_of(var):
                fields.update(_fields(index, cls))
            for name, ann in fields.items():
                flag = "--" + name.replace("_", "-")
                merged = {**_field_kwargs(index, ann), **overrides.get((var, name), {})}
                _record(table, [flag], _apply_choice_ops(merged), name, index)
            return
        flags = [
            a.value
            for a in map(bound, call.args)
            if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value[:2] == "--"
        ]
        if not flags:
            return
        kw: dict[str, object] = {}
        for k in call.keywords:
            if k.arg == "choices":
                kw["choices"] = _choices(bound(k.value), index, local)
                continue
            if k.arg is not None:
                kw[k.arg] = _literal(bound(k.value))
                continue
            for var, fname, extra in _splat(k.value, aliases):
                found = field_ann(var, fname)
                if found is not None:
                    kw.update(_field_kwargs(index, found))
                kw.update(overrides.get((var, fname), {}))
                _apply_choice_ops(kw)
                kw.update(extra)
        dest = kw.get("dest")
        _record(table, flags, kw, dest if isinstance(dest, str) else None, index)

    visit(func, None, {})


def _literal_rows(it: ast.expr, target: ast.expr) -> list[dict[str, ast.expr]] | None:
    """`for a, b in [(x, y), ...]` / `for a in ("x", ...)` over a literal list or tuple: the
    loop variables' values for each pass; None for any other loop."""
    if not isinstance(it, ast.List | ast.Tuple):
        return None
    if isinstance(target, ast.Name):
        return [{target.id: e} for e in it.elts]
    if not (isinstance(target, ast.Tuple) and all(isinstance(t, ast.Name) for t in target.elts)):
        return None
    names = [t.id for t in target.elts if isinstance(t, ast.Name)]
    rows: list[dict[str, ast.expr]] = []
    for e in it.elts:
        if not (isinstance(e, ast.Tuple | ast.List) and len(e.elts) == len(names)):
            return None
        rows.append(dict(zip(names, e.elts, strict=True)))
    return rows


def _override_key(
    target: ast.expr, aliases: Mapping[str, tuple[str, str]] | None = None
) -> tuple[str, str, str] | None:
    """`V["field"]["key"]` -> (V, field, key); `kw["key"]` with kw = V["field"] -> the same."""
    if not (
        isinstance(target, ast.Subscript)
        and isinstance(target.slice, ast.Constant)
        and isinstance(target.slice.value, str)
    ):
        return None
    if isinstance(target.value, ast.Name) and aliases and target.value.id in aliases:
        return (*aliases[target.value.id], target.slice.value)
    owner = _field_alias(target.value)
    if owner is not None:
        return (*owner, target.slice.value)
    return None


def _splat(
    node: ast.expr, aliases: Mapping[str, tuple[str, str]]
) -> list[tuple[str, str, dict[str, object]]]:
    """`**V["f"]` -> [(V, f, {})]; `**{**V["f"], "k": x}` -> [(V, f, {k: x})]; `**kw` with
    kw = V["f"] -> [(V, f, {})]."""
    if isinstance(node, ast.Name) and node.id in aliases:
        return [(*aliases[node.id], {})]
    if (alias := _field_alias(node)) is not None:
        return [(*alias, {})]
    if isinstance(node, ast.Dict):
        out: list[tuple[str, str, dict[str, object]]] = []
        extra: dict[str, object] = {}
        for key, value in zip(node.keys, node.values, strict=True):
            if key is None:
                out += _splat(value, aliases)
            elif isinstance(key, ast.Constant) and isinstance(key.value, str):
                extra[key.value] = _literal(value)
        if out:
            var, fname, _ = out[-1]
            out[-1] = (var, fname, extra)
        return out
    return []


def _record(
    table: dict[str, FlagInfo],
    flags: list[str],
    kw: Mapping[str, object],
    dest: str | None,
    index: _Index,
) -> None:
    action = kw.get("action")
    nargs = kw.get("nargs")
    nargs = None if nargs is _DELETED else nargs
    action = None if action is _DELETED else action
    choices = kw.get("choices")
    kind: FlagKind
    if action in _SWITCH_ACTIONS:
        kind = "b"
    elif action == "BooleanOptionalAction":
        kind = "n"
    elif nargs in ("+", "*") or (isinstance(nargs, int) and nargs > 1):
        kind = "l"
    elif nargs == "?":
        kind = "o"
    else:
        kind = "v"
    info = FlagInfo(
        kind=kind,
        dest=dest or flags[0][2:].replace("-", "_"),
        choices=tuple(choices) if isinstance(choices, tuple) and kind != "b" else (),
        deprecated=kw.get("deprecated") is True,
    )
    for flag in flags:
        table[flag] = info
    if kind == "n":
        twin = FlagInfo(kind="b", dest=info.dest, deprecated=info.deprecated)
        for flag in flags:
            table["--no-" + flag[2:]] = twin
            if index.enable_disable:
                for pos, neg in (("--enable-", "--disable-"), ("--disable-", "--enable-")):
                    if flag.startswith(pos):
                        table[neg + flag.removeprefix(pos)] = twin
