"""launch.sh and the systemd unit: hostile values cannot inject shell code, the argv arrives
intact, the port check works, secrets never appear and are required from the environment, and
the HiCache file tier gets its P4 variables."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from autotune.errors import ConfigError
from autotune.report.launch import (
    P4_MAX_SIZE,
    P4_MIN_FREE,
    P4_STORAGE_DIR,
    REDACTED,
    LaunchSpec,
    Redactor,
    build_launch,
    is_secret_field,
    is_secret_name,
    redact_mapping,
    render_launch_sh,
    render_unit,
    systemd_quote,
)

BASH = shutil.which("bash")
pytestmark = pytest.mark.skipif(BASH is None, reason="bash is not installed")

FAKE_PYTHON = """#!/usr/bin/env bash
# Stands in for the engine's interpreter: records argv (NUL-separated) and the environment.
for a in "$@"; do printf '%s\\0' "$a"; done > "${FAKE_PY_OUT:?}.argv"
env -0 > "${FAKE_PY_OUT}.env"
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Runner:
    """Writes a LaunchSpec's script and runs it with a fake python3 first on PATH."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.bin = tmp / "bin"
        self.bin.mkdir()
        fake = self.bin / "python3"
        fake.write_text(FAKE_PYTHON)
        fake.chmod(0o755)
        self.home = tmp / "home"
        self.home.mkdir()
        (self.home / "canary").write_text("still here")
        self.out = tmp / "fake"

    def write(self, spec: LaunchSpec, name: str = "launch.sh") -> Path:
        path = self.tmp / name
        path.write_text(render_launch_sh(spec, generated_at="2026-03-01 07:00 UTC"))
        path.chmod(0o755)
        return path

    def run(
        self, script: Path, env: dict[str, str] | None = None, port: int | None = None
    ) -> subprocess.CompletedProcess[str]:
        base = {
            "PATH": f"{self.bin}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "HOME": str(self.home),
            "FAKE_PY_OUT": str(self.out),
            "PORT": str(port or free_port()),
        }
        base.update(env or {})
        return subprocess.run(
            [str(script)], env=base, capture_output=True, text=True, timeout=30, cwd=self.tmp
        )

    def argv(self) -> list[str]:
        data = (self.tmp / "fake.argv").read_bytes().decode()
        return data.split("\0")[:-1]

    def env(self) -> dict[str, str]:
        data = (self.tmp / "fake.env").read_bytes().decode()
        pairs = [p.split("=", 1) for p in data.split("\0") if "=" in p]
        return {k: v for k, v in pairs}


@pytest.fixture
def runner(tmp_path: Path) -> Runner:
    return Runner(tmp_path)


def spec_for(config: dict, **kw: object) -> LaunchSpec:
    args: dict = dict(
        engine="sglang", engine_version="0.5.17", sweep="night-1", model_path="/models/qwen"
    )
    args.update(kw)
    return build_launch(config, **args)


def bash_n(script: Path) -> None:
    res = subprocess.run([BASH or "bash", "-n", str(script)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


# -- the plain case ----------------------------------------------------------------------------


def test_script_layout_and_argv(runner: Runner) -> None:
    spec = spec_for({"mem_fraction_static": 0.88, "page_size": 64, "context_length": 131072})
    script = runner.write(spec)
    text = script.read_text()
    lines = text.splitlines()
    assert lines[0] == "#!/usr/bin/env bash"
    assert "# engine: sglang==0.5.17" in lines
    assert "set -euo pipefail" in lines
    assert lines.index("set -euo pipefail") < next(
        i for i, line in enumerate(lines) if line.startswith("exec ")
    )
    assert 'exec "${PYTHON}" -m sglang.launch_server' in text
    assert "autotune.sim" not in text
    bash_n(script)
    port = free_port()
    res = runner.run(script, port=port)
    assert res.returncode == 0, res.stderr
    got = runner.argv()
    assert got == spec.argv(port=port)[1:]  # argv[0] (the interpreter) is the fake itself
    assert got[:2] == ["-m", "sglang.launch_server"]
    assert got[got.index("--model-path") + 1] == "/models/qwen"
    assert got[got.index("--port") + 1] == str(port)
    assert got[got.index("--mem-fraction-static") + 1] == "0.88"


def test_a_nightly_launches_its_release_argv_and_says_so(runner: Runner) -> None:
    """A sweep of an SGLang release candidate: the script runs 0.5.12's argv (the release the
    build follows, autotune.engines.builds), pins the build it was tuned on, and the note says
    which release's flags were used."""
    cfg = {"mem_fraction_static": 0.88, "page_size": 64}
    rc, release = spec_for(cfg, engine_version="0.5.12rc0"), spec_for(cfg, engine_version="0.5.12")
    assert rc.argv(port=30000) == release.argv(port=30000)
    assert "# engine: sglang==0.5.12rc0" in runner.write(rc).read_text().splitlines()
    assert rc.notes[0].startswith("SGLang 0.5.12rc0 is a pre-release: autotune follows 0.5.12's")
    assert not any("pre-release" in n for n in release.notes)


