"""Commands that need an optional dependency group name it instead of a traceback."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest
from typer.testing import CliRunner

from autotune import extras
from autotune.errors import ConfigError


def _without(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any, **kwargs: Any) -> Any:
        return None if name in names else real(name, *args, **kwargs)

    monkeypatch.setattr(extras.importlib.util, "find_spec", find_spec)


def test_require_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    extras.require("service", "x", ("json",))  # present: no error
    _without(monkeypatch, "fastapi")
    assert extras.missing(extras.SERVICE_HTTP) == ["fastapi"]
    with pytest.raises(ConfigError, match=r"pip install 'autotune\[service\]'"):
        extras.require("service", "autotune serve", extras.SERVICE_HTTP)


@pytest.mark.parametrize(
    ("args", "module"),
    [(["serve", "--state-dir", "{tmp}"], "uvicorn"), (["mcp", "--state-dir", "{tmp}"], "mcp")],
)
def test_service_commands_without_the_extra(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any, args: list[str], module: str
) -> None:
    from autotune.cli import app

    _without(monkeypatch, module)
    done = CliRunner().invoke(app, [a.format(tmp=tmp_path) for a in args])
    assert done.exit_code != 0
    assert isinstance(done.exception, ConfigError)
    assert f"{module} not installed" in str(done.exception)
    assert "autotune[service]" in str(done.exception)
