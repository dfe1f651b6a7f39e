"""A hostile client of a wire meter, as tables: what it sends and what the meter must answer.

Every row is sent over a raw socket (an HTTP client would normalise the
target before it left), to a meter whose allocation is exhausted and whose
upstream needs the key the meter injects. No row may reach the upstream,
except the free key probe, and every row is one ledger line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

CHAT = json.dumps(
    {"model": "local/scripted", "messages": [{"role": "user", "content": "balance of A-1?"}]}
).encode()
RESPONSES = json.dumps({"model": "local/scripted", "input": "balance of A-1?"}).encode()


@dataclass(frozen=True)
class Attack:
    name: str
    method: str
    target: str
    status: int  # what the meter answers
    ledger: str  # the status of its one ledger line
    body: bytes = CHAT
    forwarded: bool = False  # whether it reaches the upstream


BYPASSES = [
    Attack("lower-case method", "post", "/v1/chat/completions", 404, "refused"),
    Attack("mixed-case method", "Post", "/v1/chat/completions", 404, "refused"),
    Attack("fragment", "POST", "/v1/chat/completions#x", 400, "refused"),
    Attack("empty fragment", "POST", "/v1/responses#", 400, "refused"),
    Attack("dot-dot segment", "POST", "/v1/x/../chat/completions", 400, "refused"),
    Attack("dot segment", "POST", "/v1/./chat/completions", 400, "refused"),
    Attack("trailing slash", "POST", "/v1/chat/completions/", 400, "refused"),
    Attack("empty segment", "POST", "//v1/chat/completions", 400, "refused"),
    Attack("percent-encoded", "POST", "/v1/chat/%63ompletions", 400, "refused"),
    Attack("absolute form", "POST", "http://127.0.0.1/v1/chat/completions", 400, "refused"),
    Attack("NUL in the target", "POST", "/v1/chat/completions\0", 400, "refused"),
    Attack("control character", "POST", "/v1/chat/\x7fcompletions", 400, "refused"),
    Attack("legacy completions", "POST", "/v1/completions", 404, "refused"),
    Attack("embeddings", "POST", "/v1/embeddings", 404, "refused"),
    Attack("upper-case path", "POST", "/V1/chat/completions", 404, "refused"),
    Attack("path parameter", "POST", "/v1/chat/completions;x", 404, "refused"),
    Attack("PUT on chat", "PUT", "/v1/chat/completions", 404, "refused"),
    Attack("GET on chat", "GET", "/v1/chat/completions", 404, "refused", body=b""),
    Attack("POST on models", "POST", "/v1/models", 404, "refused"),
    Attack("HEAD on models", "HEAD", "/v1/models", 404, "refused", body=b""),
    Attack("DELETE a model", "DELETE", "/v1/models/x", 404, "refused", body=b""),
    # The real endpoints: metered, so refused by the exhausted allocation.
    Attack("chat", "POST", "/v1/chat/completions", 429, "budget_blocked"),
    Attack(
        "chat with a query", "POST", "/v1/chat/completions?api-version=1", 429, "budget_blocked"
    ),
    Attack("responses", "POST", "/v1/responses", 429, "budget_blocked", body=RESPONSES),
    # The key probe is free: reserved at $0, so it goes while nothing is overdrawn.
    Attack("key probe", "GET", "/v1/models", 200, "ok", body=b"", forwarded=True),
]

# The output limits a chat request names, and the output tokens it must be reserved for:
# the largest an upstream may honour, times the answers asked for (the model's ceiling,
# 256 for local/scripted, when none is given). A limit that is no integer >= 1 is refused
# by the meter itself (400, nothing reserved): None.
RESERVATIONS: list[tuple[dict[str, object], int | None, int]] = [
    ({"max_completion_tokens": 1, "max_tokens": 200}, 200, 200),
    ({"max_tokens": 5, "max_output_tokens": 7}, None, 400),  # not a chat field
    ({"max_tokens": 10, "n": 3}, 30, 200),
    ({}, 256, 200),
    ({"max_tokens": "100"}, None, 400),
    ({"max_tokens": True}, None, 400),
    ({"max_tokens": 0}, None, 400),
    ({"max_tokens": 5.0}, None, 400),
    ({"n": "8"}, None, 400),
    ({"n": 8.0}, None, 400),
    ({"n": "5e0"}, None, 400),
    ({"n": 0}, None, 400),
    ({"n": 129}, None, 400),
]

_DEEP = b'{"model": "local/scripted", "messages": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"

BAD_BODIES = [
    Attack(
        "stream_options not an object",
        "POST",
        "/v1/chat/completions",
        400,
        "refused",
        body=json.dumps({**json.loads(CHAT), "stream": True, "stream_options": "x"}).encode(),
    ),
    Attack("JSON 50,000 deep", "POST", "/v1/chat/completions", 400, "refused", body=_DEEP),
    Attack("a JSON list", "POST", "/v1/chat/completions", 400, "refused", body=b"[]"),
    Attack("not JSON", "POST", "/v1/responses", 400, "refused", body=b"{model"),
]


@dataclass(frozen=True)
class Overrun:
    """An upstream asked for ``max_tokens`` that answers with far more (or honours it)."""

    endpoint: str  # chat/completions or responses
    stream: bool
    fault: str  # ignore_max_tokens: the upstream's bug; none: it honours the limit
    status: str  # the ledger line's
    charge: str  # reserved (cut where it passed), full (past the reservation), within
    whole_as_stream: bool = True  # the meter's default: a whole answer is fetched as a stream


_IGNORES = "ignore_max_tokens"
OVERRUNS = [
    Overrun("chat/completions", stream=True, fault=_IGNORES, status="overrun", charge="reserved"),
    Overrun("responses", stream=True, fault=_IGNORES, status="overrun", charge="reserved"),
    Overrun("chat/completions", stream=False, fault=_IGNORES, status="overrun", charge="reserved"),
    Overrun("responses", stream=False, fault=_IGNORES, status="overrun", charge="reserved"),
    # Fetched whole (whole_as_stream off), it cannot be cut: charged in full, then refused.
    Overrun("chat/completions", False, _IGNORES, "overrun", "full", whole_as_stream=False),
    Overrun("responses", False, _IGNORES, "overrun", "full", whole_as_stream=False),
    Overrun("chat/completions", stream=True, fault="none", status="ok", charge="within"),
    Overrun("chat/completions", stream=False, fault="none", status="ok", charge="within"),
    Overrun("responses", stream=False, fault="none", status="ok", charge="within"),
    Overrun("responses", stream=True, fault="none", status="ok", charge="within"),
]


@dataclass(frozen=True)
class SlowClient:
    """A client that holds a connection: it sends ``opening``, then ``drip`` a byte at a time."""

    name: str
    opening: bytes
    drip: bytes
    answer: bytes  # how the server's answer starts (b"": it closes without one)


_408 = b"HTTP/1.1 408 "
SLOW_CLIENTS = [
    SlowClient("idle", b"", b"", b""),
    SlowClient("slow head", b"POST /x HTTP/1.1\r\n", b"x-pad: " + b"a" * 200, _408),
    SlowClient(
        "slow body",
        b"POST /x HTTP/1.1\r\ncontent-length: 400\r\n\r\n",
        b"b" * 400,
        _408,
    ),
    SlowClient(
        "slow chunks",
        b"POST /x HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n",
        b"1\r\na\r\n" * 100,
        _408,
    ),
]


@dataclass(frozen=True)
class Liar:
    """An upstream whose answer a meter must not believe as it comes."""

    fault: str  # the local provider's fault that plays it
    endpoint: str  # chat/completions or responses
    stream: bool  # what the client asks for (a capped meter fetches a whole answer streamed)
    status: str  # the ledger line's
    charge: str  # reserved: its whole reservation; floor: at least the output it streamed


LIARS = [
    # Usage that is no usage: charged the whole reservation, never $0 or less.
    Liar("usage_empty", "chat/completions", True, "usage_invalid", "reserved"),
    Liar("usage_empty", "responses", False, "usage_invalid", "reserved"),
    Liar("usage_float", "chat/completions", False, "usage_invalid", "reserved"),
    Liar("usage_float", "responses", True, "usage_invalid", "reserved"),
    Liar("usage_string", "chat/completions", True, "usage_invalid", "reserved"),
    Liar("usage_string", "responses", True, "usage_invalid", "reserved"),
    Liar("usage_negative", "chat/completions", True, "usage_invalid", "reserved"),
    Liar("usage_negative", "responses", False, "usage_invalid", "reserved"),
    Liar("cached_over_input", "chat/completions", True, "usage_invalid", "reserved"),
    Liar("cached_over_input", "responses", True, "usage_invalid", "reserved"),
    # Less output reported than streamed: charged what it streamed.
    Liar("usage_understated", "chat/completions", True, "ok", "floor"),
    Liar("usage_understated", "responses", True, "ok", "floor"),
    Liar("usage_understated", "chat/completions", False, "ok", "floor"),
    # Past max_tokens, in a shape a meter may not count: cut where it passed.
    Liar("audio_transcript", "chat/completions", True, "overrun", "reserved"),
    Liar("content_parts", "chat/completions", True, "overrun", "reserved"),
    Liar("content_parts", "chat/completions", False, "overrun", "reserved"),
    Liar("renamed_events", "responses", True, "overrun", "reserved"),
]

_BASE = json.loads(CHAT)
# A request the meter and a lenient upstream could read two ways: each refused with 400,
# nothing reserved or sent. (code: the error's code.)
SHAPES: list[tuple[str, str, bytes, str]] = [
    ("n as a string", "chat/completions", json.dumps({**_BASE, "n": "8"}).encode(), "invalid_type"),
    ("n as a float", "chat/completions", json.dumps({**_BASE, "n": 8.0}).encode(), "invalid_type"),
    ("n as 5e0", "chat/completions", json.dumps({**_BASE, "n": "5e0"}).encode(), "invalid_type"),
    (
        "stream as a string",
        "chat/completions",
        json.dumps({**_BASE, "stream": "false"}).encode(),
        "invalid_type",
    ),
    (
        "duplicate max_tokens",
        "chat/completions",
        CHAT[:-1] + b', "max_tokens": 1, "max_tokens": 100000}',
        "duplicate_key",
    ),
    (
        "duplicate key nested",
        "chat/completions",
        CHAT[:-1] + b', "stream_options": {"include_usage": false, "include_usage": true}}',
        "duplicate_key",
    ),
    (
        "previous_response_id",
        "responses",
        json.dumps(
            {"model": "local/scripted", "input": "go on", "previous_response_id": "r_1"}
        ).encode(),
        "unbounded_cost",
    ),
    (
        "stored conversation",
        "responses",
        json.dumps(
            {"model": "local/scripted", "input": "go on", "conversation": "conv_1"}
        ).encode(),
        "unbounded_cost",
    ),
    (
        "background",
        "responses",
        json.dumps({"model": "local/scripted", "input": "go", "background": True}).encode(),
        "invalid_value",
    ),
    (
        "item reference",
        "responses",
        json.dumps(
            {"model": "local/scripted", "input": [{"type": "item_reference", "id": "msg_1"}]}
        ).encode(),
        "unbounded_cost",
    ),
    (
        "file id",
        "responses",
        json.dumps(
            {
                "model": "local/scripted",
                "input": [
                    {"role": "user", "content": [{"type": "input_file", "file_id": "file-1"}]}
                ],
            }
        ).encode(),
        "unbounded_cost",
    ),
    (
        "image URL",
        "chat/completions",
        json.dumps(
            {
                **_BASE,
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}],
                    }
                ],
            }
        ).encode(),
        "unbounded_cost",
    ),
    (
        "web search tool",
        "responses",
        json.dumps(
            {"model": "local/scripted", "input": "find", "tools": [{"type": "web_search"}]}
        ).encode(),
        "unbounded_cost",
    ),
    (
        "audio output",
        "chat/completions",
        json.dumps({**_BASE, "audio": {}}).encode(),
        "invalid_value",
    ),
    (
        "an unknown field",
        "chat/completions",
        json.dumps({**_BASE, "best_of": 8}).encode(),
        "unknown_field",
    ),
    (
        "priority tier",
        "chat/completions",
        json.dumps({**_BASE, "service_tier": "priority"}).encode(),
        "invalid_value",
    ),
    ("NaN", "chat/completions", CHAT[:-1] + b', "temperature": NaN}', "invalid_json"),
    ("lone surrogate", "chat/completions", CHAT.replace(b"A-1", b"\\ud800"), "invalid_json"),
]
