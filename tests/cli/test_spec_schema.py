"""`autotune spec schema` and docs/spec.md: generated from the sweep spec's pydantic models."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest
import yaml
from typer.testing import CliRunner

from autotune.cli import app
from autotune.sweep.spec import SweepSpec, spec_from_yaml
from autotune.sweep.spec_docs import main as spec_docs_main
from autotune.sweep.spec_docs import schema_paths

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "spec.md"
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


def _schema() -> dict[str, object]:
    res = CliRunner().invoke(app, ["spec", "schema"])
    assert res.exit_code == 0, res.output
    doc: dict[str, object] = json.loads(res.stdout)
    return doc


def test_schema_is_json_with_the_top_level_fields_and_stable(tmp_path: Path) -> None:
    schema = _schema()
    props = schema["properties"]
    assert isinstance(props, dict)
    assert set(props) == set(SweepSpec.model_fields)
    assert {"name", "target", "workload"} <= set(schema["required"])  # type: ignore[arg-type]
    assert schema["additionalProperties"] is False
    jsonschema.Draft202012Validator.check_schema(schema)
    again = CliRunner().invoke(app, ["spec", "schema"]).stdout
    assert json.dumps(schema, indent=2, sort_keys=True) + "\n" == again  # sorted, stable
    out = tmp_path / "s.json"
    res = CliRunner().invoke(app, ["spec", "schema", "--out", str(out)])
    assert res.exit_code == 0 and json.loads(out.read_text()) == schema


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_examples_validate_against_the_schema(example: Path) -> None:
    validator = jsonschema.Draft202012Validator(_schema())
    errors = list(validator.iter_errors(yaml.safe_load(example.read_text())))
    assert not errors, [e.message for e in errors]


def test_schema_rejects_what_the_loader_rejects() -> None:
    validator = jsonschema.Draft202012Validator(_schema())
    base = yaml.safe_load((ROOT / "examples" / "demo.yaml").read_text())
    assert not validator.is_valid({**base, "budgett": {}})
    assert not validator.is_valid({**base, "execution": {"executor": "slurm"}})
    assert not validator.is_valid({k: v for k, v in base.items() if k != "target"})

    # each scenario by its kind's own fields (bench.scenarios), as scenario_from_dict checks
    def with_scenario(sc: dict[str, object]) -> dict[str, object]:
        return {**base, "workload": {**base["workload"], "scenarios": [sc]}}

    assert validator.is_valid(with_scenario({"kind": "prefill", "prompt_len": 512}))
    assert validator.is_valid(with_scenario({"kind": "decode", "concurrency": 4}))
    assert not validator.is_valid(with_scenario({"kind": "prefil"}))
    assert not validator.is_valid(with_scenario({"kind": "decode", "prompt_lenz": 5}))
    assert not validator.is_valid(with_scenario({"prompt_lens": [512]}))  # no kind
    assert not validator.is_valid(with_scenario({"kind": "prefill", "prompt_lens": [0]}))


def test_docs_mention_every_field_and_are_up_to_date() -> None:
    text = DOC.read_text()
    missing = [p for p in schema_paths() if f"`{p}`" not in text]
    assert not missing, f"docs/spec.md lacks {missing}"
    assert spec_docs_main(["--check", str(DOC)]) == 0


def test_the_docs_example_is_a_valid_spec() -> None:
    blocks = re.findall(r"```yaml\n(.*?)```", DOC.read_text(), flags=re.S)
    assert blocks
    spec = spec_from_yaml(blocks[-1], source="docs/spec.md")
    assert spec.engine.launcher and spec.target.gpu == "auto" and not spec.simulated
