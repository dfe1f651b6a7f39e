"""Remote model backends and the launch config.

A campaign whose models are `fireworks/...` and `vllm/...` reaches them only
through its wire meters. The remote providers here are real `mw provider`
processes: the "Fireworks" one answers 401 to any request without the key, as
the hosted one does, so a campaign that completes proves the meter injected it.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest

import meters
from mw_actors.provider import Latency
from mw_actors.serve_learn import (
    CampaignSpec,
    Submission,
    check_campaign,
    load_launch_config,
    resolve_endpoint,
    score_file,
    split_model,
)
from mw_actors.serve_learn._backends import Backend, wire_prices
from mw_errors import ConfigError
from tests.processes import ROOT, mw, start_server, stop_server

EXAMPLES = ROOT / "examples" / "servelearnbench" / "mwm"
SEEDS_MODEL = "fireworks/accounts/fireworks/models/glm-5p3-flash"  # GLM 5.3 Flash, Fireworks
HOST = "fireworks/accounts/test/models/host-1"
LEARNER = "vllm/learner-7b"
KEY = "sk-test-4f1c9e0d7b2a"


def price(input_per_mtok: str = "0.20", output_per_mtok: str = "0.80") -> dict[str, object]:
    return {
        "input_per_mtok": input_per_mtok,
        "cached_input_per_mtok": "0.10",
        "output_per_mtok": output_per_mtok,
        "max_output_tokens": 4096,
    }


def test_a_model_is_named_backend_slash_id() -> None:
    assert split_model("vllm/Qwen/Qwen3-8B") == ("vllm", "Qwen/Qwen3-8B")
    for bad in ("scripted", "/x", "fireworks/"):
        with pytest.raises(ConfigError, match="must be named <backend>/<model id>"):
            split_model(bad)


def test_endpoints_resolve_from_the_backends_and_the_environment() -> None:
    assert resolve_endpoint("local/scripted", {}, {}) is None
    fireworks = resolve_endpoint(SEEDS_MODEL, {}, {"FIREWORKS_API_KEY": KEY})
    assert fireworks is not None
    assert fireworks.base_url == "https://api.fireworks.ai/inference/v1"
    assert fireworks.wire_model == "accounts/fireworks/models/glm-5p3-flash"
    assert fireworks.api_key_env == "FIREWORKS_API_KEY"
    assert KEY not in repr(fireworks)  # the endpoint names the variable, never the key
    vllm = resolve_endpoint("vllm/Qwen/Qwen3-8B", {}, {"VLLM_BASE_URL": "http://gpu:8000/v1/"})
    assert vllm is not None and vllm.base_url == "http://gpu:8000/v1"
    assert vllm.wire_model == "Qwen/Qwen3-8B" and vllm.api_key_env is None
    moved = resolve_endpoint(
        "fireworks/m", {"fireworks": Backend(base_url="http://127.0.0.1:9/v1")}, {}
    )
    assert moved is not None and moved.base_url == "http://127.0.0.1:9/v1"


@pytest.mark.parametrize(
    ("name", "backends", "environ", "says"),
    [
        (SEEDS_MODEL, {}, {}, "FIREWORKS_API_KEY is not set"),
        ("vllm/Qwen/Qwen3-8B", {}, {}, "VLLM_BASE_URL is not set"),
        ("together/llama", {}, {}, "no backend 'together'"),
        ("vllm/q", {"vllm": Backend(base_url="gpu:8000")}, {}, "is not an http(s) URL"),
    ],
)
def test_an_unreachable_model_is_refused_with_what_to_do(
    name: str, backends: dict[str, Backend], environ: dict[str, str], says: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        resolve_endpoint(name, backends, environ)
    assert says in caught.value.message
    line = caught.value.render()
    assert "\n" not in line and "hint:" in line


def test_the_shipped_launch_configs_run_mwm_on_the_seeds_model_and_refuse_it_unpriced() -> None:
    """The seeds' default: MWM, with GLM 5.3 Flash on Fireworks for acting and learning.
    Nobody here has checked its price, so none is given: it is refused, never $0."""
    for name in ("default.yaml", "retail_l3.yaml"):
        config = load_launch_config(EXAMPLES / name)
        assert (config.method, config.host_model, config.learner_model) == (
            "mwm", SEEDS_MODEL, SEEDS_MODEL)  # fmt: skip
        endpoint = resolve_endpoint(SEEDS_MODEL, config.backends, {"FIREWORKS_API_KEY": KEY})
        assert endpoint is not None
        assert endpoint.wire_model == "accounts/fireworks/models/glm-5p3-flash"
        with pytest.raises(ConfigError, match="has no price") as caught:
            wire_prices(config.prices, endpoint)
        assert "check the provider's price page" in caught.value.render()
        assert "https://fireworks.ai/pricing" in (EXAMPLES / name).read_text()
    retail = load_launch_config(EXAMPLES / "retail_l3.yaml")
    assert (retail.scenario, retail.method, retail.waiter) == ("retail_l3", "mwm", "after_training")


def test_a_submission_carries_every_setting_to_the_daemon_and_no_key() -> None:
    config = load_launch_config(EXAMPLES / "retail_l3.yaml")
    endpoint = resolve_endpoint(SEEDS_MODEL, config.backends, {"FIREWORKS_API_KEY": KEY})
    assert endpoint is not None
    prices = meters.parse_prices(
        json.dumps(
            {"schema_version": 1, "date": "2026-12-03", "models": {SEEDS_MODEL: price()}}
        ).encode()
    )
    settings = {
        "method": "mwm",
        "model": SEEDS_MODEL,
        "learner_model": SEEDS_MODEL,
        "train_split": 24,
        "concurrency": 3,
        "allocation_usd": Decimal("2.5"),
        "waiter": "after_training",
        "schedule": "slb",
        "latency": Latency(first_token_seconds=0.1, tokens_per_second=20),
        "prices": prices,
        "reasoning_effort": "high",
        "max_tokens": 4096,
        "judge_model": "local/scripted",
        "endpoints": {SEEDS_MODEL: endpoint},
        "secrets": {"FIREWORKS_API_KEY": KEY},
        "learner_backend": "builtin",
        "codex": None,
    }
    wire = Submission.from_settings("retail_l3", Path("/data/slb"), settings).wire()
    assert KEY not in json.dumps(wire)
    back = Submission.decode(json.loads(json.dumps(wire)))
    assert (back.scenario, back.dataset) == ("retail_l3", "/data/slb")
    assert back.settings() == {k: v for k, v in settings.items() if k != "secrets"}
    synthetic = Submission.from_settings("synthetic_l1", None, {**settings, "latency": None})
    assert Submission.decode(synthetic.wire()).dataset is None  # the daemon writes it


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("schema_version: 1\nmodel: local/scripted\n", "unknown field `model`"),
        ("schema_version: 2\n", "schema_version 2 is not 1"),
        ("concurrency: many\n", "Expected `int | null`, got `str` - at `$.concurrency`"),
        (
            "prices: {schema_version: 1, date: '2026-11-30', models: {vllm/q: "
            "{input_per_mtok: '0.0000002', cached_input_per_mtok: '0', output_per_mtok: '0.8', "
            "max_output_tokens: 10}}}\n",
            "looks like a price per token",
        ),
    ],
)
def test_a_bad_launch_config_is_one_line_naming_the_field(
    tmp_path: Path, text: str, says: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_launch_config(path)
    assert says in caught.value.message
    assert str(path) in caught.value.message and "\n" not in caught.value.render()


def test_a_remote_model_without_a_price_or_a_key_is_refused_before_anything_starts(
    dataset: Path, tmp_path: Path
) -> None:
    endpoint = resolve_endpoint(HOST, {}, {"FIREWORKS_API_KEY": KEY})
    assert endpoint is not None
    spec = CampaignSpec(
        tag="t", scenario="synthetic_l1", dataset=dataset, runs=tmp_path, model=HOST,
        endpoints={HOST: endpoint},
    )  # fmt: skip
    with pytest.raises(ConfigError, match="FIREWORKS_API_KEY is not set"):
        check_campaign(spec)  # the key first: without it, the model is out of reach
    with pytest.raises(ConfigError, match="has no price"):
        check_campaign(CampaignSpec(**{**spec.__dict__, "secrets": {"FIREWORKS_API_KEY": KEY}}))
    table = meters.parse_prices(
        json.dumps({"schema_version": 1, "date": "2026-11-30", "models": {HOST: price()}}).encode()
    )
    keyed = CampaignSpec(
        **{**spec.__dict__, "prices": table, "secrets": {"FIREWORKS_API_KEY": KEY}}
    )
    assert check_campaign(keyed).serving_total == 144
    assert KEY not in repr(keyed)
    assert not (tmp_path / "t").exists()
    with pytest.raises(ConfigError, match="local provider serves local/scripted"):
        check_campaign(CampaignSpec(**{**spec.__dict__, "model": "local/gpt"}))


@pytest.fixture(scope="module")
def remote() -> Iterator[tuple[str, str]]:
    """Two real providers: "Fireworks" (the synthetic host, keyed) and a "vLLM" learner."""
    host, host_url = start_server(
        "provider", "--engine", "synthetic-host", "--api-key-env", "FAKE_FIREWORKS_KEY",
        env={"FAKE_FIREWORKS_KEY": KEY},
    )  # fmt: skip
    learner, learner_url = start_server("provider", "--engine", "synthetic-learner")
    try:
        yield f"{host_url}/v1", f"{learner_url}/v1"
    finally:
        stop_server(host)
        stop_server(learner)


def remote_config(path: Path, host_url: str) -> Path:
    path.write_text(
        json.dumps(
            {
                "schema_version": 1,
                "method": "mwm",
                "host_model": HOST,
                "learner_model": LEARNER,
                "backends": {
                    "fireworks": {"base_url": host_url, "api_key_env": "FIREWORKS_API_KEY"}
                },
                "prices": {
                    "schema_version": 1,
                    "date": "2026-11-30",
                    "models": {HOST: price(), LEARNER: price("0.05", "0.10")},
                },
            }
        )
    )  # JSON is YAML
    return path


def no_key_in(root: Path) -> None:
    """Secrets stay in memory: the key is in no file under ``root``."""
    for path in root.rglob("*"):
        if path.is_file() and not path.is_socket():
            assert KEY.encode() not in path.read_bytes(), path


@pytest.mark.timeout(240)
def test_a_campaign_on_remote_backends_is_metered_keyed_and_scores_as_a_local_one(
    tmp_path: Path, remote: tuple[str, str]
) -> None:
    host_url, learner_url = remote
    config = remote_config(tmp_path / "remote.yaml", host_url)
    runs = tmp_path / "runs"
    env = {"FIREWORKS_API_KEY": KEY, "VLLM_BASE_URL": learner_url}
    args = ("--runs", str(runs), "--train-split", "72", "--concurrency", "6")
    # Without the key: refused in one line, nothing written.
    refused = mw("serve-learn", "run", "synthetic_l1", "--config", str(config), *args,
                 "--tag", "nokey", env={**env, "FIREWORKS_API_KEY": ""})  # fmt: skip
    assert refused.returncode == 2
    assert "FIREWORKS_API_KEY is not set" in refused.stderr
    assert not (runs / "nokey").exists()
    # A key the provider refuses: found before anything is spent or written.
    wrong = mw("serve-learn", "run", "synthetic_l1", "--config", str(config), *args,
               "--tag", "wrongkey", env={**env, "FIREWORKS_API_KEY": "sk-wrong"})  # fmt: skip
    assert wrong.returncode == 2
    assert "refused the key in FIREWORKS_API_KEY" in wrong.stderr
    assert "(HTTP 401)" in wrong.stderr and "sk-wrong" not in wrong.stderr
    assert not (runs / "wrongkey").exists()
    done = mw("serve-learn", "run", "synthetic_l1", "--config", str(config), *args,
              "--tag", "remote", env=env, timeout=200)  # fmt: skip
    assert done.returncode == 0, done.stderr
    local = mw("serve-learn", "run", "synthetic_l1", "--method", "mwm", *args,
               "--tag", "local", env={"MW_MODEL": "local/scripted"}, timeout=200)  # fmt: skip
    assert local.returncode == 0, local.stderr
    run = runs / "remote"
    # Same engines behind the endpoints: the same learning curve as on the local provider.
    mine = score_file(run / "task" / "results" / "synthetic_l1_mwm.jsonl")
    theirs = score_file(runs / "local" / "task" / "results" / "synthetic_l1_mwm.jsonl")
    assert (mine.hidden, mine.fully_specified) == (theirs.hidden, theirs.fully_specified)
    assert mine.n_test == 24
    # Every host request went to "Fireworks" under its wire name, was answered (the key
    # was injected: without it the provider answers 401) and priced from the config.
    host_lines = meters.read_ledger(run / "ledger.jsonl")
    assert host_lines and {line.model for line in host_lines} == {"accounts/test/models/host-1"}
    assert {line.status for line in host_lines} == {"ok"}
    learner_lines = meters.read_ledger(run / "learner" / "ledger.jsonl")
    assert learner_lines and {line.model for line in learner_lines} == {"learner-7b"}
    assert {line.status for line in learner_lines} == {"ok"}
    for line in host_lines:  # the config's prices, exactly
        uncached = line.input_tokens - line.cached_input_tokens
        expected = (
            uncached * Decimal("0.20")
            + line.cached_input_tokens * Decimal("0.10")
            + line.output_tokens * Decimal("0.80")
        ) / 1_000_000
        assert Decimal(line.cost_usd) == expected and line.output_tokens > 0
    summary = json.loads((run / "wire_ledger.json").read_text())
    assert Decimal(summary["cost_usd"]) == sum(Decimal(line.cost_usd) for line in host_lines)
    meta = json.loads((run / "meta_wire_ledger.json").read_text())
    assert meta["prices_date"] == "2026-11-30" and float(meta["cost_usd"]) > 0
    stamp = json.loads((run / "run.log").read_text().splitlines()[0])["setting"]
    assert stamp["endpoints"][HOST]["api_key_env"] == "FIREWORKS_API_KEY"
    assert stamp["endpoints"][LEARNER]["base_url"] == learner_url
    no_key_in(runs)


@pytest.mark.timeout(240)
def test_the_daemon_runs_a_remote_campaign_with_the_key_only_in_memory(
    tmp_path: Path, remote: tuple[str, str]
) -> None:
    host_url, learner_url = remote
    config = remote_config(tmp_path / "remote.yaml", host_url)
    runs = Path(tempfile.mkdtemp(prefix="mwr-"))  # a short path for the daemon's socket
    try:
        # The daemon's own environment has no key: the submission carries it, in memory.
        started = mw("daemon", "start", "--runs", str(runs), env={"FIREWORKS_API_KEY": ""})
        assert started.returncode == 0, started.stderr
        env = {"FIREWORKS_API_KEY": KEY, "VLLM_BASE_URL": learner_url}
        submitted = mw("serve-learn", "submit", "synthetic_l1", "--config", str(config),
                       "--runs", str(runs), "--tag", "viad", "--train-split", "24",
                       env=env)  # fmt: skip
        assert submitted.returncode == 0, submitted.stderr
        deadline = time.monotonic() + 150
        while True:
            state = json.loads(mw("status", "viad", "--runs", str(runs), "--json").stdout)
            if state["state"] not in ("running", "submitted"):
                break
            assert time.monotonic() < deadline, state
            time.sleep(0.3)
        assert state["state"] == "completed", state
        lines = meters.read_ledger(runs / "viad" / "ledger.jsonl")
        assert lines and {line.status for line in lines} == {"ok"}
        assert score_file(runs / "viad" / "task" / "results" / "synthetic_l1_mwm.jsonl").n_test
        no_key_in(runs)  # the daemon's registry included
    finally:
        mw("daemon", "stop", "--runs", str(runs))
        shutil.rmtree(runs, ignore_errors=True)
