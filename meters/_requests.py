"""What a meter forwards: a request body parsed once, checked by a table, and re-encoded.

The meter and the upstream must read a request the same way, or the meter
reserves for one request and the upstream answers another (``"n": "8"``
read as one choice by the meter, as eight by a lenient server). So the body
is parsed once, here, and what the meter forwards is that parse, re-encoded:
- a duplicate key anywhere is refused (which value would the upstream take?);
- every top-level field must be in the endpoint's table (``CHAT_FIELDS``,
  ``RESPONSES_FIELDS``), with its type, strictly (no ``"8"`` for 8, no
  ``"false"`` for false, no 8.0 for 8); a field not in the table is refused;
- inputs the body does not hold, whose tokens the meter cannot bound
  (``previous_response_id``, a stored ``conversation`` or ``prompt``, an
  ``item_reference``, images, files and audio), are refused, unless the meter
  was given a stated worst case for each (``reference_tokens``);
- what is billed outside the token usage (hosted tools such as web search,
  ``background`` answers fetched elsewhere, audio output, predicted outputs,
  a priority tier) is refused.

The reservation is then computed on the bytes that are forwarded.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from mw_errors import MeterError

from ._routes import Rule

__all__ = [
    "CHAT_FIELDS",
    "RESPONSES_FIELDS",
    "Field",
    "ParsedRequest",
    "RequestRefused",
    "check_tools",
    "encode_body",
    "parse_request",
]


class RequestRefused(MeterError):
    """A request the meter will not forward (answered 400; nothing is reserved or sent)."""

    code = "invalid_request"
    hint = "send each field once, with the type the API defines; docs/design/meters.md lists them"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


@dataclass(frozen=True)
class Field:
    """One field of a metered endpoint: its type, and how the meter meters it."""

    type: Any  # checked strictly (msgspec.convert with strict=True)
    metered: str  # for the table in docs/design/meters.md
    check: Callable[[Any], str | None] | None = None  # a further rule: the refusal, or None


_Obj = dict[str, Any]
_INPUT = "input: its bytes bound its tokens"
_PASSED = "passed: changes no count"


def _at_least_one(value: Any) -> str | None:
    return None if value is None or value >= 1 else "must be an integer >= 1"


def _choices(value: Any) -> str | None:
    return None if value is None or 1 <= value <= 128 else "must be an integer from 1 to 128"


def _tier(value: Any) -> str | None:
    if value in (None, "auto", "default", "flex"):
        return None
    return "is priced apart from the price table; use auto, default or flex"


def _text_only(value: Any) -> str | None:
    return None if value in (None, ["text"]) else "asks for output other than text"


def _not_background(value: Any) -> str | None:
    return "is answered elsewhere, where no meter sees it" if value else None


_LIMIT = Field(int | None, "output: the largest output limit is reserved", _at_least_one)
_REFUSED = Field(Any, "refused: billed outside the token usage", lambda _: "is billed apart")

CHAT_FIELDS: dict[str, Field] = {
    "model": Field(str, "priced by the table; an unpriced model is refused"),
    "messages": Field(list[_Obj], _INPUT + "; images, audio and files are references"),
    "max_tokens": _LIMIT,
    "max_completion_tokens": _LIMIT,
    "n": Field(int | None, "output: each answer is reserved the output limit", _choices),
    "stream": Field(bool | None, "a whole answer is fetched as a stream on a capped meter"),
    "stream_options": Field(_Obj | None, "include_usage is set on a stream"),
    "tools": Field(list[_Obj] | None, _INPUT + "; only function and custom tools"),
    "tool_choice": Field(str | _Obj | None, _INPUT),
    "parallel_tool_calls": Field(bool | None, _PASSED),
    "functions": Field(list[_Obj] | None, _INPUT),
    "function_call": Field(str | _Obj | None, _INPUT),
    "response_format": Field(_Obj | None, _INPUT),
    "temperature": Field(float | None, _PASSED),
    "top_p": Field(float | None, _PASSED),
    "frequency_penalty": Field(float | None, _PASSED),
    "presence_penalty": Field(float | None, _PASSED),
    "seed": Field(int | None, _PASSED),
    "stop": Field(str | list[str] | None, _PASSED),
    "logprobs": Field(bool | None, _PASSED),
    "top_logprobs": Field(int | None, _PASSED),
    "logit_bias": Field(dict[str, float] | None, _PASSED),
    "user": Field(str | None, _PASSED),
    "safety_identifier": Field(str | None, _PASSED),
    "prompt_cache_key": Field(str | None, _PASSED),
    "prompt_cache_retention": Field(str | None, _PASSED),
    "metadata": Field(dict[str, str] | None, _PASSED),
    "store": Field(bool | None, _PASSED),
    "reasoning_effort": Field(str | None, "output: reasoning counts in the output limit"),
    "verbosity": Field(str | None, _PASSED),
    "service_tier": Field(str | None, "only tiers at the table's prices", _tier),
    "modalities": Field(list[str] | None, "text only", _text_only),
    # vLLM, SGLang and llama.cpp sampling fields: none changes what is billed.
    "top_k": Field(int | None, _PASSED),
    "min_p": Field(float | None, _PASSED),
    "repetition_penalty": Field(float | None, _PASSED),
    "min_tokens": Field(int | None, "passed: within the output limit"),
    "chat_template_kwargs": Field(_Obj | None, _INPUT),
    "skip_special_tokens": Field(bool | None, _PASSED),
    "audio": _REFUSED,
    "prediction": _REFUSED,
    "web_search_options": _REFUSED,
}

RESPONSES_FIELDS: dict[str, Field] = {
    "model": CHAT_FIELDS["model"],
    "input": Field(str | list[_Obj] | None, _INPUT + "; item references are references"),
    "instructions": Field(str | list[_Obj] | None, _INPUT),
    "max_output_tokens": _LIMIT,
    "stream": CHAT_FIELDS["stream"],
    "stream_options": Field(_Obj | None, _PASSED),
    "tools": Field(
        list[_Obj] | None, _INPUT + "; forwarded only function, custom and local_shell tools"
    ),
    "tool_choice": CHAT_FIELDS["tool_choice"],
    "parallel_tool_calls": CHAT_FIELDS["parallel_tool_calls"],
    "max_tool_calls": Field(int | None, _PASSED),
    "reasoning": Field(_Obj | None, "output: reasoning counts in the output limit"),
    "text": Field(_Obj | None, _INPUT),
    "truncation": Field(str | None, _PASSED),
    "temperature": CHAT_FIELDS["temperature"],
    "top_p": CHAT_FIELDS["top_p"],
    "top_logprobs": CHAT_FIELDS["top_logprobs"],
    "store": CHAT_FIELDS["store"],
    "include": Field(list[str] | None, _PASSED),
    "metadata": CHAT_FIELDS["metadata"],
    "client_metadata": Field(_Obj | None, _PASSED),  # Codex CLI's
    "user": CHAT_FIELDS["user"],
    "safety_identifier": CHAT_FIELDS["safety_identifier"],
    "prompt_cache_key": CHAT_FIELDS["prompt_cache_key"],
    "prompt_cache_retention": CHAT_FIELDS["prompt_cache_retention"],
    "service_tier": CHAT_FIELDS["service_tier"],
    "background": Field(bool | None, "refused when true", _not_background),
    "previous_response_id": Field(str | None, "a reference: the stored input is not in the body"),
    "conversation": Field(str | _Obj | None, "a reference: the stored input is not in the body"),
    "prompt": Field(_Obj | None, "a reference: a stored prompt is not in the body"),
}

# Fields whose value names input the body does not hold.
_REFERENCES = ("previous_response_id", "conversation", "prompt")

# Content parts by type: text (bounded by its bytes), or a reference.
_TEXT_PARTS = frozenset({"text", "input_text", "output_text", "refusal", "summary_text"})
_REFERENCE_PARTS = frozenset({"image_url", "input_image", "input_audio", "file", "input_file"})
# Responses input items the meter knows: all input, bounded by their bytes.
_ITEMS = frozenset(
    {
        "message",
        "function_call",
        "function_call_output",
        "custom_tool_call",
        "custom_tool_call_output",
        "reasoning",
        "local_shell_call",
        "local_shell_call_output",
    }
)
_CHAT_TOOLS = frozenset({"function", "custom"})
_RESPONSES_TOOLS = frozenset({"function", "custom", "local_shell"})


@dataclass(frozen=True)
class ParsedRequest:
    """A request the meter may forward: its body (to re-encode) and what it reserves by."""

    body: dict[str, Any]
    model: str
    stream: bool
    output_limit: int | None  # the largest output limit the body names
    choices: int  # answers asked for (Chat's n)
    references: int  # inputs it names and does not hold (each reserved at the stated worst)


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    body = dict(pairs)
    if len(body) != len(pairs):
        seen: set[str] = set()
        key = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise RequestRefused(f"the key {key!r} appears twice in one object", code="duplicate_key")
    return body


def _no_constant(name: str) -> Any:
    raise RequestRefused(f"{name} is not a JSON number", code="invalid_json")


def _finite(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise RequestRefused(f"the number {text[:40]} is out of range", code="invalid_json")
    return value


_decoder = json.JSONDecoder(
    object_pairs_hook=_unique, parse_constant=_no_constant, parse_float=_finite
)
_encode = msgspec.json.Encoder().encode


def _decode(raw: bytes) -> dict[str, Any]:
    try:
        body = _decoder.decode(raw.decode())
    except UnicodeDecodeError:
        raise RequestRefused("the body is not UTF-8", code="invalid_json") from None
    except RecursionError:
        raise RequestRefused("the body is JSON nested too deeply", code="invalid_json") from None
    except ValueError as exc:  # JSONDecodeError
        if isinstance(exc, RequestRefused):
            raise
        raise RequestRefused(f"the body is not JSON ({exc})", code="invalid_json") from None
    if not isinstance(body, dict):
        raise RequestRefused("the body is not a JSON object", code="invalid_json")
    return body


def encode_body(body: dict[str, Any]) -> bytes:
    """The bytes forwarded for ``body`` (UTF-8 as is: non-ASCII text is never escaped).

    Raises:
        RequestRefused: it holds what JSON cannot carry (a lone surrogate, an
            integer past 64 bits).
    """
    try:
        return _encode(body)
    except (UnicodeEncodeError, OverflowError, TypeError) as exc:
        raise RequestRefused(f"the body cannot be forwarded ({exc})", code="invalid_json") from None


def _typed(fields: dict[str, Field], body: dict[str, Any], endpoint: str) -> None:
    for key, value in body.items():
        field = fields.get(key)
        if field is None:
            raise RequestRefused(
                f"{endpoint} field {key!r} is not one the meter can meter",
                code="unknown_field",
            )
        try:
            msgspec.convert(value, field.type, strict=True)
        except msgspec.ValidationError as exc:
            raise RequestRefused(f"{endpoint} field {key!r}: {exc}", code="invalid_type") from None
        problem = field.check(value) if field.check is not None else None
        if problem is not None:
            raise RequestRefused(f"{endpoint} field {key!r} {problem}", code="invalid_value")


def _parts(content: Any, where: str) -> int:
    """The references among a message's content parts (text parts are input)."""
    if content is None or isinstance(content, str):
        return 0
    if not isinstance(content, list):
        raise RequestRefused(f"{where} content is neither text nor a list of parts")
    references = 0
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in _REFERENCE_PARTS:
            references += 1
        elif kind not in _TEXT_PARTS:
            raise RequestRefused(
                f"{where} holds a content part of type {kind!r}, which the meter cannot bound",
                code="unbounded_cost",
            )
    return references


