"""``kill -9`` of a metered budget: a restarted meter spends nothing twice and loses no cent.

The meter is a real ``mw meter --allocation`` process in front of a real
provider process; each round kills it at a random point of a streamed
answer, then starts it again on the same ledger directory.
"""

from __future__ import annotations

import json
import os
import random
import signal
from decimal import Decimal
from pathlib import Path

import httpx
import pytest

import meters
import mw_actors as mw
import mw_actors.metering
from mw_actors.provider import LOCAL_PRICES
from tests.processes import start_server, stop_server

ALLOCATION = Decimal("0.05")
LONG = " ".join(f"word{i}" for i in range(60))


def meter_args(ledger: Path, upstream: str) -> list[str]:
    return [
        "meter", "--role", "host", "--upstream", upstream, "--key-env", "K",
        "--prices", str(LOCAL_PRICES), "--ledger-dir", str(ledger),
        "--allocation", str(ALLOCATION),
    ]  # fmt: skip


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_meter_killed_mid_stream_spends_nothing_twice(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"content": LONG}]))
    provider, provider_url = start_server(
        "provider", "--script", str(script), "--latency", "ttft=0.05,tps=100"
    )
    ledger = tmp_path / "ledger"
    rng = random.Random(7)
    killed: list[str] = []
    body = {"model": "local/scripted", "max_tokens": 200, "stream": True,
            "messages": [{"role": "user", "content": "talk"}]}  # fmt: skip
    try:
        for _ in range(6):
            meter, url = start_server(*meter_args(ledger, f"{provider_url}/v1"), env={"K": "k"})
            whole = httpx.post(f"{url}/v1/chat/completions", json={**body, "stream": False})
            assert whole.status_code == 200
            with httpx.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
                assert response.status_code == 200
                killed.append(response.headers["x-mw-request-id"])
                chunks = response.iter_raw()
                for _ in range(rng.randint(0, 12)):
                    next(chunks)
                os.kill(meter.pid, signal.SIGKILL)
                meter.wait(timeout=20)
            assert meter.stdout is not None and meter.stderr is not None
            meter.stdout.close()
            meter.stderr.close()
        meter, url = start_server(*meter_args(ledger, f"{provider_url}/v1"), env={"K": "k"})
        stop_server(meter)
    finally:
        stop_server(provider)

    lines = meters.read_ledger(ledger / "ledger.jsonl")
    ids = [line.id for line in lines]
    assert len(ids) == len(set(ids)) == 12  # one line per attempt, none twice
    lost = [line for line in lines if line.status == "lost"]
    assert [line.id for line in lost] == killed
    assert all(line.cost_usd == line.reserved_usd != "0" for line in lost)
    # The journaled budget agrees with the ledger to the cent, and nothing is left open.
    budget = meters.Budget(ALLOCATION)
    records = [
        entry.rec
        for entry in mw.journal.read_journal(ledger / "journal", mw.metering.BUDGET_RECORDS)
    ]
    assert mw.metering.rebuild_budget(budget, records) == []
    spent = sum((Decimal(line.cost_usd) for line in lines), Decimal(0))
    assert budget.settled == spent <= ALLOCATION
    summary = json.loads((ledger / "wire_ledger.json").read_text())
    assert summary["statuses"]["lost"] == 6 and Decimal(summary["cost_usd"]) == spent
