"""Prices (units, refusals, exact money) and usage extraction (no double counting)."""

from __future__ import annotations

import json
import random
from decimal import Decimal
from typing import Any

import pytest

import meters
from mw_errors import ConfigError

GOOD: dict[str, Any] = {
    "schema_version": 1,
    "date": "2026-11-30",
    "models": {
        "fireworks/small": {
            "input_per_mtok": "0.10",
            "cached_input_per_mtok": "0.05",
            "output_per_mtok": "0.40",
            "max_output_tokens": 8192,
        },
        "local/free": {
            "input_per_mtok": "0",
            "cached_input_per_mtok": "0",
            "output_per_mtok": "0",
            "max_output_tokens": 512,
        },
    },
}


def table(**model_changes: Any) -> meters.PriceTable:
    data = json.loads(json.dumps(GOOD))
    data["models"]["fireworks/small"].update(model_changes)
    return meters.parse_prices(json.dumps(data).encode())


def test_cost_is_exact_and_counts_cached_input_once() -> None:
    usage = meters.Usage(
        input_tokens=1000, cached_input_tokens=400, output_tokens=300, reasoning_tokens=100
    )
    cost = table().cost("fireworks/small", usage)
    # 600 uncached x 0.10 + 400 cached x 0.05 + 300 out x 0.40, per million
    assert cost == Decimal("0.00020")
    assert table().cost("local/free", usage) == 0


def test_worst_case_uses_the_ceiling_when_the_request_names_none() -> None:
    prices = table()
    assert prices.worst_case("fireworks/small", 1000, None) == Decimal("0.0033768")
    assert prices.worst_case("fireworks/small", 1000, 100) == Decimal("0.00014")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"input_per_mtok": "0.0000001"}, "looks like a price per token, not per million"),
        ({"output_per_mtok": "-1"}, "must be a finite price >= 0"),
        ({"output_per_mtok": "NaN"}, "must be a finite price >= 0"),
        ({"output_per_mtok": "cheap"}, "is not a decimal"),
        ({"output_per_mtok": 0.4}, "Expected `str`, got `float`"),
        ({"max_output_tokens": 0}, "max_output_tokens must be >= 1"),
        ({"per_token": "1"}, "unknown field"),
    ],
)
def test_bad_prices_are_refused_with_one_line(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        table(**changes)
    assert "\n" not in info.value.render()


def test_the_unit_hint_names_the_per_million_price() -> None:
    with pytest.raises(ConfigError) as info:
        table(input_per_mtok="0.0000001")
    assert "0.1000000" in info.value.hint


def test_unpriced_model_is_refused_not_free() -> None:
    with pytest.raises(meters.UnpricedModel, match="'openai/unknown' has no price"):
        table().cost("openai/unknown", meters.Usage(input_tokens=1))


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [("date", "30/11/2026", "is not YYYY-MM-DD"), ("schema_version", 2, "schema_version 2")],
)
def test_bad_tables(field: str, value: Any, message: str) -> None:
    data = {**GOOD, field: value}
    with pytest.raises(ConfigError, match=message):
        meters.parse_prices(json.dumps(data).encode())


def test_chat_usage_never_double_counts() -> None:
    block = {
        "prompt_tokens": 120,
        "completion_tokens": 50,
        "total_tokens": 170,
        "prompt_tokens_details": {"cached_tokens": 100},
        "completion_tokens_details": {"reasoning_tokens": 30},
    }
    usage = meters.chat_usage(block)
    assert usage == meters.Usage(
        input_tokens=120, cached_input_tokens=100, output_tokens=50, reasoning_tokens=30
    )
    assert meters.chat_usage(None) is None


def test_responses_usage() -> None:
    block = {
        "input_tokens": 900,
        "input_tokens_details": {"cached_tokens": 800},
        "output_tokens": 70,
        "output_tokens_details": {"reasoning_tokens": 64},
        "total_tokens": 970,
    }
    assert meters.responses_usage(block) == meters.Usage(
        input_tokens=900, cached_input_tokens=800, output_tokens=70, reasoning_tokens=64
    )


def _sse(*events: tuple[str | None, str]) -> bytes:
    out = b""
    for event, data in events:
        if event:
            out += f"event: {event}\n".encode()
        out += f"data: {data}\n\n".encode()
    return out


CHAT_STYLES = {
    # OpenAI: a last chunk with empty choices carries usage
    "openai": [
        '{"choices":[{"index":0,"delta":{"content":"hi"}}]}',
        '{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}',
        '{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2}}',
        "[DONE]",
    ],
    # vLLM: choices null on the usage chunk
    "vllm": [
        '{"choices":[{"index":0,"delta":{"content":"hi"}}]}',
        '{"choices":null,"usage":{"prompt_tokens":5,"completion_tokens":2}}',
        "[DONE]",
    ],
    # llama.cpp: usage on the finish chunk itself
    "llamacpp": [
        '{"choices":[{"index":0,"delta":{"content":"hi"}}]}',
        '{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],'
        '"usage":{"prompt_tokens":5,"completion_tokens":2}}',
        "[DONE]",
    ],
}


@pytest.mark.parametrize("style", sorted(CHAT_STYLES))
def test_chat_stream_usage_in_every_style(style: str, seed: int) -> None:
    stream = _sse(*((None, data) for data in CHAT_STYLES[style]))
    rng = random.Random(seed)
    parser, tracker = meters.SSEParser(), meters.ChatStream()
    usage_only = []
    position = 0
    while position < len(stream):  # arbitrary network splits
        step = rng.randint(1, 17)
        for event in parser.feed(stream[position : position + step]):
            usage_only.append(tracker.observe(event))
        position += step
    assert tracker.usage == meters.Usage(input_tokens=5, output_tokens=2)
    assert tracker.done and parser.tail() == b""
    assert usage_only.count(True) == (0 if style == "llamacpp" else 1)


def test_events_keep_their_exact_bytes() -> None:
    raw = b"event: response.completed\r\ndata: {}\r\n\r\n"
    (event,) = meters.SSEParser().feed(raw)
    assert event.raw == raw and event.event == "response.completed"


@pytest.mark.parametrize("terminal", ["response.completed", "response.incomplete"])
def test_responses_stream_usage(terminal: str) -> None:
    body = json.dumps(
        {"type": terminal, "response": {"usage": {"input_tokens": 9, "output_tokens": 4}}}
    )
    tracker = meters.ResponsesStream()
    stream = _sse(("response.created", '{"type":"response.created"}'), (terminal, body))
    for event in meters.SSEParser().feed(stream):
        tracker.observe(event)
    assert tracker.terminal == terminal
    assert tracker.usage == meters.Usage(input_tokens=9, output_tokens=4)


def test_a_cut_stream_has_no_usage() -> None:
    parser, tracker = meters.SSEParser(), meters.ChatStream()
    stream = _sse((None, CHAT_STYLES["openai"][0])) + b'data: {"choices":[],"us'
    for event in parser.feed(stream):
        tracker.observe(event)
    assert tracker.usage is None and parser.tail().startswith(b"data:")


def test_usages_add_field_by_field() -> None:
    from meters import Usage

    one = Usage(input_tokens=10, cached_input_tokens=4, output_tokens=3, reasoning_tokens=1)
    two = Usage(input_tokens=5, cached_input_tokens=0, output_tokens=7, reasoning_tokens=2)
    assert one + two == Usage(
        input_tokens=15, cached_input_tokens=4, output_tokens=10, reasoning_tokens=3
    )
    assert Usage() + one == one
