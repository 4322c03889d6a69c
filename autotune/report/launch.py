"""The launch artifacts of a report: `launch.sh` and a systemd unit beside it.

What the user runs must be exactly what was tuned, and nothing a stored value holds may run as
shell code. So the engine adapter builds the argv (the flags of the named engine version, P13),
every word is quoted with `shlex.quote`, and the three things a user changes (model path, host,
port) are shell variables with defaults, substituted by position, never by pasting text.

Secrets (autotune.secrets.holds_secret: a `${env:NAME}` reference, an api_key or HF_TOKEN, a
URL with a password, ...) are never written out. launch.sh requires them from the environment
instead (a clear `${NAME:?}` error when missing), and the unit reads them from an
EnvironmentFile. Everything else is the tuned configuration and is written as it ran
(long_prefill_token_threshold, TOKENIZERS_PARALLELISM).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from autotune.errors import ConfigError
from autotune.report.render import environment, one_line

# The secret-name rules live in autotune.secrets (the sweep uses them too); re-exported here.
from autotune.secrets import REDACTED as REDACTED
from autotune.secrets import SECRET_WORDS as SECRET_WORDS
from autotune.secrets import Redactor as Redactor
from autotune.secrets import holds_secret, ref_name
from autotune.secrets import is_secret_field as is_secret_field
from autotune.secrets import is_secret_name as is_secret_name
from autotune.secrets import redact_mapping as redact_mapping
from autotune.versions import parse_version, release3

if TYPE_CHECKING:
    from autotune.engines.base import EngineAdapter, LaunchCommand

# Fields the target decides (sweep.known_good.TARGET_FIELDS); the script makes them variables.
TARGET_FIELDS = frozenset({"model_path", "host", "port"})
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 30000  # SGLang's own default port; default_port(engine) for the others
# Placeholders handed to the adapter, then replaced by "${MODEL_PATH}" / "${HOST}" / "${PORT}".
_MODEL_SENTINEL = "__AUTOTUNE_MODEL_PATH__"
_HOST_SENTINEL = "__AUTOTUNE_HOST__"
_PORT_SENTINEL = 65531

# FIELD-NOTES P4: the HiCache file tier reads its directory and its caps from the environment
# (`--file-storage-path` was ignored in 0.5.17; without caps the directory grew to 24 GB).
# The caps exist from 0.5.14 (read from the wheels' srt/environ.py).
P4_STORAGE_DIR = "SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR"
P4_MAX_SIZE = "SGLANG_HICACHE_FILE_BACKEND_MAX_SIZE"
P4_MIN_FREE = "SGLANG_HICACHE_FILE_BACKEND_MIN_FREE_SPACE"
P4_CAPS_SINCE = (0, 5, 14)
P4_DEFAULTS = {
    P4_STORAGE_DIR: "/var/tmp/sglang-hicache",
    P4_MAX_SIZE: "64G",
    P4_MIN_FREE: "20G",
}

_PY_RE = re.compile(r"^(?:.*/)?python(?:\d+(?:\.\d+)*)?$")
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def safe_name(name: str) -> str:
    """A sweep name as a file-name part: [A-Za-z0-9._-] only."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.")
    return cleaned or "sweep"


def require_line(name: str) -> str:
    """A bash line that stops the script with a clear message when `name` is unset/empty."""
    return (
        f': "${{{name}:?{name} must be set in the environment (autotune never writes '
        f'secrets into launch.sh)}}"'
    )


class ScriptWord(BaseModel):
    """One word of the command line: literal text, or a reference to a script variable."""

    model_config = ConfigDict(frozen=True)

    text: str
    var: str | None = Field(None, description="shell variable the word expands, if any")

    def shell(self) -> str:
        return f'"${{{self.var}}}"' if self.var else shlex.quote(self.text)


