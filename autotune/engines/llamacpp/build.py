"""Build llama.cpp's llama-server from the llama.cpp vendored in a pinned llama-cpp-python sdist
(PyPI is the only reachable source here) into a cache folder outside the repository.

`autotune engines build llama-server` runs it; so does `scripts/build-llama-server` (a thin
wrapper) and, on a machine with no environment yet, `python3 .../build.py` with the same flags:
this module needs only the standard library (no autotune import at module level).

The cache (`$AUTOTUNE_LLAMA_CACHE` or ~/.cache/autotune/llama-server, then
`<version>[-cuda]/{bin/llama-server,share/,stamp}`) is reused when its stamp matches (sdist
version + flavour + this recipe's flags), so a second run is instant. For a machine without
PyPI: `--slim-sdist OUT` downloads the sdist here and writes a copy without what the build never
reads (llama.cpp's docs, media and other vocab files: 77 MB -> about 15 MB); carry it over and
build there with `--sdist OUT`.

Env: AUTOTUNE_LLAMA_CACHE (cache root), AUTOTUNE_LLAMA_CUDA_ARCH (CMAKE_CUDA_ARCHITECTURES with
--cuda, default 90 for the H200), PIP (pip command, default `<this python> -m pip`).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Pinned: the adapter's flag table (autotune/engines/llamacpp/flags.py) is checked against this
# version's common/arg.cpp by tests/engines/test_llamacpp_flags.py.
PINNED_VERSION = "0.3.36"
CACHE_ENV = "AUTOTUNE_LLAMA_CACHE"
CUDA_ARCH_ENV = "AUTOTUNE_LLAMA_CUDA_ARCH"
DEFAULT_CUDA_ARCH = "90"
DEFAULT_JOBS = 2

# Source files kept next to the binary (share/): the vocab-only GGUF that gives the random test
# models a real tokenizer (autotune.testing.gguf_models), and the option/type tables the flag
# tests check the adapter against (tests/engines/test_llamacpp_flags.py).
SHARE_FILES = (
    "models/ggml-vocab-llama-spm.gguf",
    "common/arg.cpp",
    "common/speculative.cpp",
    # ggml-cpu's extra (repacking) buffer types and the loader's mapped range: the log parser's
    # REPACK_BUFFERS are checked against them (tests/engines/test_llamacpp_logs.py)
    "ggml/src/ggml-cpu/ggml-cpu.cpp",
    "ggml/src/ggml-cpu/amx/amx.cpp",
    "ggml/src/ggml-cpu/repack.cpp",
    "ggml/src/ggml-cpu/kleidiai/kleidiai.cpp",
    "ggml/src/ggml-cpu/spacemit/ime.cpp",
    "src/llama-model-loader.cpp",
)

# ggml adds a backend's folder only when its GGML_<NAME> option is on; this recipe builds CPU and
# CUDA, so a slim sdist drops the others (CUDA's sources stay: HIP and MUSA reuse them but are
# off too).
UNUSED_BACKENDS = (
    "cann",
    "et",
    "hexagon",
    "metal",
    "opencl",
    "openvino",
    "sycl",
    "virtgpu",
    "vulkan",
    "webgpu",
    "zdnn",
    "zendnn",
)


class BuildError(Exception):
    """The build cannot go on; exit_code 2 for a bad argument, 1 for a failed step."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def say(message: str) -> None:
    print(f"build-llama-server: {message}", file=sys.stderr, flush=True)


def default_cache_root() -> Path:
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else Path.home() / ".cache" / "autotune" / "llama-server"


@dataclass(frozen=True)
class Recipe:
    """What is built: the sdist version, CPU or CUDA, and the CMake flags (in the stamp)."""

    version: str = PINNED_VERSION
    cuda: bool = False
    cuda_arch: str = DEFAULT_CUDA_ARCH

    @property
    def flavour(self) -> str:
        return f"{self.version}-cuda" if self.cuda else self.version

    @property
    def cmake_flags(self) -> list[str]:
        flags = [
            "-DCMAKE_BUILD_TYPE=Release",
            "-DLLAMA_BUILD_SERVER=ON",
            "-DLLAMA_BUILD_TESTS=OFF",
            "-DLLAMA_BUILD_EXAMPLES=OFF",
            "-DLLAMA_CURL=OFF",
            "-DGGML_NATIVE=ON",
            "-DBUILD_SHARED_LIBS=OFF",
        ]
        if self.cuda:
            flags += ["-DGGML_CUDA=ON", f"-DCMAKE_CUDA_ARCHITECTURES={self.cuda_arch}"]
        return flags

    @property
    def stamp(self) -> str:
        return f"llama-cpp-python=={self.version} {' '.join(self.cmake_flags)}"

    def dest(self, cache_root: Path) -> Path:
        return cache_root / self.flavour

    def binary(self, cache_root: Path) -> Path:
        return self.dest(cache_root) / "bin" / "llama-server"


