"""The wire meter: a faithful, metered, capped reverse proxy for OpenAI-compatible endpoints.

For each request: route it (an allow-list, ``_routes.py``), price it, reserve
its worst case, forward it (injecting the upstream key), pass the answer
through chunk by chunk, read its usage, cut it where it passes the output
reserved, settle the reservation and write one ledger line, in a ``finally``,
whatever happened. A request whose worst case does not fit the allocation is
refused with HTTP 429 ``insufficient_quota`` before anything is sent.

The client receives what the upstream sent, except three documented
adaptations: a streamed chat request that did not ask for usage gets
``stream_options.include_usage`` upstream, and the usage-only chunk this adds
is stripped; an answer asked for whole is fetched as a stream and sent whole
(``whole_as_stream``: only a stream can be cut); and the ``x-mw-request-id``
response header.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

import anyio
import anyio.abc
import anyio.to_thread
import httpx
import msgspec
import structlog

from mw_errors import ConfigError, UnpricedModel

from ._adapter import ChatToResponses, chat_request, completion_to_response
from ._assemble import Assembler, ChatAssembler, ResponsesAssembler
from ._budget import Blocked, Budget, Granted, Reservation, Reserver, reserve_waiting
from ._ledger import Ledger, LedgerLine, Status, attempt_holder, lost_attempt, read_ledger
from ._money import usd
from ._prices import PriceTable
from ._requests import RequestRefused, check_tools, encode_body, parse_request
from ._routes import ROUTES, BadTarget, route_listing, split_target
from ._server import (
    AbortConnection,
    LastChunk,
    Request,
    Response,
    ServerLimits,
    bind_http,
    openai_error,
    serve_on,
)
from ._transport import Body, LeanPool, LeanTransport
from ._usage import (
    ChatStream,
    InvalidUsage,
    ResponsesStream,
    SSEParser,
    Usage,
    chat_usage,
    responses_usage,
)
from ._wire import Listener

__all__ = ["LocalReserver", "Meter", "MeterConfig", "MeterStatistics", "serve_meter"]

log = structlog.get_logger("mw.meter")

_HOP_BY_HOP = {
    b"host",
    b"content-length",
    b"connection",
    b"keep-alive",
    b"transfer-encoding",
    b"accept-encoding",
    b"authorization",
    b"te",
    b"upgrade",
    b"proxy-authorization",
    b"idempotency-key",  # the meter sends its own, one per attempt
}
_RESPONSE_DROP = {b"content-length", b"transfer-encoding", b"connection", b"content-encoding"}
_SSE_HEADERS = ("content-type", "cache-control")  # of a stream sent on whole
END_SECONDS = 1.0  # to read the rest of an upstream's stream after its last event


@dataclass(frozen=True)
class MeterConfig:
    """How one meter runs. The key lives only here, in memory, and is never printed."""

    role: Literal["host", "learner", "judge"]
    upstream: str
    prices: PriceTable
    ledger_dir: Path
    api_key: str | None = field(default=None, repr=False)
    allocation_usd: Decimal | None = None
    drain_seconds: float = 10.0
    upstream_timeout: float = 600.0
    # The upstream speaks only Chat Completions: translate /v1/responses (the learner's).
    adapt_responses: bool = False
    # With an allocation, fetch an answer asked for whole as a stream, and send it whole:
    # only a stream can be cut where an upstream passes the output reserved for it.
    whole_as_stream: bool = True
    # How long a request blocked only by reservations still in flight waits for them to
    # settle (most settle for far less than their worst case) before it is refused.
    budget_wait_seconds: float = 120.0
    # The stated worst case, in input tokens, of one input a request names and does not
    # hold (a stored response, an image, a file): None refuses such requests.
    reference_tokens: int | None = None
    server: ServerLimits = field(default_factory=ServerLimits)

    def __post_init__(self) -> None:
        """Refuse an upstream the meter cannot speak to, and an allocation that is no amount.

        Raises:
            ConfigError: not an http(s) URL with a host, or an allocation not finite and >= 0.
        """
        try:
            url = httpx.URL(self.upstream)
        except (httpx.InvalidURL, TypeError):
            url = None
        if url is None or url.scheme not in ("http", "https") or not url.host:
            raise ConfigError(
                f"upstream {self.upstream!r} is not an http(s) URL",
                hint="give the provider's base URL, e.g. http://127.0.0.1:8000/v1",
            )
        allocation = self.allocation_usd
        if allocation is not None and (not allocation.is_finite() or allocation < 0):
            raise ConfigError(f"allocation {allocation} must be a finite amount >= 0 USD")

    def __repr__(self) -> str:  # belt and braces: no key in any repr
        return (
            f"MeterConfig(role={self.role!r}, upstream={self.upstream!r}, "
            f"ledger_dir={str(self.ledger_dir)!r}, allocation_usd={self.allocation_usd})"
        )


class MeterStatistics(msgspec.Struct, frozen=True):
    role: str
    requests: int
    in_flight: int
    statuses: dict[str, int]
    cost_usd: str


class LocalReserver:
    """An in-process :class:`Reserver` over a :class:`Budget` (for a standalone meter)."""

    def __init__(self, budget: Budget) -> None:
        self.budget = budget
        self._freed: anyio.Event | None = None  # made in the event loop, on first wait

    async def reserve(self, amount: Decimal, holder: str) -> Granted | Blocked:
        return self.budget.reserve(amount, holder, now=time.monotonic())

    async def settle(self, reservation_id: str, actual: Decimal) -> None:
        self.budget.settle(reservation_id, actual)
        self._wake()

    async def release(self, reservation_id: str) -> None:
        self.budget.release(reservation_id)
        self._wake()

    async def freed(self) -> None:
        """Wait until a reservation is settled or released (a blocked request may fit)."""
        if self._freed is None:
            self._freed = anyio.Event()
        await self._freed.wait()

    def _wake(self) -> None:
        if self._freed is not None:
            self._freed.set()
            self._freed = None

    async def open_reservations(self) -> list[Reservation]:
        return self.budget.open_reservations()


_decode = msgspec.json.Decoder().decode  # faster than json.loads on every request body


def decode_json(data: bytes) -> Any:
    """JSON, or ValueError: malformed, or nested past msgspec's recursion bound."""
    try:
        return _decode(data)
    except msgspec.DecodeError as exc:
        raise ValueError(f"the body is not JSON ({exc})") from None
    except RecursionError:
        raise ValueError("the body is JSON nested too deeply") from None


