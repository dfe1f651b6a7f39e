"""The wire meter's overhead, beside a direct connection, from one run.

    python bench/meters.py [--requests N] [--rss-requests N]

The local provider (zero latency) and a host meter run as their own
processes (``mw provider``, ``mw meter``); this script is the client.

Figures:
- added latency p50 / p99, non-streamed, and streamed time to first and last byte
  (goal: <= 0.5 ms p50 and <= 2 ms p99 added);
- requests/s with 32 concurrent clients, direct and through the meter (goal: >= 50% of direct);
- the meter's RSS as requests accumulate (goal: no growth with request count).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mw_actors.provider import LOCAL_PRICES  # noqa: E402

BODY = {"model": "local/scripted", "messages": [{"role": "user", "content": "hello"}]}


def start(*args: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "bin.mw", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    return process, line.removeprefix("listening on ") + "/v1"


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


async def latency(client: httpx.AsyncClient, url: str, n: int) -> dict[str, list[float]]:
    whole, first, last = [], [], []
    for _ in range(n):
        t0 = time.perf_counter()
        response = await client.post(f"{url}/chat/completions", json=BODY)
        assert response.status_code == 200, response.text
        whole.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        async with client.stream(
            "POST", f"{url}/chat/completions", json={**BODY, "stream": True}
        ) as streamed:
            seen_first = False
            async for _ in streamed.aiter_raw():
                if not seen_first:
                    first.append(time.perf_counter() - t0)
                    seen_first = True
        last.append(time.perf_counter() - t0)
    return {"whole": whole, "first byte": first, "last byte": last}


async def throughput(url: str, n: int, concurrency: int = 32) -> float:
    remaining = n

    async def worker(client: httpx.AsyncClient) -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            response = await client.post(f"{url}/chat/completions", json=BODY)
            assert response.status_code == 200

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(limits=limits, timeout=60) as client:
        t0 = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for _ in range(concurrency):
                tg.start_soon(worker, client)
        return n / (time.perf_counter() - t0)


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


async def main(requests: int, rss_requests: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        prices = LOCAL_PRICES
        provider, direct = start("provider", "--port", "0")
        meter, metered = start(
            "meter", "--role", "host", "--port", "0", "--upstream", direct,
            "--key-env", "BENCH_KEY", "--prices", str(prices), "--ledger-dir", tmp,
            env={"BENCH_KEY": "sk-bench"},
        )  # fmt: skip
        try:
            async with httpx.AsyncClient(timeout=60) as client:
                await latency(client, direct, 50)  # warm both paths up
                await latency(client, metered, 50)
                base = await latency(client, direct, requests)
                via = await latency(client, metered, requests)
            print(f"| {'figure':<34} | {'direct':>10} | {'meter':>10} | {'added':>9} | goal |")
            print(f"|{'-' * 36}|{'-' * 12}|{'-' * 12}|{'-' * 11}|------|")
            for kind in ("whole", "first byte", "last byte"):
                for q, goal in ((0.5, "<= 0.5 ms"), (0.99, "<= 2 ms")):
                    d, m = pct(base[kind], q), pct(via[kind], q)
                    label = f"{kind} p{int(q * 100)}"
                    print(f"| {label:<34} | {ms(d):>10} | {ms(m):>10} | {ms(m - d):>9} | {goal} |")
            direct_rps = await throughput(direct, requests * 4)
            meter_rps = await throughput(metered, requests * 4)
            print(
                f"| {'requests/s, 32 clients':<34} | {direct_rps:>10,.0f} | {meter_rps:>10,.0f} "
                f"| {meter_rps / direct_rps:>8.0%} | >= 50% of direct |"
            )
            marks = []
            done = 0
            for target in (rss_requests // 10, rss_requests // 2, rss_requests):
                await throughput(metered, target - done)
                done = target
                marks.append((done, rss_kib(meter.pid)))
            trail = ", ".join(f"{n:,}: {kib / 1024:.1f} MiB" for n, kib in marks)
            print(f"| meter RSS after requests           | {trail} | goal: no growth |")
        finally:
            for process in (meter, provider):
                process.terminate()
                process.wait(timeout=30)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--rss-requests", type=int, default=100_000)
    args = parser.parse_args()
    anyio.run(main, args.requests, args.rss_requests)
