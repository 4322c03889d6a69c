"""What a submitted spec may name: files under the allowed roots only (symlinks resolved),
engines from the config, no launcher or loader variables, loopback engines, bounded workers."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import pytest

from autotune.errors import ConfigError, UnknownNameError
from autotune.service.errors import Forbidden
from autotune.service.policy import Policy, ServiceConfig, load_config, looks_like_path
from autotune.sweep.spec import parse_spec
from tests.service.conftest import tiny_spec


def policy(root: Path, **fields: Any) -> Policy:
    return Policy(ServiceConfig(allowed_paths=[str(root)], **fields))


def refused(p: Policy, **changes: Any) -> Forbidden:
    with pytest.raises(Forbidden) as err:
        p.check_spec(parse_spec(tiny_spec("p", **changes)))
    return err.value


def test_default_config_is_written_owner_only_and_loads(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    cfg = load_config(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert "allowed_paths" in path.read_text() and cfg.allowed_paths == []
    assert cfg.allowed_engines == ["sglang", "vllm", "llamacpp"]
    assert load_config(path) == cfg  # read back, not rewritten


def test_config_errors_name_the_field(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("allowed_path: [/x]\n")
    with pytest.raises(ConfigError, match="did you mean 'allowed_paths'"):
        load_config(path)
    path.write_text("allowed_paths: [models]\n")
    with pytest.raises(ConfigError, match="must be absolute"):
        load_config(path)
    path.write_text("max_workers: 0\n")
    with pytest.raises(ConfigError, match="max_workers"):
        load_config(path)


def test_builtin_spec_passes(tmp_path: Path) -> None:
    policy(tmp_path).check_spec(parse_spec(tiny_spec("ok")))


def test_paths_must_resolve_under_the_roots(tmp_path: Path) -> None:
    root = tmp_path / "models"
    (root / "m").mkdir(parents=True)
    p = policy(root)
    assert p.allowed_path(str(root / "m"), field="f") == (root / "m").resolve()
    assert "outside" in str(refused(p, **{"target.model_path": str(tmp_path)}))
    assert refused(p, **{"target.model_path": str(root / ".." / "x")}).field == "target.model_path"
    link = root / "escape"
    link.symlink_to(tmp_path)  # inside by name, outside once resolved
    assert "outside" in str(refused(p, **{"space.file": str(link / "space.yaml")}))
    assert "absolute" in str(refused(p, **{"space.file": "spaces/s.yaml"}))
    with pytest.raises(Forbidden, match="home"):
        p.allowed_path("~no-such-user-xyz/m", field="f")
    with pytest.raises(Forbidden, match="NUL"):
        p.allowed_path("/x\x00y", field="f")
    with pytest.raises(UnknownNameError, match="model card"):
        p.check_model("no-such-card", field="target.model")
    assert p.check_model("qwen3.8-27b-awq-int4", field="m") == "qwen3.8-27b-awq-int4"


def test_path_valued_flags_and_json_values(tmp_path: Path) -> None:
    p = policy(tmp_path)
    err = refused(p, **{"space.fixed": {"chat_template": "/etc/passwd"}})
    assert err.field == "space.fixed.chat_template"
    err = refused(
        p, **{"space.fixed": {"json_model_override_args": '{"a": {"b": "/etc/shadow"}}'}}
    )
    assert err.field == "space.fixed.json_model_override_args.a.b"
    chosen = {"type": "categorical", "choices": ["../x"]}
    err = refused(p, **{"space.overrides.chat_template": chosen})
    assert "absolute" in str(err)
    ok = tiny_spec("p", **{"space.fixed": {"chat_template": str(tmp_path / "t.jinja")}})
    p.check_spec(parse_spec(ok))
    assert looks_like_path("~/x") and looks_like_path("a/b") and not looks_like_path("NGRAM")


def test_no_binaries_no_loader_variables(tmp_path: Path) -> None:
    p = policy(tmp_path, allowed_env_prefixes=["SGLANG_", "LD_", "PYTHON"])
    assert refused(p, **{"engine.launcher": ["/bin/sh", "-c", "id"]}).field == "engine.launcher"
    for name in ("LD_PRELOAD", "PYTHONPATH", "PATH", "BASH_ENV", "AUTOTUNE_DB"):
        assert refused(p, **{"engine.env": {name: "x"}}).field == f"engine.env.{name}"
    assert "start with" in str(refused(p, **{"engine.env": {"HF_TOKEN": "x"}}))
    assert "outside" in str(refused(p, **{"engine.env": {"SGLANG_CACHE": "/var/x"}}))
    p.check_spec(parse_spec(tiny_spec("p", **{"engine.env": {"SGLANG_X": "1"}})))
    launcher = ["/opt/sglang/bin/python", "-m", "sglang.launch_server"]
    allowed = policy(tmp_path, allowed_launchers=[launcher])
    allowed.check_spec(parse_spec(tiny_spec("p", **{"engine.launcher": launcher})))
    assert refused(allowed, **{"engine.launcher": [*launcher, "--x"]}).field == "engine.launcher"


def test_engines_hosts_ray_and_workers(tmp_path: Path) -> None:
    p = policy(tmp_path, allowed_engines=["vllm"], max_workers=2)
    assert refused(p).field == "target.engine"
    p = policy(tmp_path, max_workers=2)
    assert refused(p, **{"engine.host": "0.0.0.0"}).field == "engine.host"
    ray = {"execution.executor": "ray", "execution.ray_address": "10.0.0.1:6379"}
    assert refused(p, **ray).field == "execution.ray_address"
    assert refused(p, **{"execution.workers": 3}).field == "execution.workers"
    with pytest.raises(Forbidden, match="at most 2"):
        p.check_spec(parse_spec(tiny_spec("p")), workers=5)
    policy(tmp_path, allowed_ray_addresses=["auto"]).check_spec(
        parse_spec(tiny_spec("p", **{**ray, "execution.ray_address": "auto"}))
    )
