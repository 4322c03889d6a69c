"""Checkpoint inspector: find a broken quantized pack before a night is spent on it.

Reads config.json and the safetensors headers (no tensor is loaded) and reports, per decoder
layer, which projections are stored quantized and which unquantized, then checks the pack against
its own config and the kernels that will run it:

- `quantization_config.ignore` (compressed-tensors), `modules_to_not_convert` (AWQ, FP8) or
  `exclude_modules` (modelopt) entries that match no module, e.g. `model.language_model.layers.N`
  while the tensors are `model.layers.N` (FIELD-NOTES P10);
- modules declared unquantized there but stored packed (P10: all GDN layers held `weight_packed`);
- unquantized modules the config does not exclude (the engine builds quantized layers for them);
- widths that break kernel limits: Marlin (W4A16) needs size_n % 64 == 0, size_k % 128 == 0 and
  size_k % group_size == 0 per rank (`in_proj_a`/`in_proj_b` are 48 wide, fused `in_proj_ba` 96,
  so they must stay unquantized, P10); FP8 block-wise needs per-rank widths divisible by the block
  at TP > 1;
- fused shards (q/k/v, gate/up, in_proj_a/b, in_proj_qkv/z) stored with different quantization;
- MTP weights absent while the config declares MTP layers: NEXTN/EAGLE cannot run (P6);
- layers missing, layer_types contradicting full_attention_interval, a shard index that does not
  match the shards.

The verdict is "broken" when any finding is an error, "warnings" when any is a warning, else "ok".
"""

from __future__ import annotations

import fnmatch
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from autotune.errors import ConfigError
from autotune.models.hf import (
    FLOAT_DTYPES,
    FP8_DTYPES,
    Checkpoint,
    TensorInfo,
    full_attention_layers,
    mtp_layers_present,
    read_checkpoint,
)

Severity = Literal["error", "warning", "info"]
Verdict = Literal["ok", "warnings", "broken"]

# `autotune inspect` exit status per verdict (user errors such as a missing folder exit 2).
EXIT_CODES: dict[str, int] = {"ok": 0, "warnings": 10, "broken": 11}

MAX_LISTED = 8  # tensors named per finding; `count` has the total

# Marlin W4A16 tile limits (SGLang/vLLM marlin_utils: GPTQ_MARLIN_MIN_THREAD_N / _K).
MARLIN_MIN_N = 64
MARLIN_MIN_K = 128

# Row-parallel projections split K across TP ranks; every other linear layer splits N.
_ROW_PARALLEL = frozenset(
    {"o_proj", "out_proj", "down_proj", "dense", "proj", "fc2", "linear_fc2", "down"}
)
# Checkpoint shards SGLang loads into one fused layer (they must share one quantization).
_FUSED: dict[frozenset[str], str] = {
    frozenset({"q_proj", "k_proj", "v_proj"}): "qkv_proj",
    frozenset({"gate_proj", "up_proj"}): "gate_up_proj",
    frozenset({"in_proj_a", "in_proj_b"}): "in_proj_ba",
    frozenset({"in_proj_qkv", "in_proj_z"}): "in_proj_qkvz",
}
# MoE routers are never quantized by the engines, whatever the config lists.
_NEVER_QUANTIZED = frozenset({"gate", "shared_expert_gate", "router"})
_LAYER_PREFIX_RE = re.compile(r"^(.*?)(?:^|\.)layers\.(\d+)\.(.+)$")


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Finding(_Frozen):
    severity: Severity
    code: str = Field(description="stable identifier, e.g. marlin-size-n, ignore-unmatched")
    message: str
    tensors: list[str] = Field(default_factory=list, description=f"first {MAX_LISTED} names")
    count: int = Field(default=0, description="how many modules/tensors/entries are affected")
    fix: str | None = None


class LayerReport(_Frozen):
    index: int
    kind: Literal["full_attention", "linear_attention"]
    quantized: list[str] = Field(description="projections stored quantized (names in the layer)")
    unquantized: list[str] = Field(description="2-D projections stored in 16/32-bit floats")
    other_tensors: int = Field(description="norms, conv1d, A_log, dt_bias, biases, ...")
    bytes: int


