"""What a campaign leaves for its users, besides the journal.

``run.log``'s setting line, the results JSONL (the benchmark runner's rows),
the final card and adapter, and the learner's ledger summary.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from typing import Any

import msgspec

import meters

from .._core import read_journal
from .._metering import ledger_lines
from ..provider import (
    LOCAL_PRICES,
)
from ._methods import Method
from ._play import Budget
from ._protocol import episode_record
from ._scenario import Scenario, Task
from ._schedule import Plan
from ._spec import CAMPAIGN_RECORDS, CampaignSpec, RunDir
from .records import (
    BlockLearned,
    EpisodeEnded,
)

__all__ = ["stamp_run_log", "write_outputs"]


def stamp_run_log(
    spec: CampaignSpec, run: RunDir, schedule: Plan, meter_port: int, learner_port: int | None
) -> None:
    from importlib import metadata

    versions = {name: metadata.version(name) for name in ("mw", "anyio", "msgspec", "httpx")}
    with open(run.run_log, "a") as handle:
        handle.write(
            json.dumps(
                {
                    "setting": {
                        "tag": spec.tag,
                        "scenario": spec.scenario,
                        "method": spec.method,
                        "model": spec.model,
                        "train_split": spec.train_split,
                        "blocks": schedule.blocks,
                        "waiter": spec.waiter,
                        "host_meter": f"127.0.0.1:{meter_port}",
                        "learner_meter": f"127.0.0.1:{learner_port}" if learner_port else None,
                        "learner_model": spec.learner_model if learner_port else None,
                        "learner_backend": spec.learner_backend if learner_port else None,
                        "codex": spec.codex.binary
                        if learner_port and spec.codex and spec.learner_backend == "codex"
                        else None,
                        # where remote models are served and which variable holds each key
                        # (never the key); their prices' date
                        "endpoints": {
                            name: msgspec.to_builtins(endpoint)
                            for name, endpoint in sorted(spec.endpoints.items())
                        },
                        "remote_prices_date": spec.prices.date if spec.prices else None,
                        "allocation_usd": str(spec.allocation_usd),
                        "versions": versions,
                        "resumed": spec.resume,
                    }
                }
            )
            + "\n"
        )


def _row(
    spec: CampaignSpec, method: Method, rec: EpisodeEnded, task: Task, made: Mapping[str, str]
) -> dict[str, Any]:
    """An episode's results row, as ServeLearnBench's runner writes it, plus mw's fields."""
    labels = rec.labels
    tokens = rec.tokens or {"input": rec.input_tokens, "output": rec.output_tokens}
    row: dict[str, Any] = {
        "scenario": spec.scenario,
        "method": method.name,
        "model": spec.model,
        "phase": rec.phase,
        "window": rec.window,
        "timestamp": rec.timestamp,
        "task_id": rec.task_id,
        "tier": labels.get("tier"),
        "family": labels.get("family"),
        "slice": labels.get("slice"),
        "category": rec.category,
        "reward": rec.reward,
        "answer_detail": rec.answer_detail,
        "instruction": task.instruction,
        "tokens": tokens,
        "judge_tokens": rec.judge_tokens,
        "trace": rec.trace,
        **rec.extra,  # the method's row_extra
    }
    if rec.phase == "serving" and method.learns:
        row["record"] = made.get(rec.task_id) or episode_record(
            task.instruction, rec.trace, rec.reward
        )
    row["checkpoint"] = rec.checkpoint  # mw's: the version the episode ran on
    row["status"] = rec.status  # mw's: unknown (a dead process left it) is never a score
    return row


def write_outputs(
    run: RunDir,
    spec: CampaignSpec,
    method: Method,
    scenario: Scenario,
    records: Mapping[str, str] | None = None,
) -> None:
    """Results JSONL (the benchmark runner's rows), the final card, the learner's ledger summary.

    ``records``: the serving episodes' records already made (by task id), reused; the
    others are made here. The journal is read here once, at the end: it holds every
    episode, those of earlier processes too.
    """
    entries = read_journal(run.journal, CAMPAIGN_RECORDS)
    ended = [e.rec for e in entries if isinstance(e.rec, EpisodeEnded)]
    ended.sort(key=lambda r: (r.phase != "serving", r.window, r.timestamp, r.task_id))
    made = records or {}
    tasks = {t.task_id: t for t in [*scenario.serving, *scenario.test]}
    lines: list[dict[str, Any]] = [
        {
            "config": {
                "scenario": spec.scenario,
                **method.config(),
                "model": spec.model,
                "reasoning_effort": spec.reasoning_effort,
                "max_tokens": spec.max_tokens,
                "max_steps": Budget().turns,
                "tool_budget": Budget().tool_calls,
                "tag": spec.tag,
                "train_split": spec.train_split,
                "waiter": spec.waiter,
                "schedule": spec.schedule,
            }
        }
    ]
    lines += [_row(spec, method, rec, tasks[rec.task_id], made) for rec in ended]
    meters.write_atomically(run.results, b"".join(json.dumps(x).encode() + b"\n" for x in lines))
    learned = [e.rec for e in entries if isinstance(e.rec, BlockLearned)]
    if learned:
        last = max(learned, key=lambda r: r.version)
        for name in ("card.md", "adapter.safetensors", "cases.jsonl"):
            source = run.version_dir(last.digest) / name
            if source.is_file():
                shutil.copyfile(source, run.checkout / name)
        index = {str(r.version): r.digest for r in sorted(learned, key=lambda r: r.version)}
        (run.checkout / "index.json").write_text(json.dumps(index, indent=1) + "\n")
    # The learner's ledger lives in learner/ (its meter's own directory); its summary is
    # also kept at the run's root, where DESIGN.md's table puts it.
    learner_path = run.root / "learner" / "ledger.jsonl"
    learner_lines = ledger_lines(learner_path)
    remote = spec.prices if spec.learner_model in spec.endpoints else None
    prices_date = (remote or meters.load_prices(LOCAL_PRICES)).date
    summary = meters.summarize(
        learner_lines, "learner", allocation_usd=spec.allocation_usd, prices_date=prices_date
    )
    meters.write_atomically(run.root / "meta_wire_ledger.json", meters.encode_summary(summary))
    judge_path = run.root / "judge" / "ledger.jsonl"
    if judge_path.exists():  # a Pitch scenario's judge: its own meter, its own ledger
        remote = spec.prices if spec.judge_model in spec.endpoints else None
        judged = meters.summarize(
            meters.read_ledger(judge_path),
            "judge",
            allocation_usd=spec.allocation_usd,
            prices_date=(remote or meters.load_prices(LOCAL_PRICES)).date,
        )
        meters.write_atomically(run.root / "judge_wire_ledger.json", meters.encode_summary(judged))
