"""Safetensors files read and written without torch: headers, and small float32 vectors.

MWM's checkpoint (``adapter.safetensors``) holds one short vector and one
metadata key. Importing torch to write it cost every learner process about 2 s
of CPU; this writes the same bytes as ``safetensors.torch.save_file`` (a test
compares them, byte for byte) with the standard library: an 8-byte little-endian
header length, the header as compact JSON (``__metadata__`` first, then each
tensor by name), padded with spaces to a multiple of 8, then the data.
It stands alone (the standard library only): the Codex learner copies it into
its sandbox beside ``worldmodel.py``.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import BinaryIO

try:
    from mw_errors import IntegrityError
except ImportError:  # in the Codex learner's sandbox, copied beside worldmodel.py alone
    IntegrityError = ValueError  # type: ignore[misc,assignment]

__all__ = ["read_f32", "read_header", "write_f32"]

_MAX_HEADER = 100 << 20


def read_header(handle: BinaryIO, path: Path) -> tuple[dict[str, object], int]:
    """A safetensors file's header, and where its data starts (``handle`` is left there).

    Raises:
        IntegrityError: not a safetensors file.
    """
    prefix = handle.read(8)
    if len(prefix) != 8:
        raise IntegrityError(f"{path} is not a safetensors file: it is shorter than 8 bytes")
    (size,) = struct.unpack("<Q", prefix)
    if size > _MAX_HEADER:
        raise IntegrityError(f"{path} is not a safetensors file: header of {size} bytes")
    try:
        header = json.loads(handle.read(size))
    except ValueError as exc:
        raise IntegrityError(f"{path} is not a safetensors file: bad header ({exc})") from exc
    if not isinstance(header, dict):
        raise IntegrityError(f"{path} is not a safetensors file: the header is not an object")
    return header, 8 + size


def write_f32(
    path: str | os.PathLike[str],
    tensors: Mapping[str, Sequence[float]],
    metadata: Mapping[str, str],
) -> None:
    """Write each named vector as float32 (1-D), and ``metadata``, to ``path``."""
    header: dict[str, object] = {"__metadata__": dict(metadata)} if metadata else {}
    data, offset = [], 0
    for name in sorted(tensors):
        values = tensors[name]
        chunk = struct.pack(f"<{len(values)}f", *values)
        header[name] = {"dtype": "F32", "shape": [len(values)],
                        "data_offsets": [offset, offset + len(chunk)]}  # fmt: skip
        data.append(chunk)
        offset += len(chunk)
    text = json.dumps(header, ensure_ascii=False, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    Path(path).write_bytes(struct.pack("<Q", len(text)) + text + b"".join(data))


def read_f32(path: str | os.PathLike[str]) -> tuple[dict[str, list[float]], dict[str, str]]:
    """The float32 vectors of a safetensors file, and its metadata.

    Raises:
        IntegrityError: not a safetensors file, or a tensor that is not a float32 vector.
    """
    path = Path(path)
    with open(path, "rb") as handle:
        header, _ = read_header(handle, path)  # the handle is at the data now
        body = handle.read()
    metadata = header.pop("__metadata__", None) or {}
    tensors = {}
    for name, entry in header.items():
        try:
            dtype, (length,) = entry["dtype"], entry["shape"]  # type: ignore[index]
            begin, end = (int(x) for x in entry["data_offsets"])  # type: ignore[index]
        except (KeyError, TypeError, ValueError) as exc:
            raise IntegrityError(f"{path}: tensor {name!r} is not a vector") from exc
        if dtype != "F32" or end - begin != 4 * length or not 0 <= begin <= end <= len(body):
            raise IntegrityError(f"{path}: tensor {name!r} is not {length} float32 values")
        tensors[name] = list(struct.unpack_from(f"<{length}f", body, begin))
    if not isinstance(metadata, dict):
        raise IntegrityError(f"{path}: its metadata is not an object")
    return tensors, {str(k): str(v) for k, v in metadata.items()}