_encode = msgspec.json.Encoder().encode


async def _chunks(stream: httpx.AsyncByteStream) -> AsyncGenerator[bytes, None]:
    parts = aiter(stream)
    try:
        async for part in parts:
            yield part
    finally:  # a stream cut half-read (an overrun) closes the transport's reader, too
        aclose = getattr(parts, "aclose", None)
        if aclose is not None:
            await aclose()


async def _read(response: httpx.Response) -> bytes:
    """A response's whole body, off its stream as the transport hands it on.

    The meter asks for identity encoding, so httpx's decoders and chunkers have
    nothing to do here; an upstream that encodes anyway is decoded by httpx (the
    client is sent no ``content-encoding``).
    """
    for name, value in response.headers.raw:
        if name.lower() == b"content-encoding" and value.lower() not in (b"", b"identity"):
            return await response.aread()
    stream = response.stream
    assert isinstance(stream, httpx.AsyncByteStream)
    return b"".join([part async for part in stream])


def _output_bound(body: dict[str, Any]) -> int | None:
    """The largest output limit the body names (an upstream may honour any of them)."""
    bounds = [
        value
        for key in ("max_completion_tokens", "max_tokens", "max_output_tokens")
        if isinstance(value := body.get(key), int) and not isinstance(value, bool) and value > 0
    ]
    return max(bounds, default=None)


def _choices(body: dict[str, Any]) -> int:
    """How many answers the request asks for (Chat's ``n``): each may use the output limit."""
    n = body.get("n")
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 1 else 1


def _meter_failed(attempt: _Attempt) -> Response:
    """The 500 of a request the meter failed on: its id, no internals."""
    message = f"the meter failed on this request (id {attempt.id}); its log says why"
    return openai_error(500, "api_error", "meter_error", message)


def _refuse(attempt: _Attempt, status: int, code: str, message: str) -> Response:
    """Refuse the attempt before anything is reserved or sent."""
    attempt.status, attempt.http_status = "refused", status
    return openai_error(status, "invalid_request_error", code, message)


