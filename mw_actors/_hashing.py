"""Hashes of inputs and artifacts, computed without torch.

A safetensors file's bytes depend on its header's key order, which varies
across processes once the header holds two or more metadata keys. So every
artifact gets two digests: ``file_sha256`` (the bytes as stored) and
``payload_sha256`` (the tensors: names, dtypes, shapes and data, in name
order, independent of the header's layout and of metadata).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path

from mw_errors import ConfigError, IntegrityError

from ._tensorfile import read_header

__all__ = ["PAYLOAD_DIGEST_VERSION", "file_sha256", "manifest", "payload_sha256", "verify_file"]

PAYLOAD_DIGEST_VERSION = 1
_CHUNK = 1 << 20


def file_sha256(path: str | os.PathLike[str]) -> str:
    """The SHA-256 of a file's bytes, read in large chunks."""
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def payload_sha256(path: str | os.PathLike[str]) -> str:
    """The SHA-256 of a safetensors file's tensors, independent of header order and metadata.

    Raises:
        IntegrityError: the file is not a well-formed safetensors file.
    """
    path = Path(path)
    digest = hashlib.sha256(f"mw-payload-v{PAYLOAD_DIGEST_VERSION}\n".encode())
    with open(path, "rb") as handle:
        header, data_start = read_header(handle, path)
        end_of_file = os.fstat(handle.fileno()).st_size
        for name in sorted(k for k in header if k != "__metadata__"):
            entry = header[name]
            try:
                dtype = entry["dtype"]  # type: ignore[index]
                shape = list(entry["shape"])  # type: ignore[index]
                begin, end = (int(x) for x in entry["data_offsets"])  # type: ignore[index]
            except (KeyError, TypeError, ValueError) as exc:
                raise IntegrityError(f"{path}: tensor {name!r} has a malformed entry") from exc
            if not 0 <= begin <= end or data_start + end > end_of_file:
                raise IntegrityError(f"{path}: tensor {name!r} lies outside the file")
            digest.update(json.dumps([name, dtype, shape, end - begin]).encode() + b"\n")
            handle.seek(data_start + begin)
            remaining = end - begin
            while remaining:
                chunk = handle.read(min(_CHUNK, remaining))
                if not chunk:
                    raise IntegrityError(f"{path}: tensor {name!r} is cut short")
                digest.update(chunk)
                remaining -= len(chunk)
    return digest.hexdigest()


def verify_file(path: Path, expected: str, *, what: str) -> None:
    """Check that ``path`` hashes to ``expected``.

    Raises:
        ConfigError: the file is missing.
        IntegrityError: it hashes to something else (named in the message).
    """
    if not path.is_file():
        raise ConfigError(f"{what} {path} is missing", hint="restore the file or fix its path")
    actual = file_sha256(path)
    if actual != expected:
        raise IntegrityError(
            f"{what} {path} was changed: sha256 {actual[:16]}... but {expected[:16]}... is pinned",
            hint="restore the original file, or re-pin its hash if the change is intended",
        )


def manifest(files: Mapping[str, Path]) -> dict[str, str]:
    """``{name: sha256}`` for each file."""
    return {name: file_sha256(path) for name, path in sorted(files.items())}