def test_model_host_port_are_overridable(runner: Runner) -> None:
    spec = spec_for({"page_size": 16})
    script = runner.write(spec)
    port = free_port()
    res = runner.run(script, {"MODEL_PATH": "/other/model dir", "HOST": "0.0.0.0"}, port=port)
    assert res.returncode == 0, res.stderr
    got = runner.argv()
    assert got[got.index("--model-path") + 1] == "/other/model dir"
    assert got[got.index("--host") + 1] == "0.0.0.0"


def test_port_in_use_stops_before_exec(runner: Runner) -> None:
    script = runner.write(spec_for({"page_size": 1}))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        res = runner.run(script, {"HOST": "0.0.0.0"}, port=port)
    assert res.returncode == 1
    assert f"port {port}" in res.stderr and "already in use" in res.stderr
    assert not (runner.tmp / "fake.argv").exists()


def test_bad_port_value_is_refused(runner: Runner) -> None:
    script = runner.write(spec_for({"page_size": 1}))
    res = runner.run(script, {"PORT": "80; touch pwned"})
    assert res.returncode == 2
    assert "PORT must be a number" in res.stderr
    assert not (runner.tmp / "pwned").exists()


# -- hostile values ----------------------------------------------------------------------------


def hostile(tmp: Path) -> dict[str, str]:
    return {
        "semicolon": '"; rm -rf ~ #',
        "subst": f"$(touch {tmp}/pwned-subst)",
        "backtick": f"`touch {tmp}/pwned-tick`",
        "newline": f"line one\ntouch {tmp}/pwned-nl; echo",
        "quote": 'it\'s "quoted" \\ and $HOME',
    }


@pytest.mark.parametrize("case", ["semicolon", "subst", "backtick", "newline", "quote"])
def test_hostile_values_arrive_intact_and_run_nothing(runner: Runner, case: str) -> None:
    value = hostile(runner.tmp)[case]
    spec = spec_for(
        {"served_model_name": value, "chat_template": value, "page_size": 1},
        model_path=f"/models/{value}",
        sweep=f"night\n{value}",
        env={"SGLANG_EXTRA": value},
    )
    script = runner.write(spec)
    bash_n(script)
    port = free_port()
    res = runner.run(script, port=port)
    assert res.returncode == 0, res.stderr
    got = runner.argv()
    assert got == spec.argv(port=port)[1:]
    assert got[got.index("--served-model-name") + 1] == value
    assert got[got.index("--chat-template") + 1] == value
    assert got[got.index("--model-path") + 1] == f"/models/{value}"
    assert runner.env()["SGLANG_EXTRA"] == value
    assert not list(runner.tmp.glob("pwned*")), "an injected command ran"
    assert (runner.home / "canary").read_text() == "still here"
    # The sweep name sits in comments: one line each, never a command line of its own.
    text = script.read_text()
    for line in text.splitlines():
        if "night" in line and "sweep" in line:
            assert line.startswith("#"), line


def test_hostile_env_name_is_refused() -> None:
    with pytest.raises(ConfigError, match="not a valid shell name"):
        spec_for({"page_size": 1}, env={"X; touch pwned": "1"})


def test_unit_file_quotes_paths_and_values(tmp_path: Path) -> None:
    spec = spec_for(
        {"page_size": 1},
        model_path='/models/a "b" %h $USER\\x',
        sweep="night 1\nExecStartPre=/bin/rm -rf /",
    )
    unit = render_unit(spec, Path("/srv/reports/my sweep $x/launch.sh"))
    lines = unit.splitlines()
    assert 'ExecStart="/srv/reports/my sweep $$x/launch.sh"' in lines
    assert "Restart=on-failure" in lines
    assert 'Environment="MODEL_PATH=/models/a \\"b\\" %%h $USER\\\\x"' in lines
    assert 'Environment="PORT=30000"' in lines
    # The hostile sweep name cannot start a directive of its own.
    assert not any(line.startswith("ExecStartPre") for line in lines)
    desc = [line for line in lines if line.startswith("Description=")]
    assert len(desc) == 1 and "night 1 ExecStartPre" in desc[0]
    assert systemd_quote("a\nb") == '"a\\nb"'


# -- secrets -----------------------------------------------------------------------------------


def test_secret_env_is_required_not_written(runner: Runner) -> None:
    secret = "hf_ThisIsSecret_123456"
    spec = spec_for({"page_size": 1}, env={"HF_TOKEN": secret, "SGLANG_LOG": "info"})
    script = runner.write(spec)
    text = script.read_text()
    assert secret not in text
    assert "HF_TOKEN" in text
    assert "export SGLANG_LOG=info" in text
    res = runner.run(script)
    assert res.returncode != 0
    assert "HF_TOKEN must be set" in res.stderr
    assert not (runner.tmp / "fake.argv").exists()
    res = runner.run(script, {"HF_TOKEN": "from-the-environment"})
    assert res.returncode == 0, res.stderr
    assert runner.env()["HF_TOKEN"] == "from-the-environment"
    unit = render_unit(spec, runner.tmp / "launch.sh")
    assert secret not in unit and "EnvironmentFile=-/etc/autotune/night-1.env" in unit


