"""A serve-and-learn run as Inspect AI eval logs, for ``inspect view`` (``mw export inspect``).

Researchers read trajectories in Inspect's log viewer. Each results file of a run
(``task/results/<scenario>_<method>.jsonl``) becomes one ``.eval`` log, written with
Inspect's own API (``inspect_ai.log.write_eval_log``), and each episode one sample:

- its messages: the instruction as the user's, then per step of the benchmark's
  trace the model's turn (its text, its reasoning, its tool call) and the tool's
  observation (the trace records it as the next call's ``Observation: ...`` input);
- its events, from which the viewer draws the transcript: per step a model event
  (the messages before it, the turn, that call's usage) and a tool event;
- its score: ``reward`` on the benchmark's 0-1 scale, the score line as the
  explanation, the verifier's ``answer_detail`` in the score's metadata;
- its model usage, from the row's ``tokens`` (input, cached input, output, reasoning);
- its metadata: phase, window, version (the checkpoint it ran on), the card of that
  version where the run kept one, the benchmark's labels and the episode's status.

The log's results hold the run's Hidden and Fully Specified scores, computed as
``slb score`` does. What Inspect cannot hold is said in docs/design/serve_learn.md.
Needs the optional extra ``mw[inspect]``.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import meters
from mw_errors import ConfigError

from ._score import SettingScore, score_file

__all__ = ["export_inspect"]


def _inspect() -> Any:
    try:
        import inspect_ai.log as log
    except ImportError:
        raise ConfigError(
            "mw export inspect needs Inspect AI, which is not installed",
            hint="pip install 'mw[inspect]' (inspect-ai)",
        ) from None
    return log


def _cards(root: Path) -> dict[int, str]:
    """Each version's card, where the run kept its checkpoints (``<tag>/checkout/``)."""
    checkout = root / root.name / "checkout"
    try:
        index = json.loads((checkout / "index.json").read_text())
    except (OSError, ValueError):
        return {}
    cards = {}
    for version, digest in index.items() if isinstance(index, dict) else ():
        card = checkout / "versions" / str(digest) / "card.md"
        if str(version).isdigit() and card.is_file():
            cards[int(version)] = card.read_text()
    return cards


