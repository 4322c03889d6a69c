"""Findings on the exclusion list (FIELD-NOTES P10): entries that match no module (often a
prefix the tensors do not use), modules declared unquantized but stored packed, and unquantized
projections the list does not name."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from autotune.inspect.modules import LAYER_PREFIX_RE, NEVER_QUANTIZED, Module
from autotune.inspect.naming import describe, first_names
from autotune.inspect.report import MAX_LISTED, Finding
from autotune.inspect.scheme import QuantSpec, is_class_name


def exclusion_findings(mods: Mapping[str, Module], spec: QuantSpec | None) -> list[Finding]:
    """The exclusion list against the modules that exist (P10)."""
    findings: list[Finding] = []
    excluded: dict[str, str] = {}  # module name -> the entry that excludes it
    remapped: dict[str, str] = {}  # module name -> the misspelled entry that meant it
    if spec is not None and spec.report.exclude:
        unmatched = _match_entries(mods, spec, excluded)
        findings += _unmatched_findings(unmatched, mods, spec, remapped)
    findings += _excluded_but_quantized(mods, spec, excluded, remapped)
    if spec is not None:
        findings += _unquantized_not_excluded(mods, spec, excluded, remapped)
    return findings


def _match_entries(
    mods: Mapping[str, Module], spec: QuantSpec, excluded: dict[str, str]
) -> list[str]:
    """Record in `excluded` the modules each entry excludes; return the entries that match
    none (class names such as "Linear" aside)."""
    unmatched: list[str] = []
    for entry in spec.report.exclude:
        hits = [m for m in mods if spec.matches(entry, m)]
        for h in hits:
            excluded.setdefault(h, entry)
        if not hits and not is_class_name(entry):
            unmatched.append(entry)
    return unmatched


def _excluded_but_quantized(
    mods: Mapping[str, Module],
    spec: QuantSpec | None,
    excluded: Mapping[str, str],
    remapped: Mapping[str, str],
) -> list[Finding]:
    """Modules the exclusion list declares unquantized (or meant to, `remapped`) that are
    stored packed."""
    intended = {**remapped, **excluded}
    packed = [mods[m] for m in intended if mods[m].quant is not None and mods[m].is_linear]
    if not packed:
        return []
    via_remap = [m for m in packed if m.name in remapped and m.name not in excluded]
    also = (
        f"; {len(via_remap)} of them are named in {spec.report.exclude_field if spec else ''} "
        f"with a prefix the tensors do not use"
        if via_remap
        else ""
    )
    return [
        Finding(
            severity="error",
            code="excluded-but-quantized",
            message=f"{len(packed)} module(s) declared unquantized in quantization_config."
            f"{spec.report.exclude_field if spec else ''} are stored quantized: "
            f"{describe(packed)}{also}. The engine loads them as plain weights and serves "
            f"garbage (repeated tokens, '!!!!') while it reports healthy (seen on a community "
            f"AWQ-INT4 pack of Qwen3.8-27B; sglang#20370).",
            tensors=first_names(m.main for m in packed),
            count=len(packed),
            fix=f"dequantize these {len(packed)} modules to bf16 "
            f"(weight_packed + weight_scale -> weight) and rewrite the exclusion list "
            "with the tensors' own names",
        )
    ]


def _unquantized_not_excluded(
    mods: Mapping[str, Module],
    spec: QuantSpec,
    excluded: Mapping[str, str],
    remapped: Mapping[str, str],
) -> list[Finding]:
    """Unquantized projections the config does not exclude: the engine builds them quantized."""
    loose = [
        m
        for m in mods.values()
        if m.component == "decoder"
        and m.layer is not None
        and m.quant is None
        and m.n is not None
        and m.leaf not in NEVER_QUANTIZED
        and m.name not in excluded
        and spec.targets(m)
    ]
    if not loose:
        return []
    hint = (
        " (a misspelled exclusion entry names them)"
        if any(m.name in remapped for m in loose)
        else ""
    )
    return [
        Finding(
            severity="error" if spec.exclusion_is_binding else "warning",
            code="unquantized-not-excluded",
            message=f"{len(loose)} projection(s) are stored unquantized but "
            f"quantization_config.{spec.report.exclude_field or 'ignore'} does not list "
            f"them{hint}: {describe(loose)}. The engine creates quantized layers "
            f"for them and finds no packed weights.",
            tensors=first_names(m.main for m in loose),
            count=len(loose),
            fix="add them to the exclusion list, spelled as the tensors are",
        )
    ]


def _unmatched_findings(
    unmatched: list[str], mods: Mapping[str, Module], spec: QuantSpec, remapped: dict[str, str]
) -> list[Finding]:
    """Unmatched exclusion entries; those that name a decoder module under another prefix (P10:
    `model.language_model.layers.N.x` for tensors `model.layers.N.x`) are recorded in
    `remapped` so the caller can check what the entry meant."""
    if not unmatched:
        return []
    by_suffix: dict[str, list[tuple[str, str]]] = defaultdict(list)  # suffix -> (name, prefix)
    for name, m in mods.items():
        hit = LAYER_PREFIX_RE.match(name)
        if hit and m.component == "decoder":
            by_suffix[f"layers.{hit.group(2)}.{hit.group(3)}"].append((name, hit.group(1)))
    prefixes: set[tuple[str, str]] = set()
    for entry in unmatched:
        hit = LAYER_PREFIX_RE.match(entry)
        if not hit or entry.startswith("re:"):
            continue
        for name, tensor_prefix in by_suffix.get(f"layers.{hit.group(2)}.{hit.group(3)}", []):
            remapped.setdefault(name, entry)
            prefixes.add((hit.group(1), tensor_prefix))
    field_name = spec.report.exclude_field or "ignore"
    msg = (
        f"{len(unmatched)} of {len(spec.report.exclude)} quantization_config.{field_name} "
        f"entries match no module in the checkpoint"
    )
    fix = "remove the entries, or spell them as the tensors are named"
    if prefixes:
        said = ", ".join(
            f"'{a}.layers.N' where the tensors are '{b}.layers.N'" for a, b in sorted(prefixes)
        )
        msg += f"; they use {said} (sglang#20370)"
        fix = "rewrite the entries with the tensors' prefix: " + ", ".join(
            f"{a}. -> {b}." for a, b in sorted(prefixes)
        )
    return [
        Finding(
            severity="warning",
            code="exclude-unmatched",
            message=msg,
            tensors=unmatched[:MAX_LISTED],
            count=len(unmatched),
            fix=fix,
        )
    ]