class EnvVar(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    value: str | None = Field(None, description="None for a secret (required from outside)")
    secret: bool = False
    overridable: bool = Field(False, description="the environment's value wins if set")
    note: str = ""

    def export(self) -> str:
        if self.secret:
            return f"{require_line(self.name)}\nexport {self.name}"
        assert self.value is not None
        if self.overridable:
            return (
                f'[[ -n "${{{self.name}:-}}" ]] || {self.name}={shlex.quote(self.value)}\n'
                f"export {self.name}"
            )
        return f"export {self.name}={shlex.quote(self.value)}"


class LaunchSpec(BaseModel):
    """Everything launch.sh and the unit are rendered from (argv already split into words)."""

    engine: str
    engine_version: str
    sweep: str
    words: list[ScriptWord]
    env: list[EnvVar] = Field(default_factory=list)
    secret_args: list[str] = Field(
        default_factory=list, description="script variables that carry secret flag values"
    )
    model_path: str
    python: str = Field("python3", description="interpreter that runs the engine's launcher")
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    simulated_sweep: bool = False
    hicache_file_tier: bool = False
    model_note: str = Field("", description="why MODEL_PATH probably needs to be set")
    notes: list[str] = Field(default_factory=list)

    def argv(
        self, *, model_path: str | None = None, host: str | None = None, port: int | None = None
    ) -> list[str]:
        """The argv with the variables at their defaults (or the given values); secret flag
        values stay `${NAME}` placeholders."""
        values = {
            "MODEL_PATH": model_path or self.model_path,
            "HOST": host or self.host,
            "PORT": str(port or self.port),
            "PYTHON": self.python,
        }
        return [values.get(w.var, f"${{{w.var}}}") if w.var else w.text for w in self.words]

    def command_line(self) -> str:
        """The command as one shell line with variables at their defaults, for report.md."""
        return shlex.join(self.argv())

    def command_lines(self) -> list[str]:
        """The quoted command, one flag and its values per line (the program on the first)."""
        lines: list[list[str]] = [[]]
        for w in self.words:
            if w.var is None and w.text.startswith("--") and lines[-1]:
                lines.append([])
            lines[-1].append(w.shell())
        return [" ".join(line) for line in lines]

    def secret_names(self) -> list[str]:
        return [e.name for e in self.env if e.secret] + list(self.secret_args)


def default_port(adapter: Any) -> int:
    """The port the engine listens on by default, as its adapter declares it (build_command's
    `port` default: SGLang 30000, vLLM 8000, llama-server 8080)."""
    import inspect

    param = inspect.signature(adapter.build_command).parameters.get("port")
    if param is not None and isinstance(param.default, int):
        return param.default
    return DEFAULT_PORT


def build_launch(
    config: Mapping[str, Any],
    *,
    engine: str,
    engine_version: str,
    sweep: str,
    model_path: str,
    env: Mapping[str, str] | None = None,
    tp: int | None = None,
    host: str = DEFAULT_HOST,
    port: int | None = None,
    simulated_sweep: bool = False,
    launcher: Sequence[str] | None = None,
    inherited: Mapping[str, str | None] | None = None,
    gpus: str | None = None,
    gpu_order: str | None = None,
) -> LaunchSpec:
    """Build the engine's real launch command for `config` through its adapter.

    `config` holds engine field names; model path, host and port become script variables
    (port None: the engine's own default). A secret-named field (api_key) becomes a variable
    the user must export. `inherited`: engine variables the winning trial took from the
    sweep's environment (None: a secret, named in a note only), and `gpus` the
    CUDA_VISIBLE_DEVICES its GPUs gave it; both are written as defaults the environment
    overrides. Raises the adapter's UnsupportedFlagError when a field does not exist in
    `engine_version`.
    """
    from autotune.engines import get_adapter
    from autotune.planner.dispatch import followed

    cfg = {k: v for k, v in config.items() if k not in TARGET_FIELDS}
    if tp and tp > 1:
        cfg.setdefault("tp_size", tp)
    secret_fields = _hide_secrets(cfg)
    try:
        adapter = get_adapter(engine)
    except (ImportError, AttributeError) as exc:  # adapter module missing or incomplete
        raise ConfigError(f"the {engine} adapter cannot be loaded: {exc}", field="engine") from exc
    cmd = _real_command(adapter, cfg, engine_version, launcher)
    words = _words(cmd.argv, secret_fields)
    _check_variables(words, cmd.argv, engine, engine_version)
    env_vars, hicache_file, notes = _env(cfg, cmd.env, env or {}, engine_version)
    env_vars += _carried(inherited or {}, gpus, gpu_order, {e.name for e in env_vars}, notes)
    followed_note = followed(engine, engine_version).note()  # a nightly or a release candidate
    notes = [*([followed_note] if followed_note else []), *notes]
    # The adapter's default interpreter may be autotune's own (sys.executable); the script
    # uses python3 from PATH unless the sweep named the engine's interpreter (engine.launcher).
    python = launcher[0] if launcher and _PY_RE.match(launcher[0]) else "python3"
    return LaunchSpec(
        engine=engine,
        engine_version=engine_version,
        sweep=sweep,
        words=words,
        env=env_vars,
        secret_args=sorted(secret_fields.values()),
        model_path=model_path,
        python=python,
        host=host,
        port=default_port(adapter) if port is None else port,
        simulated_sweep=simulated_sweep,
        hicache_file_tier=hicache_file,
        model_note=_model_note(model_path),
        notes=notes,
    )


def _hide_secrets(cfg: dict[str, Any]) -> dict[str, str]:
    """Replace in `cfg` each value the script must not hold by a placeholder; return field ->
    the variable the user exports instead."""
    # A secret field, or one the sweep kept as a reference ${env:NAME}: a variable to export.
    secret_fields = {
        k: ref_name(v) or k.upper() for k, v in cfg.items() if v is not None and holds_secret(k, v)
    }
    for field, var in secret_fields.items():
        cfg[field] = f"__AUTOTUNE_SECRET_{var}__"
    return secret_fields


def _real_command(
    adapter: EngineAdapter,
    cfg: Mapping[str, Any],
    engine_version: str,
    launcher: Sequence[str] | None,
) -> LaunchCommand:
    """The adapter's launch command for `cfg` started by `launcher` (the sweep's: a venv's
    interpreter, a container, the llama-server it found), model, host and port as
    placeholders (a ConfigError when it is the simulator's)."""
    cmd = adapter.build_command(
        cfg,
        model=_MODEL_SENTINEL,
        version=engine_version,
        host=_HOST_SENTINEL,
        port=_PORT_SENTINEL,
        launcher=list(launcher) if launcher else None,
    )
    if any("autotune.sim" in a or "autotune sim" in a for a in cmd.argv):
        raise ConfigError(
            "the adapter returned the simulator's command; launch.sh must run the real engine",
            field="engine",
        )
    return cmd


def _check_variables(
    words: Sequence[ScriptWord], argv: Sequence[str], engine: str, engine_version: str
) -> None:
    """The model path and the port must be script variables (ConfigError otherwise)."""
    seen = {w.var for w in words if w.var}
    missing = {"MODEL_PATH", "PORT"} - seen
    if missing:
        raise ConfigError(
            f"{engine} {engine_version}: the launch command carries no {sorted(missing)} "
            f"(argv: {argv[:6]}...); cannot make them script variables",
            field="engine",
        )


def _model_note(model_path: str) -> str:
    from autotune.models.builtin import BUILTIN_CARDS

    return (
        f"the sweep used autotune's built-in card {model_path!r}, which is not a path: point "
        "MODEL_PATH at the model folder or hub id the engine should load"
        if model_path in BUILTIN_CARDS
        else ""
    )


def _words(argv: Sequence[str], secret_fields: Mapping[str, str]) -> list[ScriptWord]:
    secret_values = {f"__AUTOTUNE_SECRET_{v}__": v for v in secret_fields.values()}
    words: list[ScriptWord] = []
    prev = ""
    for i, arg in enumerate(argv):
        if i == 0 and _PY_RE.match(arg):
            words.append(ScriptWord(text="python3", var="PYTHON"))
        elif arg == _MODEL_SENTINEL:
            words.append(ScriptWord(text=arg, var="MODEL_PATH"))
        elif arg == _HOST_SENTINEL:
            words.append(ScriptWord(text=arg, var="HOST"))
        elif arg == str(_PORT_SENTINEL) and prev == "--port":
            words.append(ScriptWord(text=arg, var="PORT"))
        elif arg in secret_values:
            words.append(ScriptWord(text=arg, var=secret_values[arg]))
        elif _MODEL_SENTINEL in arg or _HOST_SENTINEL in arg or "__AUTOTUNE_SECRET_" in arg:
            raise ConfigError(f"cannot place a script variable inside the argument {arg!r}")
        else:
            words.append(ScriptWord(text=arg))
        prev = arg
    return words


def _env(
    cfg: Mapping[str, Any],
    adapter_env: Mapping[str, str],
    extra: Mapping[str, str],
    version: str,
) -> tuple[list[EnvVar], bool, list[str]]:
    merged: dict[str, str] = {**dict(adapter_env), **dict(extra)}
    for name in merged:
        if not _NAME_RE.match(name):
            raise ConfigError(
                f"environment variable name {name!r} is not a valid shell name "
                "([A-Za-z_][A-Za-z0-9_]*)",
                field="engine.env",
            )
    out: list[EnvVar] = []
    notes: list[str] = []
    file_tier = bool(cfg.get("enable_hierarchical_cache")) and (
        str(cfg.get("hicache_storage_backend") or "").lower() == "file"
    )
    if file_tier:
        wanted = [P4_STORAGE_DIR]
        if release3(parse_version(version, field="engine.version")) >= P4_CAPS_SINCE:
            wanted += [P4_MAX_SIZE, P4_MIN_FREE]
        else:
            notes.append(
                f"sglang {version} has no size cap for the HiCache file tier "
                f"({P4_MAX_SIZE} exists from 0.5.14): watch the disk"
            )
        for name in wanted:
            value = merged.pop(name, None)
            out.append(
                EnvVar(
                    name=name,
                    value=str(value) if value is not None else P4_DEFAULTS[name],
                    overridable=True,
                    note="HiCache file tier (--file-storage-path is ignored, sglang#33883)",
                )
            )
    for name in sorted(merged):
        if holds_secret(name, merged[name], env=True):
            out.append(
                EnvVar(name=name, secret=True, note="secret, never written here: export it first")
            )
        else:
            out.append(EnvVar(name=name, value=str(merged[name])))
    return out, file_tier, notes


def launch_differs(spec: LaunchSpec, trial_argv: Sequence[str]) -> str:
    """ "" when the script's command is the winning trial's (the words it makes variables
    aside: model, host, port, interpreter, secrets); else a note saying where they part."""
    words = spec.words
    for i, (w, arg) in enumerate(zip(words, trial_argv, strict=False)):
        if w.var is None and w.text != arg:
            return (
                f"this command differs from the one the winning trial ran at word {i + 1}: "
                f"{w.text!r} here, {arg!r} in the trial (a spec changed since, or another "
                "engine release): check before relying on it"
            )
    if len(words) != len(trial_argv):
        return (
            f"this command has {len(words)} words and the winning trial's had "
            f"{len(trial_argv)}: check before relying on it"
        )
    return ""


def _carried(
    inherited: Mapping[str, str | None],
    gpus: str | None,
    gpu_order: str | None,
    taken: set[str],
    notes: list[str],
) -> list[EnvVar]:
    """The variables the winning trial took from the sweep's shell and its GPUs (and the order
    they were counted in), as defaults the environment overrides; an inherited secret is
    named in a note, never required."""
    out: list[EnvVar] = []
    for name, value, note in (
        ("CUDA_DEVICE_ORDER", gpu_order, "how the trial's GPU indices were counted"),
        ("CUDA_VISIBLE_DEVICES", gpus, "the GPUs the winning trial ran on"),
    ):
        if value and name not in taken:
            out.append(EnvVar(name=name, value=value, overridable=True, note=note))
    secret = sorted(name for name, value in inherited.items() if value is None)
    for name, value in sorted(inherited.items()):
        if value is None or name in taken or not _NAME_RE.match(name):
            continue
        out.append(
            EnvVar(
                name=name,
                value=value,
                overridable=True,
                note="set in the environment the sweep ran in, so the winning trial had it",
            )
        )
    if secret:
        notes.append(
            f"the sweep's environment also set {', '.join(secret)} (secret, not written here): "
            "export it when the engine needs it (a gated model, a private hub)"
        )
    return out


# -- rendering ---------------------------------------------------------------------------------


def render_launch_sh(spec: LaunchSpec, *, generated_at: str = "") -> str:
    """launch.sh text; every stored value is quoted or reduced to one comment line."""
    from autotune import __version__

    return str(
        environment()
        .get_template("launch.sh.j2")
        .render(
            spec=spec,
            generated_at=generated_at,
            autotune_version=__version__,
            unit_name=unit_name(spec.sweep),
            require_line=require_line,
        )
    )


def unit_name(sweep: str) -> str:
    return f"autotune-{safe_name(sweep)}.service"


def systemd_quote(value: str) -> str:
    """One double-quoted systemd word: backslash, quote and control characters escaped as C
    escapes, `%` doubled (specifiers); `$` is literal in Environment= (no expansion)."""
    out = []
    for ch in value:
        if ch == "\\":
            out.append("\\\\")
        elif ch == '"':
            out.append('\\"')
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        elif ch == "%":
            out.append("%%")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def systemd_exec_path(path: Path) -> str:
    """ExecStart's program: quoted, `%` doubled and `$` doubled (ExecStart expands $VAR)."""
    return systemd_quote(str(path)).replace("$", "$$")


def render_unit(spec: LaunchSpec, script_path: Path) -> str:
    """The systemd unit that runs launch.sh (Restart=on-failure; secrets from a root-only
    EnvironmentFile, never in the unit)."""
    env_lines = [
        f"Environment={systemd_quote(f'{k}={v}')}"
        for k, v in (
            ("MODEL_PATH", spec.model_path),
            ("HOST", spec.host),
            ("PORT", str(spec.port)),
        )
    ]
    return str(
        environment()
        .get_template("autotune.service.j2")
        .render(
            spec=spec,
            exec_start=systemd_exec_path(script_path),
            unit_file=unit_name(spec.sweep),
            env_lines=env_lines,
            env_file=f"/etc/autotune/{safe_name(spec.sweep)}.env",
            description=one_line(
                f"{spec.engine} server tuned by autotune (sweep {spec.sweep}, "
                f"{spec.engine}=={spec.engine_version})"
            ).replace("%", "%%"),
        )
    )
