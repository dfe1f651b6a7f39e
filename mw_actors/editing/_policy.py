"""An LLM editing policy: the agent arm driven by a model, reached only through a wire meter.

Each turn sends the whole history to ``/v1/responses`` (``store: false``) on
the trial's meter, which injects the credential, prices the request, reserves
its worst case inside the trial's envelope and writes a ledger line. Before a
request leaves, its body is retained under ``trials/<id>/policy/`` and a
``PolicyIntent`` is fsynced to the journal; the answer is retained beside it.

The protocol: one tool call per turn. A turn with several calls runs none of
them; a turn with none gets a corrective message. ``finish`` ends the trial.
The turns are mw's one agent loop (:func:`~mw_actors._turns.run_turns`).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import anyio
import httpx

from mw_errors import EditFailed, ProviderRefused

from .._turns import Agent, Answer, Call, Responses, Turn, object_arguments, run_turns
from ._actions import Action, Finish, RunPython, Undo
from ._config import PolicyFile
from ._editors import EditContext, apply
from .records import PolicyIntent

__all__ = ["INSTRUCTIONS", "TOOLS", "run_policy"]

INSTRUCTIONS = """\
You edit the weights of a small causal language model so that it completes the
task's cases better without getting worse on unrelated text. The working
weights are model.safetensors in your working directory; the model's
config.json and tokenizer.json are in inputs/student/, and the public task
cases (JSON lines with id, prompt, completion) in inputs/public/. Python with
numpy, torch and safetensors is available; there is no network.
Call exactly one tool per turn. Call finish when the weights are ready."""

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "name": "run_python",
        "description": "Run a Python program in the sandbox; returns its exit code and output.",
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string"}},
            "required": ["code"],
            "additionalProperties": False,
        },
    },
    {
        "type": "function",
        "name": "undo",
        "description": "Restore the working weights from the original snapshot.",
        "parameters": {"type": "object", "properties": {}, "additionalProperties": False},
    },
    {
        "type": "function",
        "name": "finish",
        "description": "Stop; the working weights are exported and graded.",
        "parameters": {"type": "object", "properties": {}, "additionalProperties": False},
    },
]


def _action(call: Call) -> Action | str:
    """The action a function call asks for, or why it cannot run."""
    arguments = object_arguments(call)
    if isinstance(arguments, str):
        return f"the arguments are not a JSON object ({arguments})"
    if call.name == "run_python":
        code = arguments.get("code")
        return RunPython(code) if isinstance(code, str) else "run_python needs a string `code`"
    if call.name == "undo":
        return Undo()
    if call.name == "finish":
        return Finish()
    return f"there is no tool {call.name!r}; use run_python, undo or finish"


class _Editor(Agent):
    """The policy's tools on the trial's working weights; every request retained first."""

    def __init__(self, ctx: EditContext, limit: int, record_dir: Path, run_root: Path) -> None:
        self.ctx, self.limit, self.record_dir, self.run_root = ctx, limit, record_dir, run_root

    def max_tokens(self, used_output: int) -> int:
        return self.limit

    async def sending(self, number: int, data: bytes) -> None:
        request_path = self.record_dir / f"turn-{number:03d}.request.json"
        await anyio.Path(request_path).write_bytes(data)
        await self.ctx.journal.append(
            PolicyIntent(
                trial_id=self.ctx.trial_id,
                turn=number,
                idempotency_id=f"{self.ctx.trial_id}/turn-{number:03d}",
                request_sha256=hashlib.sha256(data).hexdigest(),
                request_path=str(request_path.relative_to(self.run_root)),
            )
        )

    async def answered(self, number: int, response: httpx.Response) -> None:
        path = self.record_dir / f"turn-{number:03d}.response.json"
        await anyio.Path(path).write_bytes(response.content)

    async def none(self, turn: Turn) -> Answer:
        await self.ctx.step(turn.number, "none", None, unchanged=True)
        return Answer(user="Your turn had no tool call. Call exactly one tool.")

    async def several(self, turn: Turn) -> Answer:
        await self.ctx.step(turn.number, "rejected", None, unchanged=True)
        return Answer(
            results=[(c.id, "not run: one tool call per turn") for c in turn.calls],
            user=f"Your turn had {len(turn.calls)} tool calls, so none ran. Call exactly one tool.",
        )

    async def one(self, turn: Turn, call: Call) -> Answer:
        action = _action(call)
        if isinstance(action, str):
            await self.ctx.step(turn.number, "invalid", None, unchanged=True)
            return Answer(results=[(call.id, f"not run: {action}")])
        observation = await apply(self.ctx, turn.number, action)
        return Answer(results=[(call.id, observation)], done=isinstance(action, Finish))


async def run_policy(
    ctx: EditContext,
    policy: PolicyFile,
    meter_url: str,
    *,
    turns: int,
    output_tokens: int,
    record_dir: Path,
    run_root: Path,
) -> int:
    """Let the policy edit for up to ``turns`` turns; return the turns it used.

    Raises:
        EditFailed: the meter or the provider refused a request (the answer is retained).
    """
    await anyio.Path(record_dir).mkdir(parents=True, exist_ok=True)
    editor = _Editor(ctx, min(policy.max_output_tokens, output_tokens), record_dir, run_root)
    async with httpx.AsyncClient(
        base_url=f"{meter_url}/v1", timeout=600.0, headers={"authorization": "Bearer meter"}
    ) as client:
        try:
            tally = await run_turns(
                client,
                Responses(),
                editor,
                label="the policy's request",
                model=policy.model,
                history=[
                    {"role": "user", "content": "Edit the weights for the task, then call finish."}
                ],
                tools=TOOLS,
                turns=turns,
                extra={"instructions": INSTRUCTIONS, "parallel_tool_calls": False, "store": False},
            )
        except ProviderRefused as exc:
            raise EditFailed(exc.message) from None
    return tally.turns
