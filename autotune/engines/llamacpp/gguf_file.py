"""Read a GGUF file's header: metadata and the tensor table, without touching tensor data.

The `gguf` package's GGUFReader builds a numpy view per array item, which takes ~10 s for a
32K-token vocabulary and about a minute for a 250K one; the planner reads headers at every
sweep start, so this walks the same format (gguf-py's spec: magic, version, counts, key/value
pairs, tensor infos) with `struct` over a memory map and takes the type tables (value types,
ggml block sizes) from the `gguf` package.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.errors import ModelLoadError

_MAGIC = b"GGUF"
_SCALARS = {  # GGUFValueType -> struct code
    0: "B",  # UINT8
    1: "b",  # INT8
    2: "H",  # UINT16
    3: "h",  # INT16
    4: "I",  # UINT32
    5: "i",  # INT32
    6: "f",  # FLOAT32
    7: "?",  # BOOL
    10: "Q",  # UINT64
    11: "q",  # INT64
    12: "d",  # FLOAT64
}
_STRING, _ARRAY = 8, 9


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # ggml order (ne0, ne1, ...)
    ggml_type: int
    offset: int

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def n_bytes(self) -> int:
        from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

        block, size = GGML_QUANT_SIZES[GGMLQuantizationType(self.ggml_type)]
        return self.n_elements // block * size


@dataclass(frozen=True)
class Field:
    value: Any
    vtype: int
    item_type: int | None = None  # for arrays


@dataclass(frozen=True)
class GGUFHeader:
    version: int
    fields: dict[str, Field]
    tensors: list[TensorInfo]

    def get(self, key: str, default: Any = None) -> Any:
        f = self.fields.get(key)
        return default if f is None else f.value


class _Cursor:
    def __init__(self, buf: memoryview | bytes, source: str) -> None:
        self.buf, self.pos, self.source = buf, 0, source

    def unpack(self, code: str) -> Any:
        size = struct.calcsize("<" + code)
        if self.pos + size > len(self.buf):
            raise ModelLoadError(f"{self.source}: truncated GGUF header")
        (value,) = struct.unpack_from("<" + code, self.buf, self.pos)
        self.pos += size
        return value

    def string(self) -> str:
        n = self.unpack("Q")
        if self.pos + n > len(self.buf):
            raise ModelLoadError(f"{self.source}: truncated GGUF header")
        raw = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        return raw.decode("utf-8", errors="replace")

    def value(self, vtype: int) -> Any:
        if vtype in _SCALARS:
            return self.unpack(_SCALARS[vtype])
        if vtype == _STRING:
            return self.string()
        raise ModelLoadError(f"{self.source}: unknown GGUF value type {vtype}")


def read_header(path: str | Path) -> GGUFHeader:
    """Metadata and tensor table of a GGUF file (version 2 or 3, little-endian).

    Raises:
        ModelLoadError: not a GGUF file, or a truncated / malformed header.
    """
    source = str(path)
    try:
        with (
            open(path, "rb") as fh,
            mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm,
            memoryview(mm) as view,
        ):
            return _parse(view, source)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"{source}: cannot read the GGUF file ({exc})") from None


def _parse(buf: memoryview, source: str) -> GGUFHeader:
    if bytes(buf[:4]) != _MAGIC:
        raise ModelLoadError(f"{source}: not a GGUF file (no GGUF magic)")
    cur = _Cursor(buf, source)
    cur.pos = 4
    version = cur.unpack("I")
    if version not in (2, 3):
        raise ModelLoadError(f"{source}: GGUF version {version} is not supported (2 or 3)")
    n_tensors, n_kv = cur.unpack("Q"), cur.unpack("Q")
    fields: dict[str, Field] = {}
    try:
        for _ in range(n_kv):
            key = cur.string()
            vtype = cur.unpack("I")
            if vtype == _ARRAY:
                item = cur.unpack("I")
                count = cur.unpack("Q")
                if item == _STRING:
                    values: Any = [cur.string() for _ in range(count)]
                elif item in _SCALARS:
                    code = _SCALARS[item]
                    size = struct.calcsize("<" + code)
                    values = list(struct.unpack_from(f"<{count}{code}", buf, cur.pos))
                    cur.pos += size * count
                else:
                    raise ModelLoadError(f"{source}: {key}: arrays of type {item} unsupported")
                fields[key] = Field(values, vtype, item)
            else:
                fields[key] = Field(cur.value(vtype), vtype)
        tensors = []
        for _ in range(n_tensors):
            name = cur.string()
            n_dims = cur.unpack("I")
            shape = tuple(cur.unpack("Q") for _ in range(n_dims))
            tensors.append(TensorInfo(name, shape, cur.unpack("I"), cur.unpack("Q")))
    except struct.error as exc:
        raise ModelLoadError(f"{source}: malformed GGUF header ({exc})") from None
    return GGUFHeader(version=version, fields=fields, tensors=tensors)
