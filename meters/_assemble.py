"""Whole answers put back together from the streams a meter fetched them as.

A meter fetches an answer its client asked for whole as a stream, so that it
can stop an upstream that passes the output reserved for it (a whole body
arrives all at once, past any cut). The client still gets one whole answer:
for Chat Completions a ``chat.completion`` assembled from the chunks, for
Responses the response object of the terminal event.
"""

from __future__ import annotations

from typing import Any, Protocol

from ._usage import ServerSentEvent, decode_or_none

__all__ = ["Assembler", "ChatAssembler", "ResponsesAssembler"]

_HEAD = ("id", "created", "model", "system_fingerprint", "service_tier")
_TEXT = ("content", "reasoning_content", "reasoning", "refusal")


class _Choice:
    def __init__(self) -> None:
        self.role = "assistant"
        self.text: dict[str, list[str]] = {name: [] for name in _TEXT}
        self.calls: dict[int, dict[str, Any]] = {}
        self.logprobs: list[Any] | None = None
        self.finish_reason: Any = None

    def feed(self, choice: dict[str, Any]) -> None:
        delta = choice.get("delta")
        if isinstance(delta, dict):
            if isinstance(delta.get("role"), str):
                self.role = delta["role"]
            for name in _TEXT:
                if isinstance(delta.get(name), str):
                    self.text[name].append(delta[name])
            for call in delta.get("tool_calls") or []:
                if isinstance(call, dict):
                    self._call(call)
        logprobs = choice.get("logprobs")
        if isinstance(logprobs, dict) and isinstance(logprobs.get("content"), list):
            self.logprobs = (self.logprobs or []) + logprobs["content"]
        if choice.get("finish_reason") is not None:
            self.finish_reason = choice["finish_reason"]

    def _call(self, call: dict[str, Any]) -> None:
        index = call.get("index", len(self.calls))
        slot = self.calls.setdefault(index, {"id": "", "type": "function", "name": "", "args": []})
        if call.get("id"):
            slot["id"] = call["id"]
        function = call.get("function")
        if isinstance(function, dict):
            if isinstance(function.get("name"), str):
                slot["name"] += function["name"]
            if isinstance(function.get("arguments"), str):
                slot["args"].append(function["arguments"])

    def message(self) -> dict[str, Any]:
        content = "".join(self.text["content"])
        message: dict[str, Any] = {"role": self.role, "content": content or None}
        for name in ("reasoning_content", "reasoning", "refusal"):
            if self.text[name]:
                message[name] = "".join(self.text[name])
        if self.calls:
            message["tool_calls"] = [
                {
                    "id": slot["id"],
                    "type": slot["type"],
                    "function": {"name": slot["name"], "arguments": "".join(slot["args"])},
                }
                for _, slot in sorted(self.calls.items())
            ]
        return message


class Assembler(Protocol):
    """What turns a stream's events, one by one, into the whole answer."""

    malformed: int  # events whose data was not JSON (the upstream's answer is broken)

    def feed(self, event: ServerSentEvent, decoded: Any = None) -> None:
        """Take ``event`` (``decoded``: its data, when the caller decoded it already)."""
        ...

    def complete(self) -> bool:
        """Whether the stream made a whole answer (no broken event, its end seen)."""
        ...

    def answer(self) -> dict[str, Any] | None:
        """The whole answer, or None if the stream never said enough to make one."""
        ...


class ChatAssembler:
    """A streamed Chat Completion's chunks, as the ``chat.completion`` they make up."""

    def __init__(self) -> None:
        self._head: dict[str, Any] = {}
        self._choices: dict[int, _Choice] = {}
        self._usage: Any = None
        self.malformed = 0

    def feed(self, event: ServerSentEvent, decoded: Any = None) -> None:
        if event.data.strip() == "[DONE]" or not event.data:
            return
        chunk = decoded if decoded is not None else decode_or_none(event.data)
        if not isinstance(chunk, dict):
            self.malformed += 1
            return
        for key in _HEAD:
            if key in chunk and key not in self._head:
                self._head[key] = chunk[key]
        if isinstance(chunk.get("usage"), dict):
            self._usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            if isinstance(choice, dict):
                self._choices.setdefault(choice.get("index", 0), _Choice()).feed(choice)

    def complete(self) -> bool:
        return not self.malformed

    def answer(self) -> dict[str, Any]:
        completion: dict[str, Any] = {
            "id": self._head.get("id", ""),
            "object": "chat.completion",
            "created": self._head.get("created", 0),
            "model": self._head.get("model", ""),
        }
        for key in ("system_fingerprint", "service_tier"):
            if key in self._head:
                completion[key] = self._head[key]
        completion["choices"] = [
            {
                "index": index,
                "message": choice.message(),
                "logprobs": None if choice.logprobs is None else {"content": choice.logprobs},
                "finish_reason": choice.finish_reason,
            }
            for index, choice in sorted(self._choices.items())
        ]
        if self._usage is not None:
            completion["usage"] = self._usage
        return completion


class ResponsesAssembler:
    """A Responses stream, as the response object its terminal event carries."""

    TERMINAL = ("response.completed", "response.incomplete", "response.failed")

    def __init__(self) -> None:
        self._response: dict[str, Any] | None = None
        self.malformed = 0

    def feed(self, event: ServerSentEvent, decoded: Any = None) -> None:
        if event.event is not None and event.event not in self.TERMINAL:
            return  # the pieces; the terminal event carries the whole
        body = decoded
        if body is None and event.data:
            body = decode_or_none(event.data)
        if not isinstance(body, dict):
            self.malformed += event.event is not None
            return
        if (event.event or body.get("type")) in self.TERMINAL:
            response = body.get("response")
            self._response = response if isinstance(response, dict) else None

    def complete(self) -> bool:
        return not self.malformed and self._response is not None

    def answer(self) -> dict[str, Any] | None:
        return self._response
