"""A deterministic player for any tool-calling task: what ``local/scripted`` does off the script.

It knows no domain. From the request's ``tools`` and the conversation so far it:

1. looks up every id it knows with the lookup tool (``get_*``, ``find_*``,
   ``list_*``, ``search_*``, ``read_*``) whose one required parameter names
   it; an id is known when the instruction holds it (``TXN-227177``) or an
   earlier result holds it under that parameter's name (``"account_id": ...``);
2. if a ``wm`` tool is offered (a world model), asks it once about the case
   (the instruction and what the look-ups returned);
3. then takes one action with another tool: the one ``wm`` advises when its
   estimated chance to score is at least even (``best: name(k=v, ...)``),
   else one chosen by a hash of the task's first id; its arguments are filled
   from the advice and from what it knows;
4. then calls ``finish``, with the arguments its schema requires.

The same conversation always gets the same answer, so two runners that send
the same messages (``slb run`` and mw) get the same episodes. It plays well
enough that both outcomes occur, and never learns: it is the benchmark's
model stand-in, not a method.
"""

from __future__ import annotations

import contextlib
import json
import re
import zlib
from typing import Any

from ._engine import Reply, ToolCall, Turn

__all__ = ["ToolPlayer", "message_text"]

_ID = re.compile(r"\b[A-Z]{2,5}-[A-Za-z0-9]+\b")
_CODE = re.compile(r"\b[a-z]+(?:_[a-z]+)+\b")
_LOOKUP = ("get_", "find_", "list_", "search_", "read_")
FINISH = "finish"
WM = "wm"
_ADVICE = re.compile(r"^best: (\w+)\(([^\n]*)\) \(estimated chance to score ([0-9.]+)\)$", re.M)
_TIMESTAMP = re.compile(r"^Current timestamp: \d+\n\n")


