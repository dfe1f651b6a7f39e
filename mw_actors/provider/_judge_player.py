"""A deterministic judge for ServeLearnBench's Pitch rubric: what ``local/scripted`` says as judge.

The Pitch verifier sends one checklist request per pitch: a system prompt (the
fact-checker's instructions) and ``ATTRIBUTES:`` (one ``- phrase`` per line)
then ``PITCH:``. This judge answers in the shape the verifier requires,
``{"verdicts": {phrase: "M" | "N"}, "invented": []}``: an attribute is
mentioned (``M``) when most of its words appear in the pitch, else not
addressed (``N``); it never finds a contradiction or an invented claim. The
same request always gets the same verdicts, so runs that send the same pitch
score it the same.
"""

from __future__ import annotations

import json
import re

from ._engine import Reply, Turn
from ._tool_player import message_text

__all__ = ["JudgePlayer", "is_judge_request"]

_ROLE = "You are a careful fact-checker."
_WORD = re.compile(r"[a-z0-9]+")


def is_judge_request(turn: Turn) -> bool:
    """Whether ``turn`` is the Pitch verifier's checklist request."""
    return any(
        m.get("role") == "system" and message_text(m.get("content")).startswith(_ROLE)
        for m in turn.conversation
    )


class JudgePlayer:
    """Chat Completions: the checklist's verdicts, by word overlap."""

    name = "judge-player"
    blocking = False

    def respond(self, turn: Turn) -> Reply:
        user = next(
            (message_text(m.get("content")) for m in turn.conversation if m.get("role") == "user"),
            "",
        )
        listing, _, pitch = user.partition("\n\nPITCH:\n")
        attributes = [line[2:].strip() for line in listing.splitlines() if line.startswith("- ")]
        said = set(_WORD.findall(pitch.lower()))
        verdicts = {}
        for attribute in attributes:
            words = [w for w in _WORD.findall(attribute.lower()) if len(w) > 3]
            hits = sum(w in said for w in words)
            verdicts[attribute] = "M" if words and 2 * hits > len(words) else "N"
        return Reply(content=json.dumps({"verdicts": verdicts, "invented": []}))
