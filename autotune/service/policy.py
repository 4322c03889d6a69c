"""What a request may name: the local configuration (STATE/config.yaml) and the checks that
keep a submitted spec from running anything the owner did not allow.

A spec reaches engines through three doors, and each is closed unless the config opens it:
files (model folders, checkpoints, space files, path-valued flags and env values) must lie
under `allowed_paths` after symlinks are resolved; the engine must be in `allowed_engines` and
its binary comes from the adapter (or the simulator): `engine.launcher` is refused unless it is
exactly one of `allowed_launchers`; environment variables must start with one of
`allowed_env_prefixes` and never name the loader or interpreter (LD_*, PYTHON*, PATH, ...).
The engine binds only to `allowed_engine_hosts`, and joins only `allowed_ray_addresses`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from autotune.errors import ConfigError, UnknownNameError, did_you_mean
from autotune.service.errors import Forbidden

DEFAULT_BODY_LIMIT = 1024 * 1024

# Never settable through a spec, whatever the prefixes allow: they choose what gets loaded or
# executed (dynamic loader, interpreter start-up, shell start-up, search path).
_ENV_ALWAYS_REFUSED_PREFIXES = ("LD_", "PYTHON", "DYLD_", "AUTOTUNE_")
_ENV_ALWAYS_REFUSED = frozenset(
    {"PATH", "BASH_ENV", "ENV", "SHELL", "HOME", "IFS", "PS4", "PERL5OPT", "NODE_OPTIONS"}
)

DEFAULT_CONFIG_TEXT = """\
# autotune serve / autotune mcp: what a submitted request may name. Edit, then restart the
# service. Paths are absolute (or ~); symlinks are resolved before they are compared.

# Folders under which specs may name model folders, checkpoints, search-space files and
# path-valued engine flags (and under which POST /v1/inspect may read). Empty: built-in model
# cards and the built-in search space only.
allowed_paths: []

# Engine adapters a spec may use (the adapter, not the request, decides the binary).
allowed_engines: [sglang, vllm, llamacpp]

# Exact argv prefixes a spec may give as engine.launcher, e.g.
#   - [/opt/sglang/bin/python, -m, sglang.launch_server]
# Empty: a spec that sets engine.launcher is refused.
allowed_launchers: []

# Environment variables a spec may set for the engine (engine.env), by prefix. LD_*, PYTHON*,
# PATH and other loader/shell variables are refused whatever this says.
allowed_env_prefixes: [SGLANG_, VLLM_, NCCL_, CUDA_, LLAMA_, OMP_, TORCH_]

# Addresses an engine may bind (engine.host).
allowed_engine_hosts: [127.0.0.1, localhost, "::1"]

# Ray clusters a spec may join (execution.ray_address); empty: a local Ray only.
allowed_ray_addresses: []

# Upper bound on trials at once (execution.workers, or the workers override).
max_workers: 8

# Whether requests may start kernel tuning jobs (they occupy the GPUs for a while).
allow_kernel_tuning: true

# Largest request body accepted, in bytes.
max_body_bytes: 1048576
"""


class ServiceConfig(BaseModel):
    """STATE/config.yaml."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    allowed_paths: list[str] = Field(default_factory=list)
    allowed_engines: list[str] = Field(default_factory=lambda: ["sglang", "vllm", "llamacpp"])
    allowed_launchers: list[list[str]] = Field(default_factory=list)
    allowed_env_prefixes: list[str] = Field(
        default_factory=lambda: ["SGLANG_", "VLLM_", "NCCL_", "CUDA_", "LLAMA_", "OMP_", "TORCH_"]
    )
    allowed_engine_hosts: list[str] = Field(
        default_factory=lambda: ["127.0.0.1", "localhost", "::1"]
    )
    allowed_ray_addresses: list[str] = Field(default_factory=list)
    max_workers: int = Field(8, ge=1)
    allow_kernel_tuning: bool = True
    max_body_bytes: int = Field(DEFAULT_BODY_LIMIT, ge=1024)

    def roots(self) -> list[Path]:
        return [Path(os.path.realpath(Path(p).expanduser())) for p in self.allowed_paths]


def load_config(path: Path, *, create: bool = True) -> ServiceConfig:
    """Read STATE/config.yaml; write the commented default first if it does not exist."""
    if not path.exists():
        if not create:
            return ServiceConfig()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(DEFAULT_CONFIG_TEXT)
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(
            f"cannot read the service configuration: {exc}", source=str(path)
        ) from None
    if not isinstance(data, dict):
        raise ConfigError("expected a mapping at the top level", source=str(path))
    try:
        config = ServiceConfig.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"])
        if err["type"] == "extra_forbidden":
            msg = f"unknown field{did_you_mean(field, list(ServiceConfig.model_fields))}"
        else:
            msg = err["msg"]
        raise ConfigError(msg, source=str(path), field=field) from None
    for p in config.allowed_paths:
        if not Path(p).expanduser().is_absolute():
            raise ConfigError(
                f"allowed_paths entries must be absolute (or start with ~), got {p!r}",
                source=str(path),
                field="allowed_paths",
            )
    return config


