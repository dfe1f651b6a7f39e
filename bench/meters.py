"""The wire meter's overhead, beside a direct connection and LiteLLM's proxy, from one run.

    python bench/meters.py [--requests N] [--rss-requests N] [--seconds S] [--rounds R]
                           [--no-litellm]

The local provider (scripted, zero latency), a host meter and LiteLLM's proxy
(installed by this script into ``.cache/litellm-venv`` from PyPI, doing the
same job: forward to the provider, count tokens and cost) run as their own
processes; this script and wrk are the clients.

Figures:
- added latency p50 / p99, non-streamed, and streamed time to first and last byte
  (goal: <= 0.5 ms p50 and <= 2 ms p99 added; first chunk within 1 ms of upstream).
  Direct and meter take turns request by request; LiteLLM's latency is measured in a
  pass of its own, as interleaved its ~15 ms of CPU per request cools the caches
  under the two paths being compared (it doubled the direct path's own p50);
- requests/s with 32 concurrent connections, measured by wrk (a C load generator),
  direct and through the meter in turns (the median of each), and through LiteLLM
  (goal: >= 3x LiteLLM, >= 50% of direct);
- the same latencies and requests/s through a capped meter (``--allocation``), as
  every campaign runs one: its budget journaled, and an answer asked for whole
  fetched as a stream so that an upstream past its limit can be cut;
- the meter's RSS as requests accumulate (goal: no growth with request count);
- the capped meter's CPU per streamed chunk where answers come a token at a time, beside
  the provider's own (a campaign's host answers at a provider's pace).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import statistics
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
# Every client sends LiteLLM's master key; the provider ignores it and the meter
# replaces it with the upstream key.
MASTER_KEY = "sk-" + "0123456789abcdef" * 4
AUTH = {"authorization": f"Bearer {MASTER_KEY}"}
LITELLM_VENV = ROOT / ".cache" / "litellm-venv"
WRK_SCRIPT = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer %s"
wrk.body = '%s'
"""


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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_litellm(direct: str, tmp: Path) -> tuple[subprocess.Popen[bytes], str] | None:
    """LiteLLM's proxy in front of the provider, in a venv of its own (installed once)."""
    binary = LITELLM_VENV / "bin" / "litellm"
    if not binary.exists():
        print("installing litellm[proxy] into .cache/litellm-venv (once) ...", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(LITELLM_VENV)], check=True)
        subprocess.run(
            [str(LITELLM_VENV / "bin" / "pip"), "install", "-q", "litellm[proxy]"], check=True
        )
    config = tmp / "litellm.yaml"
    config.write_text(
        "model_list:\n"
        "  - model_name: local/scripted\n"
        "    litellm_params:\n"
        "      model: openai/local/scripted\n"
        f"      api_base: {direct}\n"
        "      api_key: sk-bench\n"
        "      input_cost_per_token: 0.0000001\n"
        "      output_cost_per_token: 0.0000004\n"
    )
    port = free_port()
    log = open(tmp / "litellm.log", "wb")  # noqa: SIM115 - closed with the process
    process = subprocess.Popen(
        [str(binary), "--config", str(config), "--host", "127.0.0.1", "--port", str(port),
         "--num_workers", "1"],
        stdout=log, stderr=subprocess.STDOUT,
        env={
            **os.environ,
            "LITELLM_LOG": "ERROR",
            "LITELLM_TELEMETRY": "False",
            "LITELLM_MASTER_KEY": MASTER_KEY,
        },
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            answer = httpx.post(f"{url}/chat/completions", json=BODY, headers=AUTH, timeout=10)
            if answer.status_code == 200:
                return process, url
        except httpx.HTTPError:
            pass
        if process.poll() is not None:
            break
        time.sleep(0.5)
    process.kill()
    print("litellm did not start; see", tmp / "litellm.log", file=sys.stderr)
    return None


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


async def one(client: httpx.AsyncClient, url: str, into: dict[str, list[float]]) -> None:
    """One whole and one streamed request; their times go into ``into``."""
    t0 = time.perf_counter()
    response = await client.post(f"{url}/chat/completions", json=BODY)
    assert response.status_code == 200, response.text
    into["whole"].append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    async with client.stream(
        "POST", f"{url}/chat/completions", json={**BODY, "stream": True}
    ) as streamed:
        seen_first = False
        async for _ in streamed.aiter_raw():
            if not seen_first:
                into["first byte"].append(time.perf_counter() - t0)
                seen_first = True
    into["last byte"].append(time.perf_counter() - t0)


async def latency(
    client: httpx.AsyncClient, paths: dict[str, str], n: int
) -> dict[str, dict[str, list[float]]]:
    """Each path's times; the paths take turns request by request, so the machine's
    noise falls on all of them alike."""
    figures: dict[str, dict[str, list[float]]] = {
        name: {"whole": [], "first byte": [], "last byte": []} for name in paths
    }
    for _ in range(n):
        for name, url in paths.items():
            await one(client, url, figures[name])
    return figures


def wrk(url: str, seconds: int, tmp: Path, connections: int = 32) -> float:
    """Requests/s that wrk measured, POSTing the chat body over ``connections``."""
    script = tmp / "post.lua"
    script.write_text(WRK_SCRIPT % (MASTER_KEY, json.dumps(BODY)))
    done = subprocess.run(
        ["wrk", "-t", "1", "-c", str(connections), "-d", f"{seconds}s", "-s", str(script),
         f"{url}/chat/completions"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", done.stdout)
    if errors:
        raise SystemExit(f"wrk saw {errors.group(1)} failed responses from {url}")
    found = re.search(r"Requests/sec:\s+([\d.]+)", done.stdout)
    assert found, done.stdout
    return float(found.group(1))


async def load(url: str, n: int, concurrency: int = 32) -> None:
    remaining = n

    async def worker(client: httpx.AsyncClient) -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            response = await client.post(f"{url}/chat/completions", json=BODY)
            assert response.status_code == 200

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with (
        httpx.AsyncClient(limits=limits, timeout=60, headers=AUTH) as client,
        anyio.create_task_group() as tg,
    ):
        for _ in range(concurrency):
            tg.start_soon(worker, client)


def cpu_seconds(pid: int) -> float:
    """The process's user and system CPU so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def paced_chunks(tmp: Path, answers: int = 4, words: int = 400) -> None:
    """CPU per streamed chunk, where an answer comes a token at a time.

    A campaign's host answers at a provider's pace (tokens seconds apart, each its own
    read), not in the burst the figures above are measured on: a paced provider (400
    tokens/s, one chunk each) behind a capped meter; the meter's CPU per chunk the
    client read, beside the provider's own (which makes and sends each one).
    """
    script = tmp / "words.json"
    script.write_text(json.dumps([{"content": " ".join(["word"] * words)}]))
    provider, direct = start("provider", "--port", "0", "--script", str(script),
                             "--latency", "tps=400")  # fmt: skip
    meter, capped = start(
        "meter", "--role", "host", "--port", "0", "--upstream", direct, "--key-env", "BENCH_KEY",
        "--prices", str(LOCAL_PRICES), "--ledger-dir", str(tmp / "paced"), "--allocation",
        "1000000", env={"BENCH_KEY": "sk-bench"},
    )  # fmt: skip
    try:
        body = {**BODY, "stream": True, "max_tokens": 4 * words}
        with httpx.Client(timeout=60, headers=AUTH) as client:
            figures = []
            for _ in range(2):  # the first warms both up
                began = (cpu_seconds(meter.pid), cpu_seconds(provider.pid))
                chunks = 0
                for _ in range(answers):
                    with client.stream("POST", f"{capped}/chat/completions", json=body) as r:
                        chunks += sum(1 for _ in r.iter_raw())
                used = (cpu_seconds(meter.pid) - began[0], cpu_seconds(provider.pid) - began[1])
                figures = [1e6 * u / chunks for u in used]
        label = "CPU per streamed chunk, paced"
        print(f"| {label:<26} | capped meter {figures[0]:.0f} µs, the provider making it "
              f"{figures[1]:.0f} µs ({chunks} chunks at 400 tokens/s) | - |")  # fmt: skip
    finally:
        for process in (meter, provider):
            process.terminate()
            process.wait(timeout=30)


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


async def main(
    requests: int, rss_requests: int, seconds: int, rounds: int, with_litellm: bool
) -> None:
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        provider, direct = start("provider", "--port", "0")
        meter, metered = start(
            "meter", "--role", "host", "--port", "0", "--upstream", direct,
            "--key-env", "BENCH_KEY", "--prices", str(LOCAL_PRICES), "--ledger-dir",
            str(tmp / "ledger"), env={"BENCH_KEY": "sk-bench"},
        )  # fmt: skip
        # A capped meter, as every campaign runs one: its budget journaled, and an answer
        # asked for whole fetched as a stream (so that an overrun can be cut).
        capped_meter, capped = start(
            "meter", "--role", "host", "--port", "0", "--upstream", direct,
            "--key-env", "BENCH_KEY", "--prices", str(LOCAL_PRICES), "--ledger-dir",
            str(tmp / "capped"), "--allocation", "1000000", env={"BENCH_KEY": "sk-bench"},
        )  # fmt: skip
        litellm = start_litellm(direct, tmp) if with_litellm else None
        try:
            paths = {"direct": direct, "meter": metered, "capped": capped}
            if litellm is not None:
                paths["litellm"] = litellm[1]
            compared = {name: paths[name] for name in ("direct", "meter", "capped")}
            async with httpx.AsyncClient(timeout=60, headers=AUTH) as client:
                await latency(client, paths, 50)  # warm every path up
                figures = await latency(client, compared, requests)
                if "litellm" in paths:  # a pass of its own: see the module's docstring
                    figures.update(await latency(client, {"litellm": paths["litellm"]}, requests))
            names = list(paths)
            header = " | ".join(f"{n:>10}" for n in names)
            print(f"| {'figure':<26} | {header} | {'meter added':>11} | capped added | goal |")
            print(
                f"|{'-' * 28}|" + "|".join("-" * 12 for _ in names) + f"|{'-' * 13}|"
                f"{'-' * 14}|------|"
            )
            for kind in ("whole", "first byte", "last byte"):
                for q, goal in ((0.5, "<= +0.5 ms"), (0.99, "<= +2 ms")):
                    values = {n: pct(figures[n][kind], q) for n in names}
                    cells = " | ".join(f"{ms(values[n]):>10}" for n in names)
                    added = ms(values["meter"] - values["direct"])
                    capped_added = ms(values["capped"] - values["direct"])
                    label = f"{kind} p{int(q * 100)}"
                    print(f"| {label:<26} | {cells} | {added:>11} | {capped_added:>12} | {goal} |")
            # Direct and meter take turns, ``rounds`` times, and each keeps its median: the
            # machine's noise (it is shared) falls on both alike. LiteLLM runs once.
            runs: dict[str, list[float]] = {n: [] for n in names}
            for _ in range(rounds):
                for name in ("direct", "meter", "capped"):
                    runs[name].append(wrk(paths[name], seconds, tmp))
            if "litellm" in paths:
                runs["litellm"].append(wrk(paths["litellm"], seconds, tmp))
            rps = {n: statistics.median(values) for n, values in runs.items()}
            cells = " | ".join(f"{rps[n]:>10,.0f}" for n in names)
            ratio = (
                f"{rps['meter'] / rps['direct']:.0%} of direct "
                f"(capped {rps['capped'] / rps['direct']:.0%}; "
                f"capped {rps['capped'] / rps['meter']:.1%} of the meter)"
            )
            if "litellm" in rps:
                ratio += f", {rps['meter'] / rps['litellm']:.1f}x litellm"
            label = f"requests/s, wrk, median of {rounds}"
            goal = ">= 50%, >= 3x; capped >= 50% of the meter"
            print(f"| {label:<26} | {cells} | {ratio} | {goal} |")
            spread = ", ".join(
                f"{n} " + "/".join(f"{v:,.0f}" for v in runs[n])
                for n in ("direct", "meter", "capped")
            )
            print(f"| {'  each wrk run':<26} | {spread} |")
            marks = []
            done = 0
            for target in (rss_requests // 10, rss_requests // 2, rss_requests):
                await load(metered, target - done)
                done = target
                marks.append((done, rss_kib(meter.pid)))
            trail = ", ".join(f"{n:,}: {kib / 1024:.1f} MiB" for n, kib in marks)
            print(f"| meter RSS after requests | {trail} | goal: no growth |")
            paced_chunks(tmp)
        finally:
            processes: list[subprocess.Popen[str] | subprocess.Popen[bytes]] = [
                meter,
                capped_meter,
                provider,
            ]
            if litellm is not None:
                processes.insert(0, litellm[0])
            for process in processes:
                process.terminate()
                process.wait(timeout=30)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--rss-requests", type=int, default=100_000)
    parser.add_argument("--seconds", type=int, default=10, help="each wrk run")
    parser.add_argument("--rounds", type=int, default=3, help="wrk runs of direct and meter")
    parser.add_argument("--no-litellm", action="store_true")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("bench/meters.py needs wrk: apt-get install -y wrk")
    anyio.run(
        main, args.requests, args.rss_requests, args.seconds, args.rounds, not args.no_litellm
    )
