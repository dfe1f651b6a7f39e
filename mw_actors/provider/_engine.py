"""Engines decide what the local provider answers. ``scripted`` replays a script.

A script is a JSON list of turns, replayed by position: the n-th assistant
turn of a conversation gets entry ``n % len(script)``. Each turn is
``{"content": "..."}`` or ``{"tool_calls": [{"name": ..., "arguments": {...}}]}``.
The same conversation always gets the same answer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Protocol

import msgspec

from mw_errors import ConfigError

__all__ = ["Engine", "Reply", "ScriptedEngine", "ToolCall", "Turn"]


class ToolCall(msgspec.Struct, frozen=True):
    name: str
    arguments: dict[str, Any]

    @property
    def arguments_json(self) -> str:
        return json.dumps(self.arguments, sort_keys=True)


class Turn(msgspec.Struct, frozen=True):
    """What an engine answers: one request's conversation and its limits.

    ``conversation`` holds chat messages, or Responses input items with the
    request's ``instructions`` as a leading system message (``responses``).
    """

    conversation: list[dict[str, Any]]
    assistant_turns: int
    responses: bool = False
    tools: list[Any] = []
    max_tokens: int | None = None


class Reply(msgspec.Struct, frozen=True):
    content: str = ""
    tool_calls: list[ToolCall] = []
    reasoning: str = ""  # sent as the message's reasoning_content (Chat Completions)
    # Usage an engine that ran a model measured itself; 0 = the provider counts the text.
    prompt_tokens: int = 0
    completion_tokens: int = 0
    truncated: bool = False  # stopped at max_tokens: finish_reason "length" / status "incomplete"


class Engine(Protocol):
    """What decides the local provider's answers.

    ``blocking`` engines (a model generating on the CPU) are called on a worker
    thread so the provider's event loop keeps serving.
    """

    name: str
    blocking: bool

    def respond(self, turn: Turn) -> Reply:
        """The answer to ``turn``."""
        ...


class ScriptedEngine:
    """Answers from a script, by the number of assistant turns already in the conversation."""

    name = "scripted"
    blocking = False

    def __init__(self, script: list[Reply] | None = None) -> None:
        self.script = script or [Reply(content="ok")]

    @classmethod
    def from_file(cls, path: str | Path) -> ScriptedEngine:
        """Load a script file.

        Raises:
            ConfigError: the file is missing or not a list of turns.
        """
        try:
            script = msgspec.json.decode(Path(path).read_bytes(), type=list[Reply])
        except (OSError, msgspec.DecodeError) as exc:
            raise ConfigError(f"script {path}: {exc}", hint="a JSON list of turns") from None
        if not script:
            raise ConfigError(f"script {path} has no turns")
        return cls(script)

    def reply(self, assistant_turns: int) -> Reply:
        return self.script[assistant_turns % len(self.script)]

    def respond(self, turn: Turn) -> Reply:
        return self.reply(turn.assistant_turns)
