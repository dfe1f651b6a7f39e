"""The conformance suite every sandbox backend must pass.

Each :class:`Check` is one promise of the contract. Checks marked
``isolated`` are the escape table: hostile programs that an isolated backend
must contain. A backend without isolation cannot pass them, and the runner
says so rather than pretending: run them with :func:`run_check`, which
returns ``"not applicable"`` for those.

    for check in CHECKS:
        outcome = await run_check(check, "bwrap", workdir)
"""

from __future__ import annotations

import hashlib
import os
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio

from mw_errors import ConfigError, SandboxEscape

from ._backends import BACKENDS, open_sandbox
from ._contract import ExecResult, Limits, Sandbox, SandboxConfig

__all__ = ["CHECKS", "Check", "Harness", "NotApplicable", "run_check", "survivors"]

PY = sys.executable


def survivors(marker: str) -> list[int]:
    """Pids of live processes whose command line contains ``marker`` (scanning /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().split(") ", 1)[1][0]
        except OSError:
            continue
        if marker.encode() in cmdline and state != "Z":
            found.append(int(entry.name))
    return found


class Harness:
    """What a check gets: a backend, a work directory, and fresh sandboxes."""

    def __init__(self, backend: str, workdir: Path) -> None:
        self.backend = backend
        self.workdir = workdir
        self.inputs = workdir / "inputs"
        self.restricted = workdir / "restricted"
        for directory in (self.inputs, self.restricted):
            directory.mkdir(parents=True, exist_ok=True)
        (self.inputs / "data.txt").write_text("public input\n")
        (self.restricted / "private.jsonl").write_text('{"answer": 42}\n')

    @asynccontextmanager
    async def box(self, limits: Limits | None = None) -> AsyncIterator[Sandbox]:
        config = SandboxConfig(
            scratch=str(self.workdir / f"scratch-{uuid.uuid4().hex[:8]}"),
            inputs=(str(self.inputs),),
            limits=limits or Limits(wall_seconds=30),
        )
        async with open_sandbox(self.backend, config) as sandbox:
            yield sandbox

    async def py(self, code: str, limits: Limits | None = None, **kwargs: object) -> ExecResult:
        async with self.box(limits) as sandbox:
            return await sandbox.exec([PY, "-c", code], **kwargs)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Check:
    name: str
    isolated: bool  # part of the escape table: needs an isolated backend
    run: Callable[[Harness], Awaitable[None]]


CHECKS: list[Check] = []


def check(*, isolated: bool = False) -> Callable[[Callable[[Harness], Awaitable[None]]], None]:
    def register(fn: Callable[[Harness], Awaitable[None]]) -> None:
        CHECKS.append(Check(fn.__name__, isolated, fn))

    return register


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(message)


# -- the contract --------------------------------------------------------------------------


@check()
async def exit_codes_and_streams(h: Harness) -> None:
    async with h.box() as box:
        result = await box.exec(["sh", "-c", "cat; echo err >&2; exit 3"], input=b"in")
    expect(result.exit_code == 3, f"exit code {result.exit_code}")
    expect((result.stdout, result.stderr) == ("in", "err\n"), repr(result))
    expect(result.backend == h.backend and result.isolated is BACKENDS[h.backend].isolated, "")


@check()
async def environment_is_cleared(h: Harness) -> None:
    os.environ["MW_CONFORMANCE_API_KEY"] = "sk-must-not-leak"
    try:
        result = await h.py("import os; print(sorted(os.environ))", env={"GIVEN": "1"})
    finally:
        del os.environ["MW_CONFORMANCE_API_KEY"]
    expect("MW_CONFORMANCE_API_KEY" not in result.stdout, "a host secret reached the program")
    expect("sk-must-not-leak" not in result.stdout + result.stderr, "a host secret leaked")
    expect("'GIVEN'" in result.stdout, "the given environment is missing")


@check()
async def files_in_and_out(h: Harness) -> None:
    async with h.box() as box:
        await box.write_file("task/in.txt", b"payload")
        code = (
            "data = open('task/in.txt','rb').read() + open('inputs/inputs/data.txt','rb').read();"
            "open('out.bin','wb').write(data[::-1])"
        )
        result = await box.exec([PY, "-c", code])
        expect(result.ok, repr(result))
        (artifact,) = await box.export(["out.bin"])
        host = await box.read_file("out.bin")
    expect(artifact.sha256 == hashlib.sha256(host).hexdigest(), "export hash differs from host")
    expect(host == (b"payload" + b"public input\n")[::-1], repr(host))


@check()
async def paths_cannot_leave_scratch(h: Harness) -> None:
    async with h.box() as box:
        result = await box.exec(["sh", "-c", "ln -s /etc/passwd link; ln -s .. up"])
        expect(result.ok, repr(result))
        for path in ("link", "up/etc", "../outside", "/scratch/../x"):
            try:
                await box.read_file(path)
            except SandboxEscape:
                continue
            raise AssertionError(f"read_file({path!r}) left scratch")
        try:
            await box.export(["link"])
        except SandboxEscape:
            return
        raise AssertionError("export followed a link out of scratch")


@check()
async def scratch_must_be_empty(h: Harness) -> None:
    scratch = h.workdir / "used-scratch"
    scratch.mkdir(exist_ok=True)
    (scratch / "old").write_text("left over")
    sandbox = open_sandbox(h.backend, SandboxConfig(scratch=str(scratch)))
    try:
        async with sandbox:
            pass
    except ConfigError as exc:
        expect("already holds files" in str(exc), str(exc))
        return
    raise AssertionError("a used scratch directory was accepted")


@check()
async def wall_clock_timeout_kills_the_group(h: Harness) -> None:
    marker = f"mw-timeout-{uuid.uuid4().hex[:8]}"
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
    code = (
        f"import subprocess, time; subprocess.Popen([{PY!r}, '-c', {stubborn!r}, {marker!r}]);"
        "time.sleep(600)"
    )
    result = await h.py(code, timeout=2)
    expect(result.timed_out and "wall_time" in result.limits_hit, repr(result))
    expect(result.signal == "SIGKILL" and result.exit_code is None, repr(result))
    await _no_survivors(marker)


@check()
async def nothing_survives_the_main_process(h: Harness) -> None:
    marker = f"mw-orphan-{uuid.uuid4().hex[:8]}"
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
    code = f"import subprocess; subprocess.Popen([{PY!r}, '-c', {stubborn!r}, {marker!r}])"
    result = await h.py(code)
    expect(result.exit_code == 0, repr(result))
    await _no_survivors(marker)


async def _no_survivors(marker: str) -> None:
    for _ in range(100):
        if not survivors(marker):
            return
        await anyio.sleep(0.05)
    raise AssertionError(f"processes survived: {survivors(marker)}")


@check()
async def output_flood_is_capped_and_reported(h: Harness) -> None:
    limits = Limits(wall_seconds=20, output_bytes=4096)
    code = "import sys\nfor _ in range(20000): sys.stdout.write('x' * 100)"
    result = await h.py(code, limits)
    expect(result.truncated == ["stdout"] and "output" in result.limits_hit, repr(result)[:300])
    expect(len(result.stdout) == 4096, f"captured {len(result.stdout)} bytes")


@check()
async def memory_hog_is_stopped(h: Harness) -> None:
    limits = Limits(wall_seconds=30, address_space=512 << 20)
    result = await h.py("x = bytearray(2 << 30)", limits)
    expect("address_space" in result.limits_hit and result.exit_code != 0, repr(result)[:300])


@check()
async def cpu_loop_is_stopped(h: Harness) -> None:
    limits = Limits(wall_seconds=30, cpu_seconds=1)
    result = await h.py("while True: pass", limits)
    expect("cpu_seconds" in result.limits_hit and not result.timed_out, repr(result)[:300])


@check()
async def file_size_is_capped(h: Harness) -> None:
    limits = Limits(wall_seconds=30, file_size=1 << 20)
    result = await h.py("open('big', 'wb').write(b'x' * (4 << 20))", limits)
    expect("file_size" in result.limits_hit, repr(result)[:300])


# -- the escape table (isolated backends) ------------------------------------------------------


@check(isolated=True)
async def no_connection_to_a_host_listener(h: Harness) -> None:
    async with await anyio.create_tcp_listener(local_host="127.0.0.1") as listener:
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        code = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=3)"
        result = await h.py(code)
    expect(result.exit_code != 0 and "ConnectionRefused" in result.stderr, result.stderr[-300:])


@check(isolated=True)
async def no_dns(h: Harness) -> None:
    result = await h.py("import socket; socket.getaddrinfo('pypi.org', 443)")
    expect(result.exit_code != 0 and "gaierror" in result.stderr, result.stderr[-300:])


@check(isolated=True)
async def no_writes_outside_scratch(h: Harness) -> None:
    target = h.workdir / "host-file.txt"
    target.write_text("original")
    code = (
        "import sys\nfor p in ['/usr/x', '/etc/x', '/x', sys.argv[1]]:\n"
        "    try:\n        open(p, 'w').write('pwned'); print('wrote', p)\n"
        "    except OSError as e: print('refused', p, e.errno)"
    )
    async with h.box() as box:
        result = await box.exec([PY, "-c", code, str(target)])
    expect("wrote" not in result.stdout, result.stdout)
    expect(target.read_text() == "original", "a host file changed")


@check(isolated=True)
async def no_reads_of_private_files(h: Harness) -> None:
    code = (
        "import os, sys\nfor p in [sys.argv[1], '/root', '/inputs/inputs/../../restricted']:\n"
        "    try:\n"
        "        print('read', p, os.listdir(p) if os.path.isdir(p) else open(p).read())\n"
        "    except OSError as e: print('refused', p, e.errno)"
    )
    async with h.box() as box:
        result = await box.exec([PY, "-c", code, str(h.restricted / "private.jsonl")])
    read = [line for line in result.stdout.splitlines() if line.startswith("read ")]
    expect(not read, result.stdout)
    expect('"answer"' not in result.stdout, "a private partition was read")


@check(isolated=True)
async def no_remount(h: Harness) -> None:
    async with h.box() as box:
        result = await box.exec(["sh", "-c", "mount -o remount,rw / && touch /pwned"])
    expect(result.exit_code != 0, repr(result))
    expect(not Path("/pwned").exists(), "the host root was written")


@check(isolated=True)
async def fork_bomb_is_contained(h: Harness) -> None:
    limits = Limits(wall_seconds=20, processes=32)
    code = (
        "import os, time\nkids = 0\nwhile True:\n    try:\n        pid = os.fork()\n"
        "    except OSError as e:\n        print('refused', kids, e.errno); break\n"
        "    if pid == 0:\n        time.sleep(30); os._exit(0)\n    kids += 1"
    )
    result = await h.py(code, limits)
    expect("refused" in result.stdout, repr(result)[:300])
    kids = int(result.stdout.split()[1])
    expect(kids < 32, f"{kids} processes were forked")


@check(isolated=True)
async def no_api_key_in_the_environment(h: Harness) -> None:
    os.environ["FIREWORKS_API_KEY"] = "fw-must-not-leak"
    try:
        result = await h.py("import os; print(os.environ.get('FIREWORKS_API_KEY'))")
    finally:
        del os.environ["FIREWORKS_API_KEY"]
    expect(result.stdout.strip() == "None", result.stdout)


@check(isolated=True)
async def unprivileged_and_without_capabilities(h: Harness) -> None:
    code = (
        "import os; s = open('/proc/self/status').read();"
        "print(os.getuid(), s.split('CapEff:')[1].split()[0])"
    )
    result = await h.py(code)
    uid, caps = result.stdout.split()
    expect(uid != "0" and int(caps, 16) == 0, result.stdout)


@check(isolated=True)
async def seccomp_refuses_unix_sockets_and_ptrace(h: Harness) -> None:
    async with h.box() as box:
        if "seccomp" not in getattr(box, "layers", []):
            raise NotApplicable("the seccomp layer is not active here (no libseccomp)")
        code = (
            "import ctypes, socket\n"
            "try:\n    socket.socket(socket.AF_UNIX); print('unix opened')\n"
            "except OSError as e: print('unix refused', e.errno)\n"
            "libc = ctypes.CDLL(None, use_errno=True)\n"
            "print('ptrace', libc.ptrace(0, 0, None, None), ctypes.get_errno())"
        )
        result = await box.exec([PY, "-c", code])
    expect("unix refused" in result.stdout, result.stdout + result.stderr)
    expect("ptrace -1 1" in result.stdout, result.stdout)  # EPERM


class NotApplicable(Exception):
    """The check cannot run against this backend here; the message says why."""


async def run_check(check: Check, backend: str, workdir: Path) -> str:
    """Run one check; return "passed" or "not applicable: why" (AssertionError on failure)."""
    if check.isolated and not BACKENDS[backend].isolated:
        return f"not applicable: {backend} has no isolation"
    try:
        await check.run(Harness(backend, workdir))
    except NotApplicable as exc:
        return f"not applicable: {exc}"
    return "passed"
