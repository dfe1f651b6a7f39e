"""``mw provider`` and ``mw meter`` as real processes: ready line, real traffic, clean SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

import meters
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


def test_a_meter_bug_is_logged_without_a_key_a_header_or_a_body(tmp_path: Path) -> None:
    """A handler crash: a ``meter_error`` line, a 500 with no internals, a log with no locals."""
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps(PRICES))
    client_key, words = "sk-client-3f9a1c", "the-words-of-a-private-prompt"
    provider, provider_url = start("provider", "--port", "0")
    try:
        meter, meter_url = start(
            "--role", "host", "--port", "0", "--upstream", f"{provider_url}/v1",
            "--key-env", "TEST_PROVIDER_KEY", "--prices", str(prices),
            "--ledger-dir", str(tmp_path / "ledger"), "--allocation", "0.50",
            env={"TEST_PROVIDER_KEY": SECRET}, module="tests.meters.meter_crash_child",
        )  # fmt: skip
        body = {"model": "local/scripted", "messages": [{"role": "user", "content": words}]}
        headers = {"authorization": f"Bearer {client_key}"}
        response = httpx.post(
            f"{meter_url}/v1/chat/completions", json=body, headers=headers, timeout=10
        )
        meter.send_signal(signal.SIGTERM)
        _, log = meter.communicate(timeout=20)
    finally:
        stop(provider)
    assert response.status_code == 500
    assert response.json()["error"]["code"] == "meter_error"
    assert "planted" not in response.text and "Error" not in response.text  # no internals
    assert "meter_failed" in log and "planted" in log  # the log says what broke, and where
    for secret in (SECRET, client_key, words):
        assert secret not in log
    (line,) = meters.read_ledger(tmp_path / "ledger" / "ledger.jsonl")
    assert (line.status, line.http_status) == ("meter_error", 500)
    assert line.cost_usd == line.reserved_usd  # it was sent, and its usage is unknown


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