def _messages(row: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    """The episode's messages, and its events (a model call, then a tool call, per step).

    Inspect's viewer draws a sample's transcript from its events.
    """
    from inspect_ai.event import ModelEvent, ToolEvent
    from inspect_ai.model import (
        ChatMessageAssistant,
        ChatMessageTool,
        ChatMessageUser,
        ContentReasoning,
        ContentText,
        GenerateConfig,
        ModelOutput,
    )
    from inspect_ai.tool import ToolCall

    messages: list[Any] = [ChatMessageUser(content=str(row.get("instruction") or ""))]
    events: list[Any] = []
    model = str(row.get("model") or "")
    trace = row.get("trace") or []
    if not isinstance(trace, list):
        return messages, events
    for number, step in enumerate(trace):
        if not isinstance(step, dict) or "kind" not in step:
            continue  # a journal from before the benchmark's trace format: left out
        calls = []
        for call in step.get("tool_calls") or []:
            try:
                arguments = json.loads(call.get("arguments") or "{}")
            except ValueError:
                arguments = {"unparsed": call.get("arguments")}
            calls.append(
                ToolCall(
                    id=str(call.get("id") or f"call_{number}"),
                    function=str(call.get("name")),
                    arguments=arguments,
                )
            )
        content: list[Any] = []
        if step.get("reasoning"):
            content.append(ContentReasoning(reasoning=str(step["reasoning"])))
        content.append(ContentText(text=str(step.get("raw") or "")))
        said = ChatMessageAssistant(content=content, tool_calls=calls or None, model=model)
        output = ModelOutput.from_message(said, stop_reason="tool_calls" if calls else "stop")
        output.usage = _usage(step.get("usage") or {})
        events.append(
            ModelEvent(model=model, input=list(messages), tools=[], tool_choice="auto",
                       config=GenerateConfig(), output=output)
        )  # fmt: skip
        messages.append(said)
        if step.get("kind") == "tool":
            observed = str(step.get("obs") or "")
            call_id, name = str(step.get("call_id") or ""), str(step.get("name"))
            messages.append(ChatMessageTool(content=observed, function=name, tool_call_id=call_id))
            events.append(
                ToolEvent(id=call_id, function=name, arguments=dict(step.get("args") or {}),
                          result=observed)
            )  # fmt: skip
    return messages, events


def _usage(tokens: dict[str, Any]) -> Any:
    from inspect_ai.model import ModelUsage

    given, output = int(tokens.get("input", 0)), int(tokens.get("output", 0))
    return ModelUsage(
        input_tokens=given,
        output_tokens=output,
        total_tokens=given + output,
        input_tokens_cache_read=int(tokens.get("cache_input", 0)),
        reasoning_tokens=int(tokens.get("reasoning", 0)),
    )


def _sample(number: int, row: dict[str, Any], cards: dict[int, str]) -> Any:
    from inspect_ai.log import EvalSample
    from inspect_ai.scorer import Score

    reward = float(row.get("reward") or 0.0)
    version = row.get("checkpoint")
    metadata = {
        key: row.get(key)
        for key in (
            "phase",
            "window",
            "timestamp",
            "task_id",
            "tier",
            "family",
            "slice",
            "category",
            "status",
        )
    }
    metadata["version"] = version
    if isinstance(version, int) and version in cards:
        metadata["card"] = cards[version]
    model = str(row.get("model") or "")
    messages, events = _messages(row)
    return EvalSample(
        id=f"{number:05d}-{row.get('task_id')}",
        epoch=1,
        input=str(row.get("instruction") or ""),
        target="",
        messages=messages,
        events=events,
        scores={
            "reward": Score(
                value=reward,
                explanation=f"Score: {reward * 100:g}/100.",
                metadata={"answer_detail": row.get("answer_detail")},
            )
        },
        metadata=metadata,
        model_usage={model: _usage(row.get("tokens") or {})},
    )


def _log(
    results: Path, score: SettingScore, cards: dict[int, str], span: tuple[str, str] | None
) -> Any:
    """The log of one results file, which ``score`` (its :func:`score_file`) has checked.

    ``span``: when the run's requests began and ended (None: the file's time, for both).
    """
    log = _inspect()
    lines = [json.loads(line) for line in results.read_text().splitlines() if line.strip()]
    config = next(line["config"] for line in lines if "config" in line)
    rows = [line for line in lines if "config" not in line]
    scenario, method = score.scenario, score.method
    created = datetime.fromtimestamp(results.stat().st_mtime, UTC).isoformat()
    samples = []
    for number, row in enumerate(rows):
        try:
            samples.append(_sample(number, row, cards))
        except (AttributeError, TypeError, ValueError) as exc:
            raise ConfigError(
                f"{results}: episode row {number + 1} has a field of the wrong kind ({exc})",
                hint="give a results file as mw writes it",
            ) from None
    metrics = {
        name: log.EvalMetric(name=name, value=value)
        for name, value in (("hidden", score.hidden), ("fully_specified", score.fully_specified))
        if value is not None
    }
    started, ended = span or (created, created)
    usage: dict[str, Any] = {}
    for sample in samples:
        for model, used in sample.model_usage.items():
            usage[model] = usage[model] + used if model in usage else used
    return log.EvalLog(
        status="success",
        stats=log.EvalStats(started_at=started, completed_at=ended, model_usage=usage),
        eval=log.EvalSpec(
            created=created,
            task=f"{scenario}_{method}",
            dataset=log.EvalDataset(name=scenario, samples=len(rows)),
            model=score.model,
            config=log.EvalConfig(),
            metadata={"mw_config": config},
        ),
        results=log.EvalResults(
            total_samples=len(rows),
            completed_samples=sum(row.get("status", "finished") == "finished" for row in rows),
            scores=[log.EvalScore(name="reward", scorer="servelearnbench", metrics=metrics)],
        ),
        samples=samples,
    )


def _span(run_dir: Path) -> tuple[str, str] | None:
    """When the run's host requests began and ended (its ledger), as Inspect's stats take.

    Raises:
        MeterError: a damaged ledger line that is not the last.
    """
    path = run_dir / "ledger.jsonl"
    lines = meters.read_ledger(path) if path.is_file() else []
    if not lines:
        return None
    first = datetime.fromtimestamp(min(line.started for line in lines), UTC)
    last = datetime.fromtimestamp(max(line.ended for line in lines), UTC)
    return first.isoformat(), last.isoformat()


def export_inspect(run_dir: Path, output: Path | None = None) -> list[Path]:
    """Write each results file of ``run_dir`` as an Inspect ``.eval`` log; their paths.

    Raises:
        ConfigError: Inspect is not installed, or ``run_dir`` holds no results.
    """
    log = _inspect()
    files = sorted((run_dir / "task" / "results").glob("*.jsonl"))
    if not files:
        raise ConfigError(
            f"{run_dir} holds no results (task/results/*.jsonl)",
            hint="pass a serve-and-learn run directory",
        )
    scores = [score_file(results) for results in files]  # a malformed file: before any write
    output = output or run_dir / "inspect"
    cards, span = _cards(run_dir), _span(run_dir)
    written = []
    for results, score in zip(files, scores, strict=True):
        whole = _log(results, score, cards, span)
        output.mkdir(parents=True, exist_ok=True)
        path = output / f"{results.stem}.eval"
        partial = output / f".{results.stem}.writing.eval"  # a log is whole, or not there
        log.write_eval_log(whole, str(partial), format="eval")
        partial.replace(path)
        written.append(path)
    return written