class Policy:
    """The checks, bound to one configuration."""

    def __init__(self, config: ServiceConfig):
        self.config = config
        self.roots = config.roots()

    # -- paths -------------------------------------------------------------------------------

    def allowed_path(self, raw: str, *, field: str) -> Path:
        """`raw` as a resolved absolute path under an allowed root; Forbidden otherwise."""
        where = (
            "allowed_paths in the service's config.yaml is empty"
            if not self.roots
            else "allowed roots: " + ", ".join(str(r) for r in self.roots)
        )
        try:
            p = Path(raw).expanduser()
        except (RuntimeError, ValueError):  # ~user with no such user or home
            raise Forbidden(f"{raw!r}: cannot resolve the home folder", field=field) from None
        if "\x00" in raw:
            raise Forbidden(f"{raw!r}: a path cannot hold a NUL character", field=field)
        if not p.is_absolute():
            raise Forbidden(
                f"{raw!r} is not an absolute path; the service resolves files only as absolute "
                f"paths under its allowed roots ({where})",
                field=field,
            )
        real = Path(os.path.realpath(p))
        if not any(real == r or real.is_relative_to(r) for r in self.roots):
            raise Forbidden(
                f"{raw!r} (resolved {real}) is outside the folders this service may read; {where}",
                field=field,
            )
        return real

    def check_model(self, model: str, *, field: str) -> str:
        """A built-in card name as is; a folder resolved under the allowed roots; anything
        else is an unknown card name (UnknownNameError lists the built-in ones)."""
        from autotune.models.builtin import BUILTIN_CARDS

        if model in BUILTIN_CARDS:
            return model
        if looks_like_path(model):
            return str(self.allowed_path(model, field=field))
        raise UnknownNameError("model card", model, BUILTIN_CARDS)

    # -- a sweep spec ------------------------------------------------------------------------

    def check_spec(self, spec: Any, *, workers: int | None = None) -> None:
        """Refuse a SweepSpec that names a file, engine, binary, variable or host the local
        configuration does not allow (Forbidden, naming the field)."""
        cfg = self.config
        t = spec.target
        if t.engine not in cfg.allowed_engines:
            raise Forbidden(
                f"engine {t.engine!r} is not allowed by this service; allowed: "
                f"{', '.join(cfg.allowed_engines) or 'none'}",
                field="target.engine",
            )
        self.check_model(t.model, field="target.model")
        if t.model_path is not None:
            self.allowed_path(t.model_path, field="target.model_path")
        if spec.space.file != "builtin":
            self.allowed_path(spec.space.file, field="space.file")
        for field, value in _strings(spec.space.fixed, "space.fixed"):
            self._value(value, field)
        for field, value in _strings(spec.space.overrides, "space.overrides"):
            self._value(value, field)
        eng = spec.engine
        if eng.launcher is not None and list(eng.launcher) not in cfg.allowed_launchers:
            raise Forbidden(
                "a submitted spec cannot choose the program that starts the engine (the adapter "
                "or the simulator does); remove engine.launcher, or have the owner list this "
                "exact argv under allowed_launchers in the service's config.yaml",
                field="engine.launcher",
            )
        for name, value in eng.env.items():
            self._env(name, value)
        if eng.host not in cfg.allowed_engine_hosts:
            raise Forbidden(
                f"engines may bind only to {', '.join(cfg.allowed_engine_hosts)}; got "
                f"{eng.host!r}",
                field="engine.host",
            )
        ex = spec.execution
        if ex.ray_address is not None and ex.ray_address not in cfg.allowed_ray_addresses:
            allowed = ", ".join(cfg.allowed_ray_addresses) or "none (a local Ray only)"
            raise Forbidden(
                f"Ray cluster {ex.ray_address!r} is not allowed; allowed: {allowed}",
                field="execution.ray_address",
            )
        self.check_workers(ex.workers, field="execution.workers")
        self.check_workers(workers, field="workers")

    def check_workers(self, workers: int | None, *, field: str) -> None:
        if workers is not None and workers > self.config.max_workers:
            raise Forbidden(
                f"at most {self.config.max_workers} trials at once (max_workers in the "
                f"service's config.yaml); got {workers}",
                field=field,
            )

    def _env(self, name: str, value: str) -> None:
        field = f"engine.env.{name}"
        upper = name.upper()
        if upper in _ENV_ALWAYS_REFUSED or upper.startswith(_ENV_ALWAYS_REFUSED_PREFIXES):
            raise Forbidden(
                "this variable decides what the engine loads or executes; a submitted spec "
                "cannot set it",
                field=field,
            )
        if not name.startswith(tuple(self.config.allowed_env_prefixes)):
            raise Forbidden(
                "environment variables must start with one of "
                f"{', '.join(self.config.allowed_env_prefixes) or '(none allowed)'} "
                "(allowed_env_prefixes in the service's config.yaml)",
                field=field,
            )
        self._value(value, field)

    def _value(self, value: str, field: str) -> None:
        """A flag or env value that looks like a path must be an allowed absolute path; JSON
        text is looked into."""
        text = value.strip()
        if text[:1] in ("{", "["):
            try:
                parsed = json.loads(text)
            except ValueError:
                parsed = None
            if parsed is not None:
                for sub_field, sub in _strings(parsed, field):
                    self._value(sub, sub_field)
                return
        if looks_like_path(text):
            self.allowed_path(text, field=field)


def looks_like_path(text: str) -> bool:
    """Absolute, home-relative, dot-relative, or with a separator: the engine would open it."""
    return text.startswith(("/", "~", ".")) or "/" in text or "\\" in text


def _strings(node: Any, field: str, depth: int = 0) -> Iterator[tuple[str, str]]:
    """Every string inside a parsed mapping/list, with its dotted field path (keys included:
    a choice list may be keyed by value)."""
    if depth > 32:
        raise Forbidden("nested deeper than 32 levels", field=field)
    if isinstance(node, str):
        yield field, node
    elif isinstance(node, dict):
        for k, v in node.items():
            yield from _strings(v, f"{field}.{k}", depth + 1)
    elif isinstance(node, list | tuple):
        for i, v in enumerate(node):
            yield from _strings(v, f"{field}[{i}]", depth + 1)