@dataclass(frozen=True)
class BuildResult:
    binary: Path
    version: str
    cuda: bool
    cached: bool  # True: the cache was current, nothing was compiled
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return {
            "binary": str(self.binary),
            "version": self.version,
            "cuda": self.cuda,
            "cached": self.cached,
            "seconds": round(self.seconds, 1),
        }


def pip_command() -> list[str]:
    env = os.environ.get("PIP")
    return shlex.split(env) if env else [sys.executable, "-m", "pip"]


def check_sdist(sdist: Path | str, version: str) -> Path:
    """A given sdist file must exist and be the version asked for."""
    path = Path(sdist)
    if not path.is_file():
        raise BuildError(f"--sdist {sdist}: no such file", 2)
    if path.name != f"llama_cpp_python-{version}.tar.gz":
        raise BuildError(
            f"--sdist {sdist}: expected llama_cpp_python-{version}.tar.gz "
            "(pass --version to match)",
            2,
        )
    return path.resolve()


def _run(argv: Sequence[str], what: str, cwd: Path | None = None) -> None:
    """Run a step with its output on stderr (stdout carries only the result)."""
    try:
        sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # stderr is not a file (captured): copy it
        done = subprocess.run(
            list(argv),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            check=False,
            text=True,
        )
        sys.stderr.write(done.stdout or "")
        returncode = done.returncode
    else:
        returncode = subprocess.run(list(argv), stdout=sys.stderr, cwd=cwd, check=False).returncode
    if returncode != 0:
        raise BuildError(f"{what} failed (exit {returncode}): {shlex.join(argv)}")


def fetch_sdist(work: Path, version: str, sdist: Path | None) -> Path:
    """Unpack the sdist (downloaded with pip unless given) under `work` -> its vendored
    llama.cpp folder."""
    if sdist is None:
        say(f"downloading llama-cpp-python=={version} sdist")
        _run(
            [
                *pip_command(),
                "download",
                "-q",
                "--no-deps",
                "--no-binary",
                ":all:",
                "-d",
                str(work / "sdist"),
                f"llama-cpp-python=={version}",
            ],
            "pip download",
        )
        found = sorted((work / "sdist").glob("llama_cpp_python-*.tar.gz"))
        if not found:
            raise BuildError("pip did not produce a llama_cpp_python sdist")
        sdist = found[0]
    _run(["tar", "-xzf", str(sdist), "-C", str(work)], f"unpacking {sdist}")
    srcs = sorted(work.glob("llama_cpp_python-*/vendor/llama.cpp"))
    if not srcs:
        raise BuildError(f"{sdist} has no llama_cpp_python-*/vendor/llama.cpp")
    return srcs[0]


def copy_share(src: Path, share: Path) -> None:
    share.mkdir(parents=True, exist_ok=True)
    for rel in SHARE_FILES:
        shutil.copy2(src / rel, share / Path(rel).name)


def share_complete(dest: Path) -> bool:
    return all((dest / "share" / Path(rel).name).is_file() for rel in SHARE_FILES)


def cached(recipe: Recipe, cache_root: Path) -> Path | None:
    """The cached binary when its stamp (written last) matches the recipe, else None."""
    binary = recipe.binary(cache_root)
    stamp = recipe.dest(cache_root) / "stamp"
    if not (binary.is_file() and os.access(binary, os.X_OK) and stamp.is_file()):
        return None
    return binary if stamp.read_text().rstrip("\n") == recipe.stamp else None


def check_tools(cuda: bool) -> None:
    for tool in ("cmake", "c++"):
        if shutil.which(tool) is None:
            raise BuildError(f"'{tool}' not found on PATH")
    if cuda and shutil.which("nvcc") is None:
        raise BuildError("--cuda needs nvcc on PATH (CUDA toolkit)")


def compile_server(src: Path, build_dir: Path, recipe: Recipe, jobs: int) -> Path:
    """Configure and build the llama-server target -> the built binary (under build_dir)."""
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    say(f"configuring ({recipe.flavour})")
    _run(
        ["cmake", "-S", str(src), "-B", str(build_dir), *generator, *recipe.cmake_flags],
        "cmake configure",
    )
    say(f"building llama-server with {jobs} jobs")
    _run(
        ["cmake", "--build", str(build_dir), "-j", str(jobs), "--target", "llama-server"],
        "cmake build",
    )
    return build_dir / "bin" / "llama-server"


def _tmp_parent() -> str | None:
    return os.environ.get("TMPDIR") or None


