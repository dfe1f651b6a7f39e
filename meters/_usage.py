"""Usage extraction from Chat Completions and Responses, whole or streamed.

Chat Completions: ``prompt_tokens`` already includes
``prompt_tokens_details.cached_tokens`` and ``completion_tokens`` already
includes ``completion_tokens_details.reasoning_tokens``; they are never
counted twice. Usage may come in a final chunk with empty (or ``null``)
``choices`` (OpenAI, vLLM) or on the finish chunk itself (llama.cpp).

Responses: usage comes with ``response.completed`` or ``response.incomplete``;
cached input is ``input_tokens_details.cached_tokens`` and reasoning
``output_tokens_details.reasoning_tokens``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import msgspec

__all__ = [
    "ChatStream",
    "ResponsesStream",
    "SSEParser",
    "ServerSentEvent",
    "Usage",
    "chat_usage",
    "responses_usage",
]

_json = msgspec.json.Decoder()


class Usage(msgspec.Struct, frozen=True, kw_only=True):
    """Token counts, normalised. ``input_tokens`` includes cached; ``output_tokens`` reasoning."""

    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        """Both counts together (a session's turns, summed)."""
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            cached_input_tokens=self.cached_input_tokens + other.cached_input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
        )


def _int(block: Any, *path: str) -> int:
    for key in path:
        if not isinstance(block, dict):
            return 0
        block = block.get(key)
    return block if isinstance(block, int) and not isinstance(block, bool) else 0


def chat_usage(usage: Any) -> Usage | None:
    """Usage from a Chat Completions ``usage`` block, or None if there is none."""
    if not isinstance(usage, dict):
        return None
    return Usage(
        input_tokens=_int(usage, "prompt_tokens"),
        cached_input_tokens=_int(usage, "prompt_tokens_details", "cached_tokens"),
        output_tokens=_int(usage, "completion_tokens"),
        reasoning_tokens=_int(usage, "completion_tokens_details", "reasoning_tokens"),
    )


def responses_usage(usage: Any) -> Usage | None:
    """Usage from a Responses ``usage`` block, or None if there is none."""
    if not isinstance(usage, dict):
        return None
    return Usage(
        input_tokens=_int(usage, "input_tokens"),
        cached_input_tokens=_int(usage, "input_tokens_details", "cached_tokens"),
        output_tokens=_int(usage, "output_tokens"),
        reasoning_tokens=_int(usage, "output_tokens_details", "reasoning_tokens"),
    )


class ServerSentEvent(msgspec.Struct, frozen=True):
    event: str | None
    data: str
    raw: bytes  # the event's bytes exactly as received, blank line included


class SSEParser:
    """Incremental ``text/event-stream`` parser that keeps each event's original bytes."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, chunk: bytes) -> Iterator[ServerSentEvent]:
        self._buffer += chunk
        while True:
            end, sep = _event_end(self._buffer)
            if end < 0:
                return
            raw, self._buffer = self._buffer[: end + sep], self._buffer[end + sep :]
            yield _parse_event(raw)

    def tail(self) -> bytes:
        """Bytes of an event that never finished (a cut stream)."""
        return self._buffer


def _event_end(buffer: bytes) -> tuple[int, int]:
    candidates = [(buffer.find(sep), len(sep)) for sep in (b"\n\n", b"\r\n\r\n")]
    found = [(i, n) for i, n in candidates if i >= 0]
    return min(found) if found else (-1, 0)


def _parse_event(raw: bytes) -> ServerSentEvent:
    event = None
    data: list[str] = []
    for line in raw.decode(errors="replace").splitlines():
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "event":
            event = value
        elif field == "data":
            data.append(value)
    return ServerSentEvent(event, "\n".join(data), raw)


_OUTPUT_FIELDS = ("content", "reasoning_content", "reasoning", "refusal")
# A chunk whose delta carries output: one of these keys with a non-empty string. A chunk
# counts once however many it holds, so the count never passes the tokens it carried.
_OUTPUT = re.compile(
    r'"(?:content|reasoning_content|reasoning|refusal|arguments|name)"\s*:\s*"[^"]'
)


def _output_deltas(choices: Any) -> int:
    """How many of a chunk's choices carry output (each such delta is at least one token)."""
    count = 0
    for choice in choices if isinstance(choices, list) else ():
        delta = choice.get("delta") if isinstance(choice, dict) else None
        if not isinstance(delta, dict):
            continue
        calls = delta.get("tool_calls")
        if any(delta.get(name) for name in _OUTPUT_FIELDS) or (
            isinstance(calls, list) and any(_call_carries_output(call) for call in calls)
        ):
            count += 1
    return count


