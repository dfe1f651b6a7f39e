"""MWM's world model: learned from served episodes' records, on any scenario.

A learner reads what a learning method may read in ServeLearnBench: each
served episode's record (``protocol.episode_record``: the instruction, every
step's action and observation, the score line). It never sees an evaluator, a
category, a window or an oracle bulletin, and nothing here names a domain's
tools. From each record it takes

- the **case**: the instruction without its timestamp line, and what the
  agent observed before it acted;
- the **outcome**: the episode's last action before ``finish`` (``wm`` steps
  left out), as a signature such as ``deny_case(reason=VELOCITY)``; argument
  values that identify the case (they contain a digit and appear in the case
  text, like a case id) and free text (over 40 characters) are dropped, so
  one action on two cases is one signature;
- the **score** (the reward the agent was told).

The adapter estimates, for each outcome signature, the chance that it scores
given the words of the case: one weighted logistic regression per signature
over the case's words (present or not), fitted with torch. Every episode
weighs ``decay ** (blocks since it was served)``, so the model follows a policy
that changes; an L2 pull towards 0 is the prior. Words in fewer than two cases
(identifiers), in more than half of them (boilerplate), and bare numbers are
not features.

``wm`` (:meth:`WorldModel.answer`) answers a query with the signatures ranked
by their estimate for the query's words, and the most similar past served
cases (Okapi BM25 over the case text, as the benchmark's RAG retrieves), with
what was done in them and their score lines. The card (``card.md``) states
what the model believes, from the same statistics; the host sees it in its
system prompt.

The checkpoint is ``adapter.safetensors`` (the weights; one metadata key, so
its bytes are stable across processes), ``cases.jsonl`` (the retrieval store)
and ``card.md``. This module stands alone (torch, safetensors and msgspec
only): the Codex learner's ``fit_adapter`` imports it inside the sandbox.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import msgspec

__all__ = [
    "Case",
    "ParsedRecord",
    "Served",
    "WorldModel",
    "bm25_top_k",
    "case_of",
    "fit",
    "parse_record",
    "tokenize",
]

_TOKEN = re.compile(r"[a-z0-9]+")
_STEP = re.compile(r"^\[step \d+\]$")
_SCORE = re.compile(r"^Score: ([0-9.]+)/100\.$")
_TIMESTAMP = "Current timestamp: "
_OWN_TOOLS = ("finish", "wm")  # the episode's end, and the world model itself
CASE_CHARS = 4_000  # of a case's text kept for retrieval
TOP_K = 3  # similar past cases in a wm answer
MAX_VOCABULARY = 2_048
VALUE_CHARS = 40  # an argument longer than this is free text, left out of a signature
CARD_ROWS = 20  # signatures on the card, most evidence first (it goes into every prompt)


class Served(msgspec.Struct, frozen=True):
    """What a learner is given of one served episode: its block, position, score and record."""

    block: int
    task_id: str
    timestamp: int  # the stream position
    instruction: str  # as the agent received it, timestamp line included
    reward: float  # the score the agent was told, as a fraction
    record: str  # protocol.episode_record(instruction, trace, reward): what MWM reads


class ParsedRecord(msgspec.Struct, frozen=True):
    instruction: str
    actions: list[tuple[str, dict[str, Any], str]]  # (tool, arguments, observation)
    score: float | None


class Case(msgspec.Struct, frozen=True):
    """One served episode as the world model keeps it."""

    block: int
    timestamp: int
    reward: float
    text: str  # the case: instruction without its timestamp line, then what was observed
    signature: str  # the outcome action
    done: str  # every action, in order


def tokenize(text: str) -> list[str]:
    """Lower-case runs of letters and digits (the benchmark's RAG tokenizer)."""
    return _TOKEN.findall(text.lower())


def bm25_top_k(
    query: str, docs: list[list[str]], k: int, k1: float = 1.5, b: float = 0.75
) -> list[int]:
    """Indices of the ``k`` best Okapi BM25 scores that are positive, best first."""
    if not docs:
        return []
    n = len(docs)
    average = sum(len(d) for d in docs) / n
    frequency: dict[str, int] = {}
    for doc in docs:
        for token in set(doc):
            frequency[token] = frequency.get(token, 0) + 1
    terms = tokenize(query)
    scored = []
    for i, doc in enumerate(docs):
        counts: dict[str, int] = {}
        for token in doc:
            counts[token] = counts.get(token, 0) + 1
        score = 0.0
        for term in terms:
            if term in counts:
                idf = math.log(1 + (n - frequency[term] + 0.5) / (frequency[term] + 0.5))
                tf = counts[term]
                score += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(doc) / average))
        scored.append((score, i))
    scored.sort(key=lambda pair: pair[0], reverse=True)
    return [i for score, i in scored[:k] if score > 0]


