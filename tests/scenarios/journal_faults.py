"""Faults of the filesystem under the journal, as a table: one FileOps method breaks.

Each scenario names the call that fails, on which call, and with which errno.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass
from pathlib import Path

import mw_actors as mw


@dataclass(frozen=True)
class FileFault:
    name: str
    method: str  # the FileOps method that fails
    on_call: int  # 1-based: which call of that method fails
    errno: int

    def files(self) -> mw.journal.FileOps:
        fault = self
        calls = {"n": 0}

        class Broken(mw.journal.FileOps):
            pass

        original = getattr(mw.journal.FileOps, fault.method)

        def broken(self: mw.journal.FileOps, *args: object) -> object:
            calls["n"] += 1
            if calls["n"] == fault.on_call:
                raise OSError(fault.errno, f"injected {fault.name}")
            return original(self, *args)

        setattr(Broken, fault.method, broken)
        return Broken()


FAULTS = [
    FileFault("fsync EIO", "fsync", 2, errno.EIO),
    FileFault("fsync ENOSPC", "fsync", 3, errno.ENOSPC),
    FileFault("write ENOSPC", "write", 3, errno.ENOSPC),
    FileFault("write EIO at first batch", "write", 1, errno.EIO),
    FileFault("directory fsync EIO at rotation", "fsync_dir", 2, errno.EIO),
    FileFault("open EMFILE at rotation", "open_append", 2, errno.EMFILE),
]


def segment_bytes_for(fault: FileFault) -> int:
    """Rotation faults need rotations; others use one segment."""
    return 4096 if fault.method in ("fsync_dir", "open_append") else 1 << 26


__all__ = ["FAULTS", "FileFault", "Path", "segment_bytes_for"]
