"""Every provider fault, and a client hanging up mid-stream: one line, right status and charge."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import anyio
import httpx
import pytest

import meters
from mw_actors.provider import FaultPlan, Latency

from ..scenarios.wire_faults import WIRE_FAULTS, WireFault
from .conftest import open_wire

pytestmark = pytest.mark.anyio

BODY = {"model": "local/scripted", "messages": [{"role": "user", "content": "balance of A-1?"}]}


def expected_charge(case: WireFault, line: meters.LedgerLine, prices: meters.PriceTable) -> Decimal:
    if case.charge == "zero":
        return Decimal(0)
    if case.charge == "reserved":
        return Decimal(line.reserved_usd)
    usage = meters.Usage(
        input_tokens=line.input_tokens,
        cached_input_tokens=line.cached_input_tokens,
        output_tokens=line.output_tokens,
    )
    return prices.cost(line.model, usage)


@pytest.mark.parametrize(
    "case", WIRE_FAULTS, ids=[f"{c.fault}-{'stream' if c.stream else 'whole'}" for c in WIRE_FAULTS]
)
async def test_each_fault_is_one_line_with_the_right_charge(
    tmp_path: Path, case: WireFault, prices: meters.PriceTable
) -> None:
    faults = FaultPlan(plan=[case.fault], latency=Latency(drip_seconds=0.01))  # type: ignore[list-item]
    async with open_wire(tmp_path, faults=faults, allocation=Decimal("10")) as wire:
        client_error = False
        async with httpx.AsyncClient(timeout=20) as client:
            try:
                body = {**BODY, "stream": case.stream}
                async with client.stream(
                    "POST", f"{wire.meter_url}/chat/completions", json=body
                ) as r:
                    raw = b"".join([chunk async for chunk in r.aiter_raw()])
                    if r.status_code >= 400:
                        client_error = True
                    elif case.stream:
                        client_error = b"{not json" in raw
                    else:
                        json.loads(raw)
            except (httpx.HTTPError, ValueError):
                client_error = True
    (line,) = meters.read_ledger(wire.ledger_dir / "ledger.jsonl")
    assert line.status == case.status
    assert client_error is case.client_error
    assert Decimal(line.cost_usd) == expected_charge(case, line, prices)
    assert Decimal(line.reserved_usd) > 0
    if case.stream and case.status == "ok":
        assert b'"usage"' not in raw  # the usage chunk the meter asked for is stripped
    summary = json.loads((wire.ledger_dir / "wire_ledger.json").read_text())
    assert summary["statuses"][case.status] == 1 and summary["cost_usd"] == line.cost_usd


async def test_client_leaving_mid_stream_is_charged_what_upstream_reports(
    tmp_path: Path, prices: meters.PriceTable
) -> None:
    faults = FaultPlan(plan=["slow_drip"], latency=Latency(drip_seconds=0.05))
    async with open_wire(tmp_path, faults=faults, allocation=Decimal("10")) as wire:
        port = int(wire.meter_url.rsplit(":", 1)[1].split("/")[0])
        payload = json.dumps({**BODY, "stream": True}).encode()
        head = (
            f"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\n"
            f"content-type: application/json\r\ncontent-length: {len(payload)}\r\n\r\n"
        )
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            await stream.send(head.encode() + payload)
            first = await stream.receive()  # the headers and a chunk or two, then hang up
        assert first.startswith(b"HTTP/1.1 200")
        with anyio.fail_after(10):
            while not (wire.ledger_dir / "ledger.jsonl").stat().st_size:
                await anyio.sleep(0.02)
        stats = wire.provider.statistics()
    (line,) = meters.read_ledger(wire.ledger_dir / "ledger.jsonl")
    assert line.status == "client_disconnected"
    assert line.output_tokens == stats.output_tokens > 0  # usage was read after the client left
    assert Decimal(line.cost_usd) == expected_charge(
        WireFault("slow_drip", True, "client_disconnected", "actual", False), line, prices
    )


async def test_a_streamed_answer_that_was_never_sent_is_still_one_line(
    tmp_path: Path, prices: meters.PriceTable
) -> None:
    """The client left before the response began: the server closes the body unread."""
    async with open_wire(tmp_path) as wire:
        config = meters.MeterConfig(
            role="host", upstream=wire.provider_url, prices=prices, ledger_dir=tmp_path / "m",
            allocation_usd=Decimal("1"),
        )  # fmt: skip
        meter = meters.Meter(config)
        payload = json.dumps({**BODY, "stream": True}).encode()
        request = meters.Request("POST", "/v1/chat/completions", [], payload)
        response = await meter(request)
        assert response.status == 200 and not isinstance(response.body, bytes)
        await response.body.aclose()  # type: ignore[attr-defined]
        assert meter.statistics().in_flight == 0
        assert meter.reserver is not None
        assert await meter.reserver.open_reservations() == []
        await meter.aclose()
        stats = wire.provider.statistics()
    (line,) = meters.read_ledger(tmp_path / "m" / "ledger.jsonl")
    assert line.status == "client_disconnected"
    assert line.output_tokens == stats.output_tokens > 0  # usage was read all the same
    assert Decimal(line.cost_usd) == expected_charge(
        WireFault("ok", True, "client_disconnected", "actual", False), line, prices
    )


async def test_budget_blocked_is_a_429_that_clients_do_not_retry(tmp_path: Path) -> None:
    async with open_wire(tmp_path, allocation=Decimal("0.0000001")) as wire:
        async with httpx.AsyncClient() as client:
            response = await client.post(f"{wire.meter_url}/chat/completions", json=BODY)
        stats = wire.provider.statistics()
    assert response.status_code == 429
    error = response.json()["error"]
    assert (error["type"], error["code"]) == ("insufficient_quota", "budget_blocked")
    assert stats.requests == 0  # nothing reached the provider
    (line,) = meters.read_ledger(wire.ledger_dir / "ledger.jsonl")
    assert (line.status, line.cost_usd) == ("budget_blocked", "0")


async def test_an_unpriced_model_is_refused_not_free(tmp_path: Path) -> None:
    async with open_wire(tmp_path) as wire:
        async with httpx.AsyncClient() as client:
            body = {**BODY, "model": "fireworks/unpriced"}
            response = await client.post(f"{wire.meter_url}/chat/completions", json=body)
        stats = wire.provider.statistics()
    assert response.status_code == 400 and response.json()["error"]["code"] == "model_unpriced"
    assert stats.requests == 0
    (line,) = meters.read_ledger(wire.ledger_dir / "ledger.jsonl")
    assert line.status == "refused"


async def test_an_unreachable_upstream_is_recorded(
    tmp_path: Path, prices: meters.PriceTable
) -> None:
    config = meters.MeterConfig(
        role="learner",
        upstream="http://127.0.0.1:9/v1",  # discard port: nothing listens
        prices=prices,
        ledger_dir=tmp_path,
        allocation_usd=Decimal(1),
    )
    meter = meters.Meter(config)
    from meters._server import Request

    request = Request("POST", "/v1/chat/completions", [], json.dumps(BODY).encode())
    response = await meter(request)
    await meter.aclose()
    assert response.status == 502
    (line,) = meters.read_ledger(tmp_path / "ledger.jsonl")
    assert (line.status, line.cost_usd) == ("upstream_unreachable", "0")
    assert (tmp_path / "meta_wire_ledger.json").exists()


async def test_an_upstream_that_encodes_anyway_is_decoded_and_metered(
    tmp_path: Path, prices: meters.PriceTable
) -> None:
    """The meter asks for identity; an upstream that gzips its answer regardless is
    decoded (the client is sent plain JSON and no content-encoding) and its usage read."""
    import gzip

    usage = {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}
    answer = {"id": "c1", "object": "chat.completion", "choices": [], "usage": usage}

    async def upstream(request: meters.Request) -> meters.Response:
        assert request.header("accept-encoding") == "identity"
        headers = [("content-type", "application/json"), ("content-encoding", "gzip")]
        return meters.Response(200, headers, gzip.compress(json.dumps(answer).encode()))

    async with anyio.create_task_group() as tg:
        upstream_port = await tg.start(meters.serve_http, upstream)
        config = meters.MeterConfig(
            role="host",
            upstream=f"http://127.0.0.1:{upstream_port}/v1",
            prices=prices,
            ledger_dir=tmp_path,
        )
        meter_port = await tg.start(meters.serve_meter, config)
        async with httpx.AsyncClient() as client:
            response = await client.post(
                f"http://127.0.0.1:{meter_port}/v1/chat/completions", json=BODY
            )
        tg.cancel_scope.cancel()
    assert "content-encoding" not in response.headers
    assert response.json() == answer
    (line,) = meters.read_ledger(tmp_path / "ledger.jsonl")
    assert (line.status, line.input_tokens, line.output_tokens) == ("ok", 7, 3)
