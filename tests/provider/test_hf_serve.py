"""A real inference server nobody here wrote: Hugging Face's ``transformers serve``.

It serves the SmolLM2 snapshot that ``wsm model import-smollm2`` writes, on CPU and
offline, behind mw's wire meter, reached by the official ``openai`` SDK. Its wire
differs from OpenAI's, and from one release to the next: transformers 5.24 sends a
stream's usage on the last chunk that still has ``choices``, 5.25 in a chunk of its
own, as OpenAI does. The meter must count what this server reports, and the cap must
hold against it.

Slow: the import takes about 20 s, the server's start about as long, each answer a
second or more on 2 cores.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.processes import ROOT, start_server, stop_server

pytestmark = pytest.mark.slow
MODEL = "smol"  # the snapshot's folder, as the server names it
KEY = "sk-hf-serve-test"  # the meter injects it; this server checks none
DATASET = ROOT / "tests" / "data" / "servelearnbench"  # the real banking_l1 export


def _server_bin() -> str:
    found = shutil.which("transformers", path=str(Path(sys.executable).parent))
    if found is None or not _importable("fastapi", "uvicorn"):
        pytest.fail("transformers serve is not installed: scripts/setup.sh installs mw[serve]")
    return found


def _importable(*names: str) -> bool:
    import importlib.util

    return all(importlib.util.find_spec(name) is not None for name in names)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``transformers serve`` on the imported snapshot; its base URL once it lists the model."""
    from mw_actors.editing import import_smollm2

    home = tmp_path_factory.mktemp("hf")
    import_smollm2(home / MODEL)
    config = json.loads((home / MODEL / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]  # what the server loads it by
    port = _free_port()
    log = (home / "serve.log").open("w")
    server = subprocess.Popen(
        [_server_bin(), "serve", MODEL, "--device", "cpu", "--host", "127.0.0.1",
         "--port", str(port)],
        cwd=home, stdout=log, stderr=subprocess.STDOUT,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "NO_COLOR": "1"},
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 240
        while True:
            assert server.poll() is None, (home / "serve.log").read_text()
            try:
                listed = httpx.get(f"{url}/models", timeout=5).json()
                if any(m["id"] == MODEL for m in listed["data"]):
                    break
            except (httpx.HTTPError, ValueError, KeyError):
                pass
            assert time.monotonic() < deadline, (home / "serve.log").read_text()
            time.sleep(0.5)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


def _prices(path: Path, input_per_mtok: str) -> Path:
    price = {"input_per_mtok": input_per_mtok, "cached_input_per_mtok": input_per_mtok,
             "output_per_mtok": "1000", "max_output_tokens": 64}  # fmt: skip
    table = {"schema_version": 1, "date": "2026-12-03", "models": {MODEL: price}}
    path.write_text(json.dumps(table))
    return path


def _meter(served: str, tmp_path: Path, input_per_mtok: str, allocation: str) -> tuple[Any, str]:
    """A host meter in front of the server, its ledger in ``tmp_path/ledger``."""
    return start_server(
        "meter", "--role", "host", "--upstream", served, "--key-env", "K",
        "--prices", str(_prices(tmp_path / "prices.json", input_per_mtok)),
        "--ledger-dir", str(tmp_path / "ledger"), "--allocation", allocation, env={"K": KEY},
    )  # fmt: skip


def _ledger(directory: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (directory / "ledger.jsonl").read_text().splitlines()]


def test_the_meter_counts_what_a_real_server_reports_whole_and_streamed(
    served: str, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    meter, meter_url = _meter(served, tmp_path, "100", "5")
    try:
        client = openai.OpenAI(base_url=f"{meter_url}/v1", api_key="mw-meter", max_retries=0)
        assert [m.id for m in client.models.list()] == [MODEL]
        asked = [{"role": "user", "content": "Say hello in three words."}]
        whole = client.chat.completions.create(model=MODEL, messages=asked, max_tokens=8)  # type: ignore[arg-type]
        assert whole.choices[0].message.content and whole.usage is not None
        stream = client.chat.completions.create(
            model=MODEL, messages=asked, max_tokens=8, stream=True,  # type: ignore[arg-type]
            stream_options={"include_usage": True},
        )  # fmt: skip
        chunks = list(stream)
        usage = [c.usage for c in chunks if c.usage is not None]
        assert len(usage) == 1
        # Usage comes once, on the last chunk: transformers 5.24 puts it on the chunk that
        # still carries the last choice, 5.25 on a chunk of its own (as OpenAI does). The
        # meter must count it either way.
        assert chunks[-1].usage is not None
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text
    finally:
        stop_server(meter)
    lines = [line for line in _ledger(ledger) if line["endpoint"] == "/v1/chat/completions"]
    assert [line["status"] for line in lines] == ["ok", "ok"]
    for line, reported in zip(lines, [whole.usage, usage[0]], strict=True):
        assert line["usage"]["prompt_tokens"] == reported.prompt_tokens  # type: ignore[index]
        assert line["usage"]["completion_tokens"] == reported.completion_tokens  # type: ignore[index]
        assert line["input_tokens"] == reported.prompt_tokens
        assert line["output_tokens"] == reported.completion_tokens
        assert line["streamed"] is (line is lines[1])


def test_the_cap_holds_against_a_real_server_when_the_allocation_runs_out(
    served: str, tmp_path: Path
) -> None:
    """Each request is reserved about $0.18 (its body's bytes as prompt tokens, and 64 output
    tokens, at $1,000 per million) and costs what the server reports: an allocation of
    $0.50 runs out part-way through eight requests, and nothing is spent past it."""
    ledger = tmp_path / "ledger"
    meter, meter_url = _meter(served, tmp_path, "1000", "0.50")
    answered = blocked = 0
    refusals: list[str] = []
    try:
        client = openai.OpenAI(base_url=f"{meter_url}/v1", api_key="mw-meter", max_retries=0)
        for n in range(8):
            asked = [{"role": "user", "content": f"Count to {n + 3}."}]
            try:
                client.chat.completions.create(model=MODEL, messages=asked, max_tokens=64)  # type: ignore[arg-type]
                answered += 1
            except openai.RateLimitError as exc:
                refusals.append(str(exc))
                blocked += 1
    finally:
        stop_server(meter)
    assert answered >= 1 and blocked >= 1, (answered, blocked)
    assert all("budget exhausted" in refusal for refusal in refusals), refusals
    lines = [line for line in _ledger(ledger) if line["endpoint"] == "/v1/chat/completions"]
    spent = sum(float(str(line["cost_usd"])) for line in lines)
    assert spent <= 0.50
    assert sum(line["status"] == "budget_blocked" for line in lines) == blocked
    summary = json.loads((ledger / "wire_ledger.json").read_text())
    assert float(summary["cost_usd"]) == pytest.approx(spent)


def test_a_real_scenario_runs_through_the_benchmarks_loop_against_it_within_its_cap(
    served: str, tmp_path: Path
) -> None:
    """banking_l1's window-0 tests, slb:blind through the package's own loop, host
    `vllm/smol` (this server), each call limited to 48 tokens (the benchmark's per-call
    `max_tokens`; SmolLM2 asked for its default 65,536 runs on past the meter's read
    timeout). The allocation runs out part-way: every request after it is refused before
    it goes upstream, the spend stays within it, and the rows and report still read."""
    config = tmp_path / "hf.json"
    price = {"input_per_mtok": "100", "cached_input_per_mtok": "100", "output_per_mtok": "1",
             "max_output_tokens": 64}  # fmt: skip
    config.write_text(json.dumps({
        "schema_version": 1, "method": "slb:blind", "host_model": f"vllm/{MODEL}",
        "prices": {"schema_version": 1, "date": "2026-12-03", "models": {f"vllm/{MODEL}": price}},
    }))  # fmt: skip
    runs = tmp_path / "runs"
    done = subprocess.run(
        [sys.executable, "-m", "bin.mw", "serve-learn", "run", "banking_l1", "--config",
         str(config), "--dataset", str(DATASET), "--runs", str(runs), "--tag", "hf",
         "--train-split", "1", "--allocation", "0.6", "--reasoning-effort", "none",
         "--concurrency", "2", "--max-tokens", "48"],
        cwd=ROOT, capture_output=True, text=True, check=False, timeout=500,
        env={**os.environ, "VLLM_BASE_URL": served},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    root = runs / "hf"
    finished = json.loads((root / "run.log").read_text().splitlines()[-1])["finished"]
    assert finished["state"] == "budget_blocked"
    results = root / "task" / "results" / "banking_l1_blind.jsonl"
    header, *rows = [json.loads(line) for line in results.read_text().splitlines()]
    assert (header["config"]["model"], header["config"]["max_tokens"]) == (f"vllm/{MODEL}", 48)
    fields = {"scenario", "method", "model", "phase", "window", "timestamp", "task_id", "tier",
              "family", "slice", "category", "reward", "answer_detail", "instruction", "tokens",
              "judge_tokens", "trace"}  # fmt: skip
    assert rows and all(fields <= set(row) for row in rows)
    assert {row["status"] for row in rows} <= {"ok", "budget_blocked", "failed"}
    assert any(row["status"] == "budget_blocked" for row in rows)
    slb = Path(sys.executable).parent / "slb"
    scored = subprocess.run([str(slb), "score", str(results)], capture_output=True, text=True,
                            check=False)  # fmt: skip
    assert scored.returncode == 0, scored.stderr
    lines = [line for line in _ledger(root) if line["endpoint"] == "/v1/chat/completions"]
    answered = [line for line in lines if line["status"] == "ok"]
    assert answered, lines
    assert all(line["usage"]["completion_tokens"] <= 48 for line in answered)  # type: ignore[index]
    assert all(line["http_status"] == 429 and line["usage"] is None
               for line in lines if line["status"] == "budget_blocked")  # fmt: skip
    spent = sum(float(str(line["cost_usd"])) for line in lines)
    assert spent <= 0.6
    report = subprocess.run(
        [sys.executable, "-m", "bin.mw", "report", str(root), "--json"],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout)
