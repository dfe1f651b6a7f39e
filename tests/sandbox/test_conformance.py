"""The conformance suite against every backend here; the escape table on isolated ones."""

from __future__ import annotations

from pathlib import Path

import pytest

import sandbox
from sandbox.testing import CHECKS, Check, run_check

pytestmark = pytest.mark.anyio


def _backends() -> list[str]:
    available = ["local-trusted"]
    if sandbox.find_bwrap() is not None:
        available.append("bwrap")
    return available


@pytest.mark.parametrize("backend", ["bwrap", "local-trusted"])
@pytest.mark.parametrize("check", CHECKS, ids=[c.name for c in CHECKS])
async def test_conformance(check: Check, backend: str, tmp_path: Path) -> None:
    if backend not in _backends():
        pytest.skip(f"{backend} is not installed on this machine: {check.name} not run")
    if check.isolated and not sandbox.BACKENDS[backend].isolated:
        pytest.skip(f"{check.name} is an escape test; {backend} has no isolation to test")
    outcome = await run_check(check, backend, tmp_path)
    if outcome.startswith("not applicable"):
        pytest.skip(f"{check.name} on {backend}: {outcome}")
    assert outcome == "passed"
