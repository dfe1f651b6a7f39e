"""A wire meter as a supervised actor: served from a runtime, asked, restarted on its port."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

import meters
import mw_actors as mw
import mw_actors.metering
from mw_actors.provider import Provider, ScriptedEngine, serve_provider

from .._core.helpers import assert_one_terminal_per_run, exits
from ..meters.conftest import PRICES, SCRIPT

pytestmark = pytest.mark.anyio

BODY = {"model": "local/scripted", "messages": [{"role": "user", "content": "hi"}]}


@asynccontextmanager
async def provider() -> AsyncIterator[str]:
    async with anyio.create_task_group() as tg:
        port = await tg.start(serve_provider, Provider(ScriptedEngine(SCRIPT)))
        yield f"http://127.0.0.1:{port}/v1"
        tg.cancel_scope.cancel()


def config(upstream: str, ledger: Path) -> meters.MeterConfig:
    return meters.MeterConfig(
        role="host",
        upstream=upstream,
        prices=meters.parse_prices(json.dumps(PRICES).encode()),
        ledger_dir=ledger,
    )


async def test_a_meter_actor_serves_answers_asks_and_writes_its_summary(tmp_path: Path) -> None:
    async with provider() as upstream:
        place = mw.metering.MeterPlace()
        async with mw.open_runtime(journal=tmp_path / "journal") as rt:
            ref = await rt.spawn(
                mw.ChildSpec(
                    id="host-meter",
                    start=lambda: mw.metering.MeterActor(
                        config(upstream, tmp_path / "ledger"), place
                    ),
                )
            )
            assert place.port != 0  # bound when ready
            async with httpx.AsyncClient(base_url=place.url) as client:
                for _ in range(3):
                    answer = await client.post("/chat/completions", json=BODY)
                    assert answer.status_code == 200
            stats = await ref.ask(mw.metering.MeterStats())
            assert (stats.role, stats.requests, stats.statuses) == ("host", 3, {"ok": 3})
            assert "root/host-meter" in rt.mailboxes()
    summary = json.loads((tmp_path / "ledger" / "wire_ledger.json").read_text())
    assert summary["requests"] == 3  # the final summary, written as the actor stopped
    assert exits(tmp_path / "journal", "root/host-meter") == ["shutdown"]
    assert_one_terminal_per_run(tmp_path / "journal")


async def test_a_crashed_meter_is_restarted_where_its_clients_send(tmp_path: Path) -> None:
    made: list[mw.metering.MeterActor] = []

    def start(upstream: str, place: mw.metering.MeterPlace) -> mw.metering.MeterActor:
        made.append(mw.metering.MeterActor(config(upstream, tmp_path / "ledger"), place))
        return made[-1]

    async with provider() as upstream:
        place = mw.metering.MeterPlace()
        async with mw.open_runtime(journal=tmp_path / "journal") as rt:
            await rt.spawn(mw.ChildSpec(id="host-meter", start=start, args=(upstream, place)))
            port = place.port
            async with httpx.AsyncClient(base_url=place.url) as client:
                assert (await client.post("/chat/completions", json=BODY)).status_code == 200
                made[0].listeners[0].close()  # its listening socket fails under it
                with anyio.fail_after(10):
                    while len(made) < 2 or not rt.mailboxes()["root/host-meter"]:
                        await anyio.sleep(0.02)
                    while True:  # the restarted run listens on the same port
                        try:
                            answer = await client.post("/chat/completions", json=BODY)
                            break
                        except httpx.TransportError:
                            await anyio.sleep(0.02)
                assert answer.status_code == 200 and place.port == port
    reasons = exits(tmp_path / "journal", "root/host-meter")
    assert len(reasons) == 2 and reasons[0].startswith("error") and reasons[1] == "shutdown"
    lines = meters.read_ledger(tmp_path / "ledger" / "ledger.jsonl")
    assert [line.status for line in lines] == ["ok", "ok"]  # one ledger across both runs
    summary: dict[str, Any] = json.loads((tmp_path / "ledger" / "wire_ledger.json").read_text())
    assert summary["requests"] == 2
    assert_one_terminal_per_run(tmp_path / "journal")