def parse_record(record: str) -> ParsedRecord:
    """The instruction, the actions with their observations, and the score of a record."""
    lines = record.split("\n")
    starts = [i for i, line in enumerate(lines) if _STEP.match(line)]
    head = lines[: starts[0]] if starts else lines
    instruction = "\n".join(head).removeprefix("INSTRUCTION: ").rstrip("\n")
    score = None
    if lines and (found := _SCORE.match(lines[-1])):
        score = float(found.group(1)) / 100
    if not starts:
        instruction = instruction.rsplit("\n", 1)[0] if score is not None else instruction
    actions = []
    for n, start in enumerate(starts):
        end = starts[n + 1] if n + 1 < len(starts) else len(lines) - 1
        action: str | None = None
        observation: list[str] = []
        for line in lines[start + 1 : end]:
            if action is None and line.startswith("  action: "):
                action = line.removeprefix("  action: ")
            elif observation or line.startswith("  observation: "):
                observation.append(line.removeprefix("  observation: "))
        if action is None or action.startswith("NONE "):
            continue
        name, _, rest = action.partition("(")
        try:
            arguments = json.loads(rest[:-1]) if rest.endswith(")") else {}
        except ValueError:
            arguments = {}
        text = "\n".join(observation).strip("\n")
        actions.append((name, arguments if isinstance(arguments, dict) else {}, text))
    return ParsedRecord(instruction=instruction, actions=actions, score=score)


def _untimed(instruction: str) -> str:
    if instruction.startswith(_TIMESTAMP):
        return instruction.split("\n\n", 1)[-1]
    return instruction


def _names_the_case(value: Any, seen: str) -> bool:
    """An id, or an amount the case gave: it has a digit and the case text holds it."""
    shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return any(c.isdigit() for c in shown) and shown in seen


def _signature(name: str, arguments: dict[str, Any], seen: str) -> str:
    kept = []
    for key in sorted(arguments):
        value = arguments[key]
        if isinstance(value, list):  # a list of ids names the case item by item
            value = [v for v in value if not _names_the_case(v, seen)]
            if not value:
                continue
        elif _names_the_case(value, seen):
            continue  # it names the case, not the action
        shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        if len(shown) > VALUE_CHARS:
            continue  # free text (a message, a pitch): what it says is not which action
        kept.append(f"{key}={shown}")
    return f"{name}({', '.join(kept)})"


def case_of(served: Served) -> Case | None:
    """The case, outcome and score of a served episode; None if it did nothing."""
    parsed = parse_record(served.record)
    acted = [a for a in parsed.actions if a[0] not in _OWN_TOOLS]
    if not acted:
        return None
    last = len(acted) - 1
    observed = [obs for _, _, obs in acted[:last]]
    text = "\n".join([_untimed(parsed.instruction), *observed])
    name, arguments, _ = acted[last]
    done = "; ".join(_signature(n, a, text) for n, a, _ in acted)
    return Case(
        block=served.block,
        timestamp=served.timestamp,
        reward=served.reward,
        text=text[:CASE_CHARS],
        signature=_signature(name, arguments, text),
        done=done,
    )