def check_tools(rule: Rule, body: dict[str, Any]) -> None:
    """Refuse a forwarded body that offers a tool billed apart from tokens (web search, ...).

    It is checked on what goes upstream: a request adapted to Chat has dropped them.

    Raises:
        RequestRefused: such a tool is offered.
    """
    allowed = _CHAT_TOOLS if rule == "chat" else _RESPONSES_TOOLS
    tools = body.get("tools")
    pending = list(tools) if isinstance(tools, list) else []
    while pending:
        tool = pending.pop()
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind == "namespace" and rule == "responses" and isinstance(tool.get("tools"), list):
            pending += tool["tools"]  # a group of tools, each checked
        elif kind not in allowed:
            raise RequestRefused(
                f"a tool of type {kind!r} is billed apart from tokens "
                f"(only {', '.join(sorted(allowed))} tools are forwarded)",
                code="unbounded_cost",
            )


def _chat_references(body: dict[str, Any]) -> int:
    references = 0
    for number, message in enumerate(body["messages"]):
        if not isinstance(message.get("role"), str):
            raise RequestRefused(f"message {number} has no role")
        references += _parts(message.get("content"), f"message {number}")
    return references


def _responses_references(body: dict[str, Any]) -> int:
    references = sum(body.get(key) is not None for key in _REFERENCES)
    for key in ("input", "instructions"):
        items = body.get(key)
        for number, item in enumerate(items if isinstance(items, list) else ()):
            kind = item.get("type", "message" if "role" in item else None)
            where = f"{key} item {number}"
            if kind == "item_reference":
                references += 1
            elif kind not in _ITEMS:
                raise RequestRefused(
                    f"{where} is of type {kind!r}, which the meter cannot bound",
                    code="unbounded_cost",
                )
            elif kind == "message":
                references += _parts(item.get("content"), where)
            elif kind.endswith("_output"):
                references += _parts(item.get("output"), where)
    return references