class QuantReport(_Frozen):
    method: str | None = None
    format: str | None = None
    bits: int | None = None
    group_size: int | None = None
    block_shape: list[int] | None = None
    exclude_field: str | None = Field(default=None, description="ignore / modules_to_not_convert")
    exclude: list[str] = Field(default_factory=list)


class MTPReport(_Frozen):
    declared_layers: int
    present_layers: int
    tensors: int
    bytes: int


class InspectionReport(_Frozen):
    path: str
    architecture: str
    tp: int
    files: list[str]
    tensor_count: int
    num_layers: int
    quantization: QuantReport
    bytes_by_component: dict[str, int]
    bytes_by_dtype: dict[str, int]
    layers: list[LayerReport]
    mtp: MTPReport
    vision_tensors: int
    findings: list[Finding]
    verdict: Verdict

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]

    def by_code(self, code: str) -> list[Finding]:
        return [f for f in self.findings if f.code == code]


# ---------------------------------------------------------------------------------------------
# Modules: tensors grouped by the module that owns them (name minus the parameter suffix)


@dataclass
class _Module:
    name: str
    params: dict[str, TensorInfo] = field(default_factory=dict)
    quant: str | None = None  # "int" (packed int4/int8), "fp8", "fp4", "int8" or None
    n: int | None = None  # output width (rows of the dense weight)
    k: int | None = None  # input width
    main: str = ""  # the tensor holding the weight

    @property
    def leaf(self) -> str:
        return self.name.rsplit(".", 1)[-1]

    @property
    def component(self) -> str:
        return next(iter(self.params.values())).component

    @property
    def layer(self) -> int | None:
        """Decoder layer index (None for embeddings, lm_head, MTP and vision modules)."""
        t = next(iter(self.params.values()))
        return t.layer if t.component == "decoder" else None

    @property
    def is_linear(self) -> bool:
        return self.quant is not None or self.n is not None

    @property
    def row_parallel(self) -> bool:
        return self.leaf in _ROW_PARALLEL


