"""The lifecycle every campaign kind runs under: its steps, in their order, and what a
step that fails leaves undone."""

from __future__ import annotations

import json
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path

import anyio
import anyio.abc
import httpx
import pytest

import meters
from mw_actors import kinds
from mw_actors._lock import campaign_lock, is_locked
from mw_actors.journal import Record, read_journal
from mw_actors.metering import BUDGET_RECORDS
from mw_actors.provider import Provider, ScriptedEngine, serve_provider
from mw_errors import ConfigError, MwError

from .meters.conftest import PRICES, SCRIPT

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


class Began(Record, tag="life.began", frozen=True):
    pass


class Over(Record, tag="life.over", frozen=True):
    answers: int


class Life(kinds.Lifecycle[int]):
    """A kind that asks its provider through a meter, writing down what each step saw."""

    def __init__(self, root: Path, *, fail: bool = False) -> None:
        self.root, self.journal, self.fail = root, root / "journal", fail
        self.records: Sequence[type[Record]] = (*BUDGET_RECORDS, Began, Over)
        self.allocation = Decimal("1")
        self.steps: list[str] = []
        self.seen: dict[str, object] = {}

    async def serve(self, services: anyio.abc.TaskGroup) -> None:
        self.steps.append("serve")
        port = await services.start(serve_provider, Provider(ScriptedEngine(SCRIPT)))
        self.upstream = f"http://127.0.0.1:{port}/v1"

    async def started(self, stage: kinds.Stage) -> None:
        self.steps.append("started")
        await stage.tree.journal.append(Began())

    async def run(self, stage: kinds.Stage) -> int:
        self.steps.append("run")
        config = meters.MeterConfig(
            role="host",
            upstream=self.upstream,
            prices=meters.parse_prices(json.dumps(PRICES).encode()),
            ledger_dir=self.root / "ledger",
        )
        place = await stage.tree.meter("host-meter", config)
        body = {"model": "local/scripted", "messages": [{"role": "user", "content": "hi"}]}
        async with httpx.AsyncClient(base_url=place.url) as client:
            answer = await client.post("/chat/completions", json=body)
        assert answer.status_code == 200
        if self.fail:
            raise MwError("the campaign broke")
        return 1

    async def ended(self, stage: kinds.Stage, result: int) -> None:
        self.steps.append("ended")
        # Every meter has stopped (its summary is written as it stops); the services
        # that outlive the tree still answer.
        self.seen["summary"] = (self.root / "ledger" / "wire_ledger.json").is_file()
        async with httpx.AsyncClient(base_url=self.upstream) as client:
            self.seen["provider"] = (await client.get("/models")).status_code
        await stage.tree.journal.append(Over(answers=result))

    def write_outputs(self, result: int) -> None:
        self.steps.append("outputs")
        self.seen["locked"] = is_locked(self.root)  # still this run's
        (self.root / "outputs.txt").write_text(f"{result}\n")


def _written(life: Life) -> list[type[Record]]:
    return [type(e.rec) for e in read_journal(life.journal, life.records)]


async def test_a_kind_runs_each_step_in_order_and_ends_after_its_meters(tmp_path: Path) -> None:
    life = Life(tmp_path)
    assert await kinds.run_kind(life) == 1
    assert life.steps == ["serve", "started", "run", "ended", "outputs"]
    assert life.seen == {"summary": True, "provider": 200, "locked": True}
    written = [t for t in _written(life) if t in (Began, Over)]
    assert written == [Began, Over]
    assert (tmp_path / "outputs.txt").read_text() == "1\n"
    assert not is_locked(tmp_path)  # released at the end


async def test_a_run_that_fails_has_no_end_record_and_no_outputs(tmp_path: Path) -> None:
    life = Life(tmp_path, fail=True)
    with pytest.raises(MwError, match="the campaign broke"):
        await kinds.run_kind(life)
    assert life.steps == ["serve", "started", "run"]
    assert [t for t in _written(life) if t in (Began, Over)] == [Began]
    assert not (tmp_path / "outputs.txt").exists()
    assert not is_locked(tmp_path)


async def test_a_campaign_another_process_runs_is_refused_before_any_step(tmp_path: Path) -> None:
    life = Life(tmp_path)
    with campaign_lock(tmp_path), pytest.raises(ConfigError, match="running in another"):
        await kinds.run_kind(life)
    assert life.steps == [] and not life.journal.exists()
