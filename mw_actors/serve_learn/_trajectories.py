"""The episodes a run's report shows whole: the odd ones, and the tests that failed.

A researcher who asks why a window's Hidden score fell reads the episodes
themselves: what the host was asked, each step (its reasoning and text, its
tool call, what the tool returned), the score line, its tokens and cost, and
the version whose card it saw. They come from the journal's ``EpisodeEnded``
records, in the benchmark's trace format, so a campaign still running shows
the ones ended so far.

What is never shown: the verifier's ``answer_detail`` (it may name the expected
answer, which is the evaluator's) and the evaluator itself. An observation
longer than ``OBSERVATION_CHARS`` is cut, and says how much was left out
(``mw export inspect`` keeps every character).
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

import meters

from .records import EpisodeEnded

__all__ = ["Step", "Trajectory", "trajectories", "trajectories_html", "trajectories_markdown"]

ODD = ("unknown", "budget_blocked")
OBSERVATION_CHARS = 2000


class Step(msgspec.Struct, frozen=True):
    kind: str  # the benchmark's: tool, finish, invalid, capped, error
    said: str  # the host's reasoning, then its text
    call: str  # the tool and its arguments: ``get_case({"case_id": "C-1"})``
    observed: str  # what came back (cut to OBSERVATION_CHARS)


class Trajectory(msgspec.Struct, frozen=True):
    task_id: str
    phase: str
    window: int
    version: int  # the checkpoint it ran on: its card is the version's
    status: str
    category: str
    reward: float
    asked: str  # the first thing the host read: the task's instruction
    steps: list[Step]
    tokens: dict[str, int]
    cost_usd: str | None  # its tokens at the run's prices (None: unpriced there)


def _cut(text: str) -> str:
    if len(text) <= OBSERVATION_CHARS:
        return text
    left = len(text) - OBSERVATION_CHARS
    return f"{text[:OBSERVATION_CHARS]}... ({left} more characters: mw export inspect has them)"


def _step(step: dict[str, Any]) -> Step:
    said = "\n".join(str(step[k]) for k in ("reasoning", "raw") if step.get(k))
    arguments = json.dumps(step.get("args") or {}, sort_keys=True, ensure_ascii=False)
    return Step(
        kind=str(step.get("kind")),
        said=said,
        call=f"{step.get('name')}({arguments})",
        observed=_cut(str(step.get("obs") or "")),
    )


def _cost(tokens: dict[str, int], model: str, prices: meters.PriceTable | None) -> str | None:
    if prices is None:
        return None
    usage = meters.Usage(
        input_tokens=tokens.get("input", 0),
        cached_input_tokens=tokens.get("cache_input", 0),
        output_tokens=tokens.get("output", 0),
        reasoning_tokens=tokens.get("reasoning", 0),
    )
    try:
        return meters.usd(prices.cost(model, usage))
    except meters.UnpricedModel:
        return None


def trajectories(
    records: Iterable[object], model: str, prices: meters.PriceTable | None
) -> list[Trajectory]:
    """The odd episodes and the failed tests, by window, phase and stream position."""
    shown = [
        r
        for r in records
        if isinstance(r, EpisodeEnded)
        and (r.status in ODD or (r.phase == "test" and r.reward < 1.0))
    ]
    shown.sort(key=lambda r: (r.window, r.phase, r.timestamp, r.task_id))
    out = []
    for r in shown:
        steps = [s for s in r.trace if isinstance(s, dict) and "kind" in s]
        out.append(
            Trajectory(
                task_id=r.task_id,
                phase=r.phase,
                window=r.window,
                version=r.checkpoint,
                status=r.status,
                category=r.category,
                reward=r.reward,
                asked=str(steps[0].get("input") or "") if steps else "",
                steps=[_step(s) for s in steps],
                tokens=dict(r.tokens),
                cost_usd=_cost(r.tokens, model, prices) if r.tokens else None,
            )
        )
    return out


def _heading(t: Trajectory) -> str:
    score = f"Score: {t.reward * 100:g}/100"
    return f"{t.task_id}: {t.phase}, window {t.window}, v{t.version}, {t.status}, {score}"


def _spent(t: Trajectory) -> str:
    tokens = ", ".join(f"{k} {v}" for k, v in t.tokens.items()) or "no tokens"
    return tokens + ("" if t.cost_usd is None else f"; ${t.cost_usd}")


def anchor(number: int) -> str:
    """The page's id of the ``number``-th trajectory shown."""
    return f"episode-{number}"


def trajectories_html(items: Sequence[Trajectory], versions: set[int]) -> str:
    """Each trajectory, collapsed; its version links to that version's card."""
    e = html.escape
    parts = []
    for number, t in enumerate(items):
        card = (
            f"<a href='#v{t.version}'>v{t.version}'s card</a>"
            if t.version in versions
            else f"v{t.version} (no card)"
        )
        steps = "".join(
            f"<li><span class='kind'>{e(s.kind)}</span> "
            + (f"<pre class='said'>{e(s.said)}</pre>" if s.said else "")
            + f"<code>{e(s.call)}</code>"
            + (f"<pre class='obs'>{e(s.observed)}</pre>" if s.observed else "")
            + "</li>"
            for s in t.steps
        )
        parts.append(
            f"<details class='episode' id='{anchor(number)}'><summary>{e(_heading(t))}</summary>"
            f"<p>Ran on {card} ({e(t.category)}). Spent: {e(_spent(t))}.</p>"
            f"<pre class='asked'>{e(t.asked)}</pre>"
            + (f"<ol>{steps}</ol>" if steps else "<p class='none'>no steps were recorded</p>")
            + "</details>"
        )
    return "".join(parts) or "<p class='none'>none</p>"


def trajectories_markdown(items: Sequence[Trajectory]) -> list[str]:
    lines: list[str] = []
    for t in items:
        body = [t.asked]
        for s in t.steps:
            body += ["", f"[{s.kind}] {s.call}"]
            body += [f"  said: {s.said}"] if s.said else []
            body += [f"  -> {s.observed}"] if s.observed else []
        # A fence longer than any run of backticks in what it holds.
        fence = "`" * max(
            3, 1 + max((len(run) for run in re.findall("`+", "\n".join(body))), default=0)
        )
        lines += [f"### {_heading(t)}", "", f"Spent: {_spent(t)}.", "", fence + "text", *body]
        lines += [fence, ""]
    return lines or ["none"]
