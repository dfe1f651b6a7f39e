"""An engine that plays the host on the synthetic serve-and-learn scenario.

It reads the conversation, not a script: look the case up with ``get_case``;
if a ``wm`` tool is offered, ask the world model which decision scores best
for that kind of case; decide as the world model says, or as the manual in
the system prompt says when the world model does not know; then ``finish``.
So a method that learns the hidden policy makes this host score better, and
one that does not (``blind``) leaves it at the manual: the learning curve comes
from the world model, not from the engine. A conversation with no synthetic case
(a benchmark task) is played by :class:`~._tool_player.ToolPlayer`; the Pitch
verifier's checklist request is answered by :class:`~._judge_player.JudgePlayer`.
"""

from __future__ import annotations

import json
import re

from ._engine import Reply, ToolCall, Turn
from ._judge_player import JudgePlayer, is_judge_request
from ._tool_player import ToolPlayer
from ._tool_player import message_text as _text

__all__ = ["SyntheticHost"]

_CASE = re.compile(r"\bCASE-\d+\b")
_MANUAL = re.compile(r"^- (\w+): (approve|deny|escalate)$", re.M)
_BEST = re.compile(r"^best: \w+\([^)\n]*\b(approve|deny|escalate)\b", re.M)


class SyntheticHost:
    """Chat Completions only: it answers from the messages' tool results."""

    name = "synthetic-host"
    blocking = False

    def __init__(self) -> None:
        self._player = ToolPlayer()
        self._judge = JudgePlayer()

    def respond(self, turn: Turn) -> Reply:
        if is_judge_request(turn):  # the Pitch verifier's checklist
            return self._judge.respond(turn)
        conversation = turn.conversation
        system = "".join(_text(m.get("content")) for m in conversation if m.get("role") == "system")
        users = [_text(m.get("content")) for m in conversation if m.get("role") == "user"]
        found = _CASE.search(users[0]) if users else None
        if found is None:  # not the synthetic scenario: a benchmark task, played generically
            return self._player.respond(turn)
        case_id = found.group(0)
        # A tool result names its call's id; the call names the tool.
        tool_of = {
            str(call.get("id")): str((call.get("function") or {}).get("name") or "")
            for m in conversation
            if m.get("role") == "assistant"
            for call in m.get("tool_calls") or []
            if isinstance(call, dict)
        }
        results: dict[str, str] = {}
        for message in conversation:
            if message.get("role") == "tool":
                name = message.get("name") or tool_of.get(str(message.get("tool_call_id")), "")
                results[str(name)] = _text(message.get("content"))
        called = [
            call.get("function", {}).get("name")
            for m in conversation
            if m.get("role") == "assistant"
            for call in m.get("tool_calls") or []
        ]
        if "decide" in called:
            return Reply(tool_calls=[ToolCall("finish", {})])
        if "get_case" not in called:
            return Reply(
                reasoning=f"First I look up {case_id}.",
                tool_calls=[ToolCall("get_case", {"case_id": case_id})],
            )
        try:
            kind = str(json.loads(results.get("get_case", "{}")).get("kind", ""))
        except ValueError:
            kind = ""
        offered = "wm tool" in system  # the MWM context offers it
        if offered and "wm" not in called:
            candidates = ", ".join(("approve", "deny", "escalate"))
            query = f"Which decision scores best for a {kind} case? Candidates: {candidates}."
            return Reply(
                reasoning=f"It is a {kind} case; I ask the world model.",
                tool_calls=[ToolCall("wm", {"query": query})],
            )
        advice = _BEST.search(results.get("wm", ""))
        manual = dict(_MANUAL.findall(system))
        decision = advice.group(1) if advice else manual.get(kind, "escalate")
        return Reply(
            reasoning=f"Deciding {decision} for the {kind} case.",
            tool_calls=[ToolCall("decide", {"case_id": case_id, "decision": decision})],
        )