def _invalid(attempt: _Attempt, why: str, block: Any) -> None:
    """The upstream's usage is no usage: charged the whole reservation, never $0."""
    if attempt.status != "overrun":  # an overrun is charged the reservation too, and says more
        attempt.status = "usage_invalid"
    attempt.usage, attempt.charge_reserved = None, True
    attempt.usage_block = block if isinstance(block, dict) else None
    attempt.note = why


class _Overrun(Exception):
    """A streamed answer passed the output it was reserved for."""


# The error a translated (Responses) stream ends with, by the attempt's status.
_CUT_CODES = {"cut": "upstream_cut", "overrun": "upstream_overrun", "meter_error": "meter_error"}


class _StreamBody:
    """A streamed answer's body that is accounted for even if it is never read.

    The server closes a body it could not send (the client left before the
    response began). Closing an async generator that never started skips its
    ``finally``, which would leave the upstream open and the attempt without
    its ledger line; so an unread body is read here, for the drain time, as
    for a client that left mid-stream, then closed.
    """

    def __init__(self, body: AsyncGenerator[bytes, None], attempt: _Attempt, drain: float) -> None:
        self._body = body
        self._attempt = attempt
        self._drain = drain
        self._started = False

    def __aiter__(self) -> _StreamBody:
        return self

    async def __anext__(self) -> bytes:
        self._started = True
        return await self._body.__anext__()

    async def aclose(self) -> None:
        if not self._started:
            self._started = True
            self._attempt.status = "client_disconnected"
            with anyio.CancelScope(shield=True), anyio.move_on_after(self._drain):
                async for _ in self._body:
                    pass
        await self._body.aclose()


@dataclass
class _Attempt:
    """What one request did, filled in as it goes; becomes one ledger line."""

    id: str
    endpoint: str
    started: float
    model: str = "-"
    streamed: bool = False
    status: Status = "ok"
    http_status: int | None = None
    usage: Usage | None = None
    usage_block: dict[str, Any] | None = None
    reserved: Decimal = Decimal(0)
    reservation_id: str | None = None
    note: str = ""
    charge_reserved: bool = False
    output_ceiling: int = 0  # the output tokens reserved for
    output_floor: int = 0  # the output tokens it streamed, at least (the charge's floor)
    cleared: bool = False  # reserved (or no budget to reserve from): it may go upstream
    sent: bool = False  # handed to the upstream transport
    done: bool = False
    lent: LeanTransport | None = None  # until the upstream response is closed


