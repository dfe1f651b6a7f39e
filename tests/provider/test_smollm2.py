"""The ``smollm2`` engine: a real model behind the provider, reached through a meter.

Slow: the first run imports the GGUF into a safetensors snapshot (about 20 s), later
starts load it in about a second. Greedy decoding makes every answer repeatable.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import openai
import pytest

from mw_actors.provider import LOCAL_PRICES, ToolCall, smollm2_tokens
from mw_actors.provider._smollm2 import _tool_calls, render
from tests.processes import ROOT, start_server, stop_server

MODEL = "local/smollm2"
QUESTION = "What is the capital of France?"
KEY = "sk-smollm2-test-key"


@pytest.fixture(scope="module")
def snapshot() -> Path:
    """SmolLM2 as safetensors, imported from the shipped GGUF once (shared with bench/)."""
    path = ROOT / ".cache" / "smollm2"
    if not (path / "model.safetensors").is_file():
        from mw_actors.editing import import_smollm2

        path.parent.mkdir(exist_ok=True)
        import_smollm2(path)
    return path


@pytest.fixture(scope="module")
def wire(
    snapshot: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str, Path]]:
    """(direct URL, metered URL, ledger dir): provider and meter as real processes."""
    ledger = tmp_path_factory.mktemp("ledger")
    provider, provider_url = start_server(
        "provider", "--engine", "smollm2", "--model-dir", str(snapshot),
        "--max-new-tokens", "48",
    )  # fmt: skip
    try:
        meter, meter_url = start_server(
            "meter", "--role", "host", "--upstream", f"{provider_url}/v1", "--key-env", "K",
            "--prices", str(LOCAL_PRICES), "--ledger-dir", str(ledger), "--allocation", "1",
            env={"K": KEY},
        )  # fmt: skip
        try:
            yield f"{provider_url}/v1", f"{meter_url}/v1", ledger
        finally:
            stop_server(meter)
    finally:
        stop_server(provider)


def wait_for_summary(path: Path, requests: int) -> dict[str, Any]:
    """The meter's summary once it counts ``requests`` (it is rewritten within a second)."""
    deadline = time.monotonic() + 10
    while True:
        if path.exists():
            summary: dict[str, Any] = json.loads(path.read_text())
            if summary["requests"] >= requests:
                return summary
        assert time.monotonic() < deadline, f"{path} never counted {requests} requests"
        time.sleep(0.1)


def ledger_lines(ledger: Path, at_least: int = 0) -> list[dict[str, object]]:
    """The ledger's lines, once it has ``at_least`` of them.

    A streaming client stops at the protocol's last event; the meter writes the
    attempt's line when the upstream's answer has ended, a moment later.
    """
    path, deadline = ledger / "ledger.jsonl", time.monotonic() + 10
    while True:
        text = path.read_text() if path.exists() else ""
        lines = [json.loads(line) for line in text.splitlines()]
        if len(lines) >= at_least:
            return lines
        assert time.monotonic() < deadline, f"{path} never had {at_least} lines"
        time.sleep(0.05)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_model_answers_with_its_own_usage(wire: tuple[str, str, Path]) -> None:
    direct_url, meter_url, ledger = wire
    direct = openai.OpenAI(base_url=direct_url, api_key="placeholder")
    metered = openai.OpenAI(base_url=meter_url, api_key="placeholder")
    messages = [{"role": "user", "content": QUESTION}]
    answer = direct.chat.completions.create(model=MODEL, messages=messages)  # type: ignore[arg-type]
    text = answer.choices[0].message.content or ""
    assert "Paris" in text and answer.choices[0].finish_reason == "stop"
    # Usage is what the model read and wrote: the template's ids, the answer and <|im_end|>.
    tokens = smollm2_tokens()
    assert answer.usage is not None
    assert answer.usage.prompt_tokens == len(tokens.ids(render([("user", QUESTION)])))
    assert answer.usage.completion_tokens == tokens.count(text) + 1

    # Greedy decoding: the same answer again, streamed through the meter, piece by piece.
    stream = metered.chat.completions.create(model=MODEL, messages=messages, stream=True)  # type: ignore[arg-type]
    pieces = [c.choices[0].delta.content or "" for c in stream if c.choices]
    assert "".join(pieces) == text and len([p for p in pieces if p]) > 1
    line = ledger_lines(ledger, at_least=1)[-1]
    assert line["status"] == "ok"
    usage = line["usage"]
    assert isinstance(usage, dict)
    assert (usage["prompt_tokens"], usage["completion_tokens"]) == (
        answer.usage.prompt_tokens,
        answer.usage.completion_tokens,
    )
    assert (line["input_tokens"], line["output_tokens"]) == (
        answer.usage.prompt_tokens,
        answer.usage.completion_tokens,
    )


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_length_cut_is_reported_as_such(wire: tuple[str, str, Path]) -> None:
    _, meter_url, ledger = wire
    client = openai.OpenAI(base_url=meter_url, api_key="placeholder")
    chat = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": QUESTION}], max_tokens=3
    )
    assert chat.choices[0].finish_reason == "length"
    assert chat.usage is not None and chat.usage.completion_tokens == 3
    before = len(ledger_lines(ledger))
    events = list(
        client.responses.create(
            model=MODEL, input=QUESTION, max_output_tokens=4, stream=True, store=False
        )
    )
    final = events[-1]
    assert final.type == "response.incomplete"
    assert final.response.usage is not None and final.response.usage.output_tokens == 4
    line = ledger_lines(ledger, at_least=before + 1)[-1]
    assert (line["status"], line["output_tokens"]) == ("ok", 4)
    lines = ledger_lines(ledger)
    summary = wait_for_summary(ledger / "wire_ledger.json", len(lines))
    assert summary["output_tokens"] == sum(int(str(x["output_tokens"])) for x in lines)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_generation_does_not_block_the_server(wire: tuple[str, str, Path]) -> None:
    """Two answers at once both arrive (the model runs on a worker thread, one at a time)."""
    direct_url, _, _ = wire
    client = openai.OpenAI(base_url=direct_url, api_key="placeholder")
    questions = [QUESTION, "Name a colour."]
    with ThreadPoolExecutor(2) as pool:
        answers = list(
            pool.map(
                lambda q: client.chat.completions.create(
                    model=MODEL, messages=[{"role": "user", "content": q}], max_tokens=16
                ),
                questions,
            )
        )
    assert all(a.choices[0].message.content for a in answers)
    assert [m.id for m in client.models.list()] == [MODEL]


@pytest.mark.slow
def test_the_prompt_is_the_models_own_chat_template(snapshot: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(snapshot)
    for messages in (
        [("user", QUESTION)],
        [("system", "Be brief."), ("user", "Hi"), ("assistant", "Hello."), ("user", "Bye")],
    ):
        chat = [{"role": role, "content": text} for role, text in messages]
        expected = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
        assert render(messages) == expected


def test_tool_calls_are_parsed_from_the_text_only_for_offered_tools() -> None:
    text = 'Let me look. <tool_call>{"name": "lookup", "arguments": {"id": 7}}</tool_call>'
    assert _tool_calls(text, {"lookup"}) == ("Let me look.", [ToolCall("lookup", {"id": 7})])
    assert _tool_calls(text, {"other"}) == (text, [])
    broken = "<tool_call>{not json}</tool_call>"
    assert _tool_calls(broken, {"lookup"}) == (broken, [])
