"""The editing agent's tools, and the synthetic agent's scripted turns.

An agent edits the working weights ``model.safetensors`` in its sandbox's
scratch directory, one tool call per turn:

``run_python(code)``
    Run a Python program inside the sandbox (cwd: scratch). The student
    snapshot is at ``inputs/student/`` and the public task cases at
    ``inputs/public/<task>.jsonl``; both are read-only.
``undo()``
    Restore the working weights from the original snapshot.
``finish()``
    Stop; the working weights are the trial's export.

``actions.json`` drives the synthetic agent: the same tools, in a fixed order.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from mw_errors import ConfigError

__all__ = [
    "ACTIONS_SCHEMA_VERSION",
    "Action",
    "ActionsFile",
    "Finish",
    "RunPython",
    "Undo",
    "load_actions",
]

ACTIONS_SCHEMA_VERSION = 1


class RunPython(msgspec.Struct, frozen=True, tag_field="tool", tag="run_python"):
    code: str


class Undo(msgspec.Struct, frozen=True, tag_field="tool", tag="undo"):
    pass


class Finish(msgspec.Struct, frozen=True, tag_field="tool", tag="finish"):
    pass


Action = RunPython | Undo | Finish


class ActionsFile(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    schema_version: int
    actions: list[Action]


def load_actions(path: Path) -> ActionsFile:
    """Read the synthetic agent's actions.

    Raises:
        ConfigError: the file is malformed (one line says where).
    """
    try:
        actions = msgspec.json.decode(path.read_bytes(), type=ActionsFile)
    except (OSError, msgspec.DecodeError) as exc:
        raise ConfigError(
            f"actions file {path}: {exc}",
            hint='each action is {"tool": "run_python", "code": ...}, {"tool": "undo"} '
            'or {"tool": "finish"}',
        ) from None
    if actions.schema_version != ACTIONS_SCHEMA_VERSION:
        raise ConfigError(
            f"actions file {path}: schema_version {actions.schema_version} is not "
            f"{ACTIONS_SCHEMA_VERSION}"
        )
    if not actions.actions or not isinstance(actions.actions[-1], Finish):
        raise ConfigError(f"actions file {path}: the last action must be finish")
    return actions
