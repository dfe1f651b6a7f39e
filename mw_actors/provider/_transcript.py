"""What a conversation says, as ``(role, text)`` pairs, for chat messages and Responses items.

The provider counts prompt tokens over these pairs in ChatML, and the
``smollm2`` engine renders them for the model, so both read a conversation
the same way.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["text_of", "transcript"]


def text_of(content: Any) -> str:
    """The text of a message's content: a string or a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(text_of(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def _calls_text(message: dict[str, Any]) -> str:
    calls = message.get("tool_calls") or []
    return "".join(json.dumps(call.get("function", {})) for call in calls if isinstance(call, dict))


def _item_text(item: dict[str, Any]) -> str:
    """The text a Responses input item contributes to the prompt."""
    parts = [text_of(item.get("content")), str(item.get("output", "") or "")]
    for key in ("name", "arguments", "input"):
        if isinstance(item.get(key), str):
            parts.append(item[key])
    return "".join(parts)


def transcript(conversation: list[dict[str, Any]], *, responses: bool) -> list[tuple[str, str]]:
    """``(role, text)`` of each chat message (or Responses input item), in order.

    A Responses item without a role (a function call or its output) reads as ``tool``.
    """
    entries = [entry for entry in conversation if isinstance(entry, dict)]
    if responses:
        return [(str(item.get("role", "tool")), _item_text(item)) for item in entries]
    return [
        (str(m.get("role", "user")), text_of(m.get("content")) + _calls_text(m)) for m in entries
    ]