def _modules(ckpt: Checkpoint, bits: int) -> dict[str, _Module]:
    mods: dict[str, _Module] = {}
    for t in ckpt.tensors.values():
        owner, _, param = t.name.rpartition(".")
        mods.setdefault(owner, _Module(owner)).params[param] = t
    pack = max(1, 32 // bits)
    for m in mods.values():
        p = m.params
        if "weight_packed" in p:  # compressed-tensors: [N, K / pack] int32, or [N, K/2] uint8
            w = p["weight_packed"]
            m.quant = "int" if w.dtype in ("I32", "U32") else "fp4"
            per = pack if m.quant == "int" else 2
            if len(w.shape) == 2:
                m.n, m.k = w.shape[0], w.shape[1] * per
            m.main = w.name
        elif "qweight" in p:  # AWQ [K, N / pack] or GPTQ [K / pack, N]; scales are [K/g, N]
            w = p["qweight"]
            m.quant, m.main = "int", w.name
            s = p.get("scales")
            if len(w.shape) == 2:
                gptq = s is not None and len(s.shape) == 2 and s.shape[1] == w.shape[1]
                m.k, m.n = (
                    (w.shape[0] * pack, w.shape[1]) if gptq else (w.shape[0], w.shape[1] * pack)
                )
        elif "weight" in p and len(p["weight"].shape) == 2:
            w = p["weight"]
            m.main = w.name
            m.n, m.k = w.shape
            if w.dtype in FP8_DTYPES:
                m.quant = "fp8"
            elif w.dtype == "U8" and "weight_scale" in p:  # modelopt NVFP4: two values a byte
                m.quant, m.k = "fp4", w.shape[1] * 2
            elif w.dtype == "I8" and "weight_scale" in p:
                m.quant = "int8"
            elif w.dtype not in FLOAT_DTYPES:
                m.n = m.k = None  # an integer table, not a projection
    return mods


# ---------------------------------------------------------------------------------------------
# Quantization config: the exclusion list and how its entries match module names


@dataclass(frozen=True)
class _QuantSpec:
    report: QuantReport
    matches: Callable[[str, str], bool]  # (entry, module name) -> excluded?
    exclusion_is_binding: bool  # non-excluded linear layers are built quantized by the engine
    targets: Callable[[_Module], bool]  # is this module targeted for quantization at all?


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def _exact_or_parent(entry: str, module: str) -> bool:
    return module == entry or module.startswith(entry + ".")


def _ct_match(entry: str, module: str) -> bool:
    if entry.startswith("re:"):
        return re.match(entry[3:], module) is not None
    return _exact_or_parent(entry, module)


def _quant_spec(ckpt: Checkpoint) -> _QuantSpec | None:
    q = ckpt.quantization_config()
    if q is None:
        return None
    method = str(q.get("quant_method") or "").lower().replace("_", "-")

    def listed(*keys: str) -> tuple[str | None, list[str]]:
        for k in keys:
            v = q.get(k)
            if isinstance(v, list):
                return k, [str(x) for x in v]
        return None, []

    def any_linear(_: _Module) -> bool:
        return True

    if method == "compressed-tensors":
        groups = q.get("config_groups") if isinstance(q.get("config_groups"), dict) else {}
        weights: dict[str, Any] = {}
        targets: list[str] = []
        for g in (groups or {}).values():
            if isinstance(g, dict):
                if not weights and isinstance(g.get("weights"), dict):
                    weights = g["weights"]
                targets += [str(t) for t in g.get("targets") or []]
        key, ignore = listed("ignore")
        block = weights.get("block_structure")

        def targeted(m: _Module) -> bool:
            # "Linear" (a class name) targets every linear layer; other entries are names.
            return any(t == "Linear" or _ct_match(t, m.name) for t in targets) or not targets

        return _QuantSpec(
            QuantReport(
                method=method,
                format=q.get("format"),
                bits=_int(weights.get("num_bits")),
                group_size=_int(weights.get("group_size")),
                block_shape=list(block) if isinstance(block, list) else None,
                exclude_field=key,
                exclude=ignore,
            ),
            _ct_match,
            True,
            targeted,
        )
    if method in ("awq", "gptq", "auto-round"):
        key, skip = listed("modules_to_not_convert")
        return _QuantSpec(
            QuantReport(
                method=method,
                format=q.get("version") or q.get("packing_format"),
                bits=_int(q.get("bits", q.get("w_bit"))),
                group_size=_int(q.get("group_size", q.get("q_group_size"))),
                exclude_field=key,
                exclude=skip,
            ),
            # AutoAWQ and SGLang skip a layer when an entry is a substring of its name.
            lambda entry, module: entry in module,
            method == "awq",
            any_linear,
        )
    if method == "fp8":
        key, skip = listed("ignored_layers", "modules_to_not_convert")
        block = q.get("weight_block_size")
        return _QuantSpec(
            QuantReport(
                method=method,
                format=q.get("fmt"),
                bits=8,
                block_shape=list(block) if isinstance(block, list) else None,
                exclude_field=key,
                exclude=skip,
            ),
            _exact_or_parent,
            True,
            any_linear,
        )
    if method == "modelopt":
        key, skip = listed("exclude_modules", "ignore")
        return _QuantSpec(
            QuantReport(
                method=method,
                format=q.get("quant_algo"),
                bits=4 if str(q.get("quant_algo")).upper() == "NVFP4" else 8,
                group_size=_int(q.get("group_size")),
                exclude_field=key,
                exclude=skip,
            ),
            lambda e, m: fnmatch.fnmatchcase(m, e) or _exact_or_parent(e, m),
            True,
            any_linear,
        )
    return _QuantSpec(QuantReport(method=method or None), lambda e, m: False, False, any_linear)


def _is_class_name(entry: str) -> bool:
    """compressed-tensors also accepts layer class names ("Linear"); names cannot check those."""
    return "." not in entry and not entry.startswith("re:") and entry[:1].isupper()


# ---------------------------------------------------------------------------------------------
# The inspection


def _first(names: Iterable[str]) -> list[str]:
    return sorted(names)[:MAX_LISTED]


def _ranges(ids: Iterable[int]) -> str:
    """[0, 1, 2, 4, 6, 7] -> '0-2, 4, 6-7'."""
    out: list[str] = []
    ids = sorted(ids)
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        out.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ", ".join(out)


def _short(m: _Module) -> str:
    """`model.layers.3.self_attn.q_proj` -> `self_attn.q_proj` (the module's name in its layer)."""
    hit = _LAYER_PREFIX_RE.match(m.name)
    return hit.group(3) if hit and m.layer is not None else m.name


def _describe(mods: list[_Module]) -> str:
    """'linear_attn.in_proj_a (n=48, k=128) in layers 0-2; ...' grouped by short name."""
    by: dict[tuple[str, int | None, int | None], list[int]] = defaultdict(list)
    loose: list[str] = []
    for m in mods:
        if m.layer is None:
            loose.append(m.name)
        else:
            by[(_short(m), m.n, m.k)].append(m.layer)
    parts = [
        f"{name} (n={n}, k={k}) in layers {_ranges(ids)}"
        for (name, n, k), ids in sorted(by.items(), key=lambda kv: (kv[0][0], min(kv[1])))
    ]
    return "; ".join(parts + loose)


def inspect_checkpoint(path: Path | str, *, tp: int = 1) -> InspectionReport:
    """Inspect a local Hugging Face model folder; see the module docstring for the checks."""
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise ConfigError(f"must be a positive integer, got {tp!r}", field="--tp")
    ckpt = read_checkpoint(Path(path))
    cfg_file = ckpt.path / "config.json"
    text = ckpt.text_config
    prefix = ckpt.text_config_prefix
    full = set(full_attention_layers(text, cfg_file, prefix))
    num_layers = int(text["num_hidden_layers"])  # validated by full_attention_layers
    spec = _quant_spec(ckpt)
    bits = (spec.report.bits if spec else None) or 4
    mods = _modules(ckpt, bits)
    findings: list[Finding] = []

    # --- exclusion list vs the modules that exist (P10)
    excluded: dict[str, str] = {}  # module name -> the entry that excludes it
    remapped: dict[str, str] = {}  # module name -> the misspelled entry that meant it
    if spec is not None and spec.report.exclude:
        unmatched: list[str] = []
        for entry in spec.report.exclude:
            hits = [m for m in mods if spec.matches(entry, m)]
            for h in hits:
                excluded.setdefault(h, entry)
            if not hits and not _is_class_name(entry):
                unmatched.append(entry)
        findings += _unmatched_findings(unmatched, mods, spec, remapped)

    intended = {**remapped, **excluded}
    packed = [mods[m] for m in intended if mods[m].quant is not None and mods[m].is_linear]
    if packed:
        via_remap = [m for m in packed if m.name in remapped and m.name not in excluded]
        also = (
            f"; {len(via_remap)} of them are named in {spec.report.exclude_field if spec else ''} "
            f"with a prefix the tensors do not use"
            if via_remap
            else ""
        )
        findings.append(
            Finding(
                severity="error",
                code="excluded-but-quantized",
                message=f"{len(packed)} module(s) declared unquantized in quantization_config."
                f"{spec.report.exclude_field if spec else ''} are stored quantized: "
                f"{_describe(packed)}{also}. The engine loads them as plain weights and serves "
                f"garbage (repeated tokens, '!!!!') while it reports healthy (seen on a community "
                f"AWQ-INT4 pack of Qwen3.8-27B; sglang#20370).",
                tensors=_first(m.main for m in packed),
                count=len(packed),
                fix=f"dequantize these {len(packed)} modules to bf16 "
                f"(weight_packed + weight_scale -> weight) and rewrite the exclusion list "
                "with the tensors' own names",
            )
        )

    # --- unquantized projections the config does not exclude: the engine builds them quantized
    if spec is not None:
        loose = [
            m
            for m in mods.values()
            if m.component == "decoder"
            and m.layer is not None
            and m.quant is None
            and m.n is not None
            and m.leaf not in _NEVER_QUANTIZED
            and m.name not in excluded
            and spec.targets(m)
        ]
        if loose:
            hint = (
                " (a misspelled exclusion entry names them)"
                if any(m.name in remapped for m in loose)
                else ""
            )
            findings.append(
                Finding(
                    severity="error" if spec.exclusion_is_binding else "warning",
                    code="unquantized-not-excluded",
                    message=f"{len(loose)} projection(s) are stored unquantized but "
                    f"quantization_config.{spec.report.exclude_field or 'ignore'} does not list "
                    f"them{hint}: {_describe(loose)}. The engine creates quantized layers "
                    f"for them and finds no packed weights.",
                    tensors=_first(m.main for m in loose),
                    count=len(loose),
                    fix="add them to the exclusion list, spelled as the tensors are",
                )
            )

    # --- quantized tensors vs the config
    quantized = [m for m in mods.values() if m.quant is not None]
    if quantized and spec is None:
        findings.append(
            Finding(
                severity="error",
                code="quantized-without-config",
                message=f"{len(quantized)} module(s) are stored quantized but config.json has no "
                f"quantization_config: the engine would load packed integers as weights",
                tensors=_first(m.main for m in quantized),
                count=len(quantized),
                fix="restore the quantization_config of the tool that made the pack",
            )
        )
    if spec is not None and not quantized:
        findings.append(
            Finding(
                severity="error",
                code="no-quantized-tensors",
                message=f"config.json declares quant_method {spec.report.method!r} but no "
                f"tensor is stored quantized (no weight_packed, qweight, fp8 or packed fp4 "
                "weights)",
                fix="remove quantization_config, or use the quantized shards",
            )
        )
    missing_scales = [
        m
        for m in quantized
        if not any(p in m.params for p in ("weight_scale", "scales", "weight_scale_inv"))
    ]
    if missing_scales:
        findings.append(
            Finding(
                severity="error",
                code="missing-scales",
                message=f"{len(missing_scales)} quantized module(s) have no scale tensor: "
                f"{_describe(missing_scales)}",
                tensors=_first(m.main for m in missing_scales),
                count=len(missing_scales),
                fix="the pack is incomplete; re-export or re-download it",
            )
        )

    findings += _index_findings(ckpt)
    findings += _fused_findings(mods)
    findings += _kernel_findings(quantized, spec, tp)
    findings += _layer_findings(ckpt, mods, num_layers, full)

    # --- MTP (P6) and vision
    declared = text.get("mtp_num_hidden_layers", text.get("num_nextn_predict_layers", 0))
    declared = declared if isinstance(declared, int) and declared > 0 else 0
    present = mtp_layers_present(ckpt)
    mtp_tensors = [t for t in ckpt.tensors.values() if t.component == "mtp"]
    if declared and not present:
        findings.append(
            Finding(
                severity="warning",
                code="mtp-missing",
                message=f"config.json declares {prefix}mtp_num_hidden_layers={declared} but no "
                f"tensor holds MTP weights: NEXTN/EAGLE speculative decoding cannot be used with "
                f"this pack (vllm#35548, sglang#35797)",
                fix="use a checkpoint that ships the MTP layer, or keep NEXTN/EAGLE out of the "
                "search space (NGRAM needs no weights)",
            )
        )
    elif present and not declared:
        findings.append(
            Finding(
                severity="info",
                code="mtp-undeclared",
                message=f"{len(mtp_tensors)} MTP tensor(s) present but config.json declares "
                f"no MTP layers; the engine will not load them as a draft model",
                tensors=_first(t.name for t in mtp_tensors),
                count=len(mtp_tensors),
            )
        )
    elif present:
        findings.append(
            Finding(
                severity="info",
                code="mtp-present",
                message=f"{present} MTP layer(s) present ({len(mtp_tensors)} tensors): "
                f"NEXTN/EAGLE speculative decoding is possible",
                count=len(mtp_tensors),
            )
        )
    vision = [t for t in ckpt.tensors.values() if t.component == "vision"]
    if ckpt.config.get("vision_config") is not None and not vision:
        findings.append(
            Finding(
                severity="info",
                code="vision-absent",
                message="config.json has a vision_config but no vision tensors: a text-only pack",
            )
        )

    findings.sort(key=lambda f: ({"error": 0, "warning": 1, "info": 2}[f.severity], f.code))
    verdict: Verdict = (
        "broken"
        if any(f.severity == "error" for f in findings)
        else "warnings"
        if any(f.severity == "warning" for f in findings)
        else "ok"
    )
    archs = ckpt.config.get("architectures")
    return InspectionReport(
        path=str(ckpt.path.resolve()),
        architecture=str(archs[0])
        if isinstance(archs, list) and archs
        else str(ckpt.config.get("model_type", "unknown")),
        tp=tp,
        files=list(ckpt.files),
        tensor_count=len(ckpt.tensors),
        num_layers=num_layers,
        quantization=spec.report if spec else QuantReport(),
        bytes_by_component=ckpt.bytes_by_component(),
        bytes_by_dtype=ckpt.bytes_by_dtype(),
        layers=_layer_reports(ckpt, mods, num_layers, full),
        mtp=MTPReport(
            declared_layers=declared,
            present_layers=present,
            tensors=len(mtp_tensors),
            bytes=sum(t.nbytes for t in mtp_tensors),
        ),
        vision_tensors=len(vision),
        findings=findings,
        verdict=verdict,
    )


def _unmatched_findings(
    unmatched: list[str], mods: Mapping[str, _Module], spec: _QuantSpec, remapped: dict[str, str]
) -> list[Finding]:
    """Unmatched exclusion entries; those that name a decoder module under another prefix (P10:
    `model.language_model.layers.N.x` for tensors `model.layers.N.x`) are recorded in
    `remapped` so the caller can check what the entry meant."""
    if not unmatched:
        return []
    by_suffix: dict[str, list[tuple[str, str]]] = defaultdict(list)  # suffix -> (name, prefix)
    for name, m in mods.items():
        hit = _LAYER_PREFIX_RE.match(name)
        if hit and m.component == "decoder":
            by_suffix[f"layers.{hit.group(2)}.{hit.group(3)}"].append((name, hit.group(1)))
    prefixes: set[tuple[str, str]] = set()
    for entry in unmatched:
        hit = _LAYER_PREFIX_RE.match(entry)
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


def _index_findings(ckpt: Checkpoint) -> list[Finding]:
    """model.safetensors.index.json against the shards: engines load by the index."""
    wm = ckpt.index_weight_map
    if wm is None:
        return []
    out = []
    absent = sorted(set(wm) - set(ckpt.tensors))
    wrong = sorted(n for n, f in wm.items() if n in ckpt.tensors and ckpt.tensors[n].file != f)
    unindexed = sorted(set(ckpt.tensors) - set(wm))
    if absent or wrong:
        out.append(
            Finding(
                severity="error",
                code="index-mismatch",
                message=f"model.safetensors.index.json places {len(absent) + len(wrong)} tensor(s) "
                f"in shards that do not hold them ({len(absent)} in no shard at all)",
                tensors=_first(absent + wrong),
                count=len(absent) + len(wrong),
                fix="regenerate the index from the shards, or re-download the pack",
            )
        )
    if unindexed:
        out.append(
            Finding(
                severity="warning",
                code="index-incomplete",
                message=f"{len(unindexed)} tensor(s) in the shards are missing from "
                f"model.safetensors.index.json; loaders that follow the index skip them",
                tensors=_first(unindexed),
                count=len(unindexed),
                fix="regenerate the index from the shards",
            )
        )
    return out


def _fused_findings(mods: Mapping[str, _Module]) -> list[Finding]:
    by_parent: dict[str, dict[str, _Module]] = defaultdict(dict)
    for m in mods.values():
        if m.is_linear:
            by_parent[m.name.rpartition(".")[0]][m.leaf] = m
    mixed: list[tuple[str, list[_Module]]] = []
    for children in by_parent.values():
        for group, fused in _FUSED.items():
            members = [children[c] for c in sorted(group) if c in children]
            if len(members) > 1 and len({m.quant for m in members}) > 1:
                mixed.append((fused, members))
    if not mixed:
        return []
    flat = [m for _, ms in mixed for m in ms]
    names = sorted({f for f, _ in mixed})
    return [
        Finding(
            severity="error",
            code="fused-mixed-quantization",
            message=f"the engine fuses {', '.join(names)} from shards that are stored with "
            f"different quantization in {len(mixed)} place(s): {_describe(flat)}",
            tensors=_first(m.main for m in flat),
            count=len(flat),
            fix="store every shard of a fused layer the same way (all quantized or all bf16)",
        )
    ]


@dataclass
class _KernelLayer:
    """A linear layer as the engine builds it: fused shards (q/k/v, in_proj_a/b, ...) share
    one GEMM whose per-rank width is what the kernel checks (P10: in_proj_ba is 96 wide)."""

    name: str  # short name in its layer, fused name for merged shards
    members: list[_Module]
    n: int  # total output width at TP 1
    k: int
    quant: str | None
    row_parallel: bool

    @property
    def layer(self) -> int | None:
        return self.members[0].layer


def _kernel_layers(quantized: list[_Module]) -> list[_KernelLayer]:
    groups: dict[str, list[_Module]] = defaultdict(list)
    for m in quantized:
        if m.n is None or m.k is None:
            continue
        fused = next((f for g, f in _FUSED.items() if m.leaf in g), None)
        groups[f"{m.name.rpartition('.')[0]}.{fused}" if fused else m.name].append(m)
    out = []
    for members in groups.values():
        first = members[0]
        short = _short(first)
        if len(members) > 1:
            base = short.rpartition(".")[0]
            fused = next(f for g, f in _FUSED.items() if first.leaf in g)
            parts = "+".join(m.leaf for m in members)
            short = f"{base + '.' if base else ''}{fused}[{parts}]"
        out.append(
            _KernelLayer(
                name=short,
                members=members,
                n=sum(m.n or 0 for m in members),
                k=first.k or 0,
                quant=first.quant,
                row_parallel=first.row_parallel,
            )
        )
    return out


def _kernel_findings(quantized: list[_Module], spec: _QuantSpec | None, tp: int) -> list[Finding]:
    bad: dict[str, list[tuple[_KernelLayer, int, int]]] = defaultdict(list)
    group = spec.report.group_size if spec else None
    block = spec.report.block_shape if spec else None
    for kl in _kernel_layers(quantized):
        split = [m.k if kl.row_parallel else m.n for m in kl.members]
        if any((w or 0) % tp for w in split):
            bad["tp-split"].append((kl, kl.n, kl.k))
            continue
        n = kl.n if kl.row_parallel else kl.n // tp
        k = kl.k // tp if kl.row_parallel else kl.k
        if kl.quant == "int":
            if n % MARLIN_MIN_N:
                bad["marlin-size-n"].append((kl, n, k))
            if k % MARLIN_MIN_K:
                bad["marlin-size-k"].append((kl, n, k))
            if group and k % group:
                bad["group-size-k"].append((kl, n, k))
        elif kl.quant == "fp8" and block and tp > 1 and (n % block[0] or k % block[1]):
            bad["fp8-block"].append((kl, n, k))
    at = f" per rank at TP {tp}" if tp > 1 else ""
    texts = {
        "tp-split": (
            f"have widths that TP {tp} does not divide",
            "use a TP size that divides them",
        ),
        "marlin-size-n": (
            f"are stored int-quantized with size_n{at} not a multiple of {MARLIN_MIN_N}, which "
            f"the Marlin W4A16 kernel needs (in_proj_a/in_proj_b are 48 wide, fused in_proj_ba "
            f"96: they must stay unquantized, sglang#19406)",
            "keep these projections in bf16 (dequantize them) and list them in the exclusion list",
        ),
        "marlin-size-k": (
            f"are stored int-quantized with size_k{at} not a multiple of {MARLIN_MIN_K}, which "
            f"the Marlin W4A16 kernel needs",
            "keep these projections in bf16, or use a TP size that keeps size_k aligned",
        ),
        "group-size-k": (
            f"have size_k{at} that is not a multiple of the quantization group size {group}",
            "use a TP size that keeps whole groups on each rank",
        ),
        "fp8-block": (
            f"have a width{at} not divisible by the FP8 weight block {block}; SGLang refuses to "
            f"load them",
            "use a smaller TP size",
        ),
    }
    out = []
    for code, hits in bad.items():
        text, fix = texts[code]
        by: dict[tuple[str, int, int], list[int]] = defaultdict(list)
        for kl, n, k in hits:
            by[(kl.name, n, k)] += [] if kl.layer is None else [kl.layer]
        where = "; ".join(
            f"{name} size_n {n}, size_k {k}" + (f" in layers {_ranges(ids)}" if ids else "")
            for (name, n, k), ids in sorted(by.items(), key=lambda kv: (kv[0][0], kv[1][:1]))
        )
        mods = [m for kl, _, _ in hits for m in kl.members]
        out.append(
            Finding(
                severity="error",
                code=code,
                message=f"{len(hits)} linear layer(s) ({len(mods)} checkpoint modules) {text}: "
                f"{where}",
                tensors=_first(m.main for m in mods),
                count=len(mods),
                fix=fix,
            )
        )
    return out


def _layer_findings(
    ckpt: Checkpoint, mods: Mapping[str, _Module], num_layers: int, full: set[int]
) -> list[Finding]:
    out: list[Finding] = []
    present = {m.layer for m in mods.values() if m.component == "decoder" and m.layer is not None}
    missing = sorted(set(range(num_layers)) - present)
    extra = sorted(i for i in present if i >= num_layers)
    if missing:
        out.append(
            Finding(
                severity="error",
                code="layers-missing",
                message=f"config.json declares {num_layers} layers but layers {_ranges(missing)} "
                f"have no tensors",
                count=len(missing),
                fix="the pack is incomplete; re-download the missing shards",
            )
        )
    if extra:
        out.append(
            Finding(
                severity="warning",
                code="layers-extra",
                message=f"tensors for layers {_ranges(extra)} beyond "
                f"num_hidden_layers={num_layers}; the engine ignores them",
                count=len(extra),
            )
        )
    types = ckpt.text_config.get("layer_types")
    if ckpt.text_config.get("full_attention_interval") and isinstance(types, list):
        said = {i for i, t in enumerate(types) if t != "linear_attention"}
        if said != full:
            diff = sorted(said ^ full)
            out.append(
                Finding(
                    severity="warning",
                    code="layer-types-disagree",
                    message=f"layer_types and full_attention_interval disagree on layers "
                    f"{_ranges(diff)}; SGLang follows full_attention_interval "
                    f"(sglang-internals §6)",
                    count=len(diff),
                    fix="make layer_types agree with full_attention_interval",
                )
            )
    # A GDN layer that holds self_attn weights (or the reverse) means the layer map is wrong.
    wrong = sorted(
        {
            m.layer
            for m in mods.values()
            if m.component == "decoder"
            and m.layer is not None
            and m.layer < num_layers
            and ((".linear_attn." in m.name + ".") == (m.layer in full))
            and (".linear_attn." in m.name + "." or ".self_attn." in m.name + ".")
        }
    )
    if wrong:
        out.append(
            Finding(
                severity="error",
                code="layer-kind-mismatch",
                message=f"layers {_ranges(wrong)} hold the other kind of attention than "
                f"the config's full_attention_interval says",
                count=len(wrong),
                fix="check full_attention_interval against the checkpoint",
            )
        )
    return out


def _layer_reports(
    ckpt: Checkpoint, mods: Mapping[str, _Module], num_layers: int, full: set[int]
) -> list[LayerReport]:
    per: dict[int, list[_Module]] = defaultdict(list)
    for m in mods.values():
        if m.component == "decoder" and m.layer is not None:
            per[m.layer].append(m)
    out = []
    for i in sorted(set(range(num_layers)) | set(per)):
        ms = per.get(i, [])
        out.append(
            LayerReport(
                index=i,
                kind="full_attention" if i in full or i >= num_layers else "linear_attention",
                quantized=sorted(_short(m) for m in ms if m.quant is not None),
                unquantized=sorted(_short(m) for m in ms if m.quant is None and m.n is not None),
                other_tensors=sum(len(m.params) for m in ms if not m.is_linear),
                bytes=sum(t.nbytes for m in ms for t in m.params.values()),
            )
        )
    return out


def layer_groups(report: InspectionReport) -> list[tuple[str, LayerReport]]:
    """Condense the per-layer table: (layer ranges, a representative layer) for each distinct
    (kind, quantized, unquantized) signature, in order of first appearance."""
    groups: dict[tuple[str, tuple[str, ...], tuple[str, ...]], list[LayerReport]] = {}
    for layer in report.layers:
        key = (layer.kind, tuple(layer.quantized), tuple(layer.unquantized))
        groups.setdefault(key, []).append(layer)
    return [(_ranges(lr.index for lr in ls), ls[0]) for ls in groups.values()]
