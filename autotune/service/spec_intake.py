"""A submitted sweep spec on its way in: parsed (YAML text or a mapping), refused when it would
expand enormously or name the service's environment, checked against the policy and loaded as
far as a sweep would load it first; and the GPUs its job queues on."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from autotune.errors import ConfigError
from autotune.service.errors import Forbidden, Invalid
from autotune.service.policy import Policy

if TYPE_CHECKING:
    from autotune.sweep.spec import SweepSpec


def parse_spec(
    *, text: str | None = None, data: Mapping[str, Any] | None = None
) -> tuple[SweepSpec, str]:
    """A submitted spec (YAML text or a mapping) -> (spec, the YAML text to store)."""
    from autotune.sweep.spec import parse_spec as parse_mapping
    from autotune.sweep.spec import spec_from_yaml

    if (text is None) == (data is None):
        raise Invalid("give the spec as YAML text or as a mapping, exactly one")
    if text is not None:
        refuse_aliases(text)
        spec = spec_from_yaml(text, source="submitted spec")
        return spec, text
    assert data is not None
    spec = parse_mapping(dict(data), source="submitted spec")
    return spec, yaml.safe_dump(dict(data), sort_keys=False, allow_unicode=True)


def check_spec(policy: Policy, spec: SweepSpec, *, base: Path, workers: int | None = None) -> None:
    """Policy (what the local config allows; relative paths taken in `base`, the job's
    working folder), then what a sweep would load first (model card or GGUF file, GPU or
    cpu, search space): errors now, not in a job's log a second later."""
    from autotune.planner.dispatch import load_target_model, resolve_target_gpu
    from autotune.sweep.setup import build_space

    policy.check_spec(spec, workers=workers, base=base)
    # Load what the job will load: relative paths from its folder, not the service's cwd.
    model = policy.check_model(spec.target.model, field="target.model", base=base)
    load_target_model(spec.target.engine, model)
    if spec.target.gpu != "auto":  # auto is detected on the machine that runs the sweep
        resolve_target_gpu(spec.target.engine, spec.target.gpu, field="target.gpu")
    if spec.space.file != "builtin":
        space_file = policy.allowed_path(spec.space.file, field="space.file", base=base)
        spec = spec.model_copy(
            update={"space": spec.space.model_copy(update={"file": str(space_file)})}
        )
    build_space(spec)


def job_gpus(spec: SweepSpec) -> list[str] | None:
    """The GPUs a sweep's job uses, for the queue: its engine.env CUDA_VISIBLE_DEVICES entries,
    `cpu` for a CPU target, else None (all GPUs: the sweep takes what NVML shows)."""
    if spec.target.cpu:
        return ["cpu"]
    visible = spec.engine.env.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return None
    return [d.strip() for d in visible.split(",") if d.strip()]


def refuse_aliases(text: str) -> None:
    """YAML anchors/aliases can expand a small body into an enormous document."""
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.AliasEvent):
                raise Invalid(
                    "YAML aliases (*name) are not accepted by the service; write the values out",
                    field="spec",
                )
    except yaml.YAMLError as exc:
        raise ConfigError(f"not valid YAML: {exc}", source="submitted spec") from None


def refuse_env_refs(spec: Any) -> None:
    """A submitted spec gives secret values, it does not name the service's environment: a
    `${env:NAME}` reference would hand the service owner's variable to the requester's
    engine. (The database stores such references; they are resolved only for a resume.)"""
    from autotune.secrets import ref_name

    def walk(node: Any, field: str) -> None:
        if ref_name(node) is not None:
            raise Forbidden(
                "a submitted spec cannot refer to the service's environment; give the value "
                "itself (it is stored as a reference, never in clear)",
                field=field,
            )
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{field}.{k}" if field else str(k))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{field}[{i}]")

    walk(spec.model_dump(mode="json"), "")
