"""The proof that an engine release finds installed files: its own lookup function, the source
taken from the installed module and executed with that module's path as `__file__` and minimal
stand-ins for what it calls ("engine-source"); where that source cannot be run, its path
computation reproduced from the catalog ("catalog").
"""

from __future__ import annotations

import ast
import builtins
import json
import os
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.engines.kernel_facts import KernelFacts
from autotune.engines.kernel_source import free_names, unconditional_function
from kernels_tuning import output
from kernels_tuning.tuned_files import TunedFile


@dataclass(frozen=True)
class FileProof:
    name: str
    found: bool
    path: str | None  # the file the lookup opened (engine-source) or computed (catalog)
    m_keys: tuple[int, ...] = ()
    changed: tuple[int, ...] = ()  # entries the engine's lookup altered (its BLOCK_SIZE_K clamp)
    detail: str = ""


@dataclass(frozen=True)
class Proof:
    method: str  # "engine-source" | "catalog"
    note: str
    files: tuple[FileProof, ...]

    @property
    def ok(self) -> bool:
        return all(f.found for f in self.files)

    def to_json(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "note": self.note,
            "ok": self.ok,
            "files": [
                {
                    "name": f.name,
                    "found": f.found,
                    "path": f.path,
                    "m_keys": list(f.m_keys),
                    "changed": list(f.changed),
                    "detail": f.detail,
                }
                for f in self.files
            ],
        }


class _Log:
    """Stand-in for the engine's logger: keeps what its lookup says."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def __getattr__(self, level: str) -> Callable[..., None]:
        def log(msg: object, *args: object, **_: object) -> None:
            text = str(msg) % args if args else str(msg)
            self.lines.append(text)

        return log


def _stand_ins(torch_name: str, file_name: str, log: _Log, opened: list[str]) -> dict[str, Any]:
    """The lookup's free names that are not builtins, replaced by minimal stand-ins: the device
    getters answer torch's name of the file's GPU (the lookup turns it into the file-name form
    itself; vLLM's get_device_name_as_file_name, defined elsewhere, answers that form), torch
    says it is not compiling, CUDA it is."""
    import functools
    import logging
    import re
    import typing

    def dev(*_: object, **__: object) -> str:
        return torch_name

    def dev_file(*_: object, **__: object) -> str:
        return file_name

    def tracked_open(file: Any, *args: Any, **kwargs: Any) -> Any:
        opened.append(os.fspath(file))
        return builtins.open(file, *args, **kwargs)

    platform = types.SimpleNamespace(
        get_device_name=dev, is_rocm=lambda: False, is_cuda=lambda: True, is_xpu=lambda: False
    )
    out: dict[str, Any] = {
        "os": os,
        "json": json,
        "functools": functools,
        "logging": logging,
        "re": re,
        "torch": types.SimpleNamespace(_dynamo=types.SimpleNamespace(is_compiling=lambda: False)),
        "get_device_name": dev,
        "get_device_name_as_file_name": dev_file,
        "current_platform": platform,
        "logger": log,
        "log_info_on_rank0": lambda _logger, msg, *a, **k: log.info(msg),
        "_is_cuda": True,
        "_is_hip": False,
        "_is_npu": False,
        "_is_xpu": False,
        "_is_cpu": False,
        "open": tracked_open,
    }
    out.update({n: getattr(typing, n) for n in ("Any", "Dict", "List", "Optional", "Tuple")})
    return out


def engine_lookup(
    source: str, module_path: Path, facts: KernelFacts
) -> tuple[Callable[[str, str], Callable[..., Any]] | None, str]:
    """(factory: (torch device name, file-name form) -> the engine's lookup function, note),
    or (None, why not)."""
    fn = unconditional_function(source, facts.lookup_function)
    if fn is None:
        return None, f"{module_path} has no top-level {facts.lookup_function}"
    free = free_names(fn) - set(dir(builtins)) - {"__file__"}
    uncovered = sorted(free - set(_stand_ins("", "", _Log(), [])))
    if uncovered:
        return None, f"its {facts.lookup_function} uses {uncovered}, which have no stand-in here"
    code = compile(ast.Module(body=[fn], type_ignores=[]), str(module_path), "exec")

    def make(torch_name: str, file_name: str) -> Callable[..., Any]:
        opened: list[str] = []
        ns: dict[str, Any] = {
            "__file__": str(module_path),
            "__name__": facts.lookup_module[: -len(".py")].replace("/", "."),
            "__builtins__": builtins,
            **_stand_ins(torch_name, file_name, _Log(), opened),
        }
        exec(code, ns)
        func: Callable[..., Any] = ns[fn.name]
        func.opened = opened  # type: ignore[attr-defined]
        return func

    return make, f"{facts.lookup_function} from {module_path}, run with __file__ = that path"


def prove(
    facts: KernelFacts,
    module_path: Path,
    module_source: str | None,
    files: Sequence[TunedFile],
    note: str = "",
) -> Proof:
    """Ask the release's lookup (as if its module were at module_path) for each file."""
    make, why = (None, "the lookup module's source is not available")
    if module_source is not None:
        make, why = engine_lookup(module_source, module_path, facts)
    results: list[FileProof] = []
    for t in files:
        parsed = facts.parse_file_name(t.name)
        assert parsed is not None  # built from the same template
        n, k, dev, block = parsed
        want = {int(m): dict(c) for m, c in t.table.items()}
        if make is None:
            path = module_path.parent / "configs" / t.name
            got = output.read_config_file(path) if path.is_file() else None
            results.append(_compare(t.name, want, got, str(path)))
            continue
        raw = t.gpu_name if t.gpu_name and facts.device_file_name(t.gpu_name) == dev else dev
        func = make(raw, dev)
        try:
            got = func(n, k, block[0], block[1])
        except Exception as exc:  # the engine's code failed: report, do not hide it
            results.append(FileProof(t.name, False, None, detail=f"lookup raised {exc!r}"))
            continue
        opened = func.opened  # type: ignore[attr-defined]
        results.append(_compare(t.name, want, got, opened[-1] if opened else None))
    if make is None:
        method = "catalog"
        text = f"path computed from the catalog: <module dir>/configs/<name> ({why})"
    else:
        method, text = "engine-source", why
    return Proof(method, "; ".join(x for x in (note, text) if x), tuple(results))


def _compare(
    name: str,
    want: Mapping[int, Mapping[str, object]],
    got: Mapping[Any, Any] | None,
    path: str | None,
) -> FileProof:
    if not got:
        return FileProof(name, False, path, detail="the lookup returned no table")
    keys = tuple(sorted(int(m) for m in got))
    if set(keys) != set(want):
        return FileProof(
            name, False, path, keys, detail=f"the lookup returned M {list(keys)}, not the file's"
        )
    changed = tuple(m for m in keys if dict(got[m]) != dict(want[m]))
    detail = f"the engine's lookup changed M {list(changed)}" if changed else ""
    return FileProof(name, True, path, keys, changed, detail)
