"""Read the options llama-server accepts from llama.cpp's own `common/arg.cpp`, without a compiler.

llama.cpp declares every command-line option as one call

    add_opt(common_arg(
        {"-c", "--ctx-size"}, "N", "help ...",
        [](common_params & params, int value) { ... }
    ).set_examples({LLAMA_EXAMPLE_SERVER}).set_env("LLAMA_ARG_CTX_SIZE"));

so the flag spellings are the first `{...}` list of string literals, a second list (if present)
holds the negated spellings of a switch (`--no-mmap`), and the lambda's parameter list tells the
kind: none = a bare switch, `bool` = a switch with negated spellings, `int` / `std::string` = one
value, two strings = two values. A handler that calls `arg_removed(...)` still parses but rejects
the option ("the argument has been removed"). An option reaches llama-server when its examples
include LLAMA_EXAMPLE_SERVER or LLAMA_EXAMPLE_COMMON (the default) and it is not excluded for the
server (`add_opt`'s filter in `common_params_parser_init`).

Used by tests/engines/regen_llamacpp_catalog.py (which writes `_catalog.py`) and by the test that
checks the adapter's table against the pinned sdist's source.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from autotune.errors import ConfigError

Kind = str  # "v" value, "b" bare switch, "n" switch with negated spellings, "2" two values

_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')
_LIST = re.compile(r"\s*\{([^{}]*)\}")
# The option's handler: the first lambda taking `common_params &` (help strings may hold others).
_LAMBDA = re.compile(r"\[[^\]]*\]\s*\((\s*common_params\b[^)]*)\)")
_EXAMPLES = re.compile(r"\.set_examples\(\s*(\{[^}]*\}|\w+)\s*\)")
_EXCLUDES = re.compile(r"\.set_excludes\(\s*\{([^}]*)\}\s*\)")
_NAMED_SET = r"{name}\s*=\s*\{{([^}}]*)\}}"
_CHOICES = re.compile(r"^[\[<]?([A-Za-z0-9_.-]+(?:\|[A-Za-z0-9_.-]+)+)[\]>]?$")


@dataclass(frozen=True)
class ArgSpec:
    """One llama.cpp option as arg.cpp declares it."""

    flags: tuple[str, ...]  # every spelling, short and long, in source order
    neg: tuple[str, ...]  # negated spellings of an "n" switch
    kind: Kind
    removed: bool  # parses, but the handler rejects it
    server: bool  # registered for llama-server
    value_hint: str | None
    choices: tuple[str, ...]  # from a hint such as "[on|off|auto]"; empty = free value
    line: int  # 1-based line of `common_arg(` in arg.cpp

    @property
    def long_flags(self) -> tuple[str, ...]:
        return tuple(f for f in (*self.flags, *self.neg) if f.startswith("--"))


def strip_comments(source: str) -> tuple[str, str]:
    """(source with // and /* */ comments blanked, the same with the contents of string and char
    literals blanked too). Both keep every offset, so structure is searched in the second (help
    strings hold `[(more info)](https://...)`, which looks like a lambda) and literals are read
    from the first."""
    clean: list[str] = []
    masked: list[str] = []
    i, n = 0, len(source)
    while i < n:
        c = source[i]
        if c in "\"'":
            j = i + 1
            while j < n and source[j] != c:
                j += 2 if source[j] == "\\" else 1
            lit = source[i : j + 1]
            clean.append(lit)
            masked.append(c + _blank(lit[1:-1]) + lit[-1:])
            i = j + 1
            continue
        if source.startswith("//", i):
            j = source.find("\n", i)
            j = n if j < 0 else j
        elif source.startswith("/*", i):
            j = source.find("*/", i + 2)
            j = n if j < 0 else j + 2
        else:
            clean.append(c)
            masked.append(c)
            i += 1
            continue
        blank = _blank(source[i:j])
        clean.append(blank)
        masked.append(blank)
        i = j
    return "".join(clean), "".join(masked)


def _blank(text: str) -> str:
    return re.sub(r"[^\n]", " ", text)


def _strings(text: str) -> tuple[str, ...]:
    return tuple(m.group(1) for m in _STRING.finditer(text))


def _handler_kind(params: str) -> Kind | None:
    parts = [p.strip() for p in params.split(",")]
    if not parts or "common_params" not in parts[0]:
        return None
    rest = parts[1:]
    if not rest:
        return "b"
    if len(rest) == 2:
        return "2"
    if re.match(r"bool\b", rest[0]):
        return "n"
    return "v"


def parse_arg_cpp(source: str) -> list[ArgSpec]:
    """Every `add_opt(common_arg(...))` option of an arg.cpp source text, in source order.

    Raises:
        ConfigError: the text has no options or one call does not have the expected shape
            (the format changed: update this parser).
    """
    text, masked_text = strip_comments(source)
    starts = [m.end() for m in re.finditer(r"add_opt\(\s*common_arg\(", text)]
    if not starts:
        raise ConfigError("no add_opt(common_arg(...)) calls found", source="common/arg.cpp")
    named_sets: dict[str, tuple[str, ...]] = {}
    specs: list[ArgSpec] = []
    for start, end in zip(starts, [*starts[1:], len(text)], strict=True):
        line = text.count("\n", 0, start) + 1
        specs.append(
            _parse_option(text[start:end], masked_text[start:end], line, text, named_sets)
        )
    return specs


def _parse_option(
    seg: str, masked: str, line: int, text: str, named_sets: dict[str, tuple[str, ...]]
) -> ArgSpec:
    """One option from its call's text (`seg`, from after `common_arg(` to the next call) and
    the same with literals blanked (`masked`); `line` is where the call starts in `text`.

    Raises:
        ConfigError: the call does not have the expected shape.
    """
    first = _LIST.match(seg)
    if first is None:
        raise ConfigError(f"line {line}: expected a {{...}} list of flags", source="arg.cpp")
    flags = _strings(first.group(1))
    pos = first.end()
    neg: tuple[str, ...] = ()
    second = re.compile(r"\s*,\s*\{([^{}]*)\}").match(seg, pos)
    if second is not None:
        neg = _strings(second.group(1))
        pos = second.end()
    lam = _LAMBDA.search(masked, pos)
    kind = _handler_kind(lam.group(1)) if lam else None
    if lam is None or kind is None or not flags:
        raise ConfigError(
            f"line {line}: cannot read option {flags or '?'} (no handler lambda)",
            source="arg.cpp",
        )
    hint: str | None = None
    if kind in ("v", "2"):
        m = re.compile(r"\s*,\s*\"((?:[^\"\\]|\\.)*)\"").match(seg, pos)
        hint = m.group(1) if m else None
    choices: tuple[str, ...] = ()
    if hint and (cm := _CHOICES.match(hint)):
        choices = tuple(cm.group(1).split("|"))
    chain = masked[lam.end() :]
    return ArgSpec(
        flags=flags,
        neg=neg,
        kind=kind,
        removed="arg_removed(" in chain,
        server=_for_server(chain, text, named_sets),
        value_hint=hint,
        choices=choices,
        line=line,
    )


def _for_server(chain: str, text: str, named: dict[str, tuple[str, ...]]) -> bool:
    """Whether the option reaches llama-server, from the calls chained on `common_arg(...)`."""
    examples = _examples(chain, text, named)
    excludes: set[str] = set()
    if ex := _EXCLUDES.search(chain):
        excludes = {e.strip() for e in ex.group(1).split(",") if e.strip()}
    return (
        bool(examples & {"LLAMA_EXAMPLE_SERVER", "LLAMA_EXAMPLE_COMMON"})
        and "LLAMA_EXAMPLE_SERVER" not in excludes
        and ".set_preset_only()" not in chain
    )


def _examples(chain: str, text: str, named: dict[str, tuple[str, ...]]) -> set[str]:
    m = _EXAMPLES.search(chain)
    if m is None:
        return {"LLAMA_EXAMPLE_COMMON"}
    body = m.group(1)
    if body.startswith("{"):
        return {e.strip() for e in body.strip("{}").split(",") if e.strip()}
    if body not in named:  # a named initializer list such as mmproj_examples
        d = re.search(_NAMED_SET.format(name=re.escape(body)), text)
        named[body] = tuple(e.strip() for e in d.group(1).split(",") if e.strip()) if d else ()
    return set(named[body])


def server_options(source: str) -> list[ArgSpec]:
    """The options llama-server registers (removed ones included: they still parse)."""
    return [s for s in parse_arg_cpp(source) if s.server]


def kv_cache_types(arg_cpp: str) -> tuple[str, ...]:
    """The -ctk/-ctv values: arg.cpp's `kv_cache_types` list (ggml type names, lower case)."""
    m = re.search(r"kv_cache_types\s*=\s*\{([^}]*)\}", strip_comments(arg_cpp)[0])
    if m is None:
        raise ConfigError("no kv_cache_types list found", source="common/arg.cpp")
    return tuple(t.lower() for t in re.findall(r"GGML_TYPE_(\w+)", m.group(1)))


def speculative_types(speculative_cpp: str) -> tuple[str, ...]:
    """The --spec-type names: speculative.cpp's `{"name", COMMON_SPECULATIVE_TYPE_X}` map
    (empty for versions before --spec-type)."""
    text = strip_comments(speculative_cpp)[0]
    return tuple(re.findall(r'\{\s*"([a-z0-9-]+)"\s*,\s*COMMON_SPECULATIVE_TYPE_\w+\s*\}', text))