def message_text(content: Any) -> str:
    """A message's text: its content string, or its text parts joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _function(tool: Any) -> dict[str, Any]:
    tool = _dict(tool)
    return _dict(tool.get("function")) or tool  # Chat's nesting, or Responses' flat


def _parameters(tool: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    params = _dict(tool.get("parameters"))
    required = [r for r in params.get("required") or [] if isinstance(r, str)]
    return _dict(params.get("properties")), required


def _values(result: str) -> dict[str, list[str]]:
    """``name -> values`` of the string fields of a JSON result, at any depth."""
    found: dict[str, list[str]] = {}

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if isinstance(value, str):
                    found.setdefault(str(key), []).append(value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    with contextlib.suppress(ValueError):
        walk(json.loads(result))
    return found


class _Seen:
    """What the conversation holds: the calls made, their results, the ids known."""

    def __init__(self, conversation: list[dict[str, Any]]) -> None:
        self.system = "".join(
            message_text(m.get("content")) for m in conversation if m.get("role") == "system"
        )
        users = [message_text(m.get("content")) for m in conversation if m.get("role") == "user"]
        self.instruction = users[0] if users else ""
        self.calls: list[tuple[str, str]] = []  # (name, arguments as JSON)
        self.results: list[str] = []
        for message in conversation:
            if message.get("role") == "assistant":
                for call in message.get("tool_calls") or []:
                    function = _dict(_dict(call).get("function"))
                    name = str(function.get("name") or "")
                    self.calls.append((name, str(function.get("arguments") or "{}")))
            elif message.get("role") == "tool":
                self.results.append(message_text(message.get("content")))
        self.ids = list(dict.fromkeys(_ID.findall(self.instruction)))
        self.fields: dict[str, list[str]] = {}
        for result in self.results:
            for key, values in _values(result).items():
                self.fields.setdefault(key, []).extend(values)

    def called(self, name: str, arguments: dict[str, Any]) -> bool:
        return (name, json.dumps(arguments, sort_keys=True)) in {
            (n, json.dumps(_loads(a), sort_keys=True)) for n, a in self.calls
        }

    def advice(self) -> tuple[str, dict[str, str]] | None:
        """The action the world model advises, if it gives it at least an even chance."""
        for result in self.results:
            found = _ADVICE.search(result)
            if found and float(found.group(3)) >= 0.5:
                pairs = (p.partition("=") for p in found.group(2).split(", ") if "=" in p)
                return found.group(1), {k: v for k, _, v in pairs}
        return None

    def value(self, parameter: str) -> str | None:
        """A known value for ``parameter``: from the results by its name, else the instruction."""
        if self.fields.get(parameter):
            return str(self.fields[parameter][0])
        if parameter.endswith("_id") and self.ids:
            return str(self.ids[0])
        return None


def _loads(raw: str) -> Any:
    try:
        return json.loads(raw or "{}")
    except ValueError:
        return None


def _pick(key: str, options: list[Any]) -> Any:
    return options[zlib.crc32(key.encode()) % len(options)]


class ToolPlayer:
    """Plays a task's tools generically: look up, act once, finish."""

    name = "tool-player"
    blocking = False

    def respond(self, turn: Turn) -> Reply:
        seen = _Seen(turn.conversation)
        tools = [f for f in map(_function, turn.tools) if f.get("name")]
        by_name = {str(f["name"]): f for f in tools}
        acted = any(not n.startswith(_LOOKUP) and n not in (FINISH, WM) for n, _ in seen.calls)
        if not acted:
            for tool in tools:
                name = str(tool["name"])
                _, required = _parameters(tool)
                if not name.startswith(_LOOKUP) or len(required) != 1:
                    continue
                for value in self._candidates(seen, required[0]):
                    arguments: dict[str, Any] = {required[0]: value}
                    if not seen.called(name, arguments):
                        return Reply(
                            reasoning=f"I look up {value}.",
                            tool_calls=[ToolCall(name, arguments)],
                        )
            if WM in by_name and not any(n == WM for n, _ in seen.calls):
                case = " ".join([_TIMESTAMP.sub("", seen.instruction), *seen.results])
                return Reply(
                    reasoning="I ask the world model what scores for a case like this.",
                    tool_calls=[ToolCall(WM, {"query": case[:2000]})],
                )
            actions = [f for f in tools if not str(f["name"]).startswith(_LOOKUP)]
            actions = [f for f in actions if f["name"] not in (FINISH, WM)]
            if actions:
                key = seen.ids[0] if seen.ids else seen.instruction
                tool, advised = _pick(key, actions), seen.advice()
                if advised is not None and advised[0] in by_name and advised[0] != FINISH:
                    tool = by_name[advised[0]]
                filled = self._fill(seen, tool, key, set(by_name))
                if filled is not None:
                    if advised is not None and advised[0] == tool["name"]:
                        filled.update({k: v for k, v in advised[1].items() if k in filled})
                    return Reply(
                        reasoning=f"Everything is looked up; I call {tool['name']}.",
                        tool_calls=[ToolCall(str(tool["name"]), filled)],
                    )
        finish = by_name.get(FINISH)
        done = self._fill(seen, finish, seen.instruction, set(by_name)) if finish else {}
        return Reply(
            content="Done.", tool_calls=[ToolCall(FINISH, done or {})], reasoning="I finish."
        )

    @staticmethod
    def _candidates(seen: _Seen, parameter: str) -> list[str]:
        values = list(seen.fields.get(parameter, []))
        if parameter.endswith("_id"):
            prefix = parameter[: -len("_id")].upper()[:3]
            values += [i for i in seen.ids if i.startswith(prefix)] or (
                seen.ids[:1] if parameter in ("case_id", "id") else []
            )
        return list(dict.fromkeys(values))

    @staticmethod
    def _fill(
        seen: _Seen, tool: dict[str, Any], key: str, names: set[str]
    ) -> dict[str, Any] | None:
        """Arguments for ``tool``'s required parameters, or None when one cannot be filled."""
        properties, required = _parameters(tool)
        arguments: dict[str, Any] = {}
        for parameter in required:
            spec = _dict(properties.get(parameter))
            if spec.get("enum"):
                arguments[parameter] = _pick(key + parameter, list(spec["enum"]))
            elif (value := seen.value(parameter)) is not None:
                arguments[parameter] = value
            elif spec.get("type") in (None, "string"):
                arguments[parameter] = ToolPlayer._text_for(seen, parameter, key, names)
            else:
                return None
        return arguments

    @staticmethod
    def _text_for(seen: _Seen, parameter: str, key: str, names: set[str]) -> str:
        if parameter in ("reason", "code"):
            codes = [
                c
                for c in _CODE.findall(" ".join([seen.system, *seen.results]))
                if c not in names and not c.startswith(_LOOKUP) and not c.endswith("_id")
            ]
            return _pick(key, sorted(set(codes))) if codes else "other"
        words = re.findall(r"[A-Za-z][a-z]+", seen.instruction)
        return " ".join((words * 8)[:60]) if words else "Done."
