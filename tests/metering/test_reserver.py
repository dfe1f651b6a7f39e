"""The budget reserver actor: journaled decisions, rebuilt after a restart, leases reclaimed."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

import meters
import mw_actors as mw
import mw_actors.metering
from tests.processes import ROOT

pytestmark = pytest.mark.anyio


def reserver(allocation: str, **kwargs: Any) -> mw.ChildSpec:
    return mw.ChildSpec(
        id="reserver", start=lambda: mw.metering.BudgetReserver(Decimal(allocation), **kwargs)
    )


async def test_reserve_settle_release_are_journaled(tmp_path: Path) -> None:
    async with mw.open_runtime(journal=tmp_path, record_types=mw.metering.BUDGET_RECORDS) as rt:
        client = mw.metering.ReserverClient(await rt.spawn(reserver("1.00")))
        a = await client.reserve(Decimal("0.60"), "meter:a")
        assert isinstance(a, meters.Granted)
        assert isinstance(await client.reserve(Decimal("0.50"), "meter:b"), meters.Blocked)
        await client.settle(a.id, Decimal("0.20"))
        b = await client.reserve(Decimal("0.50"), "meter:b")
        assert isinstance(b, meters.Granted)
        await client.release(b.id)
    kinds = [
        type(e.rec).__name__ for e in mw.journal.read_journal(tmp_path, mw.metering.BUDGET_RECORDS)
    ]
    assert [k for k in kinds if k.startswith("Budget")] == [
        "BudgetReserved",
        "BudgetBlocked",
        "BudgetSettled",
        "BudgetReserved",
        "BudgetReleased",
    ]
    reserved = [
        e
        for e in mw.journal.read_journal(tmp_path, mw.metering.BUDGET_RECORDS)
        if e.rec.__class__.__name__ == "BudgetReserved"
    ]
    assert all(e.dur == "evidence" for e in reserved)  # on disk before the meter may forward


async def test_state_is_rebuilt_after_a_restart_from_journal_and_ledger(tmp_path: Path) -> None:
    journal = tmp_path / "journal"
    async with mw.open_runtime(journal=journal, record_types=mw.metering.BUDGET_RECORDS) as rt:
        client = mw.metering.ReserverClient(await rt.spawn(reserver("1.00")))
        settled = await client.reserve(Decimal("0.30"), "m:1")
        in_flight = await client.reserve(Decimal("0.30"), "m:2")
        lost = await client.reserve(Decimal("0.30"), "m:3")
        assert all(isinstance(g, meters.Granted) for g in (settled, in_flight, lost))
        await client.settle(settled.id, Decimal("0.10"))  # type: ignore[union-attr]
    # The meter wrote a ledger line for m:2 (cost 0.05) before the crash, none for m:3.
    line = meters.LedgerLine(
        id="x", role="host", model="m", endpoint="/v1/chat/completions", started=0, ended=1,
        status="ok", http_status=200, streamed=False, usage=None, cost_usd="0.05",
        reservation_id=in_flight.id,  # type: ignore[union-attr]
    )  # fmt: skip
    async with mw.open_runtime(journal=journal, record_types=mw.metering.BUDGET_RECORDS) as rt:
        ref = await rt.spawn(reserver("1.00", ledger=[line]))
        stats = await ref.ask("statistics")
    assert stats.settled_usd == "0.15"  # 0.10 settled + 0.05 from the ledger
    assert stats.outstanding_usd == "0.30"  # m:3 is still held: it may yet be spent
    # The journal was told what the ledger settled, so it agrees with the ledger on its own.
    records = [e.rec for e in mw.journal.read_journal(journal, mw.metering.BUDGET_RECORDS)]
    settled = [r for r in records if isinstance(r, mw.metering.BudgetSettled)]
    assert [(r.id, r.actual) for r in settled][-1] == (in_flight.id, "0.05")  # type: ignore[union-attr]
    alone = mw.metering.rebuild_budget(meters.Budget(Decimal("1.00")), records)
    assert [r.holder for r in alone] == ["m:3"]


async def test_expired_leases_are_reclaimed_charged_and_recorded(tmp_path: Path) -> None:
    clock = mw.VirtualClock()
    async with mw.open_runtime(
        journal=tmp_path, clock=clock, record_types=mw.metering.BUDGET_RECORDS
    ) as rt:
        client = mw.metering.ReserverClient(await rt.spawn(reserver("1.00", lease_seconds=60)))
        await client.reserve(Decimal("0.40"), "meter:crashed")
        await clock.advance(61)
        fresh = await client.reserve(Decimal("0.50"), "meter:new")
        assert isinstance(fresh, meters.Granted)
        stats = await (await rt.root.child("reserver")).ask("statistics")
    assert (stats.settled_usd, stats.reclaimed) == ("0.40", 1)
    reclaimed = [
        e.rec
        for e in mw.journal.read_journal(tmp_path, mw.metering.BUDGET_RECORDS)
        if isinstance(e.rec, mw.metering.BudgetReclaimed)
    ]
    assert [(r.holder, r.charged) for r in reclaimed] == [("meter:crashed", "0.40")]


async def test_a_meter_reserves_through_the_actor(tmp_path: Path) -> None:
    import httpx

    from tests.meters.conftest import open_wire

    async with mw.open_runtime(
        journal=tmp_path / "j", record_types=mw.metering.BUDGET_RECORDS
    ) as rt:
        client = mw.metering.ReserverClient(await rt.spawn(reserver("0.0001")))
        async with open_wire(tmp_path, reserver=client) as wire:
            body = {"model": "local/scripted", "max_tokens": 200,
                    "messages": [{"role": "user", "content": "hi"}]}  # fmt: skip
            async with httpx.AsyncClient() as http:
                codes = [
                    (await http.post(f"{wire.meter_url}/chat/completions", json=body)).status_code
                    for _ in range(8)
                ]
        stats = await (await rt.root.child("reserver")).ask("statistics")
    assert codes.count(200) >= 1 and codes[-1] == 429
    lines = meters.read_ledger(wire.ledger_dir / "ledger.jsonl")
    spent = sum((Decimal(x.cost_usd) for x in lines), Decimal(0))
    assert Decimal(stats.settled_usd) == spent <= Decimal("0.0001")


async def test_a_restarted_meter_writes_off_what_its_dead_process_left_in_flight(
    tmp_path: Path,
) -> None:
    from tests.meters.conftest import open_wire

    journal = tmp_path / "journal"
    holder = meters.attempt_holder("host", "a1", "/v1/chat/completions", "local/scripted")
    async with mw.open_runtime(journal=journal, record_types=mw.metering.BUDGET_RECORDS) as rt:
        client = mw.metering.ReserverClient(await rt.spawn(reserver("1.00")))
        in_flight = await client.reserve(Decimal("0.25"), holder)  # then the process dies
        other = await client.reserve(Decimal("0.10"), "trial-7")  # not a meter's attempt
    async with mw.open_runtime(journal=journal, record_types=mw.metering.BUDGET_RECORDS) as rt:
        client = mw.metering.ReserverClient(await rt.spawn(reserver("1.00")))
        async with open_wire(tmp_path, reserver=client) as wire:
            pass
        stats = await client.ref.ask("statistics")
        still_open = await client.open_reservations()
    lines = meters.read_ledger(wire.ledger_dir / "ledger.jsonl")
    assert [(x.id, x.status, x.cost_usd) for x in lines] == [("a1", "lost", "0.25")]
    assert lines[0].reservation_id == in_flight.id  # type: ignore[union-attr]
    assert (stats.settled_usd, stats.outstanding_usd) == ("0.25", "0.10")
    assert [r.id for r in still_open] == [other.id]  # type: ignore[union-attr]


class _GatedFsync(mw.journal.FileOps):
    """Fsyncs wait for the gate; each one is counted."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.gate.set()
        self.synced = 0

    def fsync(self, fd: int) -> None:
        self.gate.wait(30)
        super().fsync(fd)
        self.synced += 1