class WorldModel:
    """Per outcome signature, a logistic estimate of scoring over the case's words."""

    def __init__(
        self,
        vocabulary: list[str],
        signatures: list[str],
        weights: list[list[float]],
        bias: list[float],
        evidence: list[float],
        cases: list[Case],
        *,
        now: int = -1,
    ) -> None:
        self.vocabulary = vocabulary
        self.signatures = signatures
        self.weights = weights
        self.bias = bias
        self.evidence = evidence  # decayed weight of the episodes behind each signature
        self.cases = cases
        self.now = now
        self._index = {token: i for i, token in enumerate(vocabulary)}
        self._docs = [tokenize(c.text) for c in cases]

    def estimate(self, query: str) -> dict[str, float]:
        """The estimated chance that each signature scores, for a case in these words."""
        present = {self._index[t] for t in tokenize(query) if t in self._index}
        logits = [
            self.bias[s] + sum(self.weights[s][i] for i in present)
            for s in range(len(self.signatures))
        ]
        return {sig: 1 / (1 + math.exp(-x)) for sig, x in zip(self.signatures, logits, strict=True)}

    def similar(self, query: str, k: int = TOP_K) -> list[Case]:
        return [self.cases[i] for i in bm25_top_k(_untimed(query), self._docs, k)]

    def answer(self, query: str) -> str:
        """The ``wm`` tool: signatures ranked for the query, and the most similar past cases."""
        if not self.signatures:
            return "no knowledge yet: nothing has been served and scored"
        estimate = self.estimate(query)
        ranked = sorted(self.signatures, key=lambda s: (-estimate[s], s))
        lines = [f"best: {ranked[0]} (estimated chance to score {estimate[ranked[0]]:.2f})"]
        if len(ranked) > 1:
            lines.append("others: " + "; ".join(f"{s} {estimate[s]:.2f}" for s in ranked[1:5]))
        found = self.similar(query)
        if found:
            lines.append("similar past cases:")
            for case in found:
                outcome = f"Score: {case.reward * 100:g}/100."
                lines.append(f"- stream position {case.timestamp}: did {case.done} — {outcome}")
        return "\n".join(lines)

    def card(self, version: int) -> str:
        """What the model believes, as the host's system prompt shows it."""
        lines = [f"# World model v{version}", ""]
        if not self.signatures:
            return "\n".join([*lines, "Nothing has been served and scored yet.", ""])
        served = len(self.cases)
        lines += [
            f"Learned from {served} served episodes (blocks 0-{self.now}); the latest block "
            "weighs most. Each action is the last one an episode took before finish.",
            "",
            "| action | evidence | scored (latest block) | scored (all) |",
            "|---|---:|---:|---:|",
        ]
        shown = sorted(range(len(self.signatures)), key=lambda s: -self.evidence[s])[:CARD_ROWS]
        for s in shown:
            signature = self.signatures[s]
            mine = [c for c in self.cases if c.signature == signature]
            latest = [c.reward for c in mine if c.block == self.now]
            overall = sum(c.reward for c in mine) / len(mine)
            recent = f"{100 * sum(latest) / len(latest):.0f}% of {len(latest)}" if latest else "-"
            lines.append(
                f"| `{signature}` | {self.evidence[s]:.1f} | {recent} | "
                f"{100 * overall:.0f}% of {len(mine)} |"
            )
        if len(shown) < len(self.signatures):
            lines.append(f"({len(self.signatures) - len(shown)} rarer actions not shown)")
        lines += ["", "## When each action scores", ""]
        for s in shown:
            signature = self.signatures[s]
            order = sorted(range(len(self.vocabulary)), key=lambda i: -self.weights[s][i])
            more = [self.vocabulary[i] for i in order[:4] if self.weights[s][i] > 0.5]
            less = [self.vocabulary[i] for i in reversed(order[-3:]) if self.weights[s][i] < -0.5]
            if more or less:
                said = []
                if more:
                    said.append("more likely when the case mentions " + ", ".join(more))
                if less:
                    said.append("less likely when it mentions " + ", ".join(less))
                lines.append(f"- `{signature}`: " + "; ".join(said))
        return "\n".join(lines) + "\n"

    def save(self, directory: Path, version: int) -> None:
        import torch
        from safetensors.torch import save_file

        directory.mkdir(parents=True, exist_ok=True)
        rows, columns = len(self.signatures), len(self.vocabulary)
        tensors = {
            "weights": torch.tensor(self.weights, dtype=torch.float32).reshape(rows, columns),
            "bias": torch.tensor(self.bias, dtype=torch.float32).reshape(rows),
            "evidence": torch.tensor(self.evidence, dtype=torch.float32).reshape(rows),
        }
        index = {"vocabulary": self.vocabulary, "signatures": self.signatures, "now": self.now}
        save_file(
            tensors, str(directory / "adapter.safetensors"), metadata={"index": json.dumps(index)}
        )
        (directory / "cases.jsonl").write_bytes(
            b"".join(msgspec.json.encode(c) + b"\n" for c in self.cases)
        )
        (directory / "card.md").write_text(self.card(version))

    @classmethod
    def load(cls, directory: Path) -> WorldModel:
        from safetensors import safe_open

        with safe_open(str(directory / "adapter.safetensors"), "pt") as handle:
            index = json.loads((handle.metadata() or {}).get("index", "{}"))
            weights = handle.get_tensor("weights").tolist()
            bias = handle.get_tensor("bias").tolist()
            evidence = handle.get_tensor("evidence").tolist()
        cases_file = directory / "cases.jsonl"
        decoder = msgspec.json.Decoder(Case)
        cases = [decoder.decode(line) for line in cases_file.read_bytes().splitlines() if line]
        return cls(
            index.get("vocabulary", []),
            index.get("signatures", []),
            weights,
            bias,
            evidence,
            cases,
            now=int(index.get("now", -1)),
        )


