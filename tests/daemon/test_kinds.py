"""A third campaign kind, defined here alone and registered with one line, runs under the
daemon and reads in its status: nothing outside this file names it."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import anyio
import msgspec
import pytest
from rich.console import Console

from mw_actors import kinds
from mw_actors.daemon import (
    Daemon,
    DaemonOptions,
    ListCampaigns,
    Status,
    Submit,
    campaign_status,
    connect,
    status_line,
)
from mw_actors.daemon._attach import render
from mw_actors.journal import Entry, Record, open_journal, read_journal
from mw_errors import ConfigError, MwError

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


class NapStarted(Record, tag="nap.started", frozen=True):
    tag: str
    naps: int


class Napped(Record, tag="nap.napped", frozen=True):
    number: int


class NapEnded(Record, tag="nap.ended", frozen=True):
    state: str


class NapSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    naps: int
    seconds: float = 0.01


class Naps:
    """A kind that only sleeps and records: each nap a record, then its end."""

    name: str = "nap"
    records: Sequence[type[Record]] = (NapStarted, Napped, NapEnded)
    started: type[Record] = NapStarted
    resumable: bool = False
    progress_keys: tuple[str, ...] = ("naps_taken",)
    abandoned: ClassVar[list[Path]] = []

    async def prepare(
        self, tag: str, spec: Mapping[str, Any], *, resume: bool, context: kinds.Context
    ) -> tuple[kinds.Runner, str]:
        try:
            nap = msgspec.convert(spec, NapSpec)
        except msgspec.ValidationError as exc:
            raise ConfigError(f"a nap campaign's spec: {exc}", hint='send {"naps": 3}') from None
        journal = context.runs / tag / "journal"

        async def run() -> None:
            async with open_journal(journal, record_types=self.records) as out:
                await out.append(NapStarted(tag=tag, naps=nap.naps))
                for number in range(nap.naps):
                    await anyio.sleep(nap.seconds)
                    await out.append(Napped(number=number))
                await out.append(NapEnded(state="completed"))

        return run, "0"

    async def abandon(self, run: Path) -> None:
        self.abandoned.append(run)

    def summary(self, run: Path, records: Sequence[Record]) -> kinds.Summary:
        ended = [r for r in records if isinstance(r, NapEnded)]
        return kinds.Summary(
            progress={"naps_taken": sum(isinstance(r, Napped) for r in records)},
            spend_usd={},
            allocation_usd="0",
            final="completed" if ended else None,
        )

    def progress_line(self, progress: Mapping[str, int]) -> str:
        return f"{progress.get('naps_taken', 0)} naps taken"

    def view(self, entries: Sequence[Entry], progress: Mapping[str, int]) -> kinds.View:
        start = next(e.rec for e in entries if isinstance(e.rec, NapStarted))
        naps = kinds.Bar("naps", progress.get("naps_taken", 0), start.naps)
        return kinds.View(bars=[naps], milestones=["the last nap was quiet"])


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setitem(kinds.KINDS, "nap", Naps())  # the one registry line
    path = Path(tempfile.mkdtemp(prefix="mwk-"))  # a Unix socket's path is short
    yield path
    shutil.rmtree(path, ignore_errors=True)


async def test_a_new_kind_runs_under_the_daemon_and_reads_in_its_status(runs: Path) -> None:
    daemon = Daemon(runs, DaemonOptions())
    async with anyio.create_task_group() as tg:
        await tg.start(daemon.serve)
        async with connect(runs) as control:
            submitted = await control.request(Submit(kind="nap", tag="n1", spec={"naps": 3}))
            assert submitted["kind"] == "nap" and submitted["progress"] == {"naps_taken": 0}
            with anyio.fail_after(30):
                while (now := await control.request(Status(tag="n1")))["state"] != "completed":
                    await anyio.sleep(0.02)
            assert now["progress"] == {"naps_taken": 3}
            listed = await control.request(ListCampaigns())
            assert [c["kind"] for c in listed] == ["nap"]
            with pytest.raises(MwError, match="a nap campaign's spec"):
                await control.request(Submit(kind="nap", tag="n2", spec={"nap": 3}))
            with pytest.raises(MwError, match="unknown campaign kind 'siesta'"):
                await control.request(Submit(kind="siesta", tag="n3", spec={}))
            assert not (runs / "n2").exists() and not (runs / "n3").exists()
        daemon.stop()
    status = campaign_status(runs / "n1")  # from the run directory alone, as `mw status`
    assert (status.kind, status.state) == ("nap", "completed")
    assert status_line(msgspec.to_builtins(status)).startswith("n1: nap, completed; 3 naps taken")
    console = Console(record=True, width=100)
    console.print(render(runs / "n1", deque())[0])  # `mw attach --once`'s frame
    frame = console.export_text()
    assert "n1  (nap, completed)" in frame and "3/3" in frame and "quiet" in frame, frame
    written = [type(e.rec) for e in read_journal(runs / "n1" / "journal", Naps.records)]
    assert [t for t in written if t in Naps.records] == [NapStarted, *[Napped] * 3, NapEnded]


async def test_a_run_of_a_kind_that_never_continues_is_abandoned_on_restart(runs: Path) -> None:
    """The daemon died mid-run: a kind that does not resume ends what was in flight."""
    journal = runs / "n1" / "journal"
    async with open_journal(journal, record_types=Naps.records) as out:
        await out.append(NapStarted(tag="n1", naps=3))
    registry = Daemon(runs, DaemonOptions()).paths.registry
    registry.mkdir(parents=True, exist_ok=True)
    entry = {"kind": "nap", "tag": "n1", "spec": {"naps": 3}}
    (registry / "n1.json").write_text(json.dumps(entry))
    Naps.abandoned.clear()
    daemon = Daemon(runs, DaemonOptions())
    async with anyio.create_task_group() as tg:
        await tg.start(daemon.serve)
        daemon.stop()
    assert Naps.abandoned == [runs / "n1"]
    assert campaign_status(runs / "n1").state == "failed"  # no end: nothing pretends it ran