async def test_reservations_that_arrive_together_share_an_fsync_and_wait_for_it(
    tmp_path: Path,
) -> None:
    files = _GatedFsync()
    answered: list[meters.Granted | meters.Blocked] = []
    async with (
        mw.journal.open_journal(
            tmp_path, record_types=mw.metering.BUDGET_RECORDS, files=files
        ) as journal,
        mw.open_runtime(journal=journal, record_types=mw.metering.BUDGET_RECORDS) as rt,
    ):
        client = mw.metering.ReserverClient(await rt.spawn(reserver("100")))
        await client.reserve(Decimal("0.01"), "meter:warm")
        await journal.sync()  # the reserver waits on nothing now
        files.gate.clear()  # the disk stalls: nothing may be granted until it is back
        before = files.synced

        async def reserve(holder: str) -> None:
            answered.append(await client.reserve(Decimal("1"), holder))

        async with anyio.create_task_group() as tg:
            for number in range(64):
                tg.start_soon(reserve, f"meter:{number}")
            await anyio.sleep(0.2)  # real time: the fsync waits in a worker thread
            assert answered == []
            files.gate.set()
        assert all(isinstance(a, meters.Granted) for a in answered) and len(answered) == 64
        assert files.synced - before <= 3  # not 64: the ones that waited went as one
    reserved = [
        e
        for e in mw.journal.read_journal(tmp_path, mw.metering.BUDGET_RECORDS)
        if isinstance(e.rec, mw.metering.BudgetReserved)
    ]
    assert len(reserved) == 65 and all(e.dur == "evidence" for e in reserved)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_reserver_killed_mid_batch_has_every_grant_it_gave_on_disk(tmp_path: Path) -> None:
    """``kill -9`` while batches queue behind a slow fsync: no answered grant is lost."""
    for round_ in range(3):
        journal = tmp_path / f"journal-{round_}"
        with subprocess.Popen(
            [sys.executable, "-m", "tests.metering._grants", str(journal)],
            cwd=ROOT, stdout=subprocess.PIPE, text=True,
        ) as child:  # fmt: skip
            assert child.stdout is not None
            assert child.stdout.readline().strip() == "ready"
            granted = []
            while len(granted) < 200 + 150 * round_:  # each round kills at another point
                granted.append(child.stdout.readline().strip())
            child.send_signal(signal.SIGKILL)
            granted += [line.strip() for line in child.stdout]  # what it had answered already
        on_disk = {
            e.rec.id
            for e in mw.journal.read_journal(journal, mw.metering.BUDGET_RECORDS)
            if isinstance(e.rec, mw.metering.BudgetReserved)
        }
        assert set(granted) <= on_disk, f"{len(set(granted) - on_disk)} grants not on disk"


