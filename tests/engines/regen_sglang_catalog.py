"""Regenerate autotune/engines/sglang/_catalog.py from SGLang's own argparse parsers.

Not a test: a maintenance tool, run by hand when a new SGLang release must be supported.
For every version it downloads the PyPI wheel (`pip download --no-deps`), extracts it, imports
`sglang.srt.server_args` in a subprocess (with a handful of optional heavy modules stubbed out),
builds the real parser with `ServerArgs.add_cli_args` and records every long option: kind,
nargs, type, choices, dest. Contiguous versions with identical rows are merged into ranges.

    python tests/engines/regen_sglang_catalog.py --work /tmp/sgw --deps /tmp/sgdeps

`--deps` must hold what server_args imports and this venv lacks (pip install --target DIR
"transformers==5.12.1" msgspec orjson pybase64 starlette aiohttp pyzmq fastapi dill
"openai==2.6.1" partial_json_parser; and with --no-deps: xgrammar "apache-tvm-ffi==0.1.11").
torch comes from the venv. Stubbed (never used by the parser): IPython, torchvision, sentencepiece.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

FIRST, LAST = 9, 23
STUBBED = ("IPython", "torchvision", "sentencepiece")
OUT = Path(__file__).resolve().parents[2] / "autotune" / "engines" / "sglang" / "_catalog.py"

# Runs inside the subprocess: argv[1] = extracted wheel root, argv[2] = deps dir.
DUMP = r"""
import argparse, importlib.abc, importlib.machinery, json, sys, types
from unittest import mock
sys.path.insert(0, sys.argv[1]); sys.path.append(sys.argv[2])
STUB = set(sys.argv[3].split(","))

class _Stub(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        value = mock.MagicMock(name=f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value

class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if fullname.split(".")[0] not in STUB:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
    def create_module(self, spec):
        module = _Stub(spec.name)
        module.__path__ = []
        module.__version__ = "0.26.0"  # transformers parses torchvision's version
        return module
    def exec_module(self, module):
        pass

sys.meta_path.insert(0, _Finder())
from sglang.srt.server_args import ServerArgs
parser = argparse.ArgumentParser()
ServerArgs.add_cli_args(parser)
rows = []
for a in parser._actions:
    rows.append(dict(
        opts=list(a.option_strings), dest=a.dest, nargs=str(a.nargs),
        kind=type(a).__name__, type=getattr(a.type, "__name__", None),
        # a set's order changes from run to run (--sampling-backend): sorted, so a rerun
        # writes the same catalog
        choices=(sorted(str(c) for c in a.choices) if isinstance(a.choices, (set, frozenset))
                 else [str(c) for c in a.choices]) if a.choices is not None else None,
    ))
json.dump(rows, sys.stdout)
"""

TYPES = {"int": "int", "human_readable_int": "int", "float": "float", "str": "str", None: "str"}


def _kind(action: str, nargs: str) -> str:
    if action == "BooleanOptionalAction":
        return "n"
    if nargs == "0":
        return "b"
    if nargs in ("+", "*"):
        return "l"
    if nargs == "?":
        return "o"
    return "v"


def dump_version(minor: int, work: Path, deps: Path) -> list[dict[str, object]]:
    version = f"0.5.{minor}"
    root = work / f"x{minor}"
    if not root.exists():
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "-q",
                f"sglang=={version}",
                "-d",
                str(work),
            ],
            check=True,
        )
        wheel = next(work.glob(f"sglang-{version}-*.whl"))
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(root, [n for n in zf.namelist() if n.startswith("sglang/")])
    out = subprocess.run(
        [sys.executable, "-c", DUMP, str(root), str(deps), ",".join(STUBBED)],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    rows: list[dict[str, object]] = json.loads(out.stdout)
    return rows


def rows_for(dump: list[dict[str, object]]) -> dict[str, str]:
    """flag -> 'kind|dest|type|choices' for one version."""
    table: dict[str, str] = {}
    for a in dump:
        action, nargs = str(a["kind"]), str(a["nargs"])
        if action == "_HelpAction":
            continue
        deprecated = "!" if action.startswith("Deprecated") else ""
        choices = a["choices"] or []
        assert isinstance(choices, list)
        for c in choices:
            assert " " not in c and "|" not in c, c
        for opt in a["opts"]:  # type: ignore[attr-defined]
            if not opt.startswith("--"):
                continue
            kind = _kind(action, nargs)
            if kind == "n" and opt.startswith("--no-"):
                kind = "b"
            typ = TYPES.get(a["type"], "other")  # type: ignore[arg-type]
            table[opt] = f"{kind}{deprecated}|{a['dest']}|{typ}|{' '.join(choices)}"
    return table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--work", type=Path, required=True, help="scratch dir for wheels")
    ap.add_argument("--deps", type=Path, required=True, help="pip --target dir of extra deps")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    per_version = {
        m: rows_for(dump_version(m, args.work, args.deps)) for m in range(FIRST, LAST + 1)
    }
    flags = sorted({f for t in per_version.values() for f in t})
    lines: list[str] = []
    for flag in flags:
        start, prev = None, None
        for m in [*range(FIRST, LAST + 1), None]:
            cur = per_version[m].get(flag) if m is not None else None
            if cur != prev:
                if prev is not None:
                    assert start is not None
                    end = (m if m is not None else LAST + 1) - 1
                    lines.append(f"{flag}|{start}-{end}|{prev}")
                start, prev = m, cur
    header = '''"""Every long option of SGLang's server parser, 0.5.9 to 0.5.23, by version range.

GENERATED by tests/engines/regen_sglang_catalog.py from each PyPI wheel's own argparse parser
(`ServerArgs.add_cli_args`); do not edit by hand. One row per flag and contiguous range of 0.5.N
minors with identical behaviour:

    flag|first-last|kind|dest|type|choices (space separated; empty = free value)

kind: v value, b switch without value (store_true / store_const), n BooleanOptional (`--x`, with
a `--no-x` row of kind b), l list (nargs + or *), o optional value (nargs ?); a trailing `!`
marks a deprecated alias (still accepted, warns). type: int, float, str, other.
"""

# ruff: noqa: E501

CATALOG = """\\
'''
    OUT.write_text(header + "\n".join(lines) + '\n"""\n')
    print(f"wrote {OUT} ({len(lines)} rows, {len(flags)} flags)")


if __name__ == "__main__":
    main()
