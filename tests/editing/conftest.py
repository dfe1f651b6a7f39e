"""Shared pieces of the weight-editing tests: the fixture, one finished run, the CLI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mw_actors.editing import file_sha256, write_fixture

ROOT = Path(__file__).resolve().parents[2]


def wsm(
    *args: str, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[bytes]:
    """Run ``wsm`` as a real subprocess with one OpenMP thread."""
    return subprocess.run(
        [sys.executable, "-m", "bin.wsm", *args],
        cwd=ROOT,
        capture_output=True,
        timeout=timeout,
        env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})},
    )


def edit_config(config: Path, change: Any) -> None:
    """Rewrite a fixture config in place through ``change(dict)``."""
    data = json.loads(config.read_text())
    change(data)
    config.write_text(json.dumps(data, indent=2))


def repin(config: Path, file: Path) -> None:
    """Pin ``file``'s new hash wherever the config names it."""
    digest = file_sha256(file)
    relative = str(file.relative_to(config.parent))

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("path") == relative and "sha256" in node:
                node["sha256"] = digest
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    edit_config(config, walk)


@pytest.fixture(scope="session")
def fixture_master(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_fixture(tmp_path_factory.mktemp("wsm") / "inputs")


@pytest.fixture
def fixture_config(fixture_master: Path, tmp_path: Path) -> Path:
    """A private copy of the fixture, free to change."""
    target = tmp_path / "inputs"
    shutil.copytree(fixture_master.parent, target)
    return target / "config.json"


@pytest.fixture(scope="session")
def finished_run(
    fixture_master: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, bytes]:
    """One completed local-trusted run of the fixture and the report ``run`` printed."""
    run = tmp_path_factory.mktemp("wsm-run") / "run"
    done = wsm(
        "benchmark", "run", "--config", str(fixture_master), "--output", str(run), "--local-trusted"
    )
    assert done.returncode == 0, done.stderr.decode()
    return run, done.stdout


@pytest.fixture
def run_copy(finished_run: tuple[Path, bytes], tmp_path: Path) -> Path:
    """A private copy of the finished run, free to tamper with."""
    target = tmp_path / "run"
    shutil.copytree(finished_run[0], target, symlinks=True)
    return target