async def test_a_request_blocked_by_one_in_flight_is_woken_by_its_settle(tmp_path: Path) -> None:
    """Through the actor: the waiter asks again on the settle, not at its next poll."""
    async with mw.open_runtime(journal=tmp_path, record_types=mw.metering.BUDGET_RECORDS) as rt:

        class Watched(mw.metering.ReserverClient):
            waiting = woken = False

            async def freed(self) -> None:
                Watched.waiting = True
                await super().freed()
                Watched.woken = True

        client = Watched(await rt.spawn(reserver("1.00")))
        first = await client.reserve(Decimal("0.80"), "meter:a")
        assert isinstance(first, meters.Granted)
        outcome: list[meters.Granted | meters.Blocked] = []

        async def second() -> None:
            outcome.append(
                await meters.reserve_waiting(client, Decimal("0.50"), "meter:b", wait_seconds=600)
            )

        with anyio.fail_after(60):  # a hang guard
            async with anyio.create_task_group() as tg:
                tg.start_soon(second)
                while not Watched.waiting:
                    await anyio.lowlevel.checkpoint()
                await anyio.wait_all_tasks_blocked()  # its ask is in the reserver's hands
                await client.settle(first.id, Decimal("0.10"))
        assert Watched.woken and isinstance(outcome[0], meters.Granted)
