"""What a request may name: the local configuration (STATE/config.yaml) and the checks that
keep a submitted spec from running anything the owner did not allow.

A spec reaches engines through three doors, and each is closed unless the config opens it:
files (model folders, checkpoints, space files, path-valued flags and env values) must lie
under `allowed_paths` after symlinks are resolved, and never in the service's own state folder
(token, config, database), whatever the roots; a relative value is what the job would open in
its own working folder, so it is resolved there first. A flag or variable is path-valued by
its name (`path_valued`) or by its value (`looks_like_path`). The engine must be in
`allowed_engines` and
its binary comes from the adapter (or the simulator): `engine.launcher` is refused unless it is
exactly one of `allowed_launchers`; environment variables must start with one of
`allowed_env_prefixes` and never name the loader or interpreter (LD_*, PYTHON*, PATH, ...).
The engine binds only to `allowed_engine_hosts`, and joins only `allowed_ray_addresses`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from autotune.errors import ConfigError, UnknownNameError, did_you_mean
from autotune.service.errors import Forbidden

log = logging.getLogger(__name__)

DEFAULT_BODY_LIMIT = 1024 * 1024

# Flag and variable names whose value is a file or folder although it may carry no `/`
# (`chat_template: token` opens ./token). Matched on the lower-cased name, `-` as `_`, so the
# same rule covers SGLang/vLLM fields, llama-server options and environment variables.
PATH_SUFFIXES = (
    "_path",
    "_paths",
    "_dir",
    "_dirs",
    "_file",
    "_files",
    "_folder",
    "_template",
    "_home",
    "_root",
    "_certs",
    "_certfile",
    "_keyfile",
    "_socket",
)
PATH_NAMES = frozenset(
    {
        "model",  # vLLM --model, llama-server -m
        "tokenizer",
        "config",  # SGLang/vLLM --config: a YAML file
        "mmproj",
        "lora",
        "model_draft",
        "spec_draft_model",
        "model_vocoder",
        "path",  # llama-server --path: static files it serves
        "deepep_config",  # JSON text or a file
        "hicache_storage_backend_extra_config",  # JSON text or a file
    }
)
# Matching names whose value is not a file: a count, a switch, a URL prefix, a name in a hub.
NOT_PATH_NAMES = frozenset(
    {
        "mamba_max_states_per_path",
        "export_metrics_to_file",
        "trust_request_chat_template",
        "fastapi_root_path",
        "root_path",
        "hf_file",
    }
)

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
# cards and the built-in search space only. The service's own state folder never counts.
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

# Whether requests may install an engine kernel job's files into the engine's own config
# folder (POST /v1/kernels/NAME/install without dry_run: it writes into that environment's
# site-packages). A dry run is always allowed.
allow_kernel_install: false

# Interpreters of engine environments that kernel jobs may read the engine from (engine_python
# of POST /v1/kernels), e.g. /opt/sglang/bin/python. The interpreter of an allowed_launchers
# entry that runs a module ([PYTHON, -m, ...]) is allowed too.
allowed_engine_pythons: []

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
    allow_kernel_install: bool = False
    allowed_engine_pythons: list[str] = Field(default_factory=list)
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
    """The checks, bound to one configuration. `private`: folders and files never readable
    through a request, even under an allowed root (the state folder, the database)."""

    def __init__(self, config: ServiceConfig, *, private: Sequence[Path] = ()):
        self.config = config
        self.roots = config.roots()
        self.private = [Path(os.path.realpath(p)) for p in private]

    # -- paths -------------------------------------------------------------------------------

    def allowed_path(self, raw: str, *, field: str, base: Path | None = None) -> Path:
        """`raw` as a resolved absolute path under an allowed root and outside the private
        ones; Forbidden otherwise. A relative `raw` is taken in `base` (the job's working
        folder), or refused without one. The message names the value as sent and never the
        resolved path or the roots (a client must not learn symlink targets or the server's
        layout); the service's log has them."""
        try:
            p = Path(raw).expanduser()
        except (RuntimeError, ValueError):  # ~user with no such user or home
            raise Forbidden(f"{raw!r}: cannot resolve the home folder", field=field) from None
        if "\x00" in raw:
            raise Forbidden(f"{raw!r}: a path cannot hold a NUL character", field=field)
        relative = not p.is_absolute()
        if relative and base is None:
            raise Forbidden(
                f"{raw!r} is not an absolute path; the service reads files only by absolute "
                "path, under the folders its owner allowed (allowed_paths in its config.yaml)",
                field=field,
            )
        real = Path(os.path.realpath(base / p if relative and base is not None else p))
        private = any(_within(real, q) for q in self.private)
        if not private and any(real == r or real.is_relative_to(r) for r in self.roots):
            return real
        log.info(
            "refused %s=%r: resolved %s (%s); allowed roots %s",
            field,
            raw,
            real,
            "in the state folder" if private else "outside the allowed roots",
            [str(r) for r in self.roots],
        )
        if relative:
            raise Forbidden(
                f"{raw!r} is a relative path, which the job would resolve from its own "
                "working folder (not readable through a request); give an absolute path under "
                "a folder this service may read (allowed_paths in its config.yaml)",
                field=field,
            )
        if not self.roots:
            raise Forbidden(
                f"{raw!r}: this service reads no files (its allowed_paths is empty); use a "
                "built-in model card and the built-in search space, or ask the service's "
                "owner to add the folder to allowed_paths in its config.yaml",
                field=field,
            )
        raise Forbidden(
            f"{raw!r} is outside the folders this service may read (the service's own state "
            "folder never counts); give a path under them, or ask the service's owner to add "
            "its folder to allowed_paths in its config.yaml",
            field=field,
        )

    def check_model(self, model: str, *, field: str, base: Path | None = None) -> str:
        """A built-in card name as is; a folder resolved under the allowed roots; anything
        else is an unknown card name (UnknownNameError lists the built-in ones)."""
        from autotune.models.builtin import BUILTIN_CARDS

        if model in BUILTIN_CARDS:
            return model
        if looks_like_path(model):
            folder = self.allowed_path(model, field=field, base=base)
            # The loaders open the folder's files by name (config.json, the safetensors index,
            # the tokenizer): a link among them to a file outside the roots is refused too.
            with contextlib.suppress(OSError):
                for child in folder.iterdir() if folder.is_dir() else ():
                    if child.is_symlink():
                        self.allowed_path(str(child), field=field)
            return str(folder)
        raise UnknownNameError("model card", model, BUILTIN_CARDS)

    # -- a sweep spec ------------------------------------------------------------------------

    def check_spec(
        self, spec: Any, *, workers: int | None = None, base: Path | None = None
    ) -> None:
        """Refuse a SweepSpec that names a file, engine, binary, variable or host the local
        configuration does not allow (Forbidden, naming the field). `base`: the job's working
        folder, where relative paths are resolved (None: they are refused)."""
        cfg = self.config
        t = spec.target
        self.check_engine(t.engine, field="target.engine")
        self.check_model(t.model, field="target.model", base=base)
        if t.model_path is not None:
            self.allowed_path(t.model_path, field="target.model_path", base=base)
        if spec.space.file != "builtin":
            self.allowed_path(spec.space.file, field="space.file", base=base)
        for flag, node in spec.space.fixed.items():
            self._walk(node, f"space.fixed.{flag}", path_valued(str(flag)), base)
        for flag, node in spec.space.overrides.items():
            field = f"space.overrides.{flag}"
            if isinstance(node, dict):  # a parameter: only its choices/default are flag values
                for key, sub in node.items():
                    named = path_valued(str(flag)) if key in ("choices", "default") else False
                    self._walk(sub, f"{field}.{key}", named, base)
            else:
                self._walk(node, field, path_valued(str(flag)), base)
        eng = spec.engine
        if eng.launcher is not None and list(eng.launcher) not in cfg.allowed_launchers:
            raise Forbidden(
                "a submitted spec cannot choose the program that starts the engine (the adapter "
                "or the simulator does); remove engine.launcher, or have the owner list this "
                "exact argv under allowed_launchers in the service's config.yaml",
                field="engine.launcher",
            )
        for name, value in eng.env.items():
            self._env(name, value, base)
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

    def check_engine(self, engine: str, *, field: str) -> None:
        if engine not in self.config.allowed_engines:
            raise Forbidden(
                f"engine {engine!r} is not allowed by this service; allowed: "
                f"{', '.join(self.config.allowed_engines) or 'none'}",
                field=field,
            )

    # -- a kernel job ------------------------------------------------------------------------

    def check_kernel_engine(self, engine: str, python: str | None) -> None:
        """An engine kernel job reads `engine` from the service's own environment, or from
        `python`'s: an interpreter the owner named (allowed_engine_pythons) or one that runs an
        allowed launcher's module ([PYTHON, -m, ...])."""
        cfg = self.config
        self.check_engine(engine, field="engine")
        if python is None:
            return
        allowed = [*cfg.allowed_engine_pythons]
        allowed += [argv[0] for argv in cfg.allowed_launchers if argv[1:2] == ["-m"]]
        if python not in allowed:
            raise Forbidden(
                f"{python!r} is not an interpreter this service may run; allowed: "
                f"{', '.join(allowed) or 'none'} (allowed_engine_pythons, or the interpreter of "
                "an allowed_launchers entry, in the service's config.yaml)",
                field="engine_python",
            )

    def check_workers(self, workers: int | None, *, field: str) -> None:
        if workers is not None and workers > self.config.max_workers:
            raise Forbidden(
                f"at most {self.config.max_workers} trials at once (max_workers in the "
                f"service's config.yaml); got {workers}",
                field=field,
            )

    def _env(self, name: str, value: str, base: Path | None) -> None:
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
        self._value(value, field, path_valued(name), base)

    def _walk(self, node: Any, field: str, named: bool, base: Path | None, depth: int = 0) -> None:
        """Every string of a flag's value; `named`: the enclosing name is path-valued (a key
        inside a mapping decides for its own value, a list inherits)."""
        if depth > 32:
            raise Forbidden("nested deeper than 32 levels", field=field)
        if isinstance(node, str):
            self._value(node, field, named, base, depth)
        elif isinstance(node, dict):
            for k, v in node.items():
                self._walk(v, f"{field}.{k}", path_valued(str(k)), base, depth + 1)
        elif isinstance(node, list | tuple):
            for i, v in enumerate(node):
                self._walk(v, f"{field}[{i}]", named, base, depth + 1)

    def _value(
        self, value: str, field: str, named: bool, base: Path | None, depth: int = 0
    ) -> None:
        """A value of a path-valued name, or one that looks like a path, must be an allowed
        path (relative: in the job's folder); JSON text is looked into."""
        text = value.strip()
        if text[:1] in ("{", "["):
            try:
                parsed = json.loads(text)
            except ValueError:
                parsed = None
            if parsed is not None:
                self._walk(parsed, field, named, base, depth + 1)
                return
        if text and (named or looks_like_path(text)):
            self.allowed_path(text, field=field, base=base)


def path_valued(name: str) -> bool:
    """Whether a flag, field or environment variable named `name` takes a file or folder."""
    key = name.strip().lstrip("-").lower().replace("-", "_")
    if key in NOT_PATH_NAMES:
        return False
    return key in PATH_NAMES or key.endswith(PATH_SUFFIXES)


def _within(path: Path, private: Path) -> bool:
    """`path` is `private`, inside it, or an SQLite sidecar of it (NAME-wal, -shm, -journal)."""
    sidecars = {f"{private.name}-{s}" for s in ("wal", "shm", "journal")}
    return (
        path == private
        or path.is_relative_to(private)
        or (path.parent == private.parent and path.name in sidecars)
    )


def looks_like_path(text: str) -> bool:
    """Absolute, home-relative, dot-relative, or with a separator: the engine would open it."""
    return text.startswith(("/", "~", ".")) or "/" in text or "\\" in text
