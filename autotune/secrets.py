"""Secrets: which names hold one, and how their values are kept out of everything autotune
writes (database, Optuna storage, reports, JSON output, logs it copies).

A secret reaches a sweep through the spec (`engine.env: {HF_TOKEN: ...}`, a flag such as
`api_key` in `space.fixed`) or through the environment. `protect_spec` turns every literal into
a reference `${env:NAME}` before anything is stored: NAME is the variable's own name, or the
flag's name upper-cased (api_key -> API_KEY, the variable launch.sh requires too). The values
stay in memory and reach only the worker that starts the engine (`TrialSpec.secrets`), which
resolves the references in the engine's argv and environment. So stored specs, trial configs,
Optuna attributes, reports and JSON output hold the reference, never the value, and
`--resume` without the spec file reads each value from the variable its reference names.
A spec may also write the reference itself (`HF_TOKEN: ${env:HF_TOKEN}`).

Free text (log tails, failure reasons) is scrubbed of the known values with `hide`.
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from autotune.errors import ConfigError

if TYPE_CHECKING:
    from autotune.sweep.spec import SweepSpec

SECRET_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD")
REDACTED = "<redacted>"
# Values shorter than this are not searched for in free text: they would match everywhere
# (a 3-character "secret" protects nothing anyway).
MIN_HIDDEN_LEN = 4

_ENV_REF = re.compile(r"^\$\{env:([A-Za-z_][A-Za-z0-9_]*)\}$")
# A URL's user:password@ (HF_ENDPOINT=https://alice:pw@mirror): a secret whatever the name.
_URL_USERINFO = re.compile(r"://[^/@\s:]+:[^/@\s]+@")
_SWITCH_WORDS = frozenset({"", "true", "false", "yes", "no", "on", "off", "none", "null"})
_SECRET_SEGMENTS = {
    "token",
    "key",
    "secret",
    "password",
    "passwd",
    "apikey",
    "credential",
    "credentials",
}

V = TypeVar("V")


def is_secret_name(name: str) -> bool:
    """An environment variable name that holds a secret: it contains TOKEN, KEY, SECRET or
    PASSWORD anywhere (HF_TOKEN, OPENAI_API_KEY, HUGGINGFACEHUB_API_TOKEN)."""
    up = name.upper()
    return any(word in up for word in SECRET_WORDS)


def is_secret_field(name: str) -> bool:
    """An engine field that holds a secret (api_key, admin_api_key, hf_token). Judged by whole
    name segments, since many fields merely count tokens (max_total_tokens, kv_pool_tokens)."""
    return any(seg in _SECRET_SEGMENTS for seg in re.split(r"[_\-.]+", name.lower()))


def redact_mapping(values: Mapping[str, object], *, env: bool = False) -> dict[str, object]:
    """A copy with the value of every secret key replaced; nested mappings too. `env=True`:
    keys are environment variable names; a nested `env` mapping always is. Secret is what
    holds_secret says: long_prefill_token_threshold: 2048 or TOKENIZERS_PARALLELISM: false is
    part of the tuned configuration and stays readable."""
    out: dict[str, object] = {}
    for k, v in values.items():
        secret = holds_secret(str(k), v, env=env)
        if isinstance(v, str) and ref_name(v):
            out[k] = v  # a reference names the variable, not the value: launch.sh requires it
        elif secret and v is not None and not isinstance(v, Mapping):
            out[k] = REDACTED
        elif isinstance(v, Mapping):
            out[k] = redact_mapping(v, env=env or str(k) == "env")
        else:
            out[k] = v
    return out


class Redactor:
    """Removes secrets from free text (log tails, rendered files): the known secret values, and
    `NAME=value`, `NAME: value`, `--name value` where NAME names a secret."""

    # Short values (true, 1, info) would match everywhere; a real secret is longer.
    MIN_SECRET_LEN = 8
    # Whole-segment names (api_key, HF_TOKEN, DB_PASSWORD), not counters like max_total_tokens.
    _WORD = r"(?:token|key|secret|password|passwd|apikey)"
    _ASSIGN = re.compile(
        rf"(?P<name>\b(?:[A-Za-z0-9]+_)*{_WORD}(?:_[A-Za-z0-9]+)*\b)"
        r"(?P<sep>[ \t]*[=:][ \t]*)(?P<value>'[^']*'|\"[^\"]*\"|[^\s,;)]+)",
        re.IGNORECASE,
    )
    _FLAG = re.compile(
        rf"(?P<name>--(?:[A-Za-z0-9]+-)*{_WORD}(?:-[A-Za-z0-9]+)*)"
        r"(?P<sep>=|\s+)(?P<value>'[^']*'|\"[^\"]*\"|[^\s-]\S*)",
        re.IGNORECASE,
    )

    _BEARER = re.compile(r"\b(Bearer)\s+[A-Za-z0-9._~+/=-]{8,}", re.IGNORECASE)

    def __init__(self, secrets: Sequence[str] = ()):
        self.secrets = sorted(
            {s for s in secrets if s and len(s) >= self.MIN_SECRET_LEN}, key=len, reverse=True
        )

    def add(self, value: object) -> None:
        text = "" if value is None else str(value)
        if len(text) >= self.MIN_SECRET_LEN and text not in self.secrets:
            self.secrets = sorted([*self.secrets, text], key=len, reverse=True)

    def add_from(self, values: Mapping[str, object], *, env: bool = False) -> None:
        """Learn the secret values of a config (or, `env=True`, an environment mapping)."""
        for k, v in values.items():
            secret = is_secret_name(str(k)) if env else is_secret_field(str(k))
            if secret and v is not None and not isinstance(v, bool | Mapping):
                self.add(v)

    def text(self, text: str) -> str:
        for s in self.secrets:
            text = text.replace(s, REDACTED)
        text = self._ASSIGN.sub(self._assign, text)
        text = self._BEARER.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
        return self._FLAG.sub(self._flag, text)

    @staticmethod
    def _flag(m: re.Match[str]) -> str:
        # --tbo-token-distribution-threshold 0.48 is a count; --api-key 12345678 a secret
        if plain_value(m["value"]) and not holds_secret_env(m["name"].lstrip("-")):
            return m.group(0)
        return f"{m['name']}{m['sep']}{REDACTED}"

    @staticmethod
    def _assign(m: re.Match[str]) -> str:
        # An identifier (api_key, HF_TOKEN) or `word=`; not prose such as "secret: export".
        name = m["name"]
        if plain_value(m["value"]) and not holds_secret_env(name):
            return m.group(0)
        if "_" in name or name.isupper() or "=" in m["sep"]:
            return f"{name}{m['sep']}{REDACTED}"
        return m.group(0)


# -- free text and argv ------------------------------------------------------------------------


def hide(text: str, values: Iterable[str]) -> str:
    """`text` with every known secret value (longest first) replaced by REDACTED."""
    for v in sorted({v for v in values if len(v) >= MIN_HIDDEN_LEN}, key=len, reverse=True):
        text = text.replace(v, REDACTED)
    return text


# What the sweep takes out of a spec (and scrub_argv hides, and reports and launch.sh leave
# out) is judged more narrowly than free text is scrubbed: a value taken out must come back from
# the environment on --resume and launch.sh requires it, so FAKE_TOKEN_DELAY_S or
# long_prefill_token_threshold (a count) must not be one. A secret is a name whose last segment
# is a secret word, holding text (or digits, for a key or password).
_LAST_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "CREDENTIALS")


def _last_segment(name: str) -> str:
    return re.split(r"[_\-.]+", name.upper().strip("_-."))[-1]


def holds_secret_env(name: str) -> bool:
    """An environment variable the sweep keeps as a reference: HF_TOKEN, OPENAI_API_KEY,
    AWS_SECRET_ACCESS_KEY, PGPASSWORD; not FAKE_TOKEN_DELAY_S or HF_TOKEN_PATH."""
    return _last_segment(name).endswith(_LAST_WORDS)


def holds_secret(name: str, value: object, *, env: bool = False) -> bool:
    """Whether a value is kept out of everything written from a sweep (reports, launch.sh, the
    trials' command records):
    - a reference, an already redacted value, a URL carrying a password;
    - a value under a name whose last segment is a secret word (HF_TOKEN, api_key,
      VLLM_API_KEY), whatever it looks like (a key may be all digits or start with /);
    - for an environment variable (`env`), also a value under a name with a secret word as any
      other segment (HF_TOKEN_RO, VLLM_S3_ACCESS_KEY_ID), unless it is a number, a switch or a
      path (FAKE_TOKEN_DELAY_S, HF_TOKEN_PATH). An engine field is judged by its last segment
      only: speculative_token_map or api_key_file name files, long_prefill_token_threshold a
      count.
    The sweep takes out of a spec only what holds_secret_env / holds_secret_field say, which
    must come back from the environment on --resume."""
    if isinstance(value, str) and (ref_name(value) or value == REDACTED):
        return True
    if isinstance(value, str) and _URL_USERINFO.search(value):
        return True
    if value is None or isinstance(value, bool):
        return False
    if isinstance(value, list | tuple) and plain_value(value):
        return False  # bucket_time_to_first_token: [0.1, 0.5]; no key is a list
    if holds_secret_env(name):  # the last segment: a field's name is judged the same way
        return True
    return env and is_secret_field(name) and not plain_value(value)


def plain_value(value: object) -> bool:
    """A value no secret is: nothing, a number, a switch, a path, a list of those."""
    if value is None or isinstance(value, bool | int | float):
        return True
    if isinstance(value, list | tuple):
        return all(plain_value(v) for v in value)
    text = str(value).strip().strip("'\"")
    if text.lower() in _SWITCH_WORDS:
        return True
    try:
        float(text)
        return True
    except ValueError:
        return text.startswith(("/", "~", "./", "../"))


def holds_secret_field(name: str, value: object) -> bool:
    """An engine field value the sweep keeps as a reference: api_key, admin_api_key, hf_token,
    ssl_keyfile_password holding text; not api_key_file, nor a token count."""
    last = _last_segment(name)
    if isinstance(value, str):
        return last in (*_LAST_WORDS, "APIKEY")
    if isinstance(value, int) and not isinstance(value, bool):  # an unquoted digits-only key
        return last in ("KEY", "SECRET", "PASSWORD", "PASSWD", "APIKEY")
    return False


def _secret_flag(arg: str) -> bool:
    return arg.startswith("--") and holds_secret_field(arg[2:], "")


def scrub_argv(argv: Sequence[str]) -> list[str]:
    """argv with the value of every secret flag replaced: `--api-key K` and `--api-key=K` (and
    --admin-api-key, --hf-token, ...) keep the flag, lose the value."""
    out: list[str] = []
    after_flag = False
    for arg in argv:
        if after_flag and not arg.startswith("--"):
            out.append(REDACTED)
        elif arg.startswith("--") and "=" in arg and _secret_flag(arg.partition("=")[0]):
            out.append(f"{arg.partition('=')[0]}={REDACTED}")
        else:
            out.append(arg)
        after_flag = _secret_flag(arg) and "=" not in arg
    return out


def scrub_file(path: Path, values: Iterable[str]) -> bool:
    """Rewrite `path` (an engine's log, once the engine has stopped) with the known secret
    values replaced, line by line; whether anything was replaced. Engines print their own
    arguments (SGLang: `server_args=ServerArgs(... api_key='...')`)."""
    needles = [
        v.encode()
        for v in sorted({v for v in values if len(v) >= MIN_HIDDEN_LEN}, key=len, reverse=True)
    ]
    if not needles:
        return False
    marker = REDACTED.encode()
    tmp = path.with_name(path.name + ".scrub")
    found = False
    try:
        with open(path, "rb") as src, open(tmp, "wb") as dst:
            for line in src:
                for n in needles:
                    if n in line:
                        line = line.replace(n, marker)
                        found = True
                dst.write(line)
        if found:
            os.replace(tmp, path)
    except OSError:
        return False
    finally:
        tmp.unlink(missing_ok=True)
    return found


# -- references --------------------------------------------------------------------------------


def env_ref(name: str) -> str:
    """The reference that stands for the value of environment variable `name`."""
    return f"${{env:{name}}}"


def ref_name(value: object) -> str | None:
    """NAME if `value` is exactly a reference `${env:NAME}`, else None."""
    if not isinstance(value, str):
        return None
    m = _ENV_REF.match(value)
    return m.group(1) if m else None


def field_var(name: str) -> str:
    """The variable a flag's secret is read from: api_key -> API_KEY (as launch.sh names it)."""
    return re.sub(r"[^A-Za-z0-9_]", "_", name).upper()


def resolve_refs(values: Mapping[str, V], secrets: Mapping[str, str]) -> dict[str, V | str]:
    """A copy of a config or an environment with every reference replaced by its value (from
    `secrets`, else this process's environment)."""
    out: dict[str, V | str] = {}
    for k, v in values.items():
        name = ref_name(v)
        if name is None:
            out[k] = v
            continue
        value = secrets.get(name) or os.environ.get(name)
        if not value:
            raise ConfigError(f"{k} is {v}, but {name} is not set in the environment", field=k)
        out[k] = value
    return out


@dataclass
class SpecSecrets:
    """What `protect_spec` took out of a spec: the values by variable name (memory only) and
    where each reference stands (dotted field -> variable)."""

    values: dict[str, str] = field(default_factory=dict)
    fields: dict[str, str] = field(default_factory=dict)
    # (path in the YAML mapping, new value) of every literal replaced, for the stored text
    replaced: list[tuple[tuple[str, ...], str | list[object]]] = field(default_factory=list)
    # variables whose value came from the spec itself (the rest from the environment)
    literal: set[str] = field(default_factory=set)

    def hide(self, text: str) -> str:
        return hide(text, self.values.values())


def protect_spec(
    spec: SweepSpec, *, environ: Mapping[str, str] | None = None
) -> tuple[SweepSpec, SpecSecrets]:
    """The spec with every secret literal replaced by its reference, and the values.

    Secret literals sit in `engine.env` (names with TOKEN, KEY, SECRET, PASSWORD) and in
    `space.fixed` / `space.overrides` (fields such as api_key). A reference, written by the user
    or left by an earlier run (`--resume` reads the stored spec), is resolved from the
    environment; one that cannot be is a ConfigError naming the field. Raises ConfigError too
    for a reference to another variable than the field's own, two different values under one
    name, and a searched secret.
    """
    env = os.environ if environ is None else environ
    out = SpecSecrets()
    take = partial(_take, out)

    new_env = dict(spec.engine.env)
    for k, v in spec.engine.env.items():
        # HF_TOKEN_RO or a URL with a password too: what the outputs would hide, the stored
        # spec must not hold either
        if holds_secret(k, v, env=True):
            new_env[k] = take(("engine", "env", k), k, v)
    new_fixed = dict(spec.space.fixed)
    for k, v in spec.space.fixed.items():
        if holds_secret_field(k, v) or ref_name(v) is not None:
            new_fixed[k] = take(("space", "fixed", k), field_var(k), v)
    new_over = dict(spec.space.overrides)
    for k, v in spec.space.overrides.items():
        if isinstance(v, Mapping):
            new_over[k] = _protect_override(("space", "overrides", k), k, v, take, out)
        elif holds_secret_field(k, v) or ref_name(v) is not None:
            new_over[k] = take(("space", "overrides", k), field_var(k), v)

    _check_launcher(spec.engine.launcher or [])
    _resolve_from_env(out, env)
    if not out.fields:
        return spec, out
    protected = spec.model_copy(
        update={
            "engine": spec.engine.model_copy(update={"env": new_env}),
            "space": spec.space.model_copy(update={"fixed": new_fixed, "overrides": new_over}),
        }
    )
    return protected, out


def _take(out: SpecSecrets, path: tuple[str, ...], var: str, value: object) -> str:
    """Record the secret at `path` (a literal: its value; a reference: its place) in `out`;
    the reference that stands for it."""
    dotted = ".".join(path)
    name = ref_name(value)
    if name is not None:
        if name != var:
            raise ConfigError(
                f"{value} must name the field's own variable: write {env_ref(var)}",
                field=dotted,
            )
    else:
        text = str(value)
        seen = out.values.get(var)
        if var in out.literal and seen != text:
            other = next(f for f, v in out.fields.items() if v == var)
            raise ConfigError(
                f"{other} and {dotted} hold different secrets, but both are kept as "
                f"{env_ref(var)}: give them the same value",
                field=dotted,
            )
        out.values[var] = text
        out.literal.add(var)
        out.replaced.append((path, env_ref(var)))
    out.fields.setdefault(dotted, var)
    return env_ref(var)


def _check_launcher(launcher: Sequence[str]) -> None:
    if scrub_argv(launcher) != list(launcher):
        raise ConfigError(
            "holds the value of a secret flag, which would be stored with the sweep: set it "
            "in space.fixed instead (e.g. api_key), where it is kept as a reference",
            field="engine.launcher",
        )


def _resolve_from_env(out: SpecSecrets, env: Mapping[str, str]) -> None:
    """The values of the references in `out` that the spec did not give, from `env`."""
    for dotted, var in out.fields.items():
        if var in out.values:
            continue
        value = env.get(var)
        if not value:
            raise ConfigError(
                f"{env_ref(var)} needs {var} in the environment, and it is not set (autotune "
                "stores a secret as such a reference, never its value, so a resumed sweep "
                f"reads it back from there): set {var}, or pass the spec file that holds the "
                "value again (autotune sweep SPEC --resume NAME)",
                field=dotted,
            )
        out.values[var] = value


def _protect_override(
    path: tuple[str, ...],
    name: str,
    ov: Mapping[str, object],
    take: Callable[[tuple[str, ...], str, object], str],
    out: SpecSecrets,
) -> dict[str, object]:
    """A secret field given as a parameter ({type: categorical, choices: [None, K]}): one value
    at most, kept as its reference; any other override is returned as it is."""
    new = dict(ov)

    def secret(v: object) -> bool:
        return holds_secret_field(name, v) or ref_name(v) is not None

    choices = ov.get("choices")
    if isinstance(choices, list) and any(secret(c) for c in choices):
        distinct = {str(c) for c in choices if secret(c)}
        if len(distinct) > 1:
            raise ConfigError(
                "a secret cannot be searched (autotune keeps one value per name, as the "
                f"reference {env_ref(field_var(name))}): set it in space.fixed",
                field=".".join(path),
            )
        before = len(out.replaced)
        ref = take((*path, "choices"), field_var(name), next(iter(distinct)))
        new["choices"] = protected = [ref if secret(c) else c for c in choices]
        del out.replaced[before:]  # the whole list is what the stored text gets
        out.replaced.append(((*path, "choices"), protected))
    if secret(ov.get("default")):
        new["default"] = take((*path, "default"), field_var(name), ov["default"])
    return new


def protect_spec_text(text: str, secrets: SpecSecrets, *, source: str = "spec") -> str:
    """The spec's YAML text as it may be stored: each literal secret replaced by its reference.
    The text is kept (comments included) when swapping the values in it gives exactly the
    protected mapping; otherwise the protected mapping is written out as YAML, with any other
    occurrence of a secret (a description, say) replaced by REDACTED."""
    import yaml

    from autotune.yamlio import load_yaml

    literal = {v: k for k, v in secrets.values.items() if k in secrets.literal}
    if not literal:
        return text
    raw = load_yaml(text, source=source)
    want = copy.deepcopy(raw)
    for path, value in secrets.replaced:
        node = want
        for p in path[:-1]:
            node = node[p]
        node[path[-1]] = value
    candidate = text
    for value in sorted(literal, key=len, reverse=True):
        candidate = re.sub(
            r"(?P<q>[\"']?)" + re.escape(value) + r"(?P=q)",
            _quoted_ref(env_ref(literal[value])),
            candidate,
        )
    try:
        same = load_yaml(candidate, source=source) == want
    except ConfigError:
        same = False
    if same and not any(v in candidate for v in literal if len(v) >= MIN_HIDDEN_LEN):
        return candidate
    return yaml.safe_dump(_hide_deep(want, literal), sort_keys=False, allow_unicode=True)


def _quoted_ref(ref: str) -> Callable[[re.Match[str]], str]:
    # inside the value's own quotes, or single-quoted: `{` would open a flow mapping
    def sub(m: re.Match[str]) -> str:
        return f"{m['q']}{ref}{m['q']}" if m["q"] else f"'{ref}'"

    return sub


def _hide_deep(node: object, values: Iterable[str]) -> object:
    vals = list(values)
    if isinstance(node, str):
        return hide(node, vals)
    if isinstance(node, Mapping):
        return {_hide_deep(k, vals): _hide_deep(v, vals) for k, v in node.items()}
    if isinstance(node, list):
        return [_hide_deep(v, vals) for v in node]
    return node