def build_llama_server(
    *,
    version: str = PINNED_VERSION,
    cuda: bool = False,
    cache_dir: Path | str | None = None,
    jobs: int = DEFAULT_JOBS,
    force: bool = False,
    sdist: Path | str | None = None,
    cuda_arch: str | None = None,
) -> BuildResult:
    """Build (or reuse the current cached build of) llama-server -> where it is.

    Progress goes to stderr. The new build is installed atomically: a half-copied cache never
    looks valid (its stamp is written last)."""
    if jobs < 1:
        raise BuildError(f"--jobs must be a positive integer, got {jobs}", 2)
    sdist_path = check_sdist(sdist, version) if sdist is not None else None
    recipe = Recipe(version, cuda, cuda_arch or os.environ.get(CUDA_ARCH_ENV) or DEFAULT_CUDA_ARCH)
    root = Path(cache_dir) if cache_dir is not None else default_cache_root()
    dest = recipe.dest(root)
    t0 = time.monotonic()
    found = None if force else cached(recipe, root)
    if found is not None:
        if not share_complete(dest):  # a cache from an older recipe: add the files, no rebuild
            with tempfile.TemporaryDirectory(prefix="llama-server-share.", dir=_tmp_parent()) as w:
                copy_share(fetch_sdist(Path(w), version, sdist_path), dest / "share")
        say(f"reusing cached {found}")
        return BuildResult(found, version, cuda, True, time.monotonic() - t0)

    check_tools(cuda)
    with tempfile.TemporaryDirectory(prefix="llama-server-build.", dir=_tmp_parent()) as w:
        work = Path(w)
        src = fetch_sdist(work, version, sdist_path)
        if not (src / "tools" / "server" / "server.cpp").is_file():
            raise BuildError(f"{src} has no tools/server")
        built = compile_server(src, work / "build", recipe, jobs)
        root.mkdir(parents=True, exist_ok=True)
        tmp_dest = Path(tempfile.mkdtemp(prefix=f".tmp-{recipe.flavour}.", dir=root))
        try:
            tmp_dest.chmod(0o755)
            (tmp_dest / "bin").mkdir()
            shutil.copy2(built, tmp_dest / "bin" / "llama-server")
            copy_share(src, tmp_dest / "share")
            (tmp_dest / "stamp").write_text(recipe.stamp + "\n")  # last: only then is it valid
            if dest.exists():
                shutil.rmtree(dest)
            tmp_dest.rename(dest)
        except BaseException:
            shutil.rmtree(tmp_dest, ignore_errors=True)
            raise
    seconds = time.monotonic() - t0
    say(f"built in {seconds:.0f} s")
    return BuildResult(recipe.binary(root), version, cuda, False, seconds)


def slim_sdist(
    out: Path | str, *, version: str = PINNED_VERSION, sdist: Path | str | None = None
) -> Path:
    """Write a copy of the sdist without what the build never reads -> `out`. Keeps the layout
    (llama_cpp_python-X/vendor/llama.cpp/...) so `--sdist` reads it like the original."""
    sdist_path = check_sdist(sdist, version) if sdist is not None else None
    out = Path(out)
    with tempfile.TemporaryDirectory(prefix="llama-server-slim.", dir=_tmp_parent()) as w:
        work = Path(w)
        src = fetch_sdist(work, version, sdist_path)
        keep = work / "keep"
        copy_share(src, keep)
        top = src.parent.parent
        for rel in ("docs", "media", "benches", ".git"):
            shutil.rmtree(src / rel, ignore_errors=True)
        for child in (src / "models").glob("*"):
            if child.is_dir():
                shutil.rmtree(child)
            else:
                child.unlink()
        shutil.rmtree(top / ".git", ignore_errors=True)
        for backend in UNUSED_BACKENDS:
            shutil.rmtree(src / "ggml" / "src" / f"ggml-{backend}", ignore_errors=True)
        for rel in SHARE_FILES:
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(keep / Path(rel).name), src / rel)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + ".tmp")
        _run(["tar", "-czf", str(tmp), "-C", str(work), top.name], "tar")
        tmp.replace(out)
    say(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB)")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """`python3 build.py [--cuda] [--version X.Y.Z] [--cache-dir DIR] [--jobs N] [--force]
    [--sdist FILE] [--slim-sdist OUT.tar.gz] [--json]`: the path (or JSON) on stdout."""
    parser = argparse.ArgumentParser(
        prog="build-llama-server", description=__doc__.split("\n\n")[0] if __doc__ else None
    )
    parser.add_argument("--cuda", action="store_true", help="CUDA build (nvcc needed)")
    parser.add_argument("--version", default=PINNED_VERSION, help="llama-cpp-python sdist")
    parser.add_argument("--cache-dir", type=Path, default=None, help="cache root")
    parser.add_argument("--jobs", "-j", type=int, default=DEFAULT_JOBS, help="build jobs")
    parser.add_argument("--force", action="store_true", help="rebuild although cached")
    parser.add_argument("--sdist", type=Path, default=None, help="a local sdist file")
    parser.add_argument("--slim-sdist", type=Path, default=None, help="write a slim sdist")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = parser.parse_args(argv)
    try:
        if args.slim_sdist is not None:
            path = slim_sdist(args.slim_sdist, version=args.version, sdist=args.sdist)
            print(json.dumps({"slim_sdist": str(path)}) if args.json else path)
            return 0
        res = build_llama_server(
            version=args.version,
            cuda=args.cuda,
            cache_dir=args.cache_dir,
            jobs=args.jobs,
            force=args.force,
            sdist=args.sdist,
        )
    except BuildError as exc:
        say(str(exc))
        return exc.exit_code
    print(json.dumps(res.to_json(), indent=2) if args.json else res.binary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
