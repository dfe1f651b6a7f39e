"""An LLM editing policy: the agent arm driven by a model, reached only through a wire meter.

Each turn sends the whole history to ``/v1/responses`` (``store: false``) on
the trial's meter, which injects the credential, prices the request, reserves
its worst case inside the trial's envelope and writes a ledger line. Before a
request leaves, its body is retained under ``trials/<id>/policy/`` and a
``PolicyIntent`` is fsynced to the journal; the answer is retained beside it.

The protocol: one tool call per turn. A turn with several calls runs none of
them; a turn with none gets a corrective message. ``finish`` ends the trial.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import anyio
import httpx

from mw_errors import EditFailed

from ._actions import Action, Finish, RunPython, Undo
from ._config import PolicyFile
from ._editors import EditContext, apply
from ._records import PolicyIntent

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


def _action(call: dict[str, Any]) -> Action | str:
    """The action a function call asks for, or why it cannot run."""
    try:
        arguments = json.loads(call.get("arguments") or "{}")
    except ValueError:
        return "the arguments are not JSON"
    name = call.get("name")
    if name == "run_python":
        code = arguments.get("code") if isinstance(arguments, dict) else None
        return RunPython(code) if isinstance(code, str) else "run_python needs a string `code`"
    if name == "undo":
        return Undo()
    if name == "finish":
        return Finish()
    return f"there is no tool {name!r}; use run_python, undo or finish"


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
    history: list[dict[str, Any]] = [
        {"role": "user", "content": "Edit the weights for the task, then call finish."}
    ]
    limit = min(policy.max_output_tokens, output_tokens)
    async with httpx.AsyncClient(base_url=meter_url, timeout=600.0) as client:
        for turn in range(1, turns + 1):
            body = {
                "model": policy.model,
                "instructions": INSTRUCTIONS,
                "input": history,
                "tools": TOOLS,
                "parallel_tool_calls": False,
                "max_output_tokens": limit,
                "store": False,
            }
            data = json.dumps(body, sort_keys=True).encode()
            request_path = record_dir / f"turn-{turn:03d}.request.json"
            await anyio.Path(request_path).write_bytes(data)
            await ctx.journal.append(
                PolicyIntent(
                    trial_id=ctx.trial_id,
                    turn=turn,
                    idempotency_id=f"{ctx.trial_id}/turn-{turn:03d}",
                    request_sha256=hashlib.sha256(data).hexdigest(),
                    request_path=str(request_path.relative_to(run_root)),
                )
            )
            response = await client.post(
                "/v1/responses",
                content=data,
                headers={"content-type": "application/json", "authorization": "Bearer meter"},
            )
            await anyio.Path(record_dir / f"turn-{turn:03d}.response.json").write_bytes(
                response.content
            )
            if response.status_code != 200:
                raise EditFailed(
                    f"the policy's request {turn} was refused with HTTP {response.status_code}: "
                    f"{response.text[:200]}"
                )
            try:
                output = response.json().get("output") or []
            except (ValueError, AttributeError):
                raise EditFailed(
                    f"the provider's answer to request {turn} is not a Responses object"
                ) from None
            history.extend(item for item in output if isinstance(item, dict))
            calls = [item for item in output if item.get("type") == "function_call"]
            if len(calls) != 1:
                why = "no tool call" if not calls else f"{len(calls)} tool calls, so none ran"
                for call in calls:
                    history.append(
                        {
                            "type": "function_call_output",
                            "call_id": call.get("call_id"),
                            "output": "not run: one tool call per turn",
                        }
                    )
                history.append(
                    {"role": "user", "content": f"Your turn had {why}. Call exactly one tool."}
                )
                await ctx.step(turn, "none" if not calls else "rejected", None)
                continue
            action = _action(calls[0])
            if isinstance(action, str):
                await ctx.step(turn, "invalid", None)
                observation = f"not run: {action}"
            else:
                observation = await apply(ctx, turn, action)
            history.append(
                {
                    "type": "function_call_output",
                    "call_id": calls[0].get("call_id"),
                    "output": observation,
                }
            )
            if isinstance(action, Finish):
                return turn
    return turns
