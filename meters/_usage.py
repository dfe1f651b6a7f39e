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

from collections.abc import Iterator
from typing import Any

import msgspec

from mw_errors import MeterError

__all__ = [
    "RESPONSES_EVENTS",
    "ChatStream",
    "InvalidUsage",
    "ResponsesStream",
    "SSEParser",
    "ServerSentEvent",
    "Usage",
    "chat_usage",
    "responses_usage",
    "usage_or_none",
]

_json = msgspec.json.Decoder()
_encode = msgspec.json.Encoder().encode


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


class InvalidUsage(MeterError):
    """A usage block that is not one: the attempt is charged its whole reservation."""

    code = "usage_invalid"
    hint = "the upstream's usage was not non-negative integers with cached <= input"


def _count(block: dict[str, Any], key: str, *, required: bool, most: int | None = None) -> int:
    value = block.get(key)
    if value is None and not required:
        return 0
    if type(value) is not int or value < 0:  # a bool, a float, a string: not a count
        raise InvalidUsage(f"usage {key} is {value!r}, not an integer >= 0")
    if most is not None and value > most:
        raise InvalidUsage(f"usage {key} {value} is more than the {most} it is part of")
    return value


def _details(block: dict[str, Any], key: str) -> dict[str, Any]:
    details = block.get(key)
    if details is None:
        return {}
    if not isinstance(details, dict):
        raise InvalidUsage(f"usage {key} is {type(details).__name__}, not an object")
    return details


def _usage(block: Any, names: tuple[str, str, str, str]) -> Usage | None:
    inputs, input_details, outputs, output_details = names
    if block is None:
        return None
    if not isinstance(block, dict):
        raise InvalidUsage(f"usage is {type(block).__name__}, not an object")
    input_tokens = _count(block, inputs, required=True)
    output_tokens = _count(block, outputs, required=True)
    return Usage(
        input_tokens=input_tokens,
        cached_input_tokens=_count(
            _details(block, input_details), "cached_tokens", required=False, most=input_tokens
        ),
        output_tokens=output_tokens,
        reasoning_tokens=_count(
            _details(block, output_details), "reasoning_tokens", required=False, most=output_tokens
        ),
    )


_CHAT = ("prompt_tokens", "prompt_tokens_details", "completion_tokens", "completion_tokens_details")
_RESPONSES = ("input_tokens", "input_tokens_details", "output_tokens", "output_tokens_details")


def chat_usage(usage: Any) -> Usage | None:
    """Usage from a Chat Completions ``usage`` block, or None if there is none.

    Raises:
        InvalidUsage: the block is there, but not non-negative integer counts with
            cached <= prompt and reasoning <= completion.
    """
    return _usage(usage, _CHAT)


def responses_usage(usage: Any) -> Usage | None:
    """Usage from a Responses ``usage`` block, or None if there is none.

    Raises:
        InvalidUsage: as :func:`chat_usage`'s.
    """
    return _usage(usage, _RESPONSES)


def usage_or_none(usage: Any, *, chat: bool) -> Usage | None:
    """The usage a client reads from an answer: None where it is absent or invalid."""
    try:
        return chat_usage(usage) if chat else responses_usage(usage)
    except InvalidUsage:
        return None


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


# -- counting the output relayed --------------------------------------------------------
#
# A tracker keeps two counts of a stream's output. ``floor`` is a lower bound on the
# tokens streamed: each event that carries output in a shape the API defines is at least
# one token. ``bound`` is what the meter holds against the output it reserved for: the
# floor, plus everything it does not recognise at its byte bound (a token is at least one
# byte), so no shape of output escapes the cut. The charge is never below the floor.

_CHAT_TEXT = ("content", "reasoning_content", "reasoning", "refusal")
# Keys of a choice that carry no output of their own (vendors add the last ones).
_CHOICE_KEYS = frozenset(
    {"index", "delta", "finish_reason", "logprobs", "stop_reason", "matched_stop"}
)


def _size(value: Any) -> int:
    """The bytes of ``value`` as JSON: the most tokens it can hold."""
    if value is None or value == "" or value == [] or value == {}:
        return 0
    if isinstance(value, str):
        return len(value.encode(errors="replace"))
    try:
        return len(_encode(value))
    except (TypeError, OverflowError):
        return 1


def _text(part: Any) -> bool:
    """Whether a content part (a Chat or Responses one) carries text."""
    return isinstance(part, dict) and any(
        isinstance(part.get(key), str) and part[key] for key in ("text", "refusal", "transcript")
    )


def _strings(value: Any, *keys: str) -> bool:
    return isinstance(value, dict) and any(
        isinstance(value.get(key), str) and value[key] for key in keys
    )


