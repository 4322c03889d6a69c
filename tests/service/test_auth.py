"""The token file (created owner-only, refused when others can read it) and the two guards in
front of every endpoint: bearer token (401) and body limit (413, also without
Content-Length)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from autotune.errors import ConfigError
from autotune.service.auth import ensure_token, read_token, token_matches
from tests.service.conftest import write_config

TOKEN = "t" * 43


def test_token_created_once_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "token"
    token = ensure_token(path)
    assert len(token) >= 40 and oct(path.stat().st_mode & 0o777) == "0o600"
    assert ensure_token(path) == token  # kept across restarts
    assert token != ensure_token(tmp_path / "other")


def test_token_file_readable_by_others_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "token"
    ensure_token(path)
    os.chmod(path, 0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        read_token(path)
    path.write_text("short\n")
    os.chmod(path, 0o600)
    with pytest.raises(ConfigError, match="no usable token"):
        read_token(path)


def test_token_comparison() -> None:
    assert token_matches(TOKEN, TOKEN)
    assert not token_matches(TOKEN[:-1], TOKEN)
    assert not token_matches(TOKEN + "x", TOKEN)
    assert not token_matches("\udcff", TOKEN)  # not even valid UTF-8: no crash


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    from autotune.service.app import create_app
    from autotune.service.core import Service

    state = tmp_path / "state"
    write_config(state, max_body_bytes=4096)
    service = Service.open(state, str(state / "autotune.db"))
    with TestClient(create_app(service, token=TOKEN, recover=False)) as c:
        yield c


def test_every_endpoint_but_health_needs_the_token(client: TestClient) -> None:
    schema = client.get("/openapi.json", headers={"Authorization": f"Bearer {TOKEN}"}).json()
    assert schema["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    for path, ops in schema["paths"].items():
        for method in ops:
            url = path.replace("{name}", "x")
            r = client.request(method.upper(), url)
            if path == "/healthz":
                assert r.status_code == 200
                continue
            assert r.status_code == 401, (method, path)
            r = client.request(method.upper(), url, headers={"Authorization": "Bearer nope"})
            assert r.status_code == 401 and r.json()["error"] == "Unauthorized"


def test_body_limit_with_and_without_content_length(client: TestClient) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/yaml"}
    r = client.post("/v1/sweeps", content=b"#" * 5000, headers=auth)
    assert r.status_code == 413 and "4096 bytes" in r.json()["detail"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit counts what arrives
        for _ in range(5):
            yield b"#" * 1000

    r = client.post("/v1/sweeps", content=chunks(), headers=auth)
    assert r.status_code == 413
    r = client.post("/v1/sweeps", content=b"# a comment\n", headers=auth)
    assert r.status_code == 422  # under the limit: reaches validation
    r = client.post(
        "/v1/plan", content=b"\xff\xfe", headers={**auth, "Content-Type": "application/json"}
    )
    assert r.status_code == 422 and r.json()["field"] == "body"
