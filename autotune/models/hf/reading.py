"""Reading a Hugging Face model folder: config.json, every *.safetensors header (no tensor
is loaded) and the shard index, with errors that say what is wrong with which file."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from autotune.errors import ModelLoadError
from autotune.models.hf.tensors import SAFETENSORS_DTYPE_BITS, Checkpoint, TensorInfo

# Header sizes the safetensors library accepts (it refuses larger ones as a DoS guard).
_MAX_HEADER = 100_000_000


def read_checkpoint(path: Path) -> Checkpoint:
    """Read config.json and every *.safetensors header of a model folder."""
    path = Path(path).expanduser()
    if not path.exists():
        raise ModelLoadError(f"{path}: no such model folder")
    if not path.is_dir():
        raise ModelLoadError(f"{path}: not a folder (expected a Hugging Face model folder)")
    config = _read_json(path / "config.json", what="model config")
    text = config.get("text_config")
    if text is not None and not isinstance(text, dict):
        raise ModelLoadError(
            f"{path / 'config.json'}: field 'text_config' must be an object, got "
            f"{type(text).__name__}"
        )
    files, tensors = _read_tensors(path)
    index = _read_index(path, files)
    hf_quant = None
    if (path / "hf_quant_config.json").is_file():
        hf_quant = _read_json(path / "hf_quant_config.json", what="modelopt quant config")
    return Checkpoint(
        path=path,
        config=config,
        tensors=tensors,
        files=files,
        index_weight_map=index,
        hf_quant_config=hf_quant,
        text_section=text,
    )


def _read_json(file: Path, *, what: str) -> dict[str, Any]:
    if not file.is_file():
        raise ModelLoadError(
            f"{file}: missing ({what}); a Hugging Face model folder holds config.json next to "
            f"its *.safetensors files"
        )
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ModelLoadError(
            f"{file}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelLoadError(f"{file}: cannot read: {exc}") from exc
    if not isinstance(data, dict):
        raise ModelLoadError(f"{file}: expected a JSON object, got {type(data).__name__}")
    return data


def _read_tensors(folder: Path) -> tuple[tuple[str, ...], dict[str, TensorInfo]]:
    from safetensors import SafetensorError, safe_open

    shards = sorted(p for p in folder.glob("*.safetensors") if p.is_file())
    if not shards:
        raise ModelLoadError(
            f"{folder}: no *.safetensors files (only safetensors checkpoints can be read; "
            f"convert .bin/.pt/.gguf weights first)"
        )
    tensors: dict[str, TensorInfo] = {}
    for shard in shards:
        try:
            with safe_open(str(shard), framework="numpy") as f:
                for name in f.keys():
                    sl = f.get_slice(name)
                    info = TensorInfo(
                        name=name,
                        dtype=str(sl.get_dtype()),
                        shape=tuple(int(d) for d in sl.get_shape()),
                        file=shard.name,
                    )
                    if info.dtype not in SAFETENSORS_DTYPE_BITS:
                        raise ModelLoadError(
                            f"{shard}: tensor {name!r} has dtype {info.dtype!r}, unknown to "
                            f"autotune (known: {', '.join(SAFETENSORS_DTYPE_BITS)})"
                        )
                    if name in tensors:
                        raise ModelLoadError(
                            f"{shard}: tensor {name!r} is also in {tensors[name].file}; a "
                            f"checkpoint must store each tensor once"
                        )
                    tensors[name] = info
        except SafetensorError as exc:
            raise ModelLoadError(f"{shard}: {_diagnose_header(shard, str(exc))}") from exc
        except OSError as exc:
            raise ModelLoadError(f"{shard}: cannot read: {exc}") from exc
    return tuple(p.name for p in shards), tensors


def _diagnose_header(shard: Path, library_message: str) -> str:
    """Say precisely what is wrong with a safetensors file the library refused: check the 8-byte
    little-endian header length against the file size, then the JSON header's data offsets."""
    size = shard.stat().st_size
    with shard.open("rb") as fh:
        prefix = fh.read(8)
        if len(prefix) < 8:
            return f"file is {size} bytes, too short for the 8-byte header length prefix"
        (n,) = struct.unpack("<Q", prefix)
        if n > _MAX_HEADER:
            return (
                f"header length prefix says {n} bytes (limit {_MAX_HEADER}): not a safetensors "
                f"file, or its first bytes are damaged"
            )
        if n > size - 8:
            return (
                f"header is truncated (declares {n} bytes, file has {size - 8} bytes after the "
                f"8-byte length prefix)"
            )
        raw = fh.read(n)
    try:
        header = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        return f"header is not valid JSON ({exc}); the file is corrupt"
    if isinstance(header, dict):
        ends = [
            int(v["data_offsets"][1])
            for k, v in header.items()
            if k != "__metadata__" and isinstance(v, dict) and "data_offsets" in v
        ]
        need = 8 + n + max(ends, default=0)
        if need > size:
            return (
                f"data is truncated (the header places tensors up to byte {need}, file has "
                f"{size} bytes); the download or copy is incomplete"
            )
    return f"invalid safetensors file ({library_message})"


def _read_index(folder: Path, files: tuple[str, ...]) -> dict[str, str] | None:
    """model.safetensors.index.json: every shard it names must be present."""
    index_file = folder / "model.safetensors.index.json"
    if not index_file.is_file():
        return None
    data = _read_json(index_file, what="shard index")
    wm = data.get("weight_map")
    if not isinstance(wm, dict):
        raise ModelLoadError(f"{index_file}: field 'weight_map' is missing or not an object")
    missing = sorted(set(map(str, wm.values())) - set(files))
    if missing:
        raise ModelLoadError(
            f"{index_file}: names shard(s) not in the folder: {', '.join(missing[:5])}"
            f"{' ...' if len(missing) > 5 else ''}; the download is incomplete"
        )
    return {str(k): str(v) for k, v in wm.items()}