def _delta_output(delta: dict[str, Any]) -> tuple[bool, int]:
    """Whether a Chat delta carries output, and the bytes of what it holds unrecognised."""
    carried, unknown = False, 0
    for key, value in delta.items():
        if key == "role" or value is None:
            continue
        if key in _CHAT_TEXT and isinstance(value, str):
            carried |= bool(value)
        elif key == "content" and isinstance(value, list):  # content as parts
            carried |= any(_text(part) for part in value)
            unknown += sum(_size(part) for part in value if not isinstance(part, dict))
        elif key == "tool_calls" and isinstance(value, list):
            for call in value:
                if _strings(
                    call.get("function") if isinstance(call, dict) else None, "name", "arguments"
                ) or _strings(
                    call.get("custom") if isinstance(call, dict) else None, "name", "input"
                ):
                    carried = True
                elif isinstance(call, dict):
                    unknown += sum(
                        _size(v)
                        for k, v in call.items()
                        if k not in ("index", "id", "type", "function", "custom")
                    )
                else:
                    unknown += _size(call)
        elif key == "function_call":  # the legacy single call
            carried |= _strings(value, "name", "arguments")
        elif key == "audio":
            carried |= _strings(value, "transcript", "data")
        else:  # a key no Chat delta has (or a known one with a value of another type)
            unknown += _size(value)
    return carried, unknown


def chat_output(choices: Any) -> tuple[int, int]:
    """A Chat chunk's output: (choices that carried some, bytes of what is unrecognised)."""
    floor = unknown = 0
    if choices is None:
        return 0, 0
    if not isinstance(choices, list):
        return 0, _size(choices)
    for choice in choices:
        if not isinstance(choice, dict):
            unknown += _size(choice)
            continue
        delta = choice.get("delta")
        if isinstance(delta, dict):
            carried, extra = _delta_output(delta)
            floor += carried
            unknown += extra
        else:
            unknown += _size(delta)
        unknown += sum(_size(v) for k, v in choice.items() if k not in _CHOICE_KEYS)
    return floor, unknown


def decode_or_none(data: str) -> Any:
    """JSON decoded, or None: malformed, or nested past msgspec's recursion bound."""
    try:
        return _json.decode(data)
    except (msgspec.DecodeError, RecursionError):
        return None


class _Tracker:
    """What both trackers keep: usage (valid, or why not), and the output counts."""

    def __init__(self) -> None:
        self.usage: Usage | None = None
        self.usage_block: dict[str, Any] | None = None
        self.invalid: str | None = None  # why the upstream's usage was refused, if it was
        self.floor = 0
        self.bound = 0
        # The last event's data as decoded here (None for [DONE], or data not JSON): a
        # reader of the same events need not decode again.
        self.decoded: Any = None

    def _take(self, block: Any, read: Any) -> None:
        """Take a usage block (the last one counts); one that is invalid taints the stream."""
        try:
            usage = read(block)
        except InvalidUsage as exc:
            self.invalid = exc.message
            self.usage = None
            self.usage_block = block if isinstance(block, dict) else None
            return
        if usage is not None and self.invalid is None:
            self.usage, self.usage_block = usage, block


class ChatStream(_Tracker):
    """Follows a streamed Chat Completion: usage, output, usage-only chunks."""

    def __init__(self) -> None:
        super().__init__()
        self.done = False

    def observe(self, event: ServerSentEvent) -> bool:
        """Record what ``event`` says; return True if it is a usage-only chunk."""
        data = event.data
        if data.strip() == "[DONE]":
            self.done, self.decoded = True, None
            return False
        self.decoded = chunk = decode_or_none(data)
        if not isinstance(chunk, dict):
            self.bound += _size(data)  # relayed, and not understood: output at its bytes
            return False
        floor, unknown = chat_output(chunk.get("choices"))
        self.floor += floor
        self.bound += floor + unknown
        if chunk.get("usage") is None:
            return False
        self._take(chunk["usage"], chat_usage)
        return not chunk.get("choices")


