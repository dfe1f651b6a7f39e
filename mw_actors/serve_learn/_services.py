"""The services a campaign runs beside its tree: upstreams, wire meters, the learner's session.

A local model gets the campaign's own provider on loopback; a remote one is
reached at its URL with its key injected by the meter.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Literal

import anyio
import anyio.abc

import meters

from .._campaign_tree import CampaignTree
from ..provider import (
    LOCAL_PRICES,
    FaultPlan,
    Provider,
    SyntheticHost,
    SyntheticLearner,
    serve_provider,
)
from ._backends import wire_prices
from ._codex import CodexSession, run_codex_session
from ._learner import LearnerEndpoint, run_learner_session
from ._methods import Session
from ._play import JudgeLink
from ._spec import CampaignSpec, RunDir

__all__ = ["start_judge", "start_learner", "start_upstream"]


async def start_upstream(
    spec: CampaignSpec,
    role: Literal["host", "learner", "judge"],
    ledger_dir: Path,
    services: anyio.abc.TaskGroup,
) -> meters.MeterConfig:
    """The config of ``role``'s meter, in front of its model's endpoint.

    A local model gets its own provider on loopback, started in ``services`` (the
    host's at the spec's emulated latency). A remote one is reached at its URL with
    its key injected by the meter. The learner's meter adapts Responses to Chat.
    A Pitch scenario's judge gets a meter of its own, so every judge request is
    metered, capped by the one allocation, and in its own ledger.
    """
    model = {"host": spec.model, "learner": spec.learner_model, "judge": spec.judge_model}[role]
    endpoint = spec.endpoints.get(model)
    api_key = None
    if endpoint is None:  # the synthetic host also answers the Pitch judge's checklist
        engine = SyntheticLearner() if role == "learner" else SyntheticHost()
        latency = FaultPlan(latency=spec.latency) if spec.latency and role == "host" else None
        port = await services.start(serve_provider, Provider(engine, latency))
        upstream, prices = f"http://127.0.0.1:{port}/v1", meters.load_prices(LOCAL_PRICES)
    else:
        upstream, prices = endpoint.base_url, wire_prices(spec.prices, endpoint)
        api_key = spec.key(endpoint)
    return meters.MeterConfig(
        role=role,
        upstream=upstream,
        prices=prices,
        ledger_dir=ledger_dir,
        api_key=api_key,
        allocation_usd=spec.allocation_usd,
        adapt_responses=role == "learner",
    )


async def start_judge(
    spec: CampaignSpec, run: RunDir, services: anyio.abc.TaskGroup, tree: CampaignTree
) -> JudgeLink | None:
    """Where the verifier's judge is reached: its provider, through a meter of its own.

    None where the scenario's verifier calls no judge.
    """
    if not spec.judged:
        return None
    config = await start_upstream(spec, "judge", run.root / "judge", services)
    judged = await tree.meter("judge-meter", config)
    return JudgeLink(judged.port, spec.wire_model(spec.judge_model))


async def start_learner(
    spec: CampaignSpec,
    run: RunDir,
    services: anyio.abc.TaskGroup,
    tree: CampaignTree,
) -> tuple[int, Session]:
    """The learner's provider and its own meter (WM_PORT+1), which adapts Responses to Chat.

    Returns the meter's port and the learner session that reaches the model through it:
    mw's own loop, or Codex CLI in the sandbox.
    """
    config = await start_upstream(spec, "learner", run.root / "learner", services)
    port = spec.wm_port + 1 if spec.wm_port is not None else 0
    bound = (await tree.meter("learner-meter", config, port=port)).port
    endpoint = LearnerEndpoint(
        f"http://127.0.0.1:{bound}/v1", spec.wire_model(spec.learner_model), config.prices
    )
    if spec.learner_backend == "codex" and spec.codex is not None:
        codex = CodexSession(
            install=spec.codex, meter_port=bound, sessions=str(run.root / "learner" / "sessions")
        )
        return bound, partial(run_codex_session, codex, endpoint)
    return bound, partial(run_learner_session, endpoint)
