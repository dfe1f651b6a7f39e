"""The meter's one reading of a request: the table, strict types, and what it forwards."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import meters
from meters._requests import CHAT_FIELDS, RESPONSES_FIELDS, RequestRefused, parse_request

from ..scenarios.meter_attacks import CHAT

DOC = Path(__file__).parents[2] / "docs" / "design" / "meters.md"


def test_every_field_the_meter_forwards_is_in_the_documented_table() -> None:
    doc = DOC.read_text()
    missing = [name for name in {**CHAT_FIELDS, **RESPONSES_FIELDS} if f"| `{name}` |" not in doc]
    assert not missing, f"docs/design/meters.md lacks the table rows of {missing}"


def test_a_parse_keeps_what_it_read_and_its_limits() -> None:
    body = {**json.loads(CHAT), "max_tokens": 7, "max_completion_tokens": 9, "n": 2}
    parsed = parse_request("chat", json.dumps(body).encode(), reference_tokens=None)
    assert parsed.body == body
    assert (parsed.output_limit, parsed.choices, parsed.stream) == (9, 2, False)


def test_a_reference_is_reserved_at_its_stated_worst_case_when_allowed() -> None:
    raw = json.dumps({"model": "m", "input": "go on", "previous_response_id": "r_1"}).encode()
    with pytest.raises(RequestRefused, match="cannot bound"):
        parse_request("responses", raw, reference_tokens=None)
    assert parse_request("responses", raw, reference_tokens=128_000).references == 1


def test_non_ascii_is_forwarded_as_is() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "café, naïve"}]}
    assert (
        meters._requests.encode_body(body)
        == json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
    )


def test_the_learner_adapter_keeps_non_ascii_as_is() -> None:
    """Escaped as \\uXXXX, accented input took up to 3x the tokens its bytes were reserved for."""
    item = {"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch", "input": "é" * 50}
    chat, _ = meters._adapter.chat_request(
        {"model": "m", "input": [item, {"type": "custom_tool_call_output", "call_id": "c1",
                                        "output": [{"type": "input_text", "text": "ü"}]}]}
    )  # fmt: skip
    forwarded = meters._requests.encode_body(chat)
    assert b"\\u00e9" not in forwarded and "é".encode() * 50 in forwarded