# The stream events of the Responses API (openai 2.x's ``ResponseStreamEvent``).
RESPONSES_EVENTS = frozenset(
    {
        "error", "response.audio.delta", "response.audio.done",
        "response.audio.transcript.delta", "response.audio.transcript.done",
        "response.code_interpreter_call.completed", "response.code_interpreter_call.in_progress",
        "response.code_interpreter_call.interpreting", "response.code_interpreter_call_code.delta",
        "response.code_interpreter_call_code.done", "response.completed",
        "response.content_part.added", "response.content_part.done", "response.created",
        "response.custom_tool_call_input.delta", "response.custom_tool_call_input.done",
        "response.failed", "response.file_search_call.completed",
        "response.file_search_call.in_progress", "response.file_search_call.searching",
        "response.function_call_arguments.delta", "response.function_call_arguments.done",
        "response.image_generation_call.completed", "response.image_generation_call.generating",
        "response.image_generation_call.in_progress",
        "response.image_generation_call.partial_image", "response.in_progress",
        "response.incomplete", "response.mcp_call.completed", "response.mcp_call.failed",
        "response.mcp_call.in_progress", "response.mcp_call_arguments.delta",
        "response.mcp_call_arguments.done", "response.mcp_list_tools.completed",
        "response.mcp_list_tools.failed", "response.mcp_list_tools.in_progress",
        "response.output_item.added", "response.output_item.done",
        "response.output_text.annotation.added", "response.output_text.delta",
        "response.output_text.done", "response.queued", "response.reasoning_summary_part.added",
        "response.reasoning_summary_part.done", "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.done", "response.reasoning_text.delta",
        "response.reasoning_text.done", "response.refusal.delta", "response.refusal.done",
        "response.web_search_call.completed", "response.web_search_call.in_progress",
        "response.web_search_call.searching",
    }
)  # fmt: skip


def _visible(item: Any) -> int:
    """The bytes of output an item (or a content part) shows: its text, arguments, input.

    A reasoning item's ``encrypted_content`` is not shown (its tokens are the hidden
    kind, which no proxy can count); an item of a type the API does not define counts whole.
    """
    if not isinstance(item, dict):
        return _size(item)
    kind = item.get("type")
    if kind == "message":
        content = item.get("content")
        parts = content if isinstance(content, list) else [content]
        return sum(_visible_part(part) for part in parts)
    if kind == "function_call":
        return _size(item.get("arguments")) + _size(item.get("name"))
    if kind == "custom_tool_call":
        return _size(item.get("input")) + _size(item.get("name"))
    if kind == "reasoning":
        parts = [*(item.get("summary") or []), *(item.get("content") or [])]
        return sum(_visible_part(part) for part in parts if isinstance(parts, list))
    if kind == "local_shell_call":
        return _size(item.get("action"))
    return _visible_part(item) if kind in _PART_TYPES else _size(item)


_PART_TYPES = frozenset({"output_text", "refusal", "summary_text", "reasoning_text", "text"})


def _visible_part(part: Any) -> int:
    if isinstance(part, str):
        return _size(part)
    if not isinstance(part, dict):
        return _size(part)
    if part.get("type") not in _PART_TYPES:
        return _size(part)
    return sum(_size(part.get(key)) for key in ("text", "refusal"))


class ResponsesStream(_Tracker):
    """Follows a streamed Response by each event's data ``type`` (as the SDK reads it)."""

    TERMINAL = ("response.completed", "response.incomplete", "response.failed")

    def __init__(self) -> None:
        super().__init__()
        self.terminal: str | None = None
        self._streamed: set[Any] = set()  # output indexes that came as deltas
        self._counted: set[Any] = set()  # output indexes counted whole, at their bytes

    def observe(self, event: ServerSentEvent) -> None:
        self.decoded = body = decode_or_none(event.data) if event.data else None
        if not isinstance(body, dict):
            self.bound += _size(event.data)  # relayed, and not understood
            return
        kind = body.get("type")
        if not isinstance(kind, str):
            kind = event.event
        if kind not in RESPONSES_EVENTS:
            self.bound += _size(event.data)
            return
        if kind in self.TERMINAL:
            self._terminal(kind, body)
        elif kind.endswith(".delta"):
            if body.get("delta"):
                self.floor += 1
                self.bound += 1
                self._streamed.add(body.get("output_index"))
        else:
            shown = sum(_visible(body.get(key)) for key in ("item", "part") if key in body)
            shown += sum(
                _size(body.get(key)) for key in ("text", "arguments", "input", "transcript")
            )
            self._whole(body.get("output_index"), shown)

    def _whole(self, index: Any, shown: int) -> None:
        """Output an upstream sent whole, not as deltas: counted once, at its bytes."""
        if shown and index not in self._streamed and index not in self._counted:
            self._counted.add(index)
            self.floor += 1
            self.bound += shown

    def _terminal(self, kind: str, body: dict[str, Any]) -> None:
        self.terminal = kind
        response = body.get("response")
        if not isinstance(response, dict):
            return
        output = response.get("output")
        for index, item in enumerate(output if isinstance(output, list) else ()):
            self._whole(index, _visible(item))
        if response.get("usage") is not None:
            self._take(response["usage"], responses_usage)
