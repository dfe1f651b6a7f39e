"""The sandbox contract: a lifecycle, its records, and the limits it enforces.

Lifecycle: ``setup`` -> any number of ``exec`` / ``read_file`` / ``write_file``
/ ``export`` -> ``cleanup(interrupted)``. ``async with`` runs setup and
cleanup, with ``interrupted=True`` when the block raised or was cancelled.

Inside the sandbox the program sees:
- ``/scratch``: its one writable directory (the host's scratch directory), and
  its working directory;
- ``inputs/<name>`` under scratch (and ``/inputs/<name>``): each input
  directory, read-only;
- a read-only view of the system, no network, a cleared environment.

Programs that use paths relative to their working directory run the same on
every backend.
"""

from __future__ import annotations

import abc
import hashlib
import math
import os
import shutil
import signal
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import ClassVar, Literal

import anyio.to_thread
import msgspec

from mw_errors import (
    ConfigError,
    OutputLimitExceeded,
    ResourceLimitExceeded,
    SandboxEscape,
    SandboxTimeout,
)

from ._forward import Forward

__all__ = [
    "SCHEMA_VERSION",
    "Artifact",
    "ExecResult",
    "Limits",
    "Sandbox",
    "SandboxConfig",
]

SCHEMA_VERSION = 1
GiB = 1 << 30
MiB = 1 << 20

LimitName = Literal[
    "address_space", "cpu_seconds", "open_files", "processes", "file_size", "wall_time", "output"
]


class Limits(msgspec.Struct, frozen=True, kw_only=True):
    """Resource limits of one ``exec``. Every limit applies to the whole process tree."""

    address_space: int = 4 * GiB  # bytes of virtual memory per process
    cpu_seconds: int = 600  # CPU time per process
    open_files: int = 256
    processes: int = 128  # processes of the sandbox uid
    file_size: int = 1 * GiB  # largest file a process may write
    wall_seconds: float = 600.0  # the whole exec, killed with its process group after this
    output_bytes: int = 1 * MiB  # captured per stream; the rest is counted and reported

    def __post_init__(self) -> None:
        floors = {
            "address_space": 64 * MiB,
            "cpu_seconds": 1,
            "open_files": 16,
            "processes": 4,
            "file_size": 1,
            "output_bytes": 1,
        }
        ceiling = 2**62  # prlimit and the kernel take 64-bit limits
        for name, floor in floors.items():
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, int)
                or not floor <= value <= ceiling
            ):
                raise ConfigError(
                    f"limit {name}={value!r} makes no sense: it must be an integer from "
                    f"{floor} to 2**62",
                    hint="pass limits in bytes, seconds or counts, e.g. address_space=4294967296",
                )
        wall = self.wall_seconds
        if isinstance(wall, bool) or not isinstance(wall, int | float) or not 0 < wall < math.inf:
            raise ConfigError(f"limit wall_seconds={wall!r} makes no sense: use seconds > 0")

    def replace(self, **changes: object) -> Limits:
        return msgspec.structs.replace(self, **changes)


class ExecResult(msgspec.Struct, frozen=True, kw_only=True):
    """What one ``exec`` did. Hitting a limit is reported here, never silently."""

    exit_code: int | None  # None when killed by a signal
    signal: str | None
    timed_out: bool
    stdout: str
    stderr: str
    truncated: list[str]  # streams whose capture was cut: "stdout", "stderr"
    limits_hit: list[str]  # names of Limits fields the program ran into
    duration: float
    backend: str
    isolated: bool
    schema_version: int = SCHEMA_VERSION

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and not self.limits_hit

    @property
    def shell_status(self) -> int:
        """The status a shell reports for it: 124 timed out (as ``timeout``), 128+N by signal N."""
        if self.timed_out:
            return 124
        if self.exit_code is None:
            return 128 + int(getattr(signal, self.signal or "SIGKILL", signal.SIGKILL))
        return self.exit_code

    def raise_for_limits(self) -> ExecResult:
        """Raise the matching error if the program hit a limit; else return self.

        Raises:
            SandboxTimeout: it ran past ``wall_seconds``.
            OutputLimitExceeded: its output was cut.
            ResourceLimitExceeded: it hit another limit.
        """
        if self.timed_out:
            raise SandboxTimeout(
                f"the program ran past its wall-clock limit ({self.duration:.1f} s)"
            )
        if self.truncated:
            raise OutputLimitExceeded(f"output cut on {', '.join(self.truncated)}")
        if self.limits_hit:
            raise ResourceLimitExceeded(f"the program hit: {', '.join(self.limits_hit)}")
        return self


class Artifact(msgspec.Struct, frozen=True, kw_only=True):
    """A file exported from scratch, hashed as the host reads it."""

    path: str  # relative to scratch
    host_path: str
    sha256: str
    size: int


class SandboxConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Where a sandbox lives and what it sees."""

    scratch: str
    inputs: tuple[str, ...] = ()
    limits: Limits = Limits()
    python: str | None = None  # a Python prefix to make visible (default: the running one)
    # Host paths visible read-only at the same path (a tool's installation, e.g. Codex).
    binds: tuple[str, ...] = ()


class Sandbox(abc.ABC):
    """A place to run untrusted programs. Subclasses are the backends."""

    backend: ClassVar[str]
    isolated: ClassVar[bool]

    def __init__(self, config: SandboxConfig) -> None:
        self.config = config
        self.scratch = Path(config.scratch)
        self.inputs = tuple(Path(p) for p in config.inputs)
        names = [p.name for p in self.inputs]
        if len(set(names)) != len(names):
            raise ConfigError(f"input directories must have distinct names, got {names}")

    # -- lifecycle ------------------------------------------------------------------

    async def setup(self) -> None:
        """Prepare scratch. Refuses a scratch directory that already holds files.

        Raises:
            ConfigError: scratch holds files, or an input is not a directory.
            SandboxUnavailable: the backend cannot run here.
        """
        if self.scratch.exists() and not self.scratch.is_dir():
            raise ConfigError(f"scratch {self.scratch} is not a directory")
        if self.scratch.exists() and any(self.scratch.iterdir()):
            raise ConfigError(
                f"scratch directory {self.scratch} already holds files",
                hint="give each trial a new, empty scratch directory",
            )
        for path in self.inputs:
            if not path.is_dir():
                raise ConfigError(f"input {path} is not a directory")
        self.scratch.mkdir(parents=True, exist_ok=True)

    @abc.abstractmethod
    async def exec(
        self,
        argv: Sequence[str],
        *,
        input: bytes | None = None,
        cwd: str = "/scratch",
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        limits: Limits | None = None,
        forward: Forward | None = None,
    ) -> ExecResult:
        """Run ``argv`` inside the sandbox and wait for it (and every process it started).

        ``cwd`` is a path as the program sees it. ``env`` is the whole
        environment (nothing is inherited). ``timeout`` overrides
        ``limits.wall_seconds``. ``forward`` gives the program one way out: a
        loopback port, written ``{forward_port}`` in ``argv``, that reaches one
        host address (see :mod:`._forward`).

        Raises:
            SandboxUnavailable: the sandbox could not start the program.
        """

    async def cleanup(self, interrupted: bool) -> None:  # noqa: B027 - an optional hook
        """Release what ``setup`` made. Scratch is kept: it holds the trial's outputs."""

    async def __aenter__(self) -> Sandbox:
        await self.setup()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.cleanup(interrupted=exc is not None)

    # -- files (host side) ----------------------------------------------------------

    def _resolve(self, path: str) -> Path:
        """A scratch path that neither names nor crosses a link out of scratch.

        Raises:
            SandboxEscape: the path leaves scratch.
        """
        relative = Path(path.removeprefix("/scratch/").lstrip("/"))
        if ".." in relative.parts:
            raise SandboxEscape(f"path {path!r} leaves scratch")
        current = self.scratch
        for part in relative.parts:
            current = current / part
            if current.is_symlink():
                raise SandboxEscape(f"path {path!r} crosses a link: {current}")
        return current

    async def read_file(self, path: str) -> bytes:
        """Read a file from scratch.

        Raises:
            SandboxEscape: the path leaves scratch or crosses a link.
            FileNotFoundError: no such file.
        """
        return _read_regular(self._resolve(path))

    async def write_file(self, path: str, data: bytes) -> None:
        """Write a file into scratch (readable by the program).

        Raises:
            SandboxEscape: the path leaves scratch or crosses a link.
        """
        target = self._resolve(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        self._own(target)

    async def copy_in(self, source: Path, path: str) -> None:
        """Copy a host file into scratch (readable and writable by the program).

        Streams the file, so large weights never sit in memory; replaces a file
        the program left at ``path``.

        Raises:
            SandboxEscape: the path leaves scratch or crosses a link.
        """
        target = self._resolve(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        temp = target.with_name(f".{target.name}.copy-in")
        await anyio.to_thread.run_sync(shutil.copyfile, source, temp)
        os.replace(temp, target)
        self._own(target)

    async def export(self, paths: Sequence[str]) -> list[Artifact]:
        """Hash files the program left in scratch, as the host reads them.

        Call it after the program has exited: nothing can change the files then.

        Raises:
            SandboxEscape: a path leaves scratch or is a link.
            FileNotFoundError: a file is missing.
        """
        artifacts = []
        for path in paths:
            host = self._resolve(path)
            data = _read_regular(host)
            artifacts.append(
                Artifact(
                    path=str(host.relative_to(self.scratch)),
                    host_path=str(host),
                    sha256=hashlib.sha256(data).hexdigest(),
                    size=len(data),
                )
            )
        return artifacts

    def _own(self, path: Path) -> None:  # noqa: B027 - an optional hook
        """Hand a host-written file to the sandbox's user (a no-op without isolation)."""


def _read_regular(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise SandboxEscape(f"{path} is not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            return handle.read()
    finally:
        os.close(fd)
