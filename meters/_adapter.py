"""Responses → Chat Completions, for learner endpoints that speak only Chat.

Codex CLI speaks only the Responses API: every turn it sends the whole
history (``store: false``), function tools and freeform ``custom`` tools,
and reasoning items carrying ``encrypted_content`` that a Chat endpoint
cannot use (they are dropped). This module translates such a request to a
Chat Completions request, and the Chat answer (whole or streamed) back to a
Response object or to Responses SSE events, ending always with
``response.completed`` (usage mapped) or ``response.failed``. It is
stateless: everything it needs is in the request.

A ``custom`` tool becomes a Chat function with one string parameter,
``input``; calls to it come back as ``custom_tool_call`` items.
"""

from __future__ import annotations

import itertools
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

from ._usage import SSEParser

__all__ = [
    "ChatToResponses",
    "ResponsesEvents",
    "chat_request",
    "chat_usage_to_responses",
    "completion_to_response",
]

_CUSTOM_PARAMETERS = {
    "type": "object",
    "properties": {"input": {"type": "string", "description": "the tool's freeform input"}},
    "required": ["input"],
}


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part.get("text", "") for part in content if isinstance(part, dict) and "text" in part
        )
    return ""


def _tools(tools: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], set[str]]:
    chat_tools: list[dict[str, Any]] = []
    custom: set[str] = set()
    for tool in tools:
        kind = tool.get("type")
        if kind == "function":
            function = {
                k: tool[k] for k in ("name", "description", "parameters", "strict") if k in tool
            }
            chat_tools.append({"type": "function", "function": function})
        elif kind == "custom":
            custom.add(tool["name"])
            description = tool.get("description", "")
            chat_tools.append(
                {
                    "type": "function",
                    "function": {
                        "name": tool["name"],
                        "description": description,
                        "parameters": _CUSTOM_PARAMETERS,
                    },
                }
            )
        # other built-in tools (web_search, ...) have no Chat equivalent: dropped
    return chat_tools, custom


def chat_request(body: dict[str, Any]) -> tuple[dict[str, Any], set[str]]:
    """A Chat Completions body for a Responses body; and the names of custom tools."""
    messages: list[dict[str, Any]] = []
    if body.get("instructions"):
        messages.append({"role": "system", "content": body["instructions"]})
    items = body.get("input") or []
    if isinstance(items, str):
        items = [{"type": "message", "role": "user", "content": items}]
    pending_calls: list[dict[str, Any]] = []

    def flush_calls() -> None:
        if pending_calls:
            messages.append(
                {"role": "assistant", "content": None, "tool_calls": list(pending_calls)}
            )
            pending_calls.clear()

    for item in items:
        kind = item.get("type", "message")
        if kind == "function_call":
            pending_calls.append(
                {
                    "id": item["call_id"],
                    "type": "function",
                    "function": {"name": item["name"], "arguments": item.get("arguments", "")},
                }
            )
            continue
        if kind == "custom_tool_call":
            arguments = json.dumps({"input": item.get("input", "")}, ensure_ascii=False)
            pending_calls.append(
                {
                    "id": item["call_id"],
                    "type": "function",
                    "function": {"name": item["name"], "arguments": arguments},
                }
            )
            continue
        flush_calls()
        if kind in ("function_call_output", "custom_tool_call_output"):
            output = item.get("output", "")
            content = (
                output
                if isinstance(output, str)
                else _text_of(output) or json.dumps(output, ensure_ascii=False)
            )
            messages.append({"role": "tool", "tool_call_id": item["call_id"], "content": content})
        elif kind == "message":
            role = item.get("role", "user")
            role = "system" if role == "developer" else role
            messages.append({"role": role, "content": _text_of(item.get("content"))})
        # reasoning items (encrypted_content) and anything else: a Chat endpoint cannot use them
    flush_calls()
    chat_tools, custom = _tools(body.get("tools") or [])
    chat: dict[str, Any] = {"model": body.get("model"), "messages": messages}
    if chat_tools:
        chat["tools"] = chat_tools
        choice = body.get("tool_choice")
        if choice in ("auto", "none", "required"):
            chat["tool_choice"] = choice
        if "parallel_tool_calls" in body:
            chat["parallel_tool_calls"] = body["parallel_tool_calls"]
    if isinstance(body.get("max_output_tokens"), int):
        chat["max_tokens"] = body["max_output_tokens"]
    for key in ("temperature", "top_p"):
        if key in body:
            chat[key] = body[key]
    if body.get("stream"):
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    return chat, custom


def chat_usage_to_responses(usage: Any) -> dict[str, Any] | None:
    if not isinstance(usage, dict):
        return None
    prompt = usage.get("prompt_tokens", 0) or 0
    completion = usage.get("completion_tokens", 0) or 0
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0) or 0
    reasoning = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens", 0) or 0
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": prompt + completion,
    }


def _call_item(call_id: str, name: str, arguments: str, custom: set[str]) -> dict[str, Any]:
    if name in custom:
        try:
            text = json.loads(arguments).get("input", "")
        except (ValueError, AttributeError):
            text = arguments
        return {
            "type": "custom_tool_call",
            "id": f"ctc_{call_id}",
            "call_id": call_id,
            "name": name,
            "input": text,
            "status": "completed",
        }
    return {
        "type": "function_call",
        "id": f"fc_{call_id}",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": "completed",
    }


def _response(
    model: str,
    output: list[dict[str, Any]],
    usage: Any,
    status: str,
    identity: tuple[str, int] | None = None,
) -> dict[str, Any]:
    ident, created = identity or (f"resp_{uuid.uuid4().hex}", int(time.time()))
    return {
        "id": ident,
        "object": "response",
        "created_at": created,
        "status": status,
        "model": model,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": usage,
    }