def parse_request(rule: Rule, raw: bytes, *, reference_tokens: int | None) -> ParsedRequest:
    """The request in ``raw`` as the meter forwards it.

    ``reference_tokens`` is the stated worst case of one input the body does not
    hold; None refuses such requests.

    Raises:
        RequestRefused: the body is not one the meter can forward; its code says why.
    """
    body = _decode(raw)
    if rule == "chat":
        _typed(CHAT_FIELDS, body, "chat")
        if "messages" not in body:
            raise RequestRefused("chat requests need messages")
        references = _chat_references(body)
    else:
        _typed(RESPONSES_FIELDS, body, "responses")
        references = _responses_references(body)
    if "model" not in body:
        raise RequestRefused("the request names no model")
    if references and reference_tokens is None:
        raise RequestRefused(
            "the request names input the body does not hold (a stored response, conversation "
            "or prompt, an item reference, an image, a file or audio), whose cost the meter "
            "cannot bound; send the input itself",
            code="unbounded_cost",
        )
    options = body.get("stream_options")
    if options is not None and rule == "chat":
        _typed(_STREAM_OPTIONS, options, "stream_options")
    limits = [body.get(key) for key in ("max_completion_tokens", "max_tokens", "max_output_tokens")]
    return ParsedRequest(
        body=body,
        model=body["model"],
        stream=bool(body.get("stream")),
        output_limit=max((x for x in limits if x is not None), default=None),
        choices=body.get("n") or 1,
        references=references,
    )


_STREAM_OPTIONS = {
    "include_usage": Field(bool | None, _PASSED),
    "continuous_usage_stats": Field(bool | None, _PASSED),
    "include_obfuscation": Field(bool | None, _PASSED),
}
