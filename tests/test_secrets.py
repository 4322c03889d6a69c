"""autotune.secrets: secret flags scrubbed from argv, spec literals turned into ${env:NAME}
references (and back for the engine only), the stored spec text, free text and logs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from autotune.errors import ConfigError
from autotune.secrets import (
    REDACTED,
    hide,
    holds_secret_env,
    holds_secret_field,
    protect_spec,
    protect_spec_text,
    ref_name,
    resolve_refs,
    scrub_argv,
    scrub_file,
)
from autotune.sweep.spec import parse_spec, spec_from_yaml
from tests.sweep.conftest import make_spec

HF = "hf_SECRETVALUE123"
KEY = "SECRET789"


def secret_spec(**changes: Any) -> dict[str, Any]:
    return make_spec(
        **{
            "engine.env": {"HF_TOKEN": HF, "SGLANG_LOG": "info"},
            "space.fixed": {"api_key": KEY},
            **changes,
        }
    )


def test_scrub_argv_hides_secret_flag_values() -> None:
    argv = ["python3", "-m", "sglang.launch_server", "--api-key", KEY, "--port", "30000"]
    assert scrub_argv(argv) == [*argv[:4], REDACTED, "--port", "30000"]
    assert scrub_argv(["vllm", "--api-key=k2", "--hf-token", "hf_x"]) == [
        "vllm",
        f"--api-key={REDACTED}",
        "--hf-token",
        REDACTED,
    ]
    assert scrub_argv(["x", "--admin-api-key", "a"])[-1] == REDACTED
    # counters are no secrets; a secret flag without a value leaves the next flag alone
    plain = ["x", "--max-total-tokens", "4096", "--api-key", "--port", "1"]
    assert scrub_argv(plain) == plain


def test_hide_replaces_known_values_longest_first() -> None:
    assert hide(f"key {KEY} and {KEY}x", [KEY, f"{KEY}x"]) == f"key {REDACTED} and {REDACTED}"
    assert hide("abc is everywhere", ["abc"]) == "abc is everywhere"  # too short to search


def test_protect_spec_turns_literals_into_references() -> None:
    spec, secrets = protect_spec(parse_spec(secret_spec()), environ={})
    assert spec.engine.env == {"HF_TOKEN": "${env:HF_TOKEN}", "SGLANG_LOG": "info"}
    assert spec.space.fixed["api_key"] == "${env:API_KEY}"
    assert secrets.values == {"HF_TOKEN": HF, "API_KEY": KEY}
    assert secrets.fields == {"engine.env.HF_TOKEN": "HF_TOKEN", "space.fixed.api_key": "API_KEY"}
    assert KEY not in spec.model_dump_json() and HF not in spec.model_dump_json()
    plain = parse_spec(make_spec())
    assert protect_spec(plain, environ={})[0] is plain  # nothing secret: unchanged


def test_only_real_secrets_are_taken_out() -> None:
    """What is taken out must come back from the environment on --resume: names that merely
    mention a token (a delay, a path, a count) stay as they are."""
    assert holds_secret_env("HF_TOKEN") and holds_secret_env("AWS_SECRET_ACCESS_KEY")
    assert holds_secret_env("PGPASSWORD") and holds_secret_env("OPENAI_API_KEY")
    assert not holds_secret_env("FAKE_TOKEN_DELAY_S") and not holds_secret_env("HF_TOKEN_PATH")
    assert holds_secret_field("api_key", "k") and holds_secret_field("api_key", 12345678)
    assert holds_secret_field("ssl_keyfile_password", "p")
    assert not holds_secret_field("api_key_file", "/etc/key")
    assert not holds_secret_field("long_prefill_token_threshold", 2048)
    assert not holds_secret_field("kt_max_deferred_experts_per_token", 4)
    assert not holds_secret_field("api_key", None) and not holds_secret_field("api_key", True)
    data = make_spec(**{"engine.env": {"FAKE_TOKEN_DELAY_S": "0.1", "HF_TOKEN_PATH": "/x"}})
    plain = parse_spec(data)
    assert protect_spec(plain, environ={})[0] is plain
    # a secret word anywhere in a variable's name, or a password in a URL, is taken out too
    env = {"HF_TOKEN_RO": "hf_ro_value", "HF_ENDPOINT": "https://a:pw@mirror.example/"}
    spec, secrets = protect_spec(parse_spec(make_spec(**{"engine.env": env})), environ={})
    assert spec.engine.env == {
        "HF_TOKEN_RO": "${env:HF_TOKEN_RO}",
        "HF_ENDPOINT": "${env:HF_ENDPOINT}",
    }
    assert sorted(secrets.values.values()) == sorted(env.values())


def test_references_resolve_from_the_environment_or_fail_naming_the_field() -> None:
    data = secret_spec(**{"engine.env": {"HF_TOKEN": "${env:HF_TOKEN}"}})
    spec, secrets = protect_spec(parse_spec(data), environ={"HF_TOKEN": HF})
    assert spec.engine.env["HF_TOKEN"] == "${env:HF_TOKEN}" and secrets.values["HF_TOKEN"] == HF
    with pytest.raises(ConfigError) as err:
        protect_spec(parse_spec(data), environ={})
    msg = str(err.value)
    assert err.value.field == "engine.env.HF_TOKEN" and "set HF_TOKEN" in msg
    assert "autotune sweep SPEC --resume NAME" in msg


def test_protect_spec_refuses_what_one_reference_cannot_hold() -> None:
    with pytest.raises(ConfigError, match=r"write \$\{env:API_KEY\}"):
        protect_spec(parse_spec(secret_spec(**{"space.fixed": {"api_key": "${env:OTHER}"}})))
    clash = secret_spec(**{"engine.env": {"API_KEY": "another-secret"}})
    with pytest.raises(ConfigError, match="different secrets"):
        protect_spec(parse_spec(clash), environ={})
    searched = secret_spec(
        **{
            "space.fixed": {},
            "space.overrides.api_key": {"type": "categorical", "choices": ["k1-long", "k2-long"]},
        }
    )
    with pytest.raises(ConfigError, match="cannot be searched"):
        protect_spec(parse_spec(searched), environ={})
    in_launcher = secret_spec(**{"engine.launcher": ["/opt/sglang", "--api-key", KEY]})
    with pytest.raises(ConfigError, match="engine.launcher"):
        protect_spec(parse_spec(in_launcher), environ={})


def test_a_one_value_secret_parameter_becomes_a_reference() -> None:
    data = secret_spec(
        **{
            "space.fixed": {},
            "space.overrides.api_key": {"type": "categorical", "choices": [None, KEY]},
        }
    )
    spec, secrets = protect_spec(parse_spec(data), environ={})
    assert spec.space.overrides["api_key"]["choices"] == [None, "${env:API_KEY}"]
    assert secrets.values["API_KEY"] == KEY


def test_stored_text_keeps_comments_and_holds_references() -> None:
    text = (
        "# night sweep; the key was " + KEY + "\n" + yaml.safe_dump(secret_spec(), sort_keys=False)
    )
    spec, secrets = protect_spec(spec_from_yaml(text), environ={})
    stored = protect_spec_text(text, secrets)
    assert stored.startswith("# night sweep") and KEY not in stored and HF not in stored
    assert spec_from_yaml(stored) == spec


@pytest.mark.parametrize(
    "data",
    [
        # flow style: the reference is quoted, `{` would open a mapping
        None,
        # the value also in free text: the mapping is written out, the text redacted
        {"description": f"uses {KEY} for the API"},
    ],
)
def test_stored_text_of_awkward_specs(data: dict[str, Any] | None) -> None:
    if data is None:
        text = yaml.safe_dump(secret_spec(), sort_keys=False, default_flow_style=True)
    else:
        text = yaml.safe_dump(secret_spec(**data), sort_keys=False)
    spec, secrets = protect_spec(spec_from_yaml(text), environ={})
    stored = protect_spec_text(text, secrets)
    assert KEY not in stored and HF not in stored
    back = spec_from_yaml(stored)
    assert back.space.fixed["api_key"] == "${env:API_KEY}"
    assert back.engine.env["HF_TOKEN"] == "${env:HF_TOKEN}"
    if data is not None:
        assert back.description == f"uses {REDACTED} for the API"


def test_resolve_refs_and_ref_name(monkeypatch: pytest.MonkeyPatch) -> None:
    assert ref_name("${env:API_KEY}") == "API_KEY" and ref_name("x${env:A}") is None
    cfg = {"api_key": "${env:API_KEY}", "page_size": 1}
    assert resolve_refs(cfg, {"API_KEY": KEY}) == {"api_key": KEY, "page_size": 1}
    monkeypatch.setenv("API_KEY", "from-env-1")
    assert resolve_refs(cfg, {})["api_key"] == "from-env-1"
    monkeypatch.delenv("API_KEY")
    with pytest.raises(ConfigError, match="API_KEY is not set"):
        resolve_refs(cfg, {})


def test_scrub_file(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text(f"server_args=ServerArgs(api_key='{KEY}')\nready\n")
    assert scrub_file(log, [KEY]) is True
    assert log.read_text() == f"server_args=ServerArgs(api_key='{REDACTED}')\nready\n"
    assert scrub_file(log, [KEY]) is False and list(tmp_path.iterdir()) == [log]


def test_trial_engine_command_resolves_and_result_is_scrubbed() -> None:
    from autotune.engines import get_adapter
    from autotune.engines.base import Failure, FailureClass
    from autotune.store.models import TrialStatus
    from autotune.sweep.trial import TrialResult, TrialSpec, engine_command, scrub_result

    spec = TrialSpec(
        sweep="t",
        number=0,
        config={"api_key": "${env:API_KEY}"},
        engine_version="0.5.17",
        model="qwen3.8-27b-awq-int4",
        gpu="rtx-4080-super-32g",
        simulate=True,
        scenarios=[],
        env={"HF_TOKEN": "${env:HF_TOKEN}"},
        log_dir="/tmp/x",
        secrets={"API_KEY": KEY, "HF_TOKEN": HF},
    )
    argv, env = engine_command(spec, get_adapter("sglang"), 30000)
    assert argv[argv.index("--api-key") + 1] == KEY and env["HF_TOKEN"] == HF
    assert KEY not in repr(spec)  # the values never show in a repr (or a traceback)
    res = TrialResult(
        number=0,
        status=TrialStatus.FAILED,
        failure=Failure(cls=FailureClass.CRASH, reason=f"bad key {KEY}", evidence=f"k={HF}"),
        log_tail=f"api_key='{KEY}'",
    )
    clean = scrub_result(res, spec.secrets.values())
    assert clean.failure is not None and KEY not in clean.failure.reason
    assert HF not in (clean.failure.evidence or "") and KEY not in clean.log_tail


def test_launch_sh_requires_referenced_values() -> None:
    from autotune.report.launch import build_launch

    spec = build_launch(
        {"api_key": "${env:API_KEY}", "page_size": 1},
        engine="sglang",
        engine_version="0.5.17",
        sweep="s",
        model_path="/models/q",
        env={"HF_TOKEN": "${env:HF_TOKEN}", "SGLANG_DIR": "${env:SGLANG_DIR}"},
    )
    assert spec.secret_args == ["API_KEY"]
    assert {e.name for e in spec.env if e.secret} == {"HF_TOKEN", "SGLANG_DIR"}
    assert "${env:" not in " ".join(spec.command_lines())


@pytest.mark.parametrize(
    ("name", "value", "env", "secret"),
    [
        ("HF_TOKEN", "hf_abc", True, True),
        ("HF_TOKEN_RO", "hf_readonly_987", True, True),  # a secret word anywhere (variables)
        ("VLLM_S3_ACCESS_KEY_ID", "AKIAINHERITED99", True, True),
        ("SGLANG_API_KEY_2", "sk-second", True, True),
        ("VLLM_API_KEY", "20261204", True, True),  # a key of digits is a key
        ("VLLM_S3_SECRET_ACCESS_KEY", "/Xk9wJalrXUtnFEMI", True, True),  # one that starts with /
        ("api_key", "sk-x", False, True),
        ("api_key", 12345678, False, True),
        ("HF_ENDPOINT", "https://alice:Pa55w0rd@mirror.example/", True, True),
        ("HF_ENDPOINT", "https://mirror.example/", True, False),
        ("SOMETHING", "${env:SOMETHING}", True, True),
        ("SOMETHING", "<redacted>", False, True),
        ("long_prefill_token_threshold", 2048, False, False),  # a count, not a secret
        ("tbo_token_distribution_threshold", "0.48", False, False),
        ("bucket_time_to_first_token", [0.1, 0.5, 1.0], False, False),
        ("speculative_token_map", "thunlp/LLaMA3-Instruct-8B-FR-Spec/freq_32768.pt", False, False),
        ("api_key_file", "keys.txt", False, False),  # names a file (fields: the last segment)
        ("FAKE_TOKEN_DELAY_S", "0.002", True, False),
        ("HF_TOKEN_PATH", "/run/secrets/hf", True, False),  # a path names where it is
        ("SGLANG_KEY_SWITCH", "true", True, False),
        ("TOKENIZERS_PARALLELISM", "false", True, False),  # TOKENIZERS is not TOKEN
        ("max_total_tokens", "4096", False, False),
    ],
)
def test_one_rule_for_what_autotune_writes(
    name: str, value: object, env: bool, secret: bool
) -> None:
    from autotune.secrets import holds_secret

    assert holds_secret(name, value, env=env) is secret


def test_free_text_keeps_counts_named_like_secrets() -> None:
    from autotune.secrets import Redactor

    red = Redactor()
    text = (
        "--tbo-token-distribution-threshold 0.48 --api-key sk-abc12345 HF_TOKEN=hf_xyz789 "
        "--admin-api-key 12345678 VLLM_API_KEY=20261204"
    )
    out = red.text(text)
    assert "--tbo-token-distribution-threshold 0.48" in out
    for secret in ("sk-abc12345", "hf_xyz789", "12345678", "20261204"):
        assert secret not in out
    yaml_text = "long_prefill_token_threshold:\n  - 2048\nhf_token: hf_secret_value\n"
    out = red.text(yaml_text)
    assert "long_prefill_token_threshold:\n  - 2048\n" in out and "hf_secret_value" not in out
