"""The start-up self-test: prove the isolation holds before a campaign trusts it.

A probe runs inside the sandbox and tries what a hostile program would: reach
a listener the host opened on 127.0.0.1, resolve a name, write to the
system, read root's home; it also reports its uid, capabilities, rlimits and
environment. The host judges each check. An isolated backend that fails any
check is refused with ``sandbox_unavailable``; there is no silent fallback.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import anyio
import msgspec

from mw_errors import SandboxUnavailable

from ._backends import BwrapSandbox, open_sandbox
from ._contract import Limits, SandboxConfig

__all__ = ["SelfTestReport", "self_test"]

_PROBE = r"""
import json, os, resource, socket, sys
port = int(sys.argv[1])
out = {}
def attempt(fn):
    try:
        fn()
        return True
    except Exception:
        return False
def connect():
    socket.create_connection(("127.0.0.1", port), timeout=2).close()
out["network_reached"] = attempt(connect)
out["dns_resolved"] = attempt(lambda: socket.getaddrinfo("example.com", 80))
def write_system():
    with open("/usr/.mw-probe", "w") as f:
        f.write("x")
out["system_written"] = attempt(write_system)
def write_root():
    with open("/.mw-probe", "w") as f:
        f.write("x")
out["root_written"] = attempt(write_root)
out["root_home_read"] = attempt(lambda: os.listdir("/root"))
def write_scratch():  # the working directory is scratch
    with open(".mw-probe", "w") as f:
        f.write("x")
    os.unlink(".mw-probe")
out["scratch_written"] = attempt(write_scratch)
out["uid"] = os.getuid()
status = open("/proc/self/status").read()
out["cap_eff"] = [l.split()[1] for l in status.splitlines() if l.startswith("CapEff")][0]
out["rlimits"] = {n: resource.getrlimit(getattr(resource, n))[1] for n in
    ("RLIMIT_AS", "RLIMIT_CPU", "RLIMIT_NOFILE", "RLIMIT_NPROC", "RLIMIT_FSIZE")}
out["env"] = sorted(os.environ)
def unix_socket():
    socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).close()
out["unix_socket_opened"] = attempt(unix_socket)
print(json.dumps(out))
"""


class SelfTestReport(msgspec.Struct, frozen=True, kw_only=True):
    """What the self-test proved. ``ok`` means every check for this backend held."""

    backend: str
    isolated: bool
    ok: bool
    checks: dict[str, bool]
    layers: list[str]
    detail: str = ""


def _judge(probe: dict[str, object], limits: Limits, isolated: bool) -> dict[str, bool]:
    rlimits = probe["rlimits"]
    assert isinstance(rlimits, dict)
    expected = {
        "RLIMIT_AS": limits.address_space,
        "RLIMIT_CPU": limits.cpu_seconds + 1,
        "RLIMIT_NOFILE": limits.open_files,
        "RLIMIT_NPROC": limits.processes,
        "RLIMIT_FSIZE": limits.file_size,
    }
    env = probe["env"]
    assert isinstance(env, list)
    checks = {
        "scratch_writable": bool(probe["scratch_written"]),
        "limits_active": all(rlimits.get(k) == v for k, v in expected.items()),
        "no_secrets_in_env": not any("KEY" in k or "TOKEN" in k or "SECRET" in k for k in env),
    }
    if isolated:
        checks |= {
            "network_blocked": not probe["network_reached"] and not probe["dns_resolved"],
            "root_read_only": not probe["system_written"] and not probe["root_written"],
            "root_home_hidden": not probe["root_home_read"],
            "unprivileged_uid": probe["uid"] != 0,
            "no_capabilities": int(str(probe["cap_eff"]), 16) == 0,
        }
    return checks


async def self_test(
    backend: str = "bwrap", *, limits: Limits | None = None, bwrap: Path | None = None
) -> SelfTestReport:
    """Run the probe in a fresh sandbox of ``backend`` and judge it.

    Raises:
        SandboxUnavailable: the sandbox cannot start, or an isolated backend failed a check.
        ConfigError: an unknown backend.
    """
    limits = limits or Limits(wall_seconds=60)
    with tempfile.TemporaryDirectory(prefix="mw-selftest-") as tmp:
        config = SandboxConfig(scratch=str(Path(tmp) / "scratch"), limits=limits)
        sandbox = open_sandbox(backend, config, bwrap=bwrap)
        async with await anyio.create_tcp_listener(local_host="127.0.0.1") as listener:
            port = listener.extra(anyio.abc.SocketAttribute.local_port)
            async with sandbox:
                result = await sandbox.exec([sys.executable, "-c", _PROBE, str(port)])
    if result.exit_code != 0:
        raise SandboxUnavailable(
            f"the {backend} self-test probe failed (exit {result.exit_code}, "
            f"signal {result.signal}): {result.stderr.strip()[-300:]}"
        )
    probe = json.loads(result.stdout)
    checks = _judge(probe, limits, sandbox.isolated)
    layers = sandbox.layers if isinstance(sandbox, BwrapSandbox) else ["rlimits"]
    if "seccomp" in layers:
        checks["unix_sockets_blocked"] = not probe["unix_socket_opened"]
    report = SelfTestReport(
        backend=backend,
        isolated=sandbox.isolated,
        ok=all(checks.values()),
        checks=checks,
        layers=layers,
    )
    if not report.ok:
        failed = ", ".join(name for name, held in checks.items() if not held)
        raise SandboxUnavailable(f"the {backend} sandbox failed its self-test: {failed}")
    return report