def test_secret_engine_field_becomes_a_required_variable(runner: Runner) -> None:
    secret = "sk-live-0123456789abcdef"
    spec = spec_for({"api_key": secret, "page_size": 1})
    script = runner.write(spec)
    text = script.read_text()
    assert secret not in text
    assert '--api-key "${API_KEY}"' in text
    res = runner.run(script)
    assert res.returncode != 0 and "API_KEY must be set" in res.stderr
    res = runner.run(script, {"API_KEY": "k-from-env"})
    assert res.returncode == 0, res.stderr
    got = runner.argv()
    assert got[got.index("--api-key") + 1] == "k-from-env"
    assert secret not in " ".join(spec.argv())


def test_secret_names() -> None:
    for name in ("HF_TOKEN", "OPENAI_API_KEY", "DB_PASSWORD", "MY_SECRET", "hf_token"):
        assert is_secret_name(name)
    assert not is_secret_name("SGLANG_LOG_LEVEL")
    assert is_secret_field("api_key") and is_secret_field("admin_api_key")
    # Counters of tokens are not secrets.
    for field in ("max_total_tokens", "speculative_num_draft_tokens", "kv_pool_tokens"):
        assert not is_secret_field(field)
    red = redact_mapping({"api_key": "x", "max_total_tokens": 5, "env": {"HF_TOKEN": "y"}})
    assert red == {"api_key": REDACTED, "max_total_tokens": 5, "env": {"HF_TOKEN": REDACTED}}


def test_redactor_scrubs_free_text() -> None:
    red = Redactor(["hf_KnownValue_99"])
    text = (
        "token hf_KnownValue_99 in a line\n"
        "HF_TOKEN=abc123 OPENAI_API_KEY: 'sk-x' api_key='sk-yyy', max_total_tokens=185000\n"
        "--api-key sk-zzz --page-size 64 --speculative-num-draft-tokens 4\n"
        "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.abc"
    )
    out = red.text(text)
    for leaked in ("hf_KnownValue_99", "abc123", "sk-x", "sk-yyy", "sk-zzz", "eyJhbGci"):
        assert leaked not in out
    assert "max_total_tokens=185000" in out
    assert "--speculative-num-draft-tokens 4" in out and "--page-size 64" in out
    # Short values are not learnt as secrets: they would blank out ordinary words.
    short = Redactor(["true"])
    assert short.text("enable: true") == "enable: true"


# -- P4: the HiCache file tier -----------------------------------------------------------------


def test_hicache_file_tier_exports_p4_variables(runner: Runner) -> None:
    cfg = {
        "enable_hierarchical_cache": True,
        "hicache_size": 12,
        "hicache_storage_backend": "file",
        "page_size": 1,
    }
    spec = spec_for(cfg, engine_version="0.5.17")
    script = runner.write(spec)
    text = script.read_text()
    for name in (P4_STORAGE_DIR, P4_MAX_SIZE, P4_MIN_FREE):
        assert f"export {name}" in text
    store = runner.tmp / "hicache dir"
    res = runner.run(script, {P4_STORAGE_DIR: str(store)})
    assert res.returncode == 0, res.stderr
    env = runner.env()
    assert env[P4_STORAGE_DIR] == str(store)  # the environment wins over the default
    assert store.is_dir()  # created before the engine starts
    assert env[P4_MAX_SIZE] and env[P4_MIN_FREE]
    # 0.5.9 has only the directory variable (the caps arrived in 0.5.14).
    old = spec_for(cfg, engine_version="0.5.9")
    names = {e.name for e in old.env}
    assert P4_STORAGE_DIR in names and P4_MAX_SIZE not in names
    assert any("0.5.14" in n for n in old.notes)


def test_hicache_file_tier_keeps_configured_values(runner: Runner) -> None:
    cfg = {
        "enable_hierarchical_cache": True,
        "hicache_storage_backend": "file",
        "hicache_file_storage_dir": str(runner.tmp / "l3"),
        "hicache_file_max_size": "32Gi",
        "page_size": 1,
    }
    spec = spec_for(cfg, engine_version="0.5.23")
    values = {e.name: e.value for e in spec.env}
    assert values[P4_STORAGE_DIR] == str(runner.tmp / "l3")
    assert values[P4_MAX_SIZE] == "32Gi"
    script = runner.write(spec)
    res = runner.run(script)
    assert res.returncode == 0, res.stderr
    assert runner.env()[P4_MAX_SIZE] == "32Gi"
    assert (runner.tmp / "l3").is_dir()