class Meter:
    """The request handler of one wire meter. Close it to write the final summary."""

    def __init__(self, config: MeterConfig, reserver: Reserver | None = None) -> None:
        self.config = config
        self.ledger = Ledger(
            config.ledger_dir,
            config.role,
            allocation_usd=config.allocation_usd,
            prices_date=config.prices.date,
        )
        (config.ledger_dir / "prices.json").write_bytes(config.prices.encode())
        if reserver is None and config.allocation_usd is not None:
            reserver = LocalReserver(Budget(config.allocation_usd))
        self.reserver = reserver
        self.upstreams = LeanPool(limit=256)  # one connection per upstream attempt
        self.upstream_timeouts = httpx.Timeout(config.upstream_timeout, connect=10.0).as_dict()
        self._urls: dict[str, httpx.URL] = {}
        key = config.api_key
        self._authorization = f"Bearer {key}".encode() if key else None
        self._in_flight = 0
        self.dirty = False

    async def aclose(self) -> None:
        await self.upstreams.aclose()
        self.ledger.close()

    async def recover(self) -> list[LedgerLine]:
        """Write and settle the attempts a dead meter of this role left in flight.

        Call it once, before serving: every open reservation that names one of
        this role's attempts was made by a meter process that is gone (one meter
        per role per reserver), so its request may have been billed. Each gets a
        ``lost`` ledger line charged its reservation, and the reservation is settled.
        """
        if self.reserver is None:
            return []
        now = time.time()
        open_ = [
            (reservation, line)
            for reservation in await self.reserver.open_reservations()
            if (line := lost_attempt(reservation, self.config.role, now=now)) is not None
        ]
        if not open_:
            return []
        # An attempt stopped while it reserved wrote its line without the reservation's id:
        # the line stands (one per attempt), and settles the reservation at its cost.
        ids = {line.id for _, line in open_}
        written = {x.id: x for x in read_ledger(self.ledger.path) if x.id in ids}
        lost = []
        for reservation, line in open_:
            if line.id in written:
                await self.reserver.settle(reservation.id, Decimal(written[line.id].cost_usd))
                continue
            self.ledger.append(line)
            await self.reserver.settle(reservation.id, Decimal(line.cost_usd))
            lost.append(line)
        if lost:
            self.ledger.write_summary()
            log.warning("meter_recovered_lost_attempts", role=self.config.role, count=len(lost))
        return lost

    async def serve(self, listeners: list[Listener], *, summary_every: float = 1.0) -> None:
        """Serve on ``listeners`` until cancelled (then they are closed).

        The summary is rewritten within ``summary_every`` seconds of a change.
        Close the meter after.
        """
        async with anyio.create_task_group() as tg:
            tg.start_soon(serve_on, self, listeners, self.config.server)
            while True:
                await anyio.sleep(summary_every)
                if self.dirty:
                    self.dirty = False
                    await anyio.to_thread.run_sync(self.ledger.write_summary)

    def statistics(self) -> MeterStatistics:
        summary = self.ledger.summary()
        return MeterStatistics(
            role=self.config.role,
            requests=summary.requests,
            in_flight=self._in_flight,
            statuses={k: v for k, v in summary.statuses.items() if v},
            cost_usd=summary.cost_usd,
        )

    # -- the handler ------------------------------------------------------------------

    async def __call__(self, request: Request) -> Response:
        attempt = _Attempt(id=uuid.uuid4().hex, endpoint=request.path[:200], started=time.time())
        self._in_flight += 1
        try:
            response = await self._handle(request, attempt)
        except Exception:
            # A bug of the meter's, on this request: one line, no internals to the client.
            log.error("meter_failed", role=self.config.role, attempt=attempt.id, exc_info=True)
            attempt.status, attempt.http_status = "meter_error", 500
            attempt.charge_reserved = attempt.sent and attempt.usage is None
            response = _meter_failed(attempt)
        except BaseException:  # cancelled (the meter stops): the line says so, never `ok`
            if attempt.status == "ok" and attempt.usage is None:
                attempt.status = "lost" if attempt.sent else "refused"
                attempt.charge_reserved = attempt.sent
                attempt.note = "the meter stopped with the request in flight"
            with anyio.CancelScope(shield=True):
                await self._finish(attempt)
            raise
        if isinstance(response.body, bytes):
            await self._finish(attempt)
        response.headers.append(("x-mw-request-id", attempt.id))
        return response

    async def _handle(self, request: Request, attempt: _Attempt) -> Response:
        try:
            path, _ = split_target(request.target)
        except BadTarget as exc:
            return _refuse(attempt, 400, "bad_target", f"{exc}; ask for one of {route_listing()}")
        rule = ROUTES.get((request.method, path))
        if rule is None:
            message = (
                f"{request.method} {path} is not forwarded here; ask for one of {route_listing()}"
            )
            return _refuse(attempt, 404, "unknown_endpoint", message)
        if rule == "free":
            return await self._forward_free(request, attempt)
        try:
            parsed = parse_request(
                rule, request.body, reference_tokens=self.config.reference_tokens
            )
        except RequestRefused as exc:
            return _refuse(attempt, 400, exc.code, exc.message)
        body = parsed.body
        attempt.model, attempt.streamed = parsed.model, parsed.stream
        # Only a capped meter must cut: without an allocation, a whole answer goes as asked.
        as_stream = not attempt.streamed and self.config.whole_as_stream and bool(self.reserver)
        strip_usage, custom = False, None
        if self.config.adapt_responses and rule == "responses":
            body, custom = chat_request({**body, "stream": True} if as_stream else body)
        elif as_stream:
            body["stream"] = True
            if rule == "chat":
                body["stream_options"] = {"include_usage": True}
        elif attempt.streamed and rule == "chat":
            options = body.get("stream_options") or {}
            if not options.get("include_usage"):
                body["stream_options"] = {**options, "include_usage": True}
                strip_usage = True
        try:  # what goes upstream is this parse, and it is what is reserved for
            check_tools("responses" if custom is None and rule == "responses" else "chat", body)
            payload = encode_body(body)
        except RequestRefused as exc:
            return _refuse(attempt, 400, exc.code, exc.message)
        prices = self.config.prices
        try:
            attempt.output_ceiling = _choices(body) * prices.output_ceiling(
                attempt.model, _output_bound(body)
            )
            unheld = parsed.references * (self.config.reference_tokens or 0)
            worst = prices.worst_case(attempt.model, len(payload) + unheld, attempt.output_ceiling)
        except UnpricedModel as exc:
            return _refuse(attempt, 400, exc.code, exc.message)
        blocked = await self._reserve(attempt, worst)
        if blocked is not None:
            return blocked
        return await self._forward_metered(request, payload, attempt, strip_usage, custom)

    async def _reserve(self, attempt: _Attempt, worst: Decimal) -> Response | None:
        """Reserve ``worst`` for the attempt: None once it may go upstream, else the 429.

        Only a cleared attempt gets the upstream key (:meth:`_upstream_request`).
        """
        attempt.reserved = worst
        if self.reserver is not None:
            holder = attempt_holder(self.config.role, attempt.id, attempt.endpoint, attempt.model)
            outcome = await reserve_waiting(
                self.reserver, worst, holder, wait_seconds=self.config.budget_wait_seconds
            )
            if isinstance(outcome, Blocked):
                attempt.status, attempt.http_status = "budget_blocked", 429
                message = (
                    f"budget exhausted: this request may cost up to ${usd(worst)}, "
                    f"${outcome.remaining} of the allocation remains"
                )
                return openai_error(429, "insufficient_quota", "budget_blocked", message)
            attempt.reservation_id = outcome.id
        attempt.cleared = True
        return None

    def _upstream_request(
        self, request: Request, payload: bytes, attempt: _Attempt, target: str | None = None
    ) -> httpx.Request:
        target = target or request.target
        url = self._urls.get(target)
        if url is None:
            base = self.config.upstream.rstrip("/")
            url = httpx.URL(base + (target.removeprefix("/v1") if base.endswith("/v1") else target))
            if "?" not in target:  # parsed once; a query may be anything
                self._urls[target] = url
        headers = [(k, v) for k, v in request.headers if k.lower() not in _HOP_BY_HOP]
        headers += [
            (b"host", url.netloc),
            (b"content-length", b"%d" % len(payload)),
            (b"accept-encoding", b"identity"),
            (b"idempotency-key", attempt.id.encode()),
        ]
        if not attempt.cleared:  # by construction: every route reserves before it forwards
            raise AssertionError("an attempt that was not reserved was about to be forwarded")
        if self._authorization is not None:
            headers.append((b"authorization", self._authorization))
        # A plain Request over a ready stream, its framing headers written here: the
        # client has no defaults to merge, and httpx's encoding of ``content`` is a
        # measurable share of the meter's time per request.
        return httpx.Request(
            request.method,
            url,
            headers=headers,
            stream=httpx.ByteStream(payload),
            extensions={"timeout": self.upstream_timeouts},
        )

    async def _forward_free(self, request: Request, attempt: _Attempt) -> Response:
        """A free route (the key probe): reserved at $0, forwarded whole, charged $0."""
        blocked = await self._reserve(attempt, Decimal(0))
        if blocked is not None:
            return blocked
        try:
            upstream = await self._send(
                self._upstream_request(request, request.body, attempt), attempt
            )
            try:
                content = await _read(upstream)
            finally:
                await upstream.aclose()
                self._return(attempt)
        except httpx.HTTPError as exc:
            attempt.status, attempt.note = "upstream_unreachable", type(exc).__name__
            return openai_error(502, "api_error", "upstream_unreachable", str(exc))
        attempt.http_status = upstream.status_code
        attempt.status = "ok" if upstream.status_code < 400 else "upstream_error"
        return Response(upstream.status_code, self._headers(upstream), content)

    async def _send(self, request: httpx.Request, attempt: _Attempt) -> httpx.Response:
        """Send on a lent transport; it stays lent to ``attempt`` until :meth:`_return`."""
        transport = await self.upstreams.acquire()
        attempt.sent = True  # from here on the provider may have seen it
        try:
            response = await transport.handle_async_request(request)
        except BaseException:
            self.upstreams.release(transport)
            raise
        attempt.lent = transport
        return response

    def _return(self, attempt: _Attempt) -> None:
        """Give the attempt's upstream transport back (its response is closed)."""
        if attempt.lent is not None:
            self.upstreams.release(attempt.lent)
            attempt.lent = None

    def _headers(self, upstream: httpx.Response) -> list[tuple[str, str]]:
        return [
            (k.decode("latin-1"), v.decode("latin-1"))
            for k, v in upstream.headers.raw
            if k.lower() not in _RESPONSE_DROP
        ]

    async def _forward_metered(
        self,
        request: Request,
        payload: bytes,
        attempt: _Attempt,
        strip_usage: bool,
        adapt: set[str] | None,
    ) -> Response:
        """Forward; with ``adapt`` (custom tool names), as Chat, answering as Responses."""
        target = "/v1/chat/completions" if adapt is not None else request.path
        upstream_request = self._upstream_request(request, payload, attempt, target)
        try:
            upstream = await self._send(upstream_request, attempt)
        except httpx.ConnectError as exc:  # nothing reached the provider
            attempt.status, attempt.note = "upstream_unreachable", type(exc).__name__
            return openai_error(502, "api_error", "upstream_unreachable", str(exc))
        except httpx.HTTPError as exc:  # sent, then lost: it may have been billed
            attempt.status, attempt.note = "upstream_unreachable", type(exc).__name__
            attempt.charge_reserved = True
            return openai_error(502, "api_error", "upstream_unreachable", str(exc))
        attempt.http_status = upstream.status_code
        content_type = upstream.headers.get("content-type", "")
        if upstream.status_code >= 400 or not content_type.startswith("text/event-stream"):
            response = await self._whole(upstream, attempt, target)
            if adapt is not None and upstream.status_code < 400 and attempt.usage is not None:
                assert isinstance(response.body, bytes)
                converted = completion_to_response(decode_json(response.body), adapt)
                response.body = _encode(converted)
            return response
        if not attempt.streamed:  # asked for whole, fetched as a stream: sent whole
            return await self._assembled(upstream, attempt, target, adapt)
        translator = ChatToResponses(attempt.model, adapt) if adapt is not None else None
        body = self._stream(upstream, attempt, target, strip_usage, translator)
        return Response(
            upstream.status_code,
            self._headers(upstream),
            _StreamBody(body, attempt, self.config.drain_seconds),
        )

    async def _assembled(
        self, upstream: httpx.Response, attempt: _Attempt, path: str, adapt: set[str] | None
    ) -> Response:
        """An answer the client asked for whole, read as a stream (cut where it overruns).

        The stream is metered as any other; the client gets one JSON answer, or an
        error naming the cut, the overrun, a broken answer or the meter's failure.
        """
        chat = path == "/v1/chat/completions"
        assembler: Assembler = ChatAssembler() if chat else ResponsesAssembler()
        try:  # closed, not left to the collector, if the request is cancelled meanwhile
            async with contextlib.aclosing(
                self._stream(upstream, attempt, path, False, None, assembler)
            ) as parts:
                async for _ in parts:
                    pass
        except AbortConnection:
            code = _CUT_CODES.get(attempt.status, "upstream_cut")
            if code == "meter_error":
                return _meter_failed(attempt)
            return openai_error(502, "api_error", code, f"the upstream's answer was cut ({code})")
        answer = assembler.answer() if assembler.complete() else None
        if answer is None:
            return openai_error(502, "api_error", "upstream_malformed", attempt.note)
        if adapt is not None:
            answer = completion_to_response(answer, adapt)
        headers = [(k, v) for k, v in self._headers(upstream) if k.lower() not in _SSE_HEADERS]
        return Response(
            upstream.status_code, [*headers, ("content-type", "application/json")], _encode(answer)
        )

    async def _whole(self, upstream: httpx.Response, attempt: _Attempt, path: str) -> Response:
        try:
            content = await _read(upstream)
        except httpx.HTTPError as exc:
            attempt.status, attempt.note, attempt.charge_reserved = "cut", type(exc).__name__, True
            return openai_error(502, "api_error", "upstream_cut", str(exc))
        finally:
            await upstream.aclose()
            self._return(attempt)
        block = None
        try:
            decoded = decode_json(content)
            block = decoded.get("usage") if isinstance(decoded, dict) else None
        except ValueError:
            attempt.note = "the body is not JSON"
        self._take_usage(attempt, block, path)
        if attempt.status == "usage_invalid":
            pass
        elif upstream.status_code >= 400:
            attempt.status = "upstream_error"
            # A provider that answers 5xx may have done the work; 4xx means it refused.
            attempt.charge_reserved = attempt.usage is None and upstream.status_code >= 500
        elif attempt.usage is None:
            attempt.status, attempt.charge_reserved = "unmetered", True
        return Response(upstream.status_code, self._headers(upstream), content)

    def _take_usage(self, attempt: _Attempt, block: Any, path: str) -> None:
        """The answer's usage, checked: one that is no usage is charged the reservation."""
        try:
            usage = chat_usage(block) if path == "/v1/chat/completions" else responses_usage(block)
        except InvalidUsage as exc:
            _invalid(attempt, exc.message, block)
            return
        if usage is not None:
            attempt.usage, attempt.usage_block = usage, block

    async def _stream(
        self,
        upstream: httpx.Response,
        attempt: _Attempt,
        path: str,
        strip_usage: bool,
        translator: ChatToResponses | None,
        assembler: Assembler | None = None,
    ) -> AsyncGenerator[bytes, None]:
        """The client's stream; with ``assembler``, fed to it instead (the client gets it whole).

        The accounting, in ``finally``, is the same either way; the attempt's
        ``http_status`` is what the client is answered.
        """
        parser = SSEParser()
        chat = ChatStream() if path == "/v1/chat/completions" else None
        responses = ResponsesStream() if chat is None else None
        tracker: ChatStream | ResponsesStream = chat or responses  # type: ignore[assignment]
        # The transport's own body stream: identity-encoded bytes as they come, without
        # httpx's chunker and bookkeeping on top.
        stream = upstream.stream
        assert isinstance(stream, Body)  # every upstream answer comes on the lean transport
        chunks = _chunks(stream)
        delivered = False
        try:
            async for chunk in chunks:
                out = bytearray()
                for event in parser.feed(chunk):
                    if chat is not None:
                        if chat.observe(event) and strip_usage:
                            continue
                    elif responses is not None:
                        responses.observe(event)
                    if tracker.bound > attempt.output_ceiling:
                        raise _Overrun  # this event was not reserved for: it is not relayed
                    if assembler is not None:
                        assembler.feed(event, tracker.decoded)
                        continue
                    out += b"".join(translator.feed(event.raw)) if translator else event.raw
                if (chat is not None and chat.done) or (responses and responses.terminal):
                    break  # the protocol's last event: end the client's stream now
                if out:
                    yield bytes(out)
            else:
                out = bytearray()
            # The end goes out with the last bytes, before the accounting (in ``finally``).
            out += b"".join(translator.finish()) if translator is not None else parser.tail()
            if assembler is not None and not assembler.complete():
                attempt.http_status = 502  # the client is told its answer came broken
                attempt.note = "the upstream's stream was not a whole answer (malformed or cut)"
            delivered = True
            yield LastChunk(out)
        except Exception as exc:  # a cut, an overrun, or a bug of the meter's
            if isinstance(exc, httpx.HTTPError):
                attempt.status, attempt.note = "cut", type(exc).__name__
            elif isinstance(exc, _Overrun):
                attempt.status, attempt.charge_reserved = "overrun", True
                attempt.note = (
                    f"the upstream streamed past the {attempt.output_ceiling} output tokens "
                    "reserved for it; the meter cut it there"
                )
            else:
                log.error("meter_failed", role=self.config.role, attempt=attempt.id, exc_info=True)
                attempt.status = "meter_error"
            if assembler is not None:  # what the whole answer's client is told
                attempt.http_status = 500 if attempt.status == "meter_error" else 502
            delivered = True
            if translator is None:
                raise AbortConnection from None  # the client sees the cut, as from the upstream
            yield LastChunk(b"".join(translator.finish(error=_CUT_CODES[attempt.status])))
        finally:
            if not delivered:
                # The client went away: keep reading, for a bounded time, to learn the usage.
                attempt.status = "client_disconnected"
                with anyio.CancelScope(shield=True), anyio.move_on_after(self.config.drain_seconds):
                    await self._drain(chunks, parser, tracker, attempt)
            with anyio.CancelScope(shield=True):
                if attempt.status != "overrun":  # an overrun's upstream is closed at once
                    # Its end, read within a second to keep its connection: a deadline the
                    # body keeps (no cancel scope per request; the end is most often here).
                    stream.finish_by(anyio.current_time() + END_SECONDS)
                    await self._drain(chunks, parser, tracker, attempt)
                await chunks.aclose()
                await upstream.aclose()
                self._return(attempt)
                attempt.output_floor = tracker.floor
                if tracker.invalid is not None:
                    _invalid(attempt, tracker.invalid, tracker.usage_block)
                elif tracker.usage is not None:
                    attempt.usage, attempt.usage_block = tracker.usage, tracker.usage_block
                elif attempt.status == "ok":
                    attempt.status = "unmetered"
                if attempt.usage is None:
                    attempt.charge_reserved = True
                await self._finish(attempt)

    async def _drain(
        self,
        chunks: AsyncIterator[bytes],
        parser: SSEParser,
        tracker: ChatStream | ResponsesStream,
        attempt: _Attempt,
    ) -> None:
        # Read to the end (the caller bounds the time): a stream abandoned half-read
        # leaves httpx's inner iterators to the garbage collector. An upstream that
        # passes its reserved output meanwhile is not read further.
        try:
            async for chunk in chunks:
                for event in parser.feed(chunk):
                    tracker.observe(event)
                if tracker.bound > attempt.output_ceiling:
                    attempt.status = "overrun"
                    return
        except httpx.HTTPError:
            return

    # -- accounting --------------------------------------------------------------------

    async def _finish(self, attempt: _Attempt) -> None:
        """Charge the attempt, write its one ledger line, settle its reservation."""
        if attempt.done:
            return
        attempt.done = True
        self._in_flight -= 1
        if attempt.usage is not None and attempt.model != "-":
            if attempt.output_floor > attempt.usage.output_tokens:
                # The upstream reported less output than it streamed: charged what it streamed.
                attempt.note = (
                    f"the upstream reported {attempt.usage.output_tokens} output tokens and "
                    f"streamed at least {attempt.output_floor}: charged {attempt.output_floor}"
                )
                attempt.usage = msgspec.structs.replace(
                    attempt.usage, output_tokens=attempt.output_floor
                )
            cost = self.config.prices.cost(attempt.model, attempt.usage)
            if cost > attempt.reserved and attempt.status in ("ok", "client_disconnected"):
                # The upstream ignored the request's limit: it is charged in full, and
                # the allocation it overdraws refuses every request after it.
                attempt.status = "overrun"
                attempt.note = f"usage past the reservation of ${usd(attempt.reserved)}"
        elif attempt.charge_reserved:
            cost = attempt.reserved
        else:
            cost = Decimal(0)
        line = LedgerLine.charge(
            attempt.usage,
            id=attempt.id,
            role=self.config.role,
            model=attempt.model,
            endpoint=attempt.endpoint,
            started=attempt.started,
            ended=time.time(),
            status=attempt.status,
            http_status=attempt.http_status,
            streamed=attempt.streamed,
            usage=attempt.usage_block,
            cost_usd=usd(cost),
            reservation_id=attempt.reservation_id,
            reserved_usd=usd(attempt.reserved),
            note=attempt.note,
        )
        self.ledger.append(line)
        self.dirty = True
        if attempt.reservation_id is not None and self.reserver is not None:
            await self.reserver.settle(attempt.reservation_id, cost)


async def serve_meter(
    config: MeterConfig,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    reserver: Reserver | None = None,
    summary_every: float = 1.0,
    task_status: anyio.abc.TaskStatus[Any] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Run a meter until cancelled; report its port through ``task_status``.

    The summary is rewritten from the lines within ``summary_every`` seconds of
    a change, and once more on the way out.
    """
    meter = Meter(config, reserver)
    try:
        await meter.recover()
        listeners = bind_http(host, port)
        task_status.started(listeners[0].port)
        await meter.serve(listeners, summary_every=summary_every)
    finally:
        with anyio.CancelScope(shield=True):
            await meter.aclose()
