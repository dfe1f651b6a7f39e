"""One agent turn loop: a model called turn by turn through its meter, with tools.

Every loop mw owns is this one: the synthetic host's acting loop
(:mod:`.serve_learn._acting`), the MWM learner session
(:mod:`.serve_learn._learner`) and the editing policy
(:mod:`.editing._policy`). Each brings two parts:

- a :class:`Dialect`, the wire form: Chat Completions or Responses. It builds
  the request body from the history and reads the model's turn back as its
  text, tool calls and usage, and as the items that go back into history;
- an :class:`Agent`, which holds the tools and the words. It is told each
  turn, sorted as no call, one call or several, and answers with the tools'
  results and, optionally, a user message, or ends the session.

The loop holds what they share:
- the whole history goes with every turn;
- the budgets: at most ``turns`` turns, and no turn is taken once the session's
  output tokens reach ``output_tokens``;
- the usage tally, and the time spent waiting on the meter;
- the refusal. An answer other than 200 raises :class:`ProviderRefused` with
  its HTTP status and its error body's ``code`` (the meter's ``budget_blocked``),
  so nothing parses error text. An agent may take a refusal as the session's
  end instead (the acting loop's context overflow). An answer that is not of
  the dialect raises :class:`ProviderRefused` too.

A request is encoded once, as httpx and the openai SDK encode it (a provider
counts the bytes), and the agent is shown those bytes before they leave, so a
loop that retains its requests (the policy) holds exactly what was sent.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol

import httpx
import msgspec

import meters
from mw_errors import ProviderRefused

__all__ = [
    "Agent",
    "Answer",
    "Call",
    "ChatCompletions",
    "Dialect",
    "Responses",
    "Tally",
    "Turn",
    "object_arguments",
    "passback_args",
    "run_turns",
]

Ended = Literal["done", "turns", "output_tokens", "refused"]


class Call(msgspec.Struct, frozen=True):
    """One tool call of a turn; ``arguments`` is the model's raw JSON text."""

    id: str
    name: str
    arguments: str


class Turn(msgspec.Struct, frozen=True, kw_only=True):
    """The model's turn, as the dialect read it."""

    number: int  # 1-based
    calls: list[Call]
    text: str
    reasoning: str
    finish_reason: str | None
    usage: meters.Usage
    items: list[dict[str, Any]]  # the turn as it goes back into history


class Answer(msgspec.Struct, frozen=True, kw_only=True):
    """The agent's answer to a turn: each call's result, a user message, or the end."""

    results: list[tuple[str, str]] = []  # (call id, output), in the calls' order
    user: str | None = None
    done: bool = False


class Tally(msgspec.Struct, kw_only=True):
    """A session's totals, and why it ended."""

    turns: int = 0
    requests: int = 0
    usage: meters.Usage = meters.Usage()
    provider_seconds: float = 0.0
    ended: Ended = "turns"


def object_arguments(call: Call) -> dict[str, Any] | str:
    """The call's arguments as an object, or why they are not one (empty means ``{}``)."""
    if not call.arguments.strip():
        return {}
    try:
        parsed = json.loads(call.arguments)
    except ValueError as exc:
        return f"invalid JSON: {str(exc)[:80]}"
    return parsed if isinstance(parsed, dict) else f"got {type(parsed).__name__}, not an object"


def passback_args(raw: str) -> str:
    """Tool-call arguments as they go back into history: a JSON object, or wrapped."""
    if not raw or not raw.strip():
        return "{}"
    try:
        obj = json.loads(raw)
    except ValueError:
        obj = None
    return raw if isinstance(obj, dict) else json.dumps({"_invalid_arguments": raw})


class Dialect(Protocol):
    """A wire form of the agent loop."""

    name: str
    path: str  # under the client's base URL

    def body(
        self, model: str, history: list[dict[str, Any]], tools: Sequence[Any], max_tokens: int
    ) -> dict[str, Any]: ...

    def turn(self, number: int, answer: Any) -> Turn:
        """Read the answer. Raises ValueError (or KeyError, TypeError): not of this dialect."""
        ...

    def result(self, call_id: str, output: str) -> dict[str, Any]: ...

    def user(self, text: str) -> dict[str, Any]: ...


class ChatCompletions:
    """``POST /chat/completions``: the history is the messages, the system prompt first.

    The assistant's reasoning (``reasoning_content``) goes back into history, and
    its calls' arguments go back as objects (:func:`passback_args`).
    """

    name = "Chat Completions"
    path = "/chat/completions"

    def body(
        self, model: str, history: list[dict[str, Any]], tools: Sequence[Any], max_tokens: int
    ) -> dict[str, Any]:
        return {"model": model, "messages": history, "tools": tools, "max_tokens": max_tokens}

    def turn(self, number: int, answer: Any) -> Turn:
        choice = answer["choices"][0]
        message = choice.get("message") or {}
        if not isinstance(message, dict):
            raise TypeError("the message is not an object")
        calls = []
        for index, call in enumerate(message.get("tool_calls") or []):
            if not isinstance(call, dict):
                continue
            function = call.get("function")
            function = function if isinstance(function, dict) else {}
            arguments = function.get("arguments")
            calls.append(
                Call(
                    id=str(call.get("id") or f"call_{index}"),
                    name=str(function.get("name") or ""),
                    arguments=arguments if isinstance(arguments, str) else "",
                )
            )
        text = message.get("content") or ""
        reasoning = message.get("reasoning_content") or ""
        item: dict[str, Any] = {
            "role": "assistant",
            "content": text if (text or not calls) else None,
        }
        if reasoning:
            item["reasoning_content"] = reasoning
        if calls:
            item["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": passback_args(c.arguments)},
                }
                for c in calls
            ]
        return Turn(
            number=number,
            calls=calls,
            text=text,
            reasoning=reasoning,
            finish_reason=choice.get("finish_reason"),
            usage=meters.usage_or_none(answer.get("usage"), chat=True) or meters.Usage(),
            items=[item],
        )

    def result(self, call_id: str, output: str) -> dict[str, Any]:
        return {"role": "tool", "tool_call_id": call_id, "content": output}

    def user(self, text: str) -> dict[str, Any]:
        return {"role": "user", "content": text}


