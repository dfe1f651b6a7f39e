"""An engine that plays the MWM learner on the synthetic scenario, offline.

It works the learner's tools as an LLM learner would, one call per turn:
``fit_adapter`` (train the world model's adapter on the evidence), then
``read_card``, then ``write_card`` with the card plus its own notes (per kind
of case, the decision that scored best in the most recent block that saw it,
read from the episodes' records in the conversation), then ``finish``. Like the
synthetic host it reads the conversation, not a script; it sees only what the
learner session shows it: the records of the block's episodes.

Offered Codex CLI's shell tool (``exec_command``) instead, it does the same with
commands in the workspace: ``./fit_adapter``, then its notes appended to
``card.md``, then a last message with no tool call (Codex's end of a turn).
"""

from __future__ import annotations

import re

from ._engine import Reply, ToolCall, Turn
from ._transcript import text_of

__all__ = ["SyntheticLearner"]

_SECTION = re.compile(r"^## block (\d+), stream position \d+$", re.M)
_KIND = re.compile(r'"kind": "(\w+)"')
_DECIDED = re.compile(r'^  action: decide\(.*"decision": "(\w+)"', re.M)
_SCORE = re.compile(r"^Score: (\d+)/100\.$", re.M)


def notes(evidence: str) -> str:
    """Per kind: the best-scoring decision of the latest block that saw that kind.

    It reads the records shown (one ``## block K`` section each) as a reader of the
    synthetic scenario would: the case's kind from ``get_case``'s observation, the
    decision from ``decide``'s arguments, the score line.
    """
    seen: dict[str, dict[int, dict[str, list[int]]]] = {}
    sections = _SECTION.split(evidence)[1:]
    for block, record in zip(sections[::2], sections[1::2], strict=True):
        found = _KIND.search(record), _DECIDED.search(record), _SCORE.search(record)
        if found[0] and found[1] and found[2]:
            by_block = seen.setdefault(found[0].group(1), {}).setdefault(int(block), {})
            by_block.setdefault(found[1].group(1), []).append(int(found[2].group(1)))
    lines = ["## Learner notes", ""]
    for kind in sorted(seen):
        latest = max(seen[kind])
        scores = seen[kind][latest]
        best = max(sorted(scores), key=lambda d: sum(scores[d]) / len(scores[d]))
        mean = sum(scores[best]) / len(scores[best])
        lines.append(f"- {kind}: {best} scored {mean:.0f}/100 in block {latest}")
    return "\n".join(lines) + "\n"


class SyntheticLearner:
    """Chat Completions (the learner meter adapts the session's Responses to it)."""

    name = "synthetic-learner"
    blocking = False

    def respond(self, turn: Turn) -> Reply:
        offered = {(tool.get("function") or tool).get("name") for tool in turn.tools or []}
        if "exec_command" in offered:
            return self._codex(turn)
        messages = turn.conversation
        called = [
            call.get("function", {}).get("name")
            for m in messages
            if m.get("role") == "assistant"
            for call in m.get("tool_calls") or []
        ]
        if "fit_adapter" not in called:
            return Reply(
                reasoning="First the adapter learns from all the evidence so far.",
                tool_calls=[ToolCall("fit_adapter", {})],
            )
        if "read_card" not in called:
            return Reply(tool_calls=[ToolCall("read_card", {})])
        if "write_card" not in called:
            card = next(
                (text_of(m.get("content")) for m in reversed(messages) if m.get("role") == "tool"),
                "",
            )
            evidence = "\n".join(
                text_of(m.get("content")) for m in messages if m.get("role") == "user"
            )
            return Reply(
                reasoning="The card gets what the last block taught, kind by kind.",
                tool_calls=[
                    ToolCall("write_card", {"text": card.rstrip() + "\n\n" + notes(evidence)})
                ],
            )
        return Reply(content="The world model is updated.", tool_calls=[ToolCall("finish", {})])

    def _codex(self, turn: Turn) -> Reply:
        """Codex's workspace, through its shell: fit, note, done."""
        messages = turn.conversation
        commands = [
            call
            for m in messages
            if m.get("role") == "assistant"
            for call in m.get("tool_calls") or []
        ]
        if not commands:
            return Reply(
                reasoning="First the adapter learns from all the evidence so far.",
                tool_calls=[ToolCall("exec_command", {"cmd": "./fit_adapter"})],
            )
        if len(commands) == 1:
            evidence = "\n".join(
                text_of(m.get("content")) for m in messages if m.get("role") == "user"
            )
            append = f"cat >> card.md <<'MW_NOTES'\n\n{notes(evidence)}MW_NOTES"
            return Reply(
                reasoning="The card gets what the last block taught, kind by kind.",
                tool_calls=[ToolCall("exec_command", {"cmd": append})],
            )
        return Reply(content="The world model is updated.")
