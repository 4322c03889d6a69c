"""The published OpenAPI schema, fuzzed with schemathesis against the app (in process, real
service layer on a temporary state folder): no input gives a 5xx, and every response matches
the schema (status codes, content types, bodies)."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
import yaml
from hypothesis import HealthCheck, settings

from tests.service.conftest import stop_jobs, write_config

TOKEN = "fuzz-token-" + "0" * 32
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@schemathesis.serializer("application/yaml")
def _yaml(ctx: Any, value: Any) -> bytes:
    return (value if isinstance(value, str) else yaml.safe_dump(value)).encode()


# Built at collection: schemathesis's lazy fixture loader does not work with pytest 9.
_ROOT = Path(tempfile.mkdtemp(prefix="autotune-fuzz-"))
atexit.register(shutil.rmtree, _ROOT, True)


def _api() -> Any:
    from autotune.service.app import create_app
    from autotune.service.core import Service

    state = _ROOT / "state"
    # Schema-valid kernel requests would start real tuning jobs (torch, on a GPU-less box)
    # for every example; the job path is covered by the MCP test.
    write_config(state, allow_kernel_tuning=False)
    service = Service.open(state, str(state / "autotune.db"))
    app = create_app(service, token=TOKEN, recover=False)
    return schemathesis.openapi.from_asgi("/openapi.json", app, headers=AUTH)


schema = _api()


@pytest.fixture(scope="module", autouse=True)
def _cleanup() -> Iterator[None]:
    yield
    stop_jobs(_ROOT / "state")


@schema.parametrize()
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_no_server_errors(case: Any) -> None:
    # Schema-valid is not always acceptable here (model and GPU names, "give exactly one of
    # spec or spec_yaml" are checked by the service, 422 naming the field), so schemathesis'
    # positive-data-acceptance check is off; every other check runs, not_a_server_error first.
    case.call_and_validate(
        headers=AUTH, excluded_checks=[schemathesis.specs.openapi.checks.positive_data_acceptance]
    )
