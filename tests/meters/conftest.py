"""A local provider and a meter in front of it, on loopback, for each test."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from decimal import Decimal
from functools import partial
from pathlib import Path

import anyio
import pytest

import meters
from mw_actors.provider import (
    LOCAL_PRICES,
    Engine,
    FaultPlan,
    Provider,
    Reply,
    ScriptedEngine,
    ToolCall,
)
from mw_actors.testing import local_provider

PRICES = json.loads(LOCAL_PRICES.read_text())
SECRET = "sk-live-must-never-be-written-anywhere"
SCRIPT = [
    Reply(content="Hello there, friend. The answer is forty-two."),
    Reply(tool_calls=[ToolCall("lookup", {"account": "A-1", "field": "balance"})]),
]


@dataclass
class Wire:
    provider: Provider
    provider_url: str
    meter_url: str
    ledger_dir: Path


@asynccontextmanager
async def open_wire(
    tmp_path: Path,
    *,
    faults: FaultPlan | None = None,
    allocation: Decimal | None = None,
    drain_seconds: float = 5.0,
    reserver: meters.Reserver | None = None,
    adapt_responses: bool = False,
    engine: Engine | None = None,
    provider_key: str | None = None,
    whole_as_stream: bool = True,
    budget_wait_seconds: float = 120.0,
) -> AsyncIterator[Wire]:
    engine = engine or ScriptedEngine(SCRIPT)
    async with (
        local_provider(engine, faults, api_key=provider_key) as served,
        anyio.create_task_group() as tg,
    ):
        config = meters.MeterConfig(
            role="learner" if adapt_responses else "host",
            adapt_responses=adapt_responses,
            upstream=served.url,
            prices=meters.parse_prices(json.dumps(PRICES).encode()),
            ledger_dir=tmp_path / "ledger",
            api_key=SECRET,
            allocation_usd=allocation,
            drain_seconds=drain_seconds,
            budget_wait_seconds=budget_wait_seconds,
            # The meter's own default unless a test turns it off: campaigns rely on it.
            **({} if whole_as_stream else {"whole_as_stream": False}),
        )
        meter_port = await tg.start(
            partial(meters.serve_meter, config, reserver=reserver, summary_every=0.05)
        )
        yield Wire(
            served.provider,
            served.url,
            f"http://127.0.0.1:{meter_port}/v1",
            tmp_path / "ledger",
        )
        tg.cancel_scope.cancel()


@pytest.fixture
def prices() -> meters.PriceTable:
    return meters.parse_prices(json.dumps(PRICES).encode())