def completion_to_response(completion: dict[str, Any], custom: set[str]) -> dict[str, Any]:
    """A Response object for a (non-streamed) Chat completion."""
    output: list[dict[str, Any]] = []
    choice = (completion.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    if message.get("content"):
        output.append(
            {
                "type": "message",
                "id": f"msg_{uuid.uuid4().hex[:12]}",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": message["content"], "annotations": []}],
            }
        )
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        output.append(
            _call_item(
                call.get("id", ""), function.get("name", ""), function.get("arguments", ""), custom
            )
        )
    status = "incomplete" if choice.get("finish_reason") == "length" else "completed"
    return _response(
        completion.get("model", ""),
        output,
        chat_usage_to_responses(completion.get("usage")),
        status,
    )


class ResponsesEvents:
    """Writes Responses SSE events (``event:`` + ``data:``), numbering them in order."""

    def __init__(self) -> None:
        self._sequence = itertools.count()

    def __call__(self, kind: str, **fields: Any) -> bytes:
        data = {"type": kind, "sequence_number": next(self._sequence), **fields}
        return f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode()


class ChatToResponses:
    """Turns a streamed Chat completion into Responses SSE events, as they arrive."""

    def __init__(self, model: str, custom: set[str]) -> None:
        self.model = model
        self.custom = custom
        self._event = ResponsesEvents()
        self._parser = SSEParser()
        self._text: str | None = None
        self._message_id = f"msg_{uuid.uuid4().hex[:12]}"
        # where the text part sits: the first output item's first content part
        self._place = {"item_id": self._message_id, "output_index": 0, "content_index": 0}
        self._calls: dict[int, dict[str, str]] = {}
        self._usage: Any = None
        self._finish: str | None = None
        self._started = False
        self._output: list[dict[str, Any]] = []
        # Every event of one stream names the same response.
        self._identity = (f"resp_{uuid.uuid4().hex}", int(time.time()))

    def _start(self) -> Iterator[bytes]:
        if not self._started:
            self._started = True
            pending = _response(self.model, [], None, "in_progress", self._identity)
            yield self._event("response.created", response=pending)

    def _open_text(self) -> Iterator[bytes]:
        if self._text is None:
            self._text = ""
            item = {
                "type": "message",
                "id": self._message_id,
                "status": "in_progress",
                "role": "assistant",
                "content": [],
            }
            yield self._event("response.output_item.added", output_index=0, item=item)
            part = {"type": "output_text", "text": "", "annotations": []}
            yield self._event(
                "response.content_part.added",
                **self._place,
                part=part,
            )

    def feed(self, chunk: bytes) -> Iterator[bytes]:
        """Responses events for the Chat bytes in ``chunk``."""
        yield from self._start()
        for event in self._parser.feed(chunk):
            if event.data.strip() == "[DONE]":
                continue
            try:
                data = json.loads(event.data)
            except ValueError:
                continue
            if isinstance(data.get("usage"), dict):
                self._usage = data["usage"]
            for choice in data.get("choices") or []:
                delta = choice.get("delta") or {}
                if delta.get("content"):
                    yield from self._open_text()
                    assert self._text is not None
                    self._text += delta["content"]
                    yield self._event(
                        "response.output_text.delta",
                        **self._place,
                        delta=delta["content"],
                    )
                for call in delta.get("tool_calls") or []:
                    slot = self._calls.setdefault(
                        call.get("index", 0), {"id": "", "name": "", "arguments": ""}
                    )
                    slot["id"] = call.get("id") or slot["id"]
                    function = call.get("function") or {}
                    slot["name"] = function.get("name") or slot["name"]
                    slot["arguments"] += function.get("arguments") or ""
                if choice.get("finish_reason"):
                    self._finish = choice["finish_reason"]

    def finish(self, error: str | None = None) -> Iterator[bytes]:
        """The closing events: items done, then ``response.completed`` or ``response.failed``."""
        yield from self._start()
        index = 0
        if self._text is not None:
            text = self._text
            yield self._event(
                "response.output_text.done",
                **self._place,
                text=text,
            )
            part = {"type": "output_text", "text": text, "annotations": []}
            yield self._event(
                "response.content_part.done",
                **self._place,
                part=part,
            )
            item = {
                "type": "message",
                "id": self._message_id,
                "status": "completed",
                "role": "assistant",
                "content": [part],
            }
            yield self._event("response.output_item.done", output_index=0, item=item)
            self._output.append(item)
            index = 1
        for _, slot in sorted(self._calls.items()):
            item = _call_item(slot["id"], slot["name"], slot["arguments"], self.custom)
            yield self._event(
                "response.output_item.added",
                output_index=index,
                item={**item, "status": "in_progress"},
            )
            yield self._event("response.output_item.done", output_index=index, item=item)
            self._output.append(item)
            index += 1
        usage = chat_usage_to_responses(self._usage)
        if error is not None:
            failed = _response(self.model, self._output, usage, "failed", self._identity)
            failed["error"] = {"code": error, "message": f"the upstream stream failed: {error}"}
            yield self._event("response.failed", response=failed)
            return
        status = "incomplete" if self._finish == "length" else "completed"
        kind = "response.incomplete" if status == "incomplete" else "response.completed"
        final = _response(self.model, self._output, usage, status, self._identity)
        yield self._event(kind, response=final)

    @property
    def chat_usage(self) -> Any:
        return self._usage
