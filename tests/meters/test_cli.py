"""``mw provider`` and ``mw meter`` as real processes: ready line, real traffic, clean SIGTERM."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.processes import start_server as start
from tests.processes import stop_server as stop

from .conftest import PRICES, SECRET

ROOT = Path(__file__).resolve().parents[2]


def test_provider_and_meter_processes(tmp_path: Path) -> None:
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps(PRICES))
    provider, provider_url = start("provider", "--port", "0", "--latency", "ttft=0,tps=0")
    try:
        meter, meter_url = start(
            "meter", "--role", "learner", "--port", "0", "--upstream", f"{provider_url}/v1",
            "--key-env", "TEST_PROVIDER_KEY", "--prices", str(prices),
            "--ledger-dir", str(tmp_path / "ledger"), "--allocation", "0.50",
            env={"TEST_PROVIDER_KEY": SECRET},
        )  # fmt: skip
        try:
            body = {"model": "local/scripted", "messages": [{"role": "user", "content": "hi"}]}
            response = httpx.post(f"{meter_url}/v1/chat/completions", json=body, timeout=10)
            assert response.status_code == 200 and response.json()["choices"]
        finally:
            stop(meter)
    finally:
        stop(provider)
    summary = json.loads((tmp_path / "ledger" / "meta_wire_ledger.json").read_text())
    assert (summary["role"], summary["requests"], summary["allocation_usd"]) == (
        "learner",
        1,
        "0.50",
    )
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert SECRET not in path.read_text(errors="replace")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--key-env", "MW_TEST_UNSET_KEY"], "environment variable MW_TEST_UNSET_KEY is not set"),
        (["--allocation", "lots"], "--allocation 'lots' is not an amount in USD"),
        (["--prices", "/nonexistent/prices.json"], "cannot read prices file"),
    ],
)
def test_meter_bad_input_is_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps(PRICES))
    base = {
        "--key-env": "TEST_PROVIDER_KEY",
        "--prices": str(prices),
        "--allocation": "1",
    }
    for flag, value in zip(args[::2], args[1::2], strict=True):
        base[flag] = value
    argv = ["meter", "--role", "host", "--upstream", "http://127.0.0.1:9/v1"]
    argv += ["--ledger-dir", str(tmp_path / "l")] + [x for kv in base.items() for x in kv]
    result = subprocess.run(
        [sys.executable, "-m", "bin.mw", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "TEST_PROVIDER_KEY": "x"},
    )
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert message in line and "hint:" in line


def test_wrong_unit_prices_are_refused_at_start(tmp_path: Path) -> None:
    bad = json.loads(json.dumps(PRICES))
    bad["models"]["local/scripted"]["output_per_mtok"] = "0.0000004"
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps(bad))
    result = subprocess.run(
        [sys.executable, "-m", "bin.mw", "meter", "--role", "host", "--upstream", "http://x/v1",
         "--key-env", "HOME", "--prices", str(prices), "--ledger-dir", str(tmp_path / "l")],
        cwd=ROOT, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert result.returncode == 2
    assert "looks like a price per token" in result.stderr


def test_a_faults_file_is_read_whole_and_a_typo_is_refused_by_name(tmp_path: Path) -> None:
    faults = tmp_path / "faults.json"
    faults.write_text(json.dumps({"plan": ["server_error"], "latency": {"tps": 5}}))
    result = subprocess.run(
        [sys.executable, "-m", "bin.mw", "provider", "--port", "0", "--faults", str(faults)],
        cwd=ROOT, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert "tps" in line and "hint:" in line  # the unknown field, named; nothing served

    faults.write_text(json.dumps({"plan": ["server_error"], "latency": {"tokens_per_second": 0}}))
    provider, url = start("provider", "--port", "0", "--faults", str(faults))
    try:
        body = {"model": "local/scripted", "messages": [{"role": "user", "content": "hi"}]}
        assert httpx.post(f"{url}/v1/chat/completions", json=body, timeout=10).status_code == 500
    finally:
        stop(provider)
