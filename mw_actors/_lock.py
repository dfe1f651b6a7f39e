"""One process per campaign: an advisory lock held for the campaign's life.

``<run>/campaign.lock`` holds the owner's pid and an ``flock``. The kernel
drops the lock when the process dies, even by ``kill -9``, so a held lock
means the campaign is running, and a free one that it is not.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from mw_errors import ConfigError

__all__ = ["LOCK_NAME", "campaign_lock", "is_locked", "refuse_if_locked"]

LOCK_NAME = "campaign.lock"


@contextmanager
def campaign_lock(run_dir: Path) -> Iterator[None]:
    """Hold ``run_dir``'s campaign lock.

    Raises:
        ConfigError: another process holds it (its pid is named).
    """
    path = run_dir / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            raise _running_elsewhere(run_dir, owner) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)


def _running_elsewhere(run_dir: Path, owner: str) -> ConfigError:
    return ConfigError(
        f"the campaign in {run_dir} is running in another process (pid {owner})",
        hint="wait for it, or stop it first; two processes never share a campaign",
    )


def refuse_if_locked(run_dir: Path) -> None:
    """Refuse a campaign another process runs, before its journal is read.

    Raises:
        ConfigError: a live process holds ``run_dir``'s lock (its pid is named).
    """
    if is_locked(run_dir):
        owner = (run_dir / LOCK_NAME).read_text(errors="replace").strip() or "unknown"
        raise _running_elsewhere(run_dir, owner)


def is_locked(run_dir: Path) -> bool:
    """Whether a live process holds ``run_dir``'s campaign lock."""
    path = run_dir / LOCK_NAME
    if not path.exists():
        return False
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False
