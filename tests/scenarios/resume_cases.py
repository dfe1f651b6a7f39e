"""Resumes a user may type, against a campaign started as ``STARTED``: what each must do."""

from __future__ import annotations

from dataclasses import dataclass

STARTED = ("--method", "blind", "--allocation", "3", "--concurrency", "2", "--train-split", "24")


@dataclass(frozen=True)
class Resume:
    flags: tuple[str, ...]
    refused: str | None  # the field the one-line refusal names; None: it continues


RESUMES = [
    Resume(("--method", "mwm-local"), "--method"),
    Resume(("--allocation", "0.02"), "--allocation"),
    Resume(("--concurrency", "4"), "--concurrency"),
    Resume(("--train-split", "36"), "--train-split"),
    Resume(("--model", "local/other"), "--model"),
    Resume(("--waiter", "after_training"), "--waiter"),
    Resume(("--provider-latency", "ttft=0.5"), "--provider-latency"),
    Resume(("--method", "blind", "--allocation", "3.00"), None),  # the same, spelled otherwise
    Resume((), None),
]

# How a journal can be lost while the run keeps its spend and evidence: each resume is
# refused in one line (it once started over, repeating paid episodes).
LOST_JOURNALS = ["emptied", "removed"]