def _vocabulary(docs: list[set[str]]) -> list[str]:
    frequency: dict[str, int] = {}
    for doc in docs:
        for token in doc:
            frequency[token] = frequency.get(token, 0) + 1
    ceiling = len(docs) / 2 if len(docs) >= 4 else len(docs)
    kept = [t for t, f in frequency.items() if 2 <= f <= ceiling and not t.isdigit()]
    kept.sort(key=lambda t: (-frequency[t], t))
    return sorted(kept[:MAX_VOCABULARY])


def fit(served: list[Served], *, now: int, decay: float = 0.5, l2: float = 0.05) -> WorldModel:
    """Fit the model on every served episode up to block ``now`` (inclusive)."""
    import torch

    torch.manual_seed(0)
    cases = [c for c in (case_of(s) for s in served) if c is not None]
    if not cases:
        return WorldModel([], [], [], [], [], [], now=now)
    docs = [set(tokenize(c.text)) for c in cases]
    vocabulary = _vocabulary(docs)
    signatures = sorted({c.signature for c in cases})
    column = {t: i for i, t in enumerate(vocabulary)}
    features = torch.zeros(len(cases), len(vocabulary))
    for row, doc in enumerate(docs):
        for token in doc:
            if token in column:
                features[row, column[token]] = 1.0
    chosen = torch.tensor([signatures.index(c.signature) for c in cases])
    rewards = torch.tensor([c.reward for c in cases])
    weighting = torch.tensor([decay ** (now - c.block) for c in cases])
    weights = torch.zeros(len(signatures), len(vocabulary), requires_grad=True)
    bias = torch.zeros(len(signatures), requires_grad=True)
    optimizer = torch.optim.LBFGS([weights, bias], max_iter=100, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        logits = bias[chosen] + (features * weights[chosen]).sum(dim=1)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(
            logits, rewards, weight=weighting, reduction="sum"
        ) + l2 * (weights.pow(2).sum() + bias.pow(2).sum())
        loss.backward()  # type: ignore[no-untyped-call]
        return loss

    optimizer.step(closure)  # type: ignore[no-untyped-call]
    evidence = torch.zeros(len(signatures)).index_add_(0, chosen, weighting)
    return WorldModel(
        vocabulary,
        signatures,
        weights.detach().tolist(),
        bias.detach().tolist(),
        evidence.tolist(),
        cases,
        now=now,
    )
