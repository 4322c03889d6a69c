"""The sweep spec's JSON Schema and its field reference, both generated from the pydantic models.

`autotune spec schema` prints `spec_json_schema()`. docs/spec.md holds the tables of
`render_reference()` between two markers; `python -m autotune.sweep.spec_docs --write
docs/spec.md` regenerates them and `--check` fails when they have drifted (a test runs it).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypedDict

from autotune.jsontypes import JSONValue

if TYPE_CHECKING:
    from pydantic import BaseModel

BEGIN = "<!-- BEGIN GENERATED: python -m autotune.sweep.spec_docs --write docs/spec.md -->"
END = "<!-- END GENERATED -->"
SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"

# A JSON Schema node as pydantic writes one, with the keywords this module reads.
SchemaNode = TypedDict(
    "SchemaNode",
    {
        "$schema": str,
        "$defs": dict[str, "SchemaNode"],
        "$ref": str,
        "title": str,
        "description": str,
        "type": str,
        "anyOf": list["SchemaNode"],
        "oneOf": list["SchemaNode"],
        "discriminator": dict[str, JSONValue],
        "items": "SchemaNode",
        "additionalProperties": "SchemaNode | bool",
        "properties": dict[str, "SchemaNode"],
        "required": list[str],
        "enum": list[JSONValue],
        "const": JSONValue,
        "default": JSONValue,
        "minimum": float,
        "exclusiveMinimum": float,
        "maximum": float,
        "exclusiveMaximum": float,
        "minLength": int,
        "minItems": int,
        "pattern": str,
    },
    total=False,
)
Bound = Literal["minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"]


def spec_json_schema() -> SchemaNode:
    """The JSON Schema of a sweep spec (draft 2020-12), keys sorted for stable output."""
    from autotune.sweep.spec import SweepSpec

    schema = SweepSpec.model_json_schema()
    _scenario_items(schema)
    schema["$schema"] = SCHEMA_DIALECT
    schema["title"] = "autotune sweep spec"
    out: SchemaNode = json.loads(json.dumps(schema, sort_keys=True))
    return out


def _scenario_items(schema: dict[str, Any]) -> None:
    """`workload.scenarios[]` as the scenario kinds' own models (the spec types the list as
    mappings and validates each through bench.scenarios): one of them by `kind`, which is
    required, with the `prompt_len` shorthand where `prompt_lens` exists."""
    from pydantic import TypeAdapter

    from autotune.bench.scenarios import Scenario

    union = TypeAdapter(Scenario).json_schema(ref_template="#/$defs/{model}")
    defs = schema.setdefault("$defs", {})
    for name, node in union.pop("$defs").items():
        node["required"] = sorted({*node.get("required", []), "kind"})
        if "prompt_lens" in node["properties"]:
            node["properties"]["prompt_len"] = {
                "description": "shorthand for prompt_lens: [N] (not both)",
                "minimum": 1,
                "type": "integer",
            }
        defs[name] = node
    defs["WorkloadSpec"]["properties"]["scenarios"]["items"] = union


def dumps_schema(schema: SchemaNode | None = None) -> str:
    return json.dumps(spec_json_schema() if schema is None else schema, indent=2, sort_keys=True)


@dataclass(frozen=True)
class Row:
    path: str
    type: str
    default: str
    valid: str
    meaning: str


def _resolve(node: SchemaNode, defs: Mapping[str, SchemaNode]) -> SchemaNode:
    ref = node.get("$ref")
    if isinstance(ref, str):
        return defs[ref.rsplit("/", 1)[-1]].copy()
    return node


def _alternatives(node: SchemaNode) -> list[SchemaNode]:
    return list(node["anyOf"]) if "anyOf" in node else [node]


def _type(node: SchemaNode, defs: Mapping[str, SchemaNode]) -> str:
    if "anyOf" in node:
        return " or ".join(_type(n, defs) for n in node["anyOf"])
    if "$ref" in node:
        return "section"
    if "discriminator" in node:  # one of several sections by a key (the scenario kinds)
        return f"section by `{node['discriminator']['propertyName']}`"
    if "enum" in node or "const" in node:
        return "str"
    kind = node.get("type")
    if kind == "array":
        items = node.get("items", {})
        inner = "section" if "$ref" in items else _type(items, defs) if items else "any"
        return f"list of {inner}"
    if kind == "object":
        extra = node.get("additionalProperties")
        if isinstance(extra, Mapping) and extra:
            return f"mapping of {_type(extra, defs)}"
        return "mapping"
    names = {"integer": "int", "number": "float", "string": "str", "boolean": "bool"}
    return names.get(str(kind), str(kind)) if kind else "any"


def _valid(node: SchemaNode) -> str:
    parts: list[str] = []
    for alt in _alternatives(node):
        if "enum" in alt:
            parts.append(", ".join(f"`{v}`" for v in alt["enum"]))
        if "const" in alt:
            parts.append(f"`{alt['const']}`")
        bounds: list[tuple[Bound, str]] = [
            ("minimum", ">="),
            ("exclusiveMinimum", ">"),
            ("maximum", "<="),
            ("exclusiveMaximum", "<"),
        ]
        for key, sym in bounds:
            if key in alt:
                parts.append(f"{sym} {alt[key]}")
        if "minLength" in alt:
            parts.append(f"at least {alt['minLength']} character(s)")
        if "minItems" in alt:
            parts.append(f"at least {alt['minItems']} item(s)")
        if "pattern" in alt:
            parts.append(f"matches `{alt['pattern']}`")
    return "; ".join(parts)


def _default(name: str, node: SchemaNode, required: list[str]) -> str:
    if name in required:
        return "required"
    if "default" not in node:
        kind = node.get("type")
        return "`{}`" if kind == "object" else "`[]`" if kind == "array" else ""
    value = node["default"]
    if isinstance(value, dict) and value and any("$ref" in a for a in _alternatives(node)):
        return "(section defaults)"
    return f"`{json.dumps(value)}`"


def _sub_section(node: SchemaNode) -> tuple[str, str] | None:
    """(def name, path suffix) of the section a field holds: itself, a list of it, or null."""
    for alt in _alternatives(node):
        if "$ref" in alt:
            return str(alt["$ref"]).rsplit("/", 1)[-1], ""
        items = alt.get("items")
        if isinstance(items, Mapping) and "$ref" in items:
            return str(items["$ref"]).rsplit("/", 1)[-1], "[]"
    return None


def field_rows(schema: SchemaNode | None = None) -> list[Row]:
    """Every field of the spec as a dotted path (`objective.constraints[].max`), in model order."""
    schema = spec_json_schema() if schema is None else schema
    from autotune.sweep.spec import SweepSpec

    defs: Mapping[str, SchemaNode] = schema.get("$defs", {})
    rows: list[Row] = []

    def walk(model_node: SchemaNode, prefix: str, model: type[BaseModel] | None) -> None:
        props: Mapping[str, SchemaNode] = model_node.get("properties", {})
        required = list(model_node.get("required", []))
        # model order (the schema's keys are sorted)
        order = [n for n in getattr(model, "model_fields", {}) if n in props] or sorted(props)
        for name in order:
            node = props[name]
            path = f"{prefix}{name}"
            rows.append(
                Row(
                    path=path,
                    type=_type(node, defs),
                    default=_default(name, node, required),
                    valid=_valid(node),
                    meaning=str(node.get("description", "")),
                )
            )
            sub = _sub_section(node)
            if sub is not None:
                def_name, suffix = sub
                field = model.model_fields[name] if model is not None else None
                sub_model = _model_of(field.annotation) if field is not None else None
                walk(
                    _resolve({"$ref": f"#/$defs/{def_name}"}, defs), f"{path}{suffix}.", sub_model
                )

    walk(schema, "", SweepSpec)
    return rows


def _model_of(annotation: object) -> type[BaseModel] | None:
    from pydantic import BaseModel

    stack = [annotation]
    while stack:
        cand = stack.pop()
        if isinstance(cand, type) and issubclass(cand, BaseModel):
            return cand
        stack.extend(getattr(cand, "__args__", ()))
    return None


def schema_paths(schema: SchemaNode | None = None) -> list[str]:
    """Every field path the JSON Schema describes (what docs/spec.md must mention)."""
    return [r.path for r in field_rows(schema)]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _table(rows: list[Row]) -> Iterator[str]:
    yield "| Field | Type | Default | Valid values | Meaning |"
    yield "|---|---|---|---|---|"
    for r in rows:
        cells = (f"`{r.path}`", r.type, r.default, r.valid, r.meaning)
        yield "| " + " | ".join(_cell(c) for c in cells) + " |"


# Meanings of scenario fields whose model gives none.
SCENARIO_MEANINGS = {
    "temperature": "sampling temperature of every request",
    "connect_timeout_s": "seconds to open a connection",
    "prompt_len": "prompt tokens per request",
    "prompt_lens": "prompt lengths measured, in tokens (`prompt_len: N` is short for `[N]`)",
    "output_len": "max_tokens per request",
    "num_requests": "measured requests per repeat",
    "read_timeout_s": "longest silence between two reads",
}


def scenario_rows(kind: str) -> list[Row]:
    from autotune.bench.scenarios import SCENARIO_CLASSES

    model = SCENARIO_CLASSES[kind]
    schema = model.model_json_schema()
    defs = schema.get("$defs", {})
    required = list(schema.get("required", []))
    rows = []
    for name in model.model_fields:
        node: SchemaNode = schema["properties"][name].copy()
        node.setdefault("description", SCENARIO_MEANINGS.get(name, ""))
        default = _default(name, node, required)
        if name in ("prompt_lens",):
            default = (
                f"`{json.dumps(model.model_fields[name].get_default(call_default_factory=True))}`"
            )
        rows.append(
            Row(name, _type(node, defs), default, _valid(node), str(node.get("description", "")))
        )
    return rows


def render_reference() -> str:
    """The generated part of docs/spec.md: the field table, scenario kinds and metric names."""
    from autotune.bench.scenarios import SCENARIO_CLASSES
    from autotune.sweep.spec import LAUNCH_FIGURES, SCENARIO_FIGURES

    lines = [BEGIN, "", "### Every field", ""]
    lines += _table(field_rows())
    lines += ["", "### Scenario kinds (`workload.scenarios[]`)", ""]
    lines += [
        "Each scenario is a mapping with a `kind`; the fields below are the ones that kind takes "
        "(any other is refused, with the closest valid name).",
        "",
    ]
    for kind in SCENARIO_CLASSES:
        lines += [f"#### `kind: {kind}`", ""]
        lines += _table([r for r in scenario_rows(kind) if r.path != "kind"])
        lines.append("")
    lines += [
        "### Metric names (`objective.metric`, `constraints[].metric`, `multi[].metric`)",
        "",
    ]
    lines += [
        "`SCENARIO.FIGURE`, where SCENARIO is a scenario's `name` (default: its kind) and FIGURE "
        "one of: " + ", ".join(f"`{f}`" for f in SCENARIO_FIGURES) + "; a latency percentile "
        "`{ttft,itl,tpot,e2e}_{mean,min,max,p50,p90,p95,p99}_s`; or a per-point figure "
        "`ttft_s@LEN`, `prefill_tok_s@LEN`, `ttft_s@turnN`.",
        "",
        "`launch.FIELD`, a fact of the launch: "
        + ", ".join(f"`{f}`" for f in LAUNCH_FIGURES)
        + ".",
        "",
        END,
    ]
    return "\n".join(lines)


def splice(doc: str, generated: str) -> str:
    """`doc` with the text between the markers replaced by `generated` (markers included)."""
    start, end = doc.find(BEGIN), doc.find(END)
    if start < 0 or end < start:
        raise ValueError(f"the document has no {BEGIN!r} ... {END!r} block")
    return doc[:start] + generated + doc[end + len(END) :]


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) == 2 and args[0] in ("--write", "--check"):
        path = Path(args[1])
        doc = path.read_text(encoding="utf-8")
        new = splice(doc, render_reference())
        if args[0] == "--check":
            if new != doc:
                print(
                    f"{path}: the generated reference is out of date; run "
                    f"python -m autotune.sweep.spec_docs --write {path}",
                    file=sys.stderr,
                )
                return 1
            return 0
        path.write_text(new, encoding="utf-8")
        return 0
    if not args:
        print(render_reference())
        return 0
    print(
        "usage: python -m autotune.sweep.spec_docs [--write FILE | --check FILE]", file=sys.stderr
    )
    return 2


if __name__ == "__main__":
    sys.exit(main())
