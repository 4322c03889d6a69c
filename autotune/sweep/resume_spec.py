"""What `--resume` with a spec file may change, and what the sweep's row keeps of the change.

The target (engine, model, GPU, TP) stays: trials of another target would be compared with the
earlier ones as if they were the same. A release, a launcher, a model folder, variables or the
budget may change; the row then takes the new spec and says after how many launches which
fields changed (the report says so), and each real trial keeps its own command
(sweep/trial_record.py), which launch.sh follows.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.errors import ConfigError

if TYPE_CHECKING:
    from autotune.store.db import Store
    from autotune.store.models import SweepRow
    from autotune.sweep.spec import SweepSpec


def check_same_target(existing: SweepRow, spec: SweepSpec) -> None:
    """ConfigError, naming the field, when the resumed spec changes the sweep's target."""
    import yaml

    try:
        stored = (yaml.safe_load(existing.spec_yaml or "") or {}).get("target") or {}
    except yaml.YAMLError:
        stored = {}
    t = spec.target
    was = {
        "target.engine": existing.engine,
        "target.model": existing.model,
        "target.gpu": existing.gpu,
        "target.tp": stored.get("tp", 1) if isinstance(stored, dict) else 1,
    }
    now = {
        "target.engine": t.engine,
        "target.model": t.model,
        "target.gpu": t.gpu,
        "target.tp": t.tp,
    }
    for field, old in was.items():
        a, b = _target_key(field, old), _target_key(field, now[field])
        if old is None or "*" in (a, b) or a == b:
            continue
        raise ConfigError(
            f"sweep {spec.name!r} was run with {field} {old!r}; a resume cannot change it to "
            f"{now[field]!r} (its trials would be compared with another target's): put it "
            "back, or give the sweep a new name",
            field=field,
        )


def _target_key(field: str, value: object) -> object:
    """A target value as the check compares it: GPU names without case (`auto` matches any,
    as what it detected is not stored), model paths normalised."""
    text = str(value)
    if field == "target.gpu":
        return "*" if text.lower() == "auto" else text.lower()
    if field == "target.model" and ("/" in text or text.startswith((".", "~"))):
        return os.path.normpath(os.path.expanduser(text))
    return text


def resumed_row(
    store: Store,
    existing: SweepRow,
    spec: SweepSpec,
    spec_yaml: str,
    spec_dir: Path | None,
) -> dict[str, Any]:
    """The columns a resumed sweep's row takes: the spec folder its relative paths are now
    resolved from and, when the spec was edited, the new spec, its hash and release, with a
    revision noted (after how many launches, which fields)."""
    notes = dict(existing.notes or {})
    if spec_dir is not None:
        notes["spec_dir"] = str(spec_dir)
    changed = spec_changes(existing.spec_yaml, spec_yaml)
    if not changed:
        return {"notes": notes}
    from autotune.store.db import spec_hash
    from autotune.sweep.resume import row_launched

    launched = sum(row_launched(t) for t in store.get_trials(existing.id or 0))
    notes["spec_revisions"] = [
        *(notes.get("spec_revisions") or []),
        {"after_trials": launched, "changed": changed},
    ]
    return {
        "spec_yaml": spec_yaml,
        "spec_hash": spec_hash(spec_yaml),
        "engine_version": spec.target.engine_version,
        "notes": notes,
    }


def spec_changes(old_yaml: str, new_yaml: str) -> list[str]:
    """The dotted keys whose values differ between two stored spec texts (both hold secrets as
    references); [] for the same spec, however it is laid out."""
    import yaml

    def flat(node: Any, prefix: str = "") -> dict[str, Any]:
        if isinstance(node, dict) and node:
            out: dict[str, Any] = {}
            for k, v in node.items():
                out.update(flat(v, f"{prefix}{k}."))
            return out
        return {prefix.rstrip("."): node}

    try:
        old, new = flat(yaml.safe_load(old_yaml) or {}), flat(yaml.safe_load(new_yaml) or {})
    except yaml.YAMLError:
        return [] if old_yaml == new_yaml else ["(spec text)"]
    return sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
