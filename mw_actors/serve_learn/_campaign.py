"""A serve-and-learn campaign as supervised actors over one journal.

::

    root (one_for_one)
     ├─ reserver            the cumulative allocation; the host meter reserves from it
     └─ campaign (rest_for_one)
          ├─ learner        block k's evidence -> version v(k+1), exactly once
          ├─ stream         block k served in parallel against v(k)
          └─ waiter         window w's tests on v(test_version(w)), as soon as it exists

Its steps (start, run, end, outputs) run under the lifecycle every kind
shares (``run_kind``, ``mw_actors/_lifecycle.py``), which holds the lock and
stops the meters before the end record.

The host meter (with the local provider behind it for ``local/...`` models)
runs beside the tree for the campaign's life. Evidence is journaled before it
is acknowledged; on resume, finished episodes are kept, episodes that were
started and never ended are ended as ``unknown`` (never re-run), and a block
whose serving is complete but whose version is missing is learned.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from decimal import Decimal
from typing import Literal

import anyio
import anyio.abc
import msgspec

import meters
import sandbox

from .._core import ChildSpec, SupervisorSpec, get_logger
from .._lifecycle import Lifecycle, Stage, run_kind
from ._actors import Learner, Stream, Waiter, append_line
from ._checks import Prepared, checked, prepare_run, probe_endpoints
from ._outputs import stamp_run_log, write_outputs
from ._services import start_judge, start_learner, start_upstream
from ._spec import CAMPAIGN_RECORDS, CampaignSpec, RunDir, Submission
from ._state import Shared, end_interrupted, restore
from .records import (
    AllocationRaised,
    ServeLearnEnded,
    ServeLearnStarted,
)

__all__ = ["run_campaign"]

log = get_logger("mw.serve_learn")


async def run_campaign(
    spec: CampaignSpec | Prepared,
    *,
    on_started: Callable[[], None] | None = None,
    budget: meters.Reserver | None = None,
) -> RunDir:
    """Run (or resume) a campaign to its end; write the results.

    ``spec``: the campaign, or the campaign already checked (:func:`checked`: a daemon
    checks a submission before it registers it, and runs what it checked).
    ``budget``: what its meters reserve from, when a grid shares one budget among
    its cells; else the campaign's own reserver, holding ``spec.allocation_usd``.

    Raises:
        ConfigError: a bad scenario, an existing run directory, a model that cannot run here.
    """
    # File work runs on worker threads: a daemon runs other campaigns on this loop.
    if isinstance(spec, Prepared):
        prepared = spec
    else:
        prepared = await anyio.to_thread.run_sync(checked, spec)  # read once, used throughout
    spec = prepared.spec
    if prepared.method.learner == "llm" and spec.learner_backend == "codex":
        await sandbox.self_test("bwrap")  # trusted only once it proves its isolation here
    await probe_endpoints(spec, spec.models())
    await anyio.to_thread.run_sync(prepare_run, prepared)
    life = _Campaign(prepared, on_started)
    await run_kind(life, budget=budget)
    return life.run_dir


Ending = Literal["completed", "budget_blocked"]


class _Campaign(Lifecycle[Ending]):
    """A serve-and-learn campaign's steps under :func:`run_kind`; its result is its state."""

    def __init__(self, prepared: Prepared, on_started: Callable[[], None] | None) -> None:
        spec, run = prepared.spec, prepared.run
        self.raised = spec.allocation_add
        if self.raised:
            spec = dataclasses.replace(
                spec, allocation_usd=spec.allocation_usd + self.raised, allocation_add=Decimal(0)
            )
        self.spec, self.run_dir, self.prepared, self.on_started = spec, run, prepared, on_started
        self.shared = Shared(spec, run, prepared.scenario, prepared.plan, prepared.method)
        self.root, self.journal, self.records = run.root, run.journal, CAMPAIGN_RECORDS
        self.allocation = spec.allocation_usd
        # The reserver settles what the host meter already wrote down but did not settle;
        # the meter then writes off, as `lost`, what it left in flight (docs/design/meters.md).
        self.ledger = run.root / "ledger.jsonl"

    async def serve(self, services: anyio.abc.TaskGroup) -> None:
        self.host_config = await start_upstream(self.spec, "host", self.run_dir.root, services)

    async def started(self, stage: Stage) -> None:
        spec, shared, journal = self.spec, self.shared, stage.tree.journal
        interrupted = restore(shared, self.prepared.entries)  # from what was read: no file work
        await end_interrupted(shared, journal, interrupted)  # the protocol attempts once
        journaled = self.prepared.journaled
        if self.raised and journaled.started is not None:
            await journal.append(
                AllocationRaised(added_usd=str(self.raised), allocation_usd=str(self.allocation))
            )
        if journaled.started is None:  # a resume of one that never started starts it now
            schedule = shared.plan
            await journal.append(
                ServeLearnStarted(
                    tag=spec.tag,
                    scenario=spec.scenario,
                    method=spec.method,
                    model=spec.model,
                    serving_total=schedule.serving_total,
                    blocks=schedule.blocks,
                    test_versions={str(w.window): w.test_version for w in schedule.windows},
                    allocation_usd=str(spec.allocation_usd),
                    window_sizes={str(w.window): w.serving for w in schedule.windows},
                    settings=msgspec.to_builtins(Submission.from_spec(spec)),
                )
            )

    async def run(self, stage: Stage) -> Ending:
        spec, shared, run, tree = self.spec, self.shared, self.run_dir, stage.tree
        # The wire meters are actors of the runtime. run_kind stops them, before the end
        # is written, and each waits for its attempts in flight to write their lines.
        host = await tree.meter("host-meter", self.host_config, port=spec.wm_port or 0)
        learner_port = None
        if shared.method.learner == "llm":
            learner_port, shared.session = await start_learner(spec, run, stage.services, tree)
        judge = await start_judge(spec, run, stage.services, tree)
        await anyio.to_thread.run_sync(
            stamp_run_log, spec, run, shared.plan, host.port, learner_port
        )
        model = spec.wire_model(spec.model)
        async with shared.player.connected(
            host.port, model, spec.reasoning_effort, judge, spec.max_tokens
        ):
            await tree.start_campaign(_campaign_supervisor(shared))
            if self.on_started is not None:
                self.on_started()
            await shared.waiter_done.wait()
            await shared.stream_done.wait()
            if not shared.blocked.is_set():
                await shared.learner_done.wait()
        return "budget_blocked" if self.shared.blocked.is_set() else "completed"

    async def ended(self, stage: Stage, result: Ending) -> None:
        await stage.tree.journal.append(ServeLearnEnded(state=result))
        overhead = sorted(self.shared.overhead) or [0.0]
        finished = {
            "state": result,
            "episodes": len(self.shared.overhead),
            "runtime_overhead_ms_mean": round(1e3 * sum(overhead) / len(overhead), 3),
            "runtime_overhead_ms_p50": round(1e3 * overhead[len(overhead) // 2], 3),
        }
        await append_line(self.run_dir.run_log, json.dumps({"finished": finished}))

    def write_outputs(self, result: Ending) -> None:
        shared = self.shared
        write_outputs(self.run_dir, self.spec, shared.method, shared.scenario, shared.records())


def _campaign_supervisor(shared: Shared) -> SupervisorSpec:
    """The serve-and-learn campaign: the learner, then the stream, then the waiter.

    rest_for_one: a learner that crashes restarts the stream and the waiter after it
    (each resumes from the journal); the stream and the waiter end when done.
    """
    return SupervisorSpec(
        strategy="rest_for_one",
        intensity=5,
        period=60,
        children=[
            ChildSpec(id="learner", start=lambda: Learner(shared)),
            ChildSpec(id="stream", start=lambda: Stream(shared), restart="transient"),
            ChildSpec(id="waiter", start=lambda: Waiter(shared), restart="transient"),
        ],
    )