def _call_carries_output(call: Any) -> bool:
    function = call.get("function") if isinstance(call, dict) else None
    return isinstance(function, dict) and bool(function.get("arguments") or function.get("name"))


def decode_or_none(data: str) -> Any:
    """JSON decoded, or None: malformed, or nested past msgspec's recursion bound."""
    try:
        return _json.decode(data)
    except (msgspec.DecodeError, RecursionError):
        return None


class ChatStream:
    """Follows a streamed Chat Completion: usage, output deltas, usage-only chunks.

    ``token_events`` counts the chunks that carried output (found without
    decoding, unless a key is spelled with escapes): a lower bound on the output
    tokens streamed so far, which the meter holds against the output it
    reserved for.
    """

    def __init__(self) -> None:
        self.usage: Usage | None = None
        self.usage_block: dict[str, Any] | None = None
        self.done = False
        self.token_events = 0
        # The last event's data as decoded here: None when it was not decoded (no usage in
        # it), or was [DONE] or not JSON. A reader of the same events need not decode again.
        self.decoded: Any = None

    def observe(self, event: ServerSentEvent) -> bool:
        """Record what ``event`` says; return True if it is a usage-only chunk."""
        data = event.data
        if data.strip() == "[DONE]":
            self.done, self.decoded = True, None
            return False
        escaped = "\\u" in data  # a key may be spelled with escapes: decode to be sure
        if not escaped:
            self.token_events += _OUTPUT.search(data) is not None
            if "usage" not in data:
                self.decoded = None  # no usage here: nothing more to decode
                return False
        self.decoded = chunk = decode_or_none(data)
        if not isinstance(chunk, dict):
            return False
        if escaped:
            self.token_events += _output_deltas(chunk.get("choices"))
        block = chunk.get("usage")
        if isinstance(block, dict):
            self.usage = chat_usage(block)
            self.usage_block = block
            return not chunk.get("choices")
        return False


class ResponsesStream:
    """Follows a streamed Response: usage from its terminal event."""

    TERMINAL = ("response.completed", "response.incomplete", "response.failed")

    def __init__(self) -> None:
        self.usage: Usage | None = None
        self.usage_block: dict[str, Any] | None = None
        self.terminal: str | None = None
        self.token_events = 0  # output deltas (text, reasoning, arguments): as ChatStream's
        self.decoded: Any = None  # as ChatStream's: the last event's data, if decoded here

    def observe(self, event: ServerSentEvent) -> None:
        name = event.event
        self.decoded = None
        if name is not None and name not in self.TERMINAL:
            if name.endswith(".delta"):
                self.token_events += 1
            return  # named, and not the end: nothing to decode
        self.decoded = body = decode_or_none(event.data) if event.data else None
        kind = name or (body.get("type") if isinstance(body, dict) else None)
        if isinstance(kind, str) and kind.endswith(".delta"):
            self.token_events += 1
        if kind not in self.TERMINAL or not isinstance(body, dict):
            return
        self.terminal = kind
        response = body.get("response")
        block = response.get("usage") if isinstance(response, dict) else None
        if isinstance(block, dict):
            self.usage = responses_usage(block)
            self.usage_block = block