class Responses:
    """``POST /responses`` as Codex CLI speaks it: the history is the input items.

    The answer's output items go back into history as they came.
    """

    name = "Responses"
    path = "/responses"

    def body(
        self, model: str, history: list[dict[str, Any]], tools: Sequence[Any], max_tokens: int
    ) -> dict[str, Any]:
        return {"model": model, "input": history, "tools": tools, "max_output_tokens": max_tokens}

    def turn(self, number: int, answer: Any) -> Turn:
        output = answer.get("output") or []
        if not isinstance(output, list):
            raise TypeError("the output is not a list")
        items = [item for item in output if isinstance(item, dict)]
        calls = [
            Call(
                id=str(item.get("call_id") or ""),
                name=str(item.get("name") or ""),
                arguments=item["arguments"] if isinstance(item.get("arguments"), str) else "",
            )
            for item in items
            if item.get("type") == "function_call"
        ]
        text = "".join(
            part.get("text") or ""
            for item in items
            if item.get("type") == "message" and isinstance(item.get("content"), list)
            for part in item["content"]
            if isinstance(part, dict) and part.get("type") == "output_text"
        )
        status = answer.get("status")
        return Turn(
            number=number,
            calls=calls,
            text=text,
            reasoning="",
            finish_reason="length" if status == "incomplete" else None,
            usage=meters.usage_or_none(answer.get("usage"), chat=False) or meters.Usage(),
            items=items,
        )

    def result(self, call_id: str, output: str) -> dict[str, Any]:
        return {"type": "function_call_output", "call_id": call_id, "output": output}

    def user(self, text: str) -> dict[str, Any]:
        return {"role": "user", "content": text}


class Agent:
    """The tools and the words of one loop; override what the loop needs."""

    def max_tokens(self, used_output: int) -> int:
        """The limit of the next request, given the session's output tokens so far."""
        raise NotImplementedError

    async def turn(self, turn: Turn) -> Answer:
        """The model's turn, sorted: no call, one call, or several (none of which runs)."""
        if not turn.calls:
            return await self.none(turn)
        if len(turn.calls) > 1:
            return await self.several(turn)
        return await self.one(turn, turn.calls[0])

    async def none(self, turn: Turn) -> Answer:
        raise NotImplementedError

    async def several(self, turn: Turn) -> Answer:
        raise NotImplementedError

    async def one(self, turn: Turn, call: Call) -> Answer:
        raise NotImplementedError

    async def sending(self, number: int, data: bytes) -> None:
        """The request of turn ``number``, about to leave, as the bytes sent."""

    async def answered(self, number: int, response: httpx.Response) -> None:
        """Turn ``number``'s HTTP answer, whatever its status."""

    def refused(self, response: httpx.Response) -> bool:
        """True to end the session on this refusal rather than raise."""
        return False


def error_code(response: httpx.Response) -> str | None:
    """The ``code`` of an OpenAI-format error body, if it has one."""
    try:
        error = response.json().get("error")
    except (ValueError, AttributeError):
        return None
    code = error.get("code") if isinstance(error, dict) else None
    return code if isinstance(code, str) else None


async def run_turns(
    client: httpx.AsyncClient,
    dialect: Dialect,
    agent: Agent,
    *,
    label: str,
    model: str,
    history: list[dict[str, Any]],
    tools: Sequence[Any],
    turns: int,
    output_tokens: int | None = None,
    extra: Mapping[str, Any] | None = None,
) -> Tally:
    """Run the session until the agent is done or a budget ends it; ``history`` grows in place.

    ``label`` names the session in a refusal's message; ``extra`` fields join every
    request's body.

    Raises:
        ProviderRefused: the meter or the provider refused a turn (status and code
            set), or answered with something that is not a ``dialect`` answer.
    """
    tally = Tally()
    while tally.turns < turns:
        if output_tokens is not None and tally.usage.output_tokens >= output_tokens:
            tally.ended = "output_tokens"
            return tally
        number = tally.turns + 1
        body = dialect.body(model, history, tools, agent.max_tokens(tally.usage.output_tokens))
        body.update(extra or {})
        # As httpx and the openai SDK encode a body: the provider counts these bytes.
        data = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        encoded = data.encode()
        await agent.sending(number, encoded)
        sent = time.perf_counter()
        response = await client.post(
            dialect.path, content=encoded, headers={"content-type": "application/json"}
        )
        tally.provider_seconds += time.perf_counter() - sent
        tally.requests += 1
        await agent.answered(number, response)
        if response.status_code != 200:
            if agent.refused(response):
                tally.ended = "refused"
                return tally
            raise ProviderRefused(
                f"{label}, turn {number}: HTTP {response.status_code} {response.text[:200]}",
                status=response.status_code,
                kind=error_code(response),
            )
        try:
            turn = dialect.turn(number, response.json())
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            raise ProviderRefused(
                f"{label}, turn {number}: the answer is not a {dialect.name} answer",
                status=response.status_code,
            ) from None
        tally.turns = number
        tally.usage += turn.usage
        history.extend(turn.items)
        answer = await agent.turn(turn)
        history.extend(dialect.result(call_id, output) for call_id, output in answer.results)
        if answer.user is not None:
            history.append(dialect.user(answer.user))
        if answer.done:
            tally.ended = "done"
            return tally
    return tally
