"""The filesystem seam under the journal.

Every write, fsync and directory sync of the journal goes through a
:class:`FileOps`, so fault tests can break exactly one of them (an fsync that
returns EIO, a short write) without patching the ``os`` module.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["FileOps"]


class FileOps:
    """Plain POSIX files. Subclass and override one method to inject a fault."""

    def open_append(self, path: Path) -> int:
        """Open for appending; a new file is private (0600): journals hold prompts and spend."""
        return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)

    def write(self, fd: int, data: bytes) -> None:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def fsync_dir(self, path: Path) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def truncate(self, path: Path, size: int) -> None:
        with open(path, "r+b") as handle:
            handle.truncate(size)
            handle.flush()
            os.fsync(handle.fileno())

    def close(self, fd: int) -> None:
        os.close(fd)
