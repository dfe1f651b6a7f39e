"""The three editors of a trial, each run against a sandbox.

Every editor starts from the same place: the original weights copied into
scratch as ``model.safetensors``. When it returns, ``model.safetensors`` is
the trial's export.

- ``baseline`` changes nothing;
- ``scripted`` runs the frozen script once (``python inputs/program/script.py``);
- ``agent`` takes one tool call per turn (see :mod:`._actions`) from the
  synthetic agent's actions or from an LLM policy, up to the turn limit.

Each tool call is journaled as a :class:`TrialStep` (evidence) once it has run.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Protocol

import anyio

from mw_errors import EditFailed
from sandbox import ExecResult, Sandbox

from .._hashing import file_sha256
from ._actions import Action, Finish, RunPython, Undo
from .records import TrialStep

__all__ = ["EditContext", "apply", "run_agent", "run_scripted", "sandbox_env"]

_TAIL = 2000
WEIGHTS = "model.safetensors"  # the working weights, in scratch


def _sha256_or_none(path: Path) -> str | None:
    return file_sha256(path) if path.is_file() else None


class Journal(Protocol):
    async def append(self, record: Any) -> int: ...


class EditContext:
    """What an editor works with: the sandbox, the original weights, the journal."""

    def __init__(
        self,
        *,
        trial_id: str,
        sandbox: Sandbox,
        original: Path,
        journal: Journal,
        python: str = sys.executable,
        threads: int = 1,
        seed: int | None = None,
    ) -> None:
        self.trial_id = trial_id
        self.sandbox = sandbox
        self.original = original
        self.journal = journal
        self.python = python
        self.env = sandbox_env(threads, seed)

    async def restore(self) -> None:
        """Put the original weights into scratch (the start, and ``undo``)."""
        await self.sandbox.copy_in(self.original, "model.safetensors")

    async def weights_sha256(self) -> str | None:
        """The hash of the working weights in scratch now (None: there are none)."""
        return await anyio.to_thread.run_sync(_sha256_or_none, self.sandbox.scratch / WEIGHTS)

    async def step(
        self,
        turn: int,
        tool: str,
        result: ExecResult | None,
        *,
        arguments: dict[str, Any] | None = None,
        before: str | None = None,
        unchanged: bool = False,
    ) -> TrialStep:
        """Journal one tool call: what it was given, what it did, the weights after it.

        ``before`` is the weights' hash before the call; ``unchanged``: the call did not
        touch them (finish, or a policy's misstep), so before is after.
        """
        after = await self.weights_sha256()
        step = TrialStep(
            trial_id=self.trial_id,
            turn=turn,
            tool=tool,
            arguments=arguments or {},
            before_sha256=after if unchanged else before,
            after_sha256=after,
            exit_code=None if result is None else result.exit_code,
            limits_hit=[] if result is None else list(result.limits_hit),
            timed_out=False if result is None else result.timed_out,
            duration=0.0 if result is None else round(result.duration, 3),
            stdout_tail="" if result is None else result.stdout[-_TAIL:],
            stderr_tail="" if result is None else result.stderr[-_TAIL:],
        )
        await self.journal.append(step)
        return step


def sandbox_env(threads: int, seed: int | None = None) -> dict[str, str]:
    """The whole environment of a sandboxed editing program.

    A config's ``seed``, if it has one, is ``WSM_SEED``: what an edit that draws
    random numbers seeds them from, so a grid's seeds are distinct trials.
    """
    env = {"OMP_NUM_THREADS": str(threads), "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}
    if seed is not None:
        env["WSM_SEED"] = str(seed)
    return env


async def run_scripted(ctx: EditContext, script: str) -> None:
    """Run the frozen script once.

    Raises:
        EditFailed: it exited non-zero, timed out or hit a limit.
    """
    before = await ctx.weights_sha256()
    result = await ctx.sandbox.exec([ctx.python, script], env=ctx.env)
    step = await ctx.step(1, "run_python", result, arguments={"script": script}, before=before)
    if not result.ok:
        why = "timed out" if result.timed_out else f"exited {result.exit_code}"
        last = step.stderr_tail.strip().splitlines()[-1:] or [""]
        raise EditFailed(f"the scripted edit {why}{': ' + last[0] if last[0] else ''}")


async def apply(ctx: EditContext, turn: int, action: Action) -> str:
    """Run one tool call; return the observation the policy gets back."""
    if isinstance(action, Finish):
        await ctx.step(turn, "finish", None, unchanged=True)
        return "finished"
    before = await ctx.weights_sha256()
    if isinstance(action, RunPython):
        result = await ctx.sandbox.exec([ctx.python, "-c", action.code], env=ctx.env)
        step = await ctx.step(
            turn, "run_python", result, arguments={"code": action.code}, before=before
        )
        status = "timed out" if result.timed_out else f"exit code {result.exit_code}"
        hit = f", limits hit: {', '.join(step.limits_hit)}" if step.limits_hit else ""
        return f"{status}{hit}\nstdout:\n{step.stdout_tail}\nstderr:\n{step.stderr_tail}"
    if isinstance(action, Undo):
        await ctx.restore()
        await ctx.step(turn, "undo", None, before=before)
        return "the working weights are the original snapshot again"
    raise AssertionError(f"no such action: {action!r}")


async def run_agent(ctx: EditContext, actions: list[Action], turns: int) -> int:
    """Take the synthetic agent's actions, one per turn, up to ``turns``; return turns used."""
    used = 0
    for turn, action in enumerate(actions[:turns], 1):
        used = turn
        await apply(ctx, turn, action)
        if isinstance(action, Finish):
            break
    return used
