"""A hostile client against a wire meter: no spelling of a request bypasses the cap.

The tables are in ``tests/scenarios/meter_attacks.py``; the upstream needs
the key, so a request forwarded with the key injected would be answered.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import httpx
import msgspec
import pytest

import meters
from mw_actors.provider import FaultPlan, Latency, Reply, ScriptedEngine

from ..scenarios.meter_attacks import (
    BAD_BODIES,
    BYPASSES,
    LIARS,
    OVERRUNS,
    RESERVATIONS,
    SHAPES,
    Attack,
    Liar,
    Overrun,
)
from .conftest import SECRET, open_wire

pytestmark = pytest.mark.anyio


async def send_raw(port: int, method: str, target: str, body: bytes) -> tuple[int, bytes]:
    """One request as bytes on a socket; the answer's status and body."""
    head = (
        f"{method} {target} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    got = b""
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        await stream.send(head.encode("latin-1") + body)
        with anyio.fail_after(10):
            while True:
                try:
                    got += await stream.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    break
    status_line, _, rest = got.partition(b"\r\n")
    return int(status_line.split(b" ")[1]), rest.partition(b"\r\n\r\n")[2]


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/")[0])


@pytest.mark.parametrize("attack", [*BYPASSES, *BAD_BODIES], ids=lambda a: a.name)
async def test_no_spelling_of_a_request_passes_the_cap(tmp_path: Path, attack: Attack) -> None:
    async with open_wire(tmp_path, allocation=Decimal("0.0001"), provider_key=SECRET) as wire:
        status, body = await send_raw(
            port_of(wire.meter_url), attack.method, attack.target, attack.body
        )
        received = wire.provider.statistics().received
    assert status == attack.status, body
    assert received == (1 if attack.forwarded else 0)
    if attack.method != "HEAD" and status != 200:
        error = json.loads(body)["error"]  # an OpenAI-style error, as the SDKs parse it
        assert error["type"] in ("invalid_request_error", "insufficient_quota")
    (line,) = meters.read_ledger(wire.ledger_dir / "ledger.jsonl")
    assert (line.status, line.http_status, line.cost_usd) == (attack.ledger, attack.status, "0")


@pytest.mark.parametrize(("limits", "reserved_output", "answered"), RESERVATIONS, ids=str)
async def test_a_request_is_reserved_the_most_output_it_may_be_answered(
    tmp_path: Path,
    prices: meters.PriceTable,
    limits: dict[str, object],
    reserved_output: int | None,
    answered: int,
) -> None:
    body = json.loads(BYPASSES[0].body) | limits
    payload = json.dumps(body).encode()
    async with open_wire(tmp_path, allocation=Decimal(1), whole_as_stream=False) as wire:
        status, _ = await send_raw(port_of(wire.meter_url), "POST", "/v1/chat/completions", payload)
        received = wire.provider.statistics().received
    assert status == answered
    (line,) = meters.read_ledger(wire.ledger_dir / "ledger.jsonl")
    if reserved_output is None:  # refused by the meter: nothing reserved, nothing sent
        assert (line.status, line.reserved_usd, received) == ("refused", "0", 0)
        return
    # reserved on what it forwards: the body it parsed, re-encoded
    forwarded = len(msgspec.json.encode(body))
    worst = prices.worst_case("local/scripted", forwarded, reserved_output)
    assert Decimal(line.reserved_usd) == worst


LONG = ScriptedEngine([Reply(content=" ".join(f"w{i}" for i in range(400)))])
LIMIT = 20


def ask_for(endpoint: str, stream: bool) -> dict[str, object]:
    if endpoint == "responses":
        return {
            "model": "local/scripted",
            "input": "talk",
            "max_output_tokens": LIMIT,
            "stream": stream,
        }
    messages = [{"role": "user", "content": "talk"}]
    return {"model": "local/scripted", "messages": messages, "max_tokens": LIMIT, "stream": stream}


async def read_raw(
    client: httpx.AsyncClient, url: str, body: dict[str, object]
) -> tuple[bytes, bool]:
    """What a client was sent for ``body``, as bytes, and whether it saw an error (or a cut)."""
    raw = b""
    try:
        async with client.stream("POST", url, json=body) as response:
            async for chunk in response.aiter_raw():
                raw += chunk
            return raw, response.status_code >= 400
    except httpx.HTTPError:
        return raw, True


def output_deltas(raw: bytes) -> int:
    """How many output deltas a client was relayed."""
    deltas = 0
    for event in meters.SSEParser().feed(raw):
        if event.event == "response.output_text.delta":
            deltas += 1
        elif event.data.startswith("{") and json.loads(event.data).get("choices"):
            deltas += sum(
                bool(c["delta"].get("content")) for c in json.loads(event.data)["choices"]
            )
    return deltas


def overrun_id(case: Overrun) -> str:
    fetched = "" if case.whole_as_stream or case.stream else "-fetched-whole"
    return f"{case.endpoint}-{'stream' if case.stream else 'whole'}{fetched}-{case.fault}"


@pytest.mark.parametrize("case", OVERRUNS, ids=overrun_id)
async def test_an_upstream_past_its_max_tokens_never_overdraws_unseen(
    tmp_path: Path, case: Overrun, prices: meters.PriceTable
) -> None:
    faults = FaultPlan(plan=[case.fault])  # type: ignore[list-item]
    allocation = Decimal("0.0005")  # a few reservations; one full answer overdraws it
    async with (
        open_wire(
            tmp_path, allocation=allocation, engine=LONG, faults=faults,
            whole_as_stream=case.whole_as_stream,
        ) as wire,
        httpx.AsyncClient(timeout=20) as client,
    ):  # fmt: skip
        raw, error = await read_raw(
            client, f"{wire.meter_url}/{case.endpoint}", ask_for(case.endpoint, case.stream)
        )
        probe = await client.get(f"{wire.meter_url}/models")
    (line, probe_line) = meters.read_ledger(wire.ledger_dir / "ledger.jsonl")
    assert line.status == case.status, line.note
    cost, reserved = Decimal(line.cost_usd), Decimal(line.reserved_usd)
    if case.charge == "reserved":  # cut where it passed its limit: the client saw no more
        assert error and cost == reserved
        if case.stream:
            assert output_deltas(raw) <= LIMIT
        else:
            assert json.loads(raw)["error"]["code"] == "upstream_overrun"
    elif case.charge == "full":  # a whole answer cannot be cut: charged all it used
        assert not error and cost == prices.cost(line.model, meters.Usage(
            input_tokens=line.input_tokens, output_tokens=line.output_tokens
        )) > reserved  # fmt: skip
        assert line.output_tokens > LIMIT
    else:
        assert not error and cost <= reserved and line.output_tokens <= LIMIT
    overdrawn = cost > allocation
    assert probe.status_code == (429 if overdrawn else 200)
    assert probe_line.status == ("budget_blocked" if overdrawn else "ok")


@pytest.mark.parametrize(("name", "endpoint", "body", "code"), SHAPES, ids=[s[0] for s in SHAPES])
async def test_a_request_two_readers_could_read_two_ways_is_refused(
    tmp_path: Path, name: str, endpoint: str, body: bytes, code: str
) -> None:
    """The meter forwards only what it parsed and reserved for: an ambiguous body is a 400."""
    async with open_wire(tmp_path, allocation=Decimal(1)) as wire:
        status, answer = await send_raw(port_of(wire.meter_url), "POST", f"/v1/{endpoint}", body)
        received = wire.provider.statistics().received
    assert (status, json.loads(answer)["error"]["code"]) == (400, code), answer
    assert received == 0
    (line,) = meters.read_ledger(wire.ledger_dir / "ledger.jsonl")
    assert (line.status, line.reserved_usd, line.cost_usd) == ("refused", "0", "0")


# The SDK's own connect timeout is 5 s: on a busy machine, 200 connections at once
# waited longer than that to be accepted, gave up unseen by the meter, and the ledger
# had fewer lines than requests. A hang guard, not a measure of speed.
PATIENT = httpx.Timeout(300.0, connect=120.0)


async def sdk_stream(client: Any, endpoint: str) -> None:
    """One openai SDK stream asking for ``LIMIT`` tokens, read to its end.

    Refused (an API error) or cut past its reservation (the SDK does not wrap the cut)
    is an answer too.
    """
    import openai

    try:
        if endpoint == "responses":
            stream: Any = await client.responses.create(
                model="local/scripted", input="talk", max_output_tokens=LIMIT, stream=True
            )
        else:
            stream = await client.chat.completions.create(
                model="local/scripted",
                messages=[{"role": "user", "content": "talk"}],
                max_tokens=LIMIT,
                stream=True,
            )
        async for _ in stream:
            pass
    except (openai.APIError, httpx.RemoteProtocolError):
        pass


def relayed_outputs(raw: bytes) -> int:
    """Events a client was relayed that carry output, in any shape (the SDK reads them all)."""
    count = 0
    for event in meters.SSEParser().feed(raw):
        try:
            data = json.loads(event.data)
        except ValueError:
            continue
        if isinstance(data, dict) and str(data.get("type", "")).endswith(".delta"):
            count += 1
        elif isinstance(data, dict):
            for choice in data.get("choices") or []:
                delta = {k: v for k, v in choice.get("delta", {}).items() if k != "role" and v}
                count += bool(delta)
    return count


def liar_id(case: Liar) -> str:
    return f"{case.fault}-{case.endpoint.split('/')[0]}-{'stream' if case.stream else 'whole'}"


@pytest.mark.parametrize("case", LIARS, ids=liar_id)
async def test_an_upstream_is_charged_what_it_did_not_what_it_says(
    tmp_path: Path, case: Liar
) -> None:
    faults = FaultPlan(plan=[case.fault])  # type: ignore[list-item]
    async with (
        open_wire(tmp_path, allocation=Decimal("0.01"), engine=LONG, faults=faults) as wire,
        httpx.AsyncClient(timeout=20) as client,
    ):
        raw, error = await read_raw(
            client, f"{wire.meter_url}/{case.endpoint}", ask_for(case.endpoint, case.stream)
        )
        generated = wire.provider.statistics().output_tokens
    (line,) = meters.read_ledger(wire.ledger_dir / "ledger.jsonl")
    assert line.status == case.status, line.note
    cost, reserved = Decimal(line.cost_usd), Decimal(line.reserved_usd)
    assert cost > 0
    if case.charge == "reserved":
        assert cost == reserved
        if case.status == "overrun":  # cut where it passed its limit: the client saw no more
            assert error and (relayed_outputs(raw) <= LIMIT or not case.stream)
    else:  # each delta of the local provider is one token: the floor is all it made
        assert not error and line.output_tokens == generated > 1
        assert "reported 1 output tokens" in line.note


@pytest.mark.parametrize("fault", sorted({case.fault for case in LIARS}))
@pytest.mark.filterwarnings(  # see test_wire.py: the SDK's own iterators on trio
    "ignore:Exception ignored in. <async_generator object:pytest.PytestUnraisableExceptionWarning"
)
async def test_fifty_sdk_requests_to_a_lying_upstream_stay_within_the_allocation(
    tmp_path: Path, prices: meters.PriceTable, fault: str
) -> None:
    """Each lie, 50 concurrent SDK requests at once: the ledger never passes the allocation."""
    import openai

    endpoint = "responses" if fault == "renamed_events" else "chat/completions"
    body = ask_for(endpoint, True)
    allocation = prices.worst_case("local/scripted", len(json.dumps(body)), LIMIT) * 20
    faults = FaultPlan(plan=[fault])  # type: ignore[list-item]
    async with open_wire(tmp_path, allocation=allocation, engine=LONG, faults=faults) as wire:
        client = openai.AsyncOpenAI(
            base_url=wire.meter_url, api_key="-", max_retries=0, timeout=PATIENT
        )

        async with anyio.create_task_group() as tg:
            for _ in range(50):
                tg.start_soon(sdk_stream, client, endpoint)
        await client.close()
    lines = meters.read_ledger(wire.ledger_dir / "ledger.jsonl")
    assert len(lines) == 50
    spent = sum((Decimal(line.cost_usd) for line in lines), Decimal(0))
    assert 0 < spent <= allocation
    assert all(Decimal(line.cost_usd) >= 0 for line in lines)


@pytest.mark.slow
async def test_many_sdk_streams_against_an_upstream_past_its_limits(
    tmp_path: Path, prices: meters.PriceTable
) -> None:
    """200 concurrent SDK streams, each answered 400 tokens to max_tokens=20: spend holds."""
    import openai

    body = ask_for("chat/completions", True)
    worst = prices.worst_case("local/scripted", len(json.dumps(body)), LIMIT)
    for round_ in range(3):
        allocation = worst * 60
        faults = FaultPlan(plan=["ignore_max_tokens"])
        async with open_wire(
            tmp_path / str(round_), allocation=allocation, engine=LONG, faults=faults
        ) as wire:
            client = openai.AsyncOpenAI(
                base_url=wire.meter_url, api_key="-", max_retries=0, timeout=PATIENT
            )

            async with anyio.create_task_group() as tg:
                for _ in range(200):
                    tg.start_soon(sdk_stream, client, "chat/completions")
            await client.close()
        lines = meters.read_ledger(wire.ledger_dir / "ledger.jsonl")
        assert len(lines) == 200
        spent = sum((Decimal(line.cost_usd) for line in lines), Decimal(0))
        assert spent <= allocation, f"round {round_}: spent {spent} of {allocation}"
        statuses = {line.status for line in lines}
        assert statuses == {"overrun", "budget_blocked"}, statuses


async def test_a_meter_bug_before_sending_releases_its_reservation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def planted(*args: object) -> None:
        raise RuntimeError("a bug planted before the upstream request")

    monkeypatch.setattr(meters.Meter, "_upstream_request", planted)
    reserver = meters.LocalReserver(meters.Budget(Decimal(1)))
    async with open_wire(tmp_path, reserver=reserver) as wire:
        status, body = await send_raw(
            port_of(wire.meter_url), "POST", "/v1/chat/completions", BYPASSES[0].body
        )
        received = wire.provider.statistics().received
    assert status == 500 and b"planted" not in body
    assert received == 0
    (line,) = meters.read_ledger(wire.ledger_dir / "ledger.jsonl")
    assert (line.status, line.cost_usd) == ("meter_error", "0")
    assert reserver.budget.open_reservations() == [] and reserver.budget.settled == 0


class StallingReserver(meters.LocalReserver):
    """Grants a reservation, then never answers: the meter is stopped while it waits."""

    stall = True

    async def reserve(self, amount: Decimal, holder: str) -> meters.Granted | meters.Blocked:
        outcome = await super().reserve(amount, holder)
        if self.stall:
            await anyio.sleep_forever()
        return outcome


@pytest.mark.parametrize("where", ["reserving", "in flight"])
async def test_a_meter_stopped_mid_request_writes_one_true_line(
    tmp_path: Path, prices: meters.PriceTable, where: str
) -> None:
    """Stopped while it reserved (nothing sent) or with the request upstream: never `ok` at $0.

    Restarted, the meter writes no second line for that attempt (it once wrote `lost` too).
    """
    reserver = StallingReserver(meters.Budget(Decimal(1)))
    reserver.stall = where == "reserving"
    faults = FaultPlan(latency=Latency(first_token_seconds=30))
    async with open_wire(tmp_path, faults=faults) as wire:
        config = meters.MeterConfig(
            role="host", upstream=wire.provider_url, prices=prices, ledger_dir=tmp_path / "m"
        )
        meter = meters.Meter(config, reserver)
        request = meters.Request("POST", "/v1/chat/completions", [], BYPASSES[0].body)
        with anyio.move_on_after(0.5):
            await meter(request)
        await meter.aclose()
        received = wire.provider.statistics().received
        (line,) = meters.read_ledger(tmp_path / "m" / "ledger.jsonl")
        assert received == (0 if where == "reserving" else 1)
        if where == "reserving":
            assert (line.status, line.cost_usd, line.reservation_id) == ("refused", "0", None)
            assert len(reserver.budget.open_reservations()) == 1  # granted, never answered
        else:
            assert (line.status, line.cost_usd) == ("lost", line.reserved_usd)
            assert reserver.budget.open_reservations() == []
        reserver.stall = False
        again = meters.Meter(config, reserver)
        assert await again.recover() == []  # the attempt has its line: no second one
        await again.aclose()
    assert len(meters.read_ledger(tmp_path / "m" / "ledger.jsonl")) == 1
    assert reserver.budget.open_reservations() == []
    assert reserver.budget.settled == Decimal(line.cost_usd)


@pytest.mark.parametrize(
    ("data", "counted"),
    [
        ('{"choices": [{"delta": {"role": "assistant", "content": ""}}]}', 0),
        ('{"choices": [{"delta": {"content": "hi"}}]}', 1),
        ('{"choices":[{"delta":{"content":"\\"q"}}]}', 1),
        ('{"choices": [{"delta": {"reasoning_content": "think"}}]}', 1),
        ('{"choices": [{"delta": {"content": null}, "finish_reason": "stop"}]}', 0),
        ('{"choices": [{"delta": {"tool_calls": [{"function": {"arguments": "{\\"a"}}]}}]}', 1),
        ('{"choices": [{"delta": {"\\u0063ontent": "escaped key"}}]}', 1),
        ('{"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 2}}', 0),
        ('{"choices": [{"delta": {"content": "a", "reasoning_content": "b"}}]}', 1),
    ],
)
async def test_a_chunk_with_output_counts_once_however_it_is_spelled(
    data: str, counted: int
) -> None:
    stream = meters.ChatStream()
    stream.observe(meters.ServerSentEvent(None, data, b""))
    assert stream.floor == stream.bound == counted
