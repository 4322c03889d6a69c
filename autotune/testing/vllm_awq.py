"""vLLM's real `awq_triton.py` under a minimal stub `vllm` package, for the plugin's tests and
GPU benchmark where vLLM is not installed (benchmarks/vllm_awq_plugin.py,
tests/plugins/test_vllm_awq.py).

The module imports only `torch` and `from vllm.triton_utils import tl, triton`, so the stub holds
`vllm.triton_utils` (the real Triton) and empty parent packages. From a wheel it also takes
vLLM's `awq_gemm` call site out of `vllm/_custom_ops.py` (read with `ast`: the rest of that
module needs vLLM's compiled ops) and, whole, `vllm/envs.py` and `vllm/plugins/__init__.py`
(standard library only), so tests call the kernel and load plugins the way vLLM does.
"""

from __future__ import annotations

import ast
import importlib
import sys
import zipfile
from pathlib import Path
from types import ModuleType

from autotune.errors import ConfigError

AWQ_TRITON_PATH = "vllm/model_executor/layers/quantization/awq_triton.py"
AWQ_TRITON_MODULE = "vllm.model_executor.layers.quantization.awq_triton"
CUSTOM_OPS_PATH = "vllm/_custom_ops.py"
# Copied whole from a wheel: they import only the standard library (and each other).
WHOLE_FILES = ("vllm/envs.py", "vllm/plugins/__init__.py")
STUB_MARK = "__autotune_stub__"

_PACKAGES = (
    "vllm",
    "vllm/model_executor",
    "vllm/model_executor/layers",
    "vllm/model_executor/layers/quantization",
)
_TRITON_UTILS = "import triton\nimport triton.language as tl\n\n__all__ = ['tl', 'triton']\n"


def read_sources(source: Path) -> dict[str, str]:
    """Stub files by path: awq_triton.py, and from a wheel also _custom_ops.py (its `awq_gemm`
    alone) and WHOLE_FILES. `source` is a wheel or the awq_triton.py file itself."""
    if source.suffix == ".whl":
        with zipfile.ZipFile(source) as z:
            names = set(z.namelist())
            if AWQ_TRITON_PATH not in names:
                raise ConfigError(f"{source.name} has no {AWQ_TRITON_PATH}", field="--awq-triton")
            out = {p: z.read(p).decode() for p in (AWQ_TRITON_PATH, *WHOLE_FILES) if p in names}
            gemm = (
                function_source(z.read(CUSTOM_OPS_PATH).decode(), "awq_gemm")
                if CUSTOM_OPS_PATH in names
                else None
            )
        if gemm is not None and "vllm/envs.py" in out:
            out[CUSTOM_OPS_PATH] = "import torch\n\nimport vllm.envs as envs\n\n\n" + gemm + "\n"
        return out
    if not source.is_file():
        raise ConfigError(f"{source} does not exist", field="--awq-triton")
    awq = source.read_text()
    if "def awq_gemm_triton" not in awq:
        raise ConfigError(f"{source} defines no awq_gemm_triton", field="--awq-triton")
    return {AWQ_TRITON_PATH: awq}


def function_source(module_source: str, name: str) -> str | None:
    tree = ast.parse(module_source)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return ast.get_source_segment(module_source, node)
    return None


def write_stub(site: Path, files: dict[str, str]) -> None:
    """Write the stub package under `site`: empty parent packages, triton_utils, `files`."""
    for pkg in _PACKAGES:
        d = site / pkg
        d.mkdir(parents=True, exist_ok=True)
        init = "" if pkg != "vllm" else f"{STUB_MARK} = True\n"
        (d / "__init__.py").write_text(init)
    files = {"vllm/triton_utils/__init__.py": _TRITON_UTILS, **files}
    for rel, text in files.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text)


def load_awq_triton(source: Path, site: Path) -> ModuleType:
    """Write the stub under `site`, put `site` first on sys.path and import awq_triton from it.

    Refuses when another `vllm` (a real install) is already imported: the stub would shadow
    half of it."""
    loaded = sys.modules.get("vllm")
    if loaded is not None and not getattr(loaded, STUB_MARK, False):
        raise ConfigError(
            "a real vllm package is already imported; the stub would shadow it", field="vllm"
        )
    write_stub(site, read_sources(source))
    unload()
    sys.path.insert(0, str(site))
    importlib.invalidate_caches()
    return importlib.import_module(AWQ_TRITON_MODULE)


def unload() -> None:
    """Drop stub vllm modules from sys.modules (the next import reads the files again)."""
    for name in [n for n in sys.modules if n == "vllm" or n.startswith("vllm.")]:
        del sys.modules[name]
