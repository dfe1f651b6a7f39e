"""The attacks of issue 14, rerun: each figure beside its goal (0) in one run.

    python bench/attacks.py [--rounds N] [--kills N] [--frames N]

- bypass attempts forwarded: every spelling in tests/scenarios/meter_attacks.py,
  10 times, against a meter whose allocation is exhausted, in front of an
  upstream that needs the key the meter holds;
- overshoots: rounds of 200 concurrent openai SDK requests (half streamed, half
  whole) that an upstream answers with 400 tokens to max_tokens=100; a round
  overshoots when the ledger's spend passes the allocation;
- daemon deaths: a real ``mw daemon`` process, its control socket fuzzed with
  random and structured frames (tests/scenarios/daemon_frames.py) while a
  campaign runs; a death is the process gone, or the campaign not completed;
- queued episodes journaled as started, per kill -9 of a campaign at
  concurrency 4: episodes in flight past the slots (they once went ``unknown``
  a whole block at a time);
- bad inputs answered with a traceback: the CLI given every bad number, URL,
  tag and path of the test tables;
- spend over the allocation under a lying upstream (issue 27): for each lie of
  tests/scenarios/meter_attacks.py's LIARS (usage that is no usage, less output
  reported than streamed, output past max_tokens in shapes a meter may miss),
  rounds of 50 concurrent openai SDK streams; and for each request a lenient
  upstream would read otherwise (SHAPES: ``"n": "8"``, ``"stream": "false"``,
  duplicate keys, stored inputs, ...), rounds of 50 concurrent raw requests,
  counting what was forwarded;
- campaigns stranded by a daemon killed 0.5, 1, 2, 3 and 5 s after a submit.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from decimal import Decimal
from functools import partial
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import meters  # noqa: E402
from mw_actors.provider import (  # noqa: E402
    LOCAL_PRICES,
    FaultPlan,
    Provider,
    Reply,
    ScriptedEngine,
    serve_provider,
)
from tests.scenarios.bad_inputs import BAD_INPUTS, BAD_PATHS  # noqa: E402
from tests.scenarios.daemon_frames import BAD_TAGS, KILLERS, frame, fuzz_frames  # noqa: E402
from tests.scenarios.meter_attacks import BYPASSES, LIARS, SHAPES  # noqa: E402

KEY = "sk-bench-attacks"
KILL_FLAGS = ("--train-split", "48", "--concurrency", "4", "--provider-latency", "ttft=0.1")
PRICES = meters.load_prices(LOCAL_PRICES)


def mw(*args: str, timeout: float = 120, prog: str = "mw") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", f"bin.{prog}", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip


@asynccontextmanager
async def _meter(
    ledger: Path, allocation: Decimal, engine: ScriptedEngine | None, faults: FaultPlan | None
) -> AsyncIterator[tuple[Provider, str]]:
    """A provider that needs the key, and a meter holding it, on loopback."""
    provider = Provider(engine, faults, api_key=KEY)
    async with anyio.create_task_group() as tg:
        port = await tg.start(serve_provider, provider)
        config = meters.MeterConfig(
            role="host", upstream=f"http://127.0.0.1:{port}/v1", prices=PRICES,
            ledger_dir=ledger, api_key=KEY, allocation_usd=allocation,
        )  # fmt: skip
        meter_port = await tg.start(meters.serve_meter, config)
        yield provider, f"http://127.0.0.1:{meter_port}/v1"
        tg.cancel_scope.cancel()


async def _raw(port: int, method: str, target: str, body: bytes) -> None:
    head = (
        f"{method} {target} HTTP/1.1\r\nhost: x\r\ncontent-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    )
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        await stream.send(head.encode("latin-1") + body)
        while True:
            try:
                await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                return


async def bypasses(tmp: Path) -> tuple[int, int]:
    attempts = 0
    async with _meter(tmp, Decimal("0.0001"), None, None) as (provider, url):
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        for attack in BYPASSES:
            if attack.forwarded:
                continue  # the free key probe is meant to go
            for _ in range(10):
                await _raw(port, attack.method, attack.target, attack.body)
                attempts += 1
        forwarded = provider.statistics().received
    return forwarded, attempts


async def overshoots(tmp: Path, rounds: int) -> tuple[int, Decimal, Decimal]:
    import httpx
    import openai

    engine = ScriptedEngine([Reply(content=" ".join(f"w{i}" for i in range(400)))])
    worst = PRICES.worst_case("local/scripted", 120, 100)
    allocation = worst * 40  # 200 requests, room for 40 worst cases
    over, spent_max = 0, Decimal(0)
    for round_ in range(rounds):
        ledger = tmp / f"round-{round_}"
        faults = FaultPlan(plan=["ignore_max_tokens"])
        async with _meter(ledger, allocation, engine, faults) as (_, url):
            client = openai.AsyncOpenAI(base_url=url, api_key="-", max_retries=0)

            async def one(stream: bool, client: openai.AsyncOpenAI = client) -> None:
                try:
                    answer = await client.chat.completions.create(
                        model="local/scripted", max_tokens=100, stream=stream,
                        messages=[{"role": "user", "content": "talk"}],
                    )  # fmt: skip
                    if stream:
                        async for _ in answer:  # type: ignore[union-attr]
                            pass
                except (openai.APIError, httpx.HTTPError):
                    pass  # refused, or cut where it passed its reservation

            async with anyio.create_task_group() as requests:
                for i in range(200):
                    requests.start_soon(one, i % 2 == 0)
            await client.close()
        lines = meters.read_ledger(ledger / "ledger.jsonl")
        spent = sum((Decimal(x.cost_usd) for x in lines), Decimal(0))
        over += spent > allocation
        spent_max = max(spent_max, spent)
    return over, spent_max, allocation


def _exchange(path: str, frames: list[bytes], hello: bool) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(path)
        try:
            if hello:
                sock.sendall(frame(b'{"type": "Hello", "version": 1, "role": "control"}'))
                sock.recv(65536)
            for data in frames:
                sock.sendall(data)
                if not sock.recv(65536):
                    return
        except OSError:
            return


def daemon_deaths(frames: int, seed: int) -> tuple[int, int, str]:
    rng = random.Random(seed)
    runs = Path(tempfile.mkdtemp(prefix="mwb-"))
    deaths = sent = 0
    try:
        assert mw("daemon", "start", "--runs", str(runs)).returncode == 0
        submit = mw("serve-learn", "submit", "synthetic_l1", "--runs", str(runs), "--tag", "live",
                    "--train-split", "24")  # fmt: skip
        assert submit.returncode == 0, submit.stderr
        pid = int((runs / "mw-daemon.pid").read_text())
        path = str(runs / ".mw-daemon" / "control.sock")
        killers = [frame(json.dumps(message).encode()) for _, message, _ in KILLERS]
        for i in range(frames):
            batch = [killers[i]] if i < len(killers) else fuzz_frames(rng, "live")
            _exchange(path, batch if i % 10 else batch[:1], hello=bool(i % 10))
            sent += len(batch)
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                deaths += 1
                break
        deadline = time.monotonic() + 240
        state = "?"
        while time.monotonic() < deadline:
            state = json.loads(mw("status", "live", "--runs", str(runs), "--json").stdout)["state"]
            if state != "running":
                break
            time.sleep(0.5)
        if state != "completed":
            deaths += 1
    finally:
        mw("daemon", "stop", "--runs", str(runs))
        shutil.rmtree(runs, ignore_errors=True)
    return deaths, sent, state


def queued_started(kills: int, seed: int, tmp: Path) -> tuple[int, list[int]]:
    from mw_actors.daemon import CAMPAIGN_RECORDS
    from mw_actors.journal import read_journal
    from mw_actors.serve_learn import EpisodeEnded, EpisodeStarted

    rng = random.Random(seed)
    past_slots, unknowns = 0, []
    for k in range(kills):
        tag = f"k{k}"
        argv = ["serve-learn", "run", "synthetic_l1", "--runs", str(tmp), "--tag", tag,
                *KILL_FLAGS]  # fmt: skip
        process = subprocess.Popen(
            [sys.executable, "-m", "bin.mw", *argv], cwd=ROOT, start_new_session=True,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        journal = tmp / tag / "journal"
        target, ended = rng.randint(2, 40), 0
        deadline = time.monotonic() + 60
        while ended < target and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.05)
            try:
                ended = sum(isinstance(e.rec, EpisodeEnded)
                            for e in read_journal(journal, CAMPAIGN_RECORDS))  # fmt: skip
            except Exception:
                ended = 0
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        records = [e.rec for e in read_journal(journal, CAMPAIGN_RECORDS)]
        done = {r.task_id for r in records if isinstance(r, EpisodeEnded)}
        flying = Counter(r.phase for r in records
                         if isinstance(r, EpisodeStarted) and r.task_id not in done)  # fmt: skip
        past_slots += sum(max(0, n - 4) for n in flying.values())
        assert mw(*argv, "--resume").returncode == 0
        after = [e.rec for e in read_journal(journal, CAMPAIGN_RECORDS)]
        unknowns.append(sum(isinstance(r, EpisodeEnded) and r.status == "unknown" for r in after))
    return past_slots, unknowns


def tracebacks(tmp: Path) -> tuple[int, int]:
    tmp.mkdir(parents=True)
    prices = tmp / "prices.json"
    prices.write_text(LOCAL_PRICES.read_text())
    places = {"runs": tmp / "runs", "ledger": tmp / "ledger", "prices": prices}
    cases = [[arg.format(**places) for arg in case.argv] for case in BAD_INPUTS]
    for tag in BAD_TAGS:
        if "\0" not in tag:
            cases.append(["serve-learn", "run", "synthetic_l1", "--runs", str(tmp), "--tag", tag])
            cases.append(["status", tag, "--runs", str(tmp)])
    cases += [
        ["journal", "check", str(tmp)],
        ["serve-learn", "run", "nope", "--runs", str(tmp)],
        ["status", "--runs", str(tmp / "nowhere")],
        ["attach", "x", "--runs", str(tmp)],
    ]
    with_traceback = sum("Traceback" in mw(*argv).stderr for argv in cases)
    (tmp / "file").write_text("a file\n")
    (tmp / "rows.jsonl").write_text("[1, 2]\n")
    paths = {"file": tmp / "file", "tmp": tmp, "long": "a" * 300, "rows": tmp / "rows.jsonl"}
    for prog, argv, _ in BAD_PATHS:
        answer = mw(*[arg.format(**paths) for arg in argv], prog=prog)
        with_traceback += "Traceback" in answer.stderr
    return with_traceback, len(cases) + len(BAD_PATHS)


LIMIT = 20


async def lying_upstreams(tmp: Path, rounds: int) -> list[tuple[str, int, Decimal]]:
    """Per lie: rounds over the allocation, and the most spent as a share of it."""
    import openai

    engine = ScriptedEngine([Reply(content=" ".join(f"w{i}" for i in range(400)))])
    worst = PRICES.worst_case("local/scripted", 200, LIMIT)
    allocation = worst * 20  # 50 requests, room for 20 worst cases
    figures = []
    for fault in sorted({case.fault for case in LIARS}):
        endpoint = "responses" if fault == "renamed_events" else "chat"
        over, most = 0, Decimal(0)
        for round_ in range(rounds):
            ledger = tmp / fault / str(round_)
            async with _meter(ledger, allocation, engine, FaultPlan(plan=[fault])) as (_, url):  # type: ignore[list-item]
                client = openai.AsyncOpenAI(base_url=url, api_key="-", max_retries=0)

                async def one(
                    client: openai.AsyncOpenAI = client, endpoint: str = endpoint
                ) -> None:
                    try:
                        if endpoint == "responses":
                            stream = await client.responses.create(
                                model="local/scripted", input="talk",
                                max_output_tokens=LIMIT, stream=True,
                            )  # fmt: skip
                        else:
                            stream = await client.chat.completions.create(  # type: ignore[assignment]
                                model="local/scripted", max_tokens=LIMIT, stream=True,
                                messages=[{"role": "user", "content": "talk"}],
                            )  # fmt: skip
                        async for _ in stream:
                            pass
                    except (openai.APIError, Exception):
                        pass

                async with anyio.create_task_group() as requests:
                    for _ in range(50):
                        requests.start_soon(one)
                await client.close()
            lines = meters.read_ledger(ledger / "ledger.jsonl")
            spent = sum((Decimal(x.cost_usd) for x in lines), Decimal(0))
            over += spent > allocation
            most = max(most, spent / allocation)
        figures.append((fault, over, most))
    return figures


async def ambiguous_requests(tmp: Path, rounds: int) -> list[tuple[str, int, int]]:
    """Per request shape: how many of its rounds x 50 requests reached the upstream."""
    import httpx

    figures = []
    for name, endpoint, body, _ in SHAPES:
        ledger = tmp / name.replace(" ", "-")
        async with (
            _meter(ledger, Decimal(10), None, None) as (provider, url),
            httpx.AsyncClient(timeout=30) as client,
        ):
            for _ in range(rounds):
                async with anyio.create_task_group() as requests:
                    for _ in range(50):
                        requests.start_soon(
                            partial(client.post, f"{url}/{endpoint}", content=body,
                                    headers={"content-type": "application/json"})
                        )  # fmt: skip
            figures.append((name, provider.statistics().received, rounds * 50))
    return figures


def stranded(delays: list[float]) -> tuple[int, list[str]]:
    """Campaigns left stranded by a daemon killed ``delay`` s after a submit, then restarted."""
    base = Path(tempfile.mkdtemp(prefix="mwk-"))  # a short path: the socket's is bounded
    runs = base / "runs"
    left, states = 0, []
    try:
        for number, delay in enumerate(delays):
            assert mw("daemon", "start", "--runs", str(runs)).returncode == 0
            tag = f"early{number}"
            mw("serve-learn", "submit", "synthetic_l1", "--runs", str(runs), "--tag", tag,
               "--train-split", "12")  # fmt: skip
            time.sleep(delay)
            os.kill(int((runs / "mw-daemon.pid").read_text()), signal.SIGKILL)
            mw("daemon", "start", "--runs", str(runs))
            deadline, state = time.monotonic() + 120, "?"
            while time.monotonic() < deadline:
                answer = mw("status", tag, "--runs", str(runs), "--json")
                state = json.loads(answer.stdout)["state"] if answer.returncode == 0 else "none"
                if state in ("completed", "failed", "budget_blocked"):
                    break
                time.sleep(1)
            left += state != "completed"
            states.append(f"{delay:g}s:{state}")
            mw("daemon", "stop", "--runs", str(runs))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return left, states


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--kills", type=int, default=8)
    parser.add_argument("--frames", type=int, default=1200)
    parser.add_argument("--seed", type=int, default=20261201)
    parser.add_argument("--lie-rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as temp:
        tmp = Path(temp)
        forwarded, attempts = anyio.run(bypasses, tmp / "bypass")
        print(f"bypass attempts forwarded: {forwarded} of {attempts} (goal 0)")
        over, spent, allocation = anyio.run(overshoots, tmp / "overshoot", args.rounds)
        print(
            f"overshoots under an upstream past max_tokens: {over} of {args.rounds} rounds "
            f"(goal 0; most spent in a round ${spent} of ${allocation})"
        )
        deaths, sent, state = daemon_deaths(args.frames, args.seed)
        print(
            f"daemon deaths under fuzzing: {deaths} after {sent} frames (goal 0; campaign {state})"
        )
        past, unknowns = queued_started(args.kills, args.seed, tmp / "kills")
        print(
            f"queued episodes journaled as started: {past} over {args.kills} kills (goal 0; "
            f"unknowns per kill at concurrency 4: {unknowns})"
        )
        bad, cases = tracebacks(tmp / "inputs")
        print(f"bad inputs answered with a traceback: {bad} of {cases} (goal 0)")
        for fault, over, most in anyio.run(lying_upstreams, tmp / "liars", args.lie_rounds):
            print(
                f"spend over the allocation, upstream lie {fault}: {over} of {args.lie_rounds} "
                f"rounds of 50 SDK streams (goal 0; most spent {most:.0%} of the allocation)"
            )
        for name, forwarded, sent in anyio.run(ambiguous_requests, tmp / "shapes", args.lie_rounds):
            print(f"ambiguous request forwarded, {name}: {forwarded} of {sent} (goal 0)")
        left, states = stranded([0.5, 1, 2, 3, 5])
        print(f"campaigns stranded by a daemon kill after a submit: {left} of 5 (goal 0; {states})")


if __name__ == "__main__":
    main()
