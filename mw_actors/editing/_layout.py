"""Where everything of a weight-editing run lives. Paths in records are relative to the run.

::

    RUN/
      config.json                       the config, byte for byte
      journal/                          the campaign journal (records, budget, actor runs)
      student/                          the snapshot's config.json and tokenizer.json
      public/<task>.jsonl               public cases: the only data a sandbox sees
      program/                          the scripted arm's script
      trials/<id>/scratch/              the sandbox's scratch directory
      trials/<id>/export/model.safetensors   the exported tensors, moved out of scratch
                                        once the sandbox has ended
      trials/<id>/receipts/NNNN-<kind>.json  grade and regrade receipts, linked by hash
      trials/<id>/policy/               provider requests and responses of an LLM policy
      restricted/                       private: never exported, never in a sandbox (mode 0700)
        inputs/<task>/{private,regression}.jsonl
        grades/<id>/NNNN.json           per-case scores; NNNN.stderr the grader's stderr
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["RunLayout"]


class RunLayout:
    """Path arithmetic for one run directory."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @property
    def config(self) -> Path:
        return self.root / "config.json"

    @property
    def journal(self) -> Path:
        return self.root / "journal"

    @property
    def student(self) -> Path:
        return self.root / "student"

    @property
    def public(self) -> Path:
        return self.root / "public"

    @property
    def program(self) -> Path:
        return self.root / "program"

    @property
    def restricted(self) -> Path:
        return self.root / "restricted"

    def trial(self, trial_id: str) -> Path:
        return self.root / "trials" / trial_id

    def scratch(self, trial_id: str) -> Path:
        return self.trial(trial_id) / "scratch"

    def export(self, trial_id: str) -> Path:
        return self.trial(trial_id) / "export" / "model.safetensors"

    def receipts(self, trial_id: str) -> Path:
        return self.trial(trial_id) / "receipts"

    def policy(self, trial_id: str) -> Path:
        return self.trial(trial_id) / "policy"

    def partition(self, task: str, name: str) -> Path:
        return self.restricted / "inputs" / task / f"{name}.jsonl"

    def scores(self, trial_id: str, number: int) -> Path:
        return self.restricted / "grades" / trial_id / f"{number:04d}.json"

    def relative(self, path: Path) -> str:
        return str(path.relative_to(self.root))

    def next_receipt(self, trial_id: str, kind: str) -> tuple[int, Path]:
        """The number and path of a trial's next receipt."""
        directory = self.receipts(trial_id)
        number = len(list(directory.glob("*.json"))) if directory.is_dir() else 0
        return number, directory / f"{number:04d}-{kind}.json"
