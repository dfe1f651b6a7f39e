"""The ledger (lines, summaries rebuilt from lines) and budget arithmetic (never an overshoot)."""

from __future__ import annotations

import random
from decimal import Decimal
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

import meters
from mw_errors import MeterError


def line(i: int, status: str = "ok", model: str = "m", cost: str = "0.000123") -> meters.LedgerLine:
    usage = meters.Usage(input_tokens=10 * i, cached_input_tokens=i, output_tokens=i)
    return meters.LedgerLine.charge(
        usage,
        id=f"req-{i}",
        role="host",
        model=model,
        endpoint="/v1/chat/completions",
        started=float(i),
        ended=float(i) + 0.5,
        status=status,  # type: ignore[arg-type]
        http_status=200,
        streamed=bool(i % 2),
        usage={"prompt_tokens": 10 * i},
        cost_usd=cost,
        reservation_id=f"r{i}",
        reserved_usd="0.01",
    )


def test_summary_equals_a_recompute_to_the_micro_dollar(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    ledger = meters.Ledger(tmp_path, "host", allocation_usd=Decimal("5"), prices_date="2026-11-30")
    for i in range(200):
        status = rng.choice(["ok", "unmetered", "budget_blocked", "upstream_error", "cut"])
        cost = "0" if status == "budget_blocked" else str(Decimal(rng.randint(0, 10**6)) / 10**9)
        ledger.append(line(i, status, rng.choice(["a", "b"]), cost))
    written = ledger.write_summary()
    ledger.close()
    lines = meters.read_ledger(tmp_path / "ledger.jsonl")
    assert len(lines) == 200
    expected = sum((Decimal(x.cost_usd) for x in lines), Decimal(0))
    assert Decimal(written.cost_usd) == expected
    assert sum(written.statuses.values()) == 200
    assert set(written.statuses) >= {"ok", "budget_blocked", "unmetered", "upstream_error"}
    assert written.allocation_usd == "5"
    rebuilt = meters.summarize(lines, "host", allocation_usd=Decimal("5"), prices_date="2026-11-30")
    from meters._ledger import encode_summary

    assert encode_summary(rebuilt) == (tmp_path / "wire_ledger.json").read_bytes()
    by_model = sum((Decimal(m.cost_usd) for m in written.by_model.values()), Decimal(0))
    assert by_model == expected


def test_learner_summary_name_and_reopen(tmp_path: Path) -> None:
    ledger = meters.Ledger(tmp_path, "learner")
    ledger.append(line(1))
    ledger.close()
    assert (tmp_path / "meta_wire_ledger.json").exists()
    again = meters.Ledger(tmp_path, "learner")
    again.append(line(2))
    assert again.summary().requests == 2
    again.close()


def test_a_torn_last_line_is_left_out_and_damage_before_it_refused(tmp_path: Path) -> None:
    ledger = meters.Ledger(tmp_path, "host")
    for i in range(3):
        ledger.append(line(i))
    ledger.close()
    path = tmp_path / "ledger.jsonl"
    with open(path, "ab") as handle:
        handle.write(b'{"id":"req-9","ro')
    assert len(meters.read_ledger(path)) == 3
    data = path.read_bytes().replace(b'"req-1"', b'"req-1', 1)
    path.write_bytes(data)
    with pytest.raises(MeterError, match="line 2"):
        meters.read_ledger(path)


def test_a_reopened_ledger_cuts_a_torn_tail_before_appending(tmp_path: Path) -> None:
    ledger = meters.Ledger(tmp_path, "host")
    ledger.append(line(1))
    ledger.close()
    with open(tmp_path / "ledger.jsonl", "ab") as handle:
        handle.write(b'{"id":"req-9","ro')  # a crash mid-write
    again = meters.Ledger(tmp_path, "host")
    again.append(line(2))
    again.close()
    assert [x.id for x in meters.read_ledger(tmp_path / "ledger.jsonl")] == ["req-1", "req-2"]


def test_a_lost_attempt_is_charged_its_reservation_and_only_for_its_role() -> None:
    holder = meters.attempt_holder("host", "abc123", "/v1/chat/completions", "acme/m:1")
    reservation = meters.Reservation("r.1", "0.0123", holder, expires_at=9.0, reserved_at=3.0)
    lost = meters.lost_attempt(reservation, "host", now=5.0)
    assert lost is not None
    assert (lost.id, lost.model, lost.endpoint, lost.status) == (
        "abc123",
        "acme/m:1",
        "/v1/chat/completions",
        "lost",
    )
    assert (lost.cost_usd, lost.reserved_usd, lost.reservation_id) == ("0.0123", "0.0123", "r.1")
    assert (lost.started, lost.ended) == (3.0, 5.0)
    assert meters.lost_attempt(reservation, "learner", now=5.0) is None
    other = meters.Reservation("r.2", "1", "trial-7", expires_at=9.0)
    assert meters.lost_attempt(other, "host", now=5.0) is None


def test_reserve_is_all_or_nothing() -> None:
    budget = meters.Budget(Decimal("1.00"))
    first = budget.reserve(Decimal("0.60"), "a", now=0)
    assert isinstance(first, meters.Granted)
    blocked = budget.reserve(Decimal("0.50"), "b", now=0)
    assert blocked == meters.Blocked(requested="0.50", remaining="0.40", outstanding="0.60")
    assert blocked.may_fit_later()  # the 0.60 in flight may settle for less
    budget.settle(first.id, Decimal("0.25"))
    assert isinstance(budget.reserve(Decimal("0.50"), "b", now=0), meters.Granted)
    stats = budget.statistics()
    assert (stats.settled_usd, stats.outstanding_usd, stats.remaining_usd) == (
        "0.25",
        "0.50",
        "0.25",
    )
    assert (stats.granted, stats.blocked) == (2, 1)


def test_randomized_interleavings_never_overshoot(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(100):
        worst = Decimal("0.10")
        budget = meters.Budget(worst * 10)
        held: list[tuple[str, Decimal]] = []
        for _ in range(64 * 3):
            action = rng.random()
            if action < 0.5:
                outcome = budget.reserve(worst, "client", now=0)
                if isinstance(outcome, meters.Granted):
                    held.append((outcome.id, worst))
            elif held:
                rid, amount = held.pop(rng.randrange(len(held)))
                if action < 0.8:
                    budget.settle(rid, amount * Decimal(rng.random()).quantize(Decimal("0.0001")))
                else:
                    budget.release(rid)
            assert budget.settled + budget.outstanding <= budget.allocation


def test_leases_expire_and_are_reported() -> None:
    budget = meters.Budget(Decimal("1"), lease_seconds=60)
    granted = budget.reserve(Decimal("1"), "crashed-meter", now=0)
    assert isinstance(granted, meters.Granted)
    assert budget.reclaim_expired(now=59) == []
    (reclaimed,) = budget.reclaim_expired(now=60)
    assert reclaimed.reservation.holder == "crashed-meter" and reclaimed.at == 60
    # charged in full: the crashed holder's request may have been billed
    assert budget.statistics().settled_usd == "1"
    assert isinstance(budget.reserve(Decimal("0.01"), "next", now=61), meters.Blocked)
    assert budget.statistics().reclaimed == 1


def test_ids_are_unique_across_restarts() -> None:
    one, two = meters.Budget(Decimal(1)), meters.Budget(Decimal(1))
    a = one.reserve(Decimal("0.1"), "x", now=0)
    b = two.reserve(Decimal("0.1"), "x", now=0)
    assert isinstance(a, meters.Granted) and isinstance(b, meters.Granted) and a.id != b.id


def test_negative_amounts_are_refused() -> None:
    with pytest.raises(MeterError):
        meters.Budget(Decimal(-1))
    with pytest.raises(MeterError):
        meters.Budget(Decimal(1)).reserve(Decimal(-1), "x", now=0)


def test_the_running_sum_and_the_leases_match_a_recount_through_any_history(seed: int) -> None:
    """What is outstanding and what expires, kept as reservations come and go, equals a
    recount over the open reservations; the expiries kept stay in proportion to them."""
    rng = random.Random(seed)
    budget = meters.Budget(Decimal(10_000), lease_seconds=50)
    now = 0.0
    for _ in range(5_000):
        now += rng.random()
        action = rng.random()
        open_ = budget.open_reservations()
        if action < 0.5:
            budget.reserve(Decimal(rng.randint(1, 999)) / 100, "m", now=now)
        elif action < 0.75 and open_:
            budget.settle(rng.choice(open_).id, Decimal("0.01"))
        elif action < 0.9 and open_:
            budget.release(rng.choice(open_).id)
        else:
            due = {r.id for r in open_ if r.expires_at <= now}
            assert {x.reservation.id for x in budget.reclaim_expired(now)} == due
        recount = sum((Decimal(r.amount) for r in budget.open_reservations()), Decimal(0))
        assert budget.outstanding == recount
        assert len(budget._expiries) <= 2 * len(budget.open_reservations()) + 1025


def test_settled_leases_do_not_pile_up_while_none_expires() -> None:
    budget = meters.Budget(Decimal(10_000), lease_seconds=900)
    for n in range(5_000):
        granted = budget.reserve(Decimal("0.01"), "m", now=n / 1000)
        assert isinstance(granted, meters.Granted)
        budget.settle(granted.id, Decimal("0.01"))
    assert budget.outstanding == 0 and len(budget._expiries) <= 1025


@pytest.mark.anyio
async def test_a_blocked_request_waits_for_a_settle_and_is_woken_by_it() -> None:
    """A request that fits once the one in flight settles is granted on that settle,
    not at its next poll."""

    class Watched(meters.LocalReserver):
        waiting = woken = False

        async def freed(self) -> None:
            Watched.waiting = True
            await super().freed()
            Watched.woken = True

    reserver = Watched(meters.Budget(Decimal("1.00")))
    first = await reserver.reserve(Decimal("0.80"), "a")
    assert isinstance(first, meters.Granted)
    outcome: list[meters.Granted | meters.Blocked] = []

    async def second() -> None:
        outcome.append(
            await meters.reserve_waiting(reserver, Decimal("0.50"), "b", wait_seconds=600)
        )

    with anyio.fail_after(60):  # a hang guard: the backoff alone would take far less
        async with anyio.create_task_group() as tg:
            tg.start_soon(second)
            while not Watched.waiting:
                await anyio.lowlevel.checkpoint()
            await reserver.settle(first.id, Decimal("0.10"))
    assert Watched.woken and isinstance(outcome[0], meters.Granted)
