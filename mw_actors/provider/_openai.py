"""The local provider: Chat Completions and Responses, streamed or not, with tool calls.

It speaks the wire format of an OpenAI-compatible endpoint closely enough
for the official ``openai`` SDK, reports usage from its tokenizer, and
injects faults from a :class:`FaultPlan`. It exists for offline runs, tests
and benchmarks: the remote provider that cannot exist here.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import msgspec

from meters import AbortConnection, Request, Response, ResponsesEvents, openai_error

from ._engine import Engine, Reply, ScriptedEngine, Turn
from ._faults import PAST_LIMIT, USAGE_LIES, FaultPlan
from ._tokenizer import Tokens, smollm2_tokens
from ._transcript import transcript

__all__ = ["Provider", "ProviderStatistics"]

# ``hold_after_done``: how long a stream's body stays open after its last event.
HOLD_SECONDS = 60.0
_JSON = [("content-type", "application/json")]
_SSE = [("content-type", "text/event-stream"), ("cache-control", "no-cache")]


class ProviderStatistics(msgspec.Struct, frozen=True):
    received: int  # every request that reached the provider, whatever it was
    requests: int  # those answered by the engine or a fault
    by_fault: dict[str, int]
    input_tokens: int
    output_tokens: int


class Provider:
    """Handles requests; one instance per server."""

    def __init__(
        self,
        engine: Engine | None = None,
        faults: FaultPlan | None = None,
        tokens: Tokens | None = None,
        *,
        api_key: str | None = None,
    ) -> None:
        """One provider; ``api_key`` makes it a hosted provider's twin.

        With ``api_key``, a request without ``Authorization: Bearer <api_key>`` gets 401,
        as a hosted provider answers one: the meter must inject the key.
        """
        self.engine: Engine = engine or ScriptedEngine()
        self._authorization = f"Bearer {api_key}" if api_key else None
        self.faults = faults or FaultPlan()
        self.tokens = tokens or smollm2_tokens()
        self._numbers = itertools.count()
        self._ids = itertools.count(1)
        self._by_fault: dict[str, int] = {}
        self._input = self._output = 0
        self._received = 0

    def statistics(self) -> ProviderStatistics:
        return ProviderStatistics(
            received=self._received,
            requests=sum(self._by_fault.values()),
            by_fault=dict(self._by_fault),
            input_tokens=self._input,
            output_tokens=self._output,
        )

    async def __call__(self, request: Request) -> Response:
        self._received += 1
        if self._authorization and request.header("authorization") != self._authorization:
            self._by_fault["unauthorized"] = self._by_fault.get("unauthorized", 0) + 1
            return openai_error(
                401, "invalid_request_error", "invalid_api_key", "Incorrect API key provided"
            )
        if request.method == "GET" and request.path == "/v1/models":
            model = {"id": f"local/{self.engine.name}", "object": "model", "owned_by": "mw"}
            body = {"object": "list", "data": [model]}
            return Response(200, list(_JSON), json.dumps(body).encode())
        if request.method != "POST" or request.path not in (
            "/v1/chat/completions",
            "/v1/responses",
        ):
            return openai_error(
                404, "invalid_request_error", "not_found", f"no route {request.path}"
            )
        try:
            body = json.loads(request.body)
        except ValueError:
            return openai_error(
                400, "invalid_request_error", "invalid_json", "the body is not JSON"
            )
        for key in ("max_tokens", "max_completion_tokens", "max_output_tokens"):
            value: Any = body.get(key) if isinstance(body, dict) else None
            if value is not None and (type(value) is not int or value < 1):
                # as a hosted provider refuses it, before any engine sees it
                return openai_error(
                    400, "invalid_request_error", "invalid_value", f"{key} must be an integer >= 1"
                )
        fault = self.faults.fault(next(self._numbers))
        self._by_fault[fault] = self._by_fault.get(fault, 0) + 1
        if fault == "rate_limited":
            response = openai_error(429, "rate_limit_error", "rate_limited", "slow down")
            response.headers.append(("retry-after", str(self.faults.retry_after_seconds)))
            return response
        if fault == "server_error":
            return openai_error(500, "server_error", "internal_error", "the engine failed")
        if request.path == "/v1/chat/completions":
            return await self._chat(body, fault)
        return await self._responses(body, fault)

    # -- shared ------------------------------------------------------------------

    async def _answer(self, turn: Turn, fault: str) -> Reply:
        if self.engine.blocking:
            reply = await anyio.to_thread.run_sync(self.engine.respond, turn)
        else:
            reply = self.engine.respond(turn)
        if turn.max_tokens is None or fault in PAST_LIMIT:
            return reply
        return self._within(reply, turn.max_tokens)

    def _within(self, reply: Reply, limit: int) -> Reply:
        """``reply`` cut to ``limit`` output tokens, as a provider stops at ``max_tokens``.

        Reasoning comes first, then the text; tool calls that no longer fit are
        dropped whole (a call cut in half is no call). The cut is ``truncated``.
        """
        count = self.tokens.count
        calls = sum(count(call.name + call.arguments_json) for call in reply.tool_calls)
        if reply.completion_tokens:
            if reply.completion_tokens <= limit:
                return reply  # the engine's model counted, and stopped, itself
        else:
            whole = count(reply.reasoning) + count(reply.content) + calls
            if whole <= limit:  # this count is the usage: it is not counted again
                return msgspec.structs.replace(reply, completion_tokens=whole)
        reasoning = self._first_tokens(reply.reasoning, limit)
        content = self._first_tokens(reply.content, limit - count(reasoning))
        used = count(reasoning) + count(content)
        fits = used + calls <= limit
        return msgspec.structs.replace(
            reply,
            reasoning=reasoning,
            content=content,
            tool_calls=reply.tool_calls if fits else [],
            # the model's own count, cut; else the text's, as the usage would count it
            completion_tokens=(
                min(reply.completion_tokens, limit)
                if reply.completion_tokens
                else used + (calls if fits else 0)
            ),
            truncated=True,
        )

    def _first_tokens(self, text: str, limit: int) -> str:
        """The longest run of ``text``'s first tokens that counts at most ``limit``."""
        pieces = self.tokens.pieces(text)[: max(limit, 0)] if text else []
        while pieces and self.tokens.count("".join(pieces)) > limit:
            pieces.pop()  # a prefix re-tokenized can count one more than it was cut at
        return "".join(pieces)

    def _usage_counts(self, turn: Turn, reply: Reply) -> tuple[int, int]:
        """Prompt and completion tokens, as the engine's model measured them.

        An engine that ran no model leaves them to SmolLM2's tokenizer and chat format.
        """
        count = self.tokens.count
        output = reply.completion_tokens or (
            count(reply.reasoning)
            + count(reply.content)
            + sum(count(call.name + call.arguments_json) for call in reply.tool_calls)
        )
        input_tokens = reply.prompt_tokens or (
            self.tokens.chat_prompt(transcript(turn.conversation, responses=turn.responses))
            + (count(json.dumps(turn.tools)) if turn.tools else 0)
        )
        self._input += input_tokens
        self._output += output
        return input_tokens, output

    def _new_id(self, prefix: str) -> str:
        return f"{prefix}_{next(self._ids):06d}"

    async def _pace(self, index: int, fault: str) -> None:
        latency = self.faults.latency
        if fault == "slow_drip":
            await anyio.sleep(latency.drip_seconds)
        elif index == 0 and latency.first_token_seconds:
            await anyio.sleep(latency.first_token_seconds)
        elif latency.tokens_per_second:
            await anyio.sleep(1 / latency.tokens_per_second)

    # -- chat completions ----------------------------------------------------------

    async def _whole(self, output_tokens: int) -> None:
        """A whole (not streamed) answer takes as long as its stream would have."""
        latency = self.faults.latency
        delay = latency.first_token_seconds
        if latency.tokens_per_second:
            delay += output_tokens / latency.tokens_per_second
        if delay:
            await anyio.sleep(delay)

    async def _chat(self, body: dict[str, Any], fault: str) -> Response:
        messages = body.get("messages") or []
        turns = sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")
        turn = Turn(
            messages,
            turns,
            tools=body.get("tools") or [],
            max_tokens=body.get("max_completion_tokens") or body.get("max_tokens"),
        )
        reply = await self._answer(turn, fault)
        prompt_tokens, completion_tokens = self._usage_counts(turn, reply)
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0},
        }
        usage = _lie(usage, fault, ("prompt_tokens", "completion_tokens", "prompt_tokens_details"))
        ident, created, model = self._new_id("chatcmpl"), int(time.time()), body.get("model", "")
        # Unique in the conversation, as a provider's are, and the same on every run.
        calls = f"call_{turn.assistant_turns}"
        finish = "length" if reply.truncated else "tool_calls" if reply.tool_calls else "stop"
        if not body.get("stream"):
            await self._whole(completion_tokens)
            if fault == "malformed_json":
                return Response(200, list(_JSON), b'{"id": "broken", "choices": [')
            message: dict[str, Any] = {"role": "assistant", "content": reply.content or None}
            if reply.reasoning:
                message["reasoning_content"] = reply.reasoning
            if reply.tool_calls:
                message["tool_calls"] = [
                    {
                        "id": f"{calls}_{i}",
                        "type": "function",
                        "function": {"name": c.name, "arguments": c.arguments_json},
                    }
                    for i, c in enumerate(reply.tool_calls)
                ]
            completion = {
                "id": ident,
                "object": "chat.completion",
                "created": created,
                "model": model,
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": usage,
            }
            return Response(200, list(_JSON), json.dumps(completion).encode())
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        return Response(
            200,
            list(_SSE),
            self._chat_stream(
                ident, created, model, reply, finish, usage, include_usage, fault, calls
            ),
        )

    async def _chat_stream(
        self,
        ident: str,
        created: int,
        model: str,
        reply: Reply,
        finish: str,
        usage: dict[str, Any],
        include_usage: bool,
        fault: str,
        calls: str,
    ) -> AsyncIterator[bytes]:
        def chunk(delta: dict[str, Any], reason: str | None = None) -> bytes:
            data = {
                "id": ident,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": reason}],
            }
            return b"data: " + json.dumps(data).encode() + b"\n\n"

        deltas = [chunk({"role": "assistant", "content": ""})]
        if reply.reasoning:  # as reasoning models stream it: before the text
            deltas += [chunk({"reasoning_content": p}) for p in self.tokens.pieces(reply.reasoning)]
        text = reply.content
        deltas += [chunk(_shaped(piece, fault)) for piece in self.tokens.pieces(text) if text]
        for i, call in enumerate(reply.tool_calls):
            function = {"name": call.name, "arguments": call.arguments_json}
            deltas.append(
                chunk(
                    {
                        "tool_calls": [
                            {
                                "index": i,
                                "id": f"{calls}_{i}",
                                "type": "function",
                                "function": function,
                            }
                        ]
                    }
                )
            )
        deltas.append(chunk({}, finish))
        for index, data in enumerate(deltas):
            await self._pace(index, fault)
            if fault == "reset_mid_stream" and index == len(deltas) // 2:
                raise AbortConnection
            if fault == "malformed_json" and index == 1:
                yield b"data: {not json\n\n"
            yield data
        if fault == "cut_before_usage":
            return
        if include_usage:
            tail = {
                "id": ident,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [],
                "usage": usage,
            }
            yield b"data: " + json.dumps(tail).encode() + b"\n\n"
        yield b"data: [DONE]\n\n"
        if fault == "hold_after_done":
            await anyio.sleep(HOLD_SECONDS)

    # -- responses -----------------------------------------------------------------------

    async def _responses(self, body: dict[str, Any], fault: str) -> Response:
        items = body.get("input") or []
        if isinstance(items, str):
            items = [{"type": "message", "role": "user", "content": items}]
        turns = sum(
            1
            for item in items
            if isinstance(item, dict)
            and (item.get("role") == "assistant" or item.get("type") == "function_call")
        )
        instructions = body.get("instructions")
        system = [{"role": "system", "content": instructions}] if instructions else []
        turn = Turn(
            [*system, *items],
            turns,
            responses=True,
            tools=body.get("tools") or [],
            max_tokens=body.get("max_output_tokens"),
        )
        reply = await self._answer(turn, fault)
        input_tokens, output_tokens = self._usage_counts(turn, reply)
        usage = {
            "input_tokens": input_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": input_tokens + output_tokens,
        }
        usage = _lie(usage, fault, ("input_tokens", "output_tokens", "input_tokens_details"))
        output: list[dict[str, Any]] = []
        if reply.content:
            output.append(
                {
                    "type": "message",
                    "id": self._new_id("msg"),
                    "status": "completed",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": reply.content, "annotations": []}],
                }
            )
        for call in reply.tool_calls:
            output.append(
                {
                    "type": "function_call",
                    "id": self._new_id("fc"),
                    "call_id": self._new_id("call"),
                    "name": call.name,
                    "arguments": call.arguments_json,
                    "status": "completed",
                }
            )
        response = {
            "id": self._new_id("resp"),
            "object": "response",
            "created_at": int(time.time()),
            "status": "incomplete" if reply.truncated else "completed",
            "incomplete_details": {"reason": "max_output_tokens"} if reply.truncated else None,
            "model": body.get("model", ""),
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": body.get("tools") or [],
            "usage": usage,
        }
        if not body.get("stream"):
            await self._whole(output_tokens)
            if fault == "malformed_json":
                return Response(200, list(_JSON), b'{"id": "broken", "output": [')
            return Response(200, list(_JSON), json.dumps(response).encode())
        return Response(200, list(_SSE), self._responses_stream(response, fault))

    async def _responses_stream(self, response: dict[str, Any], fault: str) -> AsyncIterator[bytes]:
        event = ResponsesEvents()
        pending = {**response, "status": "in_progress", "output": [], "usage": None}
        events = [event("response.created", response=pending)]
        for index, item in enumerate(response["output"]):
            if item["type"] == "message":
                text = item["content"][0]["text"]
                empty = {**item, "status": "in_progress", "content": []}
                events.append(event("response.output_item.added", output_index=index, item=empty))
                place = {"item_id": item["id"], "output_index": index, "content_index": 0}
                part = {"type": "output_text", "text": "", "annotations": []}
                events.append(event("response.content_part.added", **place, part=part))
                for piece in self.tokens.pieces(text):
                    events.append(event("response.output_text.delta", **place, delta=piece))
                events.append(event("response.output_text.done", **place, text=text))
                done_part = {**part, "text": text}
                events.append(event("response.content_part.done", **place, part=done_part))
            else:  # a function call: its arguments streamed, as OpenAI streams them
                empty = {**item, "status": "in_progress", "arguments": ""}
                events.append(event("response.output_item.added", output_index=index, item=empty))
                place = {"item_id": item["id"], "output_index": index}
                for piece in self.tokens.pieces(item["arguments"]):
                    events.append(
                        event("response.function_call_arguments.delta", **place, delta=piece)
                    )
                events.append(
                    event(
                        "response.function_call_arguments.done",
                        **place,
                        arguments=item["arguments"],
                    )
                )
            events.append(event("response.output_item.done", output_index=index, item=item))
        for index, data in enumerate(events):
            await self._pace(index, fault)
            if fault == "reset_mid_stream" and index == len(events) // 2:
                raise AbortConnection
            if fault == "malformed_json" and index == 1:
                yield b"event: response.output_text.delta\ndata: {not json\n\n"
            if fault == "renamed_events":  # the SDK reads the data's type, not the name
                data = data.replace(b"event: response.output_text.delta\n", b"event: message\n")
            yield data
        if fault != "cut_before_usage":
            final = (
                "response.completed" if response["status"] == "completed" else "response.incomplete"
            )
            yield event(final, response=response)
        if fault == "hold_after_done":
            await anyio.sleep(HOLD_SECONDS)


def _shaped(piece: str, fault: str) -> dict[str, Any]:
    """A Chat delta carrying ``piece``, in the shape the fault streams it in."""
    if fault == "audio_transcript":
        return {"audio": {"id": "audio_1", "transcript": piece}}
    if fault == "content_parts":
        return {"content": [{"type": "text", "text": piece}]}
    return {"content": piece}


def _lie(usage: dict[str, Any], fault: str, names: tuple[str, str, str]) -> dict[str, Any]:
    """``usage`` as a lenient or careless server may report it, by ``fault``."""
    if fault not in USAGE_LIES:
        return usage
    inputs, outputs, input_details = names
    if fault == "usage_empty":
        return {}
    if fault == "usage_understated":
        return {**usage, outputs: 1}
    if fault == "cached_over_input":
        return {**usage, input_details: {"cached_tokens": usage[inputs] + 1000}}
    lies: dict[str, Callable[[int], object]] = {
        "usage_float": float,
        "usage_string": str,
        "usage_negative": lambda n: -n - 1,
    }
    lie = lies[fault]
    return {**usage, inputs: lie(usage[inputs]), outputs: lie(usage[outputs])}
