"""``mwm-local``'s world model: a small torch model trained on serving evidence.

It estimates, for each kind of case and each candidate decision, the chance
that the decision scores. The parameters are one logit per (kind, decision),
fitted by weighted logistic regression: every piece of evidence weighs
``decay ** (blocks since it was served)``, so new evidence outweighs old and the
model follows a policy that changes; an L2 pull towards 0 is the prior (an
untried decision sits at 0.5). It answers ``wm`` queries with the decision
whose estimate is highest, so an untried decision is preferred to one that
keeps failing: the host explores until it finds what scores.

The checkpoint is ``adapter.safetensors`` (the logits; one metadata key, so
its bytes are stable across processes) and ``card.md`` (what it believes).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import msgspec

__all__ = ["DECISIONS", "Observation", "WorldModel", "fit"]

DECISIONS = ("approve", "deny", "escalate")
_KIND = re.compile(r"for an? (\w+) case")


class Observation(msgspec.Struct, frozen=True):
    """What the learner takes from one served episode (never the evaluator)."""

    block: int
    kind: str
    decision: str
    reward: float


class WorldModel:
    """Logits per (kind, decision); ``answer`` is the ``wm`` tool."""

    def __init__(
        self, kinds: list[str], logits: list[list[float]], counts: list[list[float]]
    ) -> None:
        self.kinds = kinds
        self.logits = logits
        self.counts = counts

    def estimate(self, kind: str) -> dict[str, float] | None:
        if kind not in self.kinds:
            return None
        import math

        row = self.logits[self.kinds.index(kind)]
        return {d: 1 / (1 + math.exp(-x)) for d, x in zip(DECISIONS, row, strict=True)}

    def answer(self, query: str) -> str:
        found = _KIND.search(query)
        estimate = self.estimate(found.group(1)) if found else None
        if estimate is None:
            return "no knowledge of that kind of case yet"
        best = max(DECISIONS, key=lambda d: (estimate[d], -DECISIONS.index(d)))
        shown = ", ".join(f"{d} {p:.2f}" for d, p in estimate.items())
        return f"best: {best} (estimated chance to score: {shown})"

    def card(self, version: int) -> str:
        lines = [
            f"# World model v{version}",
            "",
            "| kind | " + " | ".join(DECISIONS) + " | evidence |",
        ]
        lines.append("|---|" + "---:|" * (len(DECISIONS) + 1))
        for i, kind in enumerate(self.kinds):
            estimate = self.estimate(kind) or {}
            cells = " | ".join(f"{estimate[d]:.2f}" for d in DECISIONS)
            lines.append(f"| {kind} | {cells} | {sum(self.counts[i]):.1f} |")
        return "\n".join(lines) + "\n"

    def save(self, directory: Path, version: int) -> None:
        import torch
        from safetensors.torch import save_file

        directory.mkdir(parents=True, exist_ok=True)
        tensors = {
            "logits": torch.tensor(self.logits, dtype=torch.float32).reshape(-1, len(DECISIONS)),
            "counts": torch.tensor(self.counts, dtype=torch.float32).reshape(-1, len(DECISIONS)),
        }
        save_file(
            tensors,
            str(directory / "adapter.safetensors"),
            metadata={"kinds": json.dumps(self.kinds)},
        )
        (directory / "card.md").write_text(self.card(version))

    @classmethod
    def load(cls, directory: Path) -> WorldModel:
        from safetensors import safe_open

        with safe_open(str(directory / "adapter.safetensors"), "pt") as handle:
            kinds = json.loads((handle.metadata() or {}).get("kinds", "[]"))
            logits = handle.get_tensor("logits").tolist()
            counts = handle.get_tensor("counts").tolist()
        return cls(kinds, logits, counts)


def fit(
    observations: list[Observation], *, now: int, decay: float = 0.5, l2: float = 0.05
) -> WorldModel:
    """Fit the logits on every observation up to block ``now`` (inclusive)."""
    import torch

    torch.manual_seed(0)
    kinds = sorted({o.kind for o in observations if o.decision in DECISIONS})
    if not kinds:
        return WorldModel([], [], [])
    k_index = torch.tensor([kinds.index(o.kind) for o in observations if o.decision in DECISIONS])
    d_index = torch.tensor(
        [DECISIONS.index(o.decision) for o in observations if o.decision in DECISIONS]
    )
    rewards = torch.tensor([o.reward for o in observations if o.decision in DECISIONS])
    weights = torch.tensor(
        [decay ** (now - o.block) for o in observations if o.decision in DECISIONS]
    )
    logits = torch.zeros(len(kinds), len(DECISIONS), requires_grad=True)
    optimizer = torch.optim.LBFGS([logits], max_iter=100, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        chosen = logits[k_index, d_index]
        loss = (
            torch.nn.functional.binary_cross_entropy_with_logits(
                chosen, rewards, weight=weights, reduction="sum"
            )
            + l2 * logits.pow(2).sum()
        )
        loss.backward()  # type: ignore[no-untyped-call]
        return loss

    optimizer.step(closure)  # type: ignore[no-untyped-call]
    counts = torch.zeros(len(kinds), len(DECISIONS))
    counts.index_put_((k_index, d_index), weights, accumulate=True)
    return WorldModel(kinds, logits.detach().tolist(), counts.tolist())
