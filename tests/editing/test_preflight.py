"""Preflight checks every input before anything runs, without torch or a provider."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mw_actors.editing import load_config, preflight, write_fixture
from mw_errors import ConfigError, IntegrityError, UnpricedModel

from .conftest import ROOT, edit_config, repin, wsm


def test_the_fixture_schedule(fixture_config: Path) -> None:
    report = preflight(load_config(fixture_config))
    assert report.trials == [
        "completion.baseline.0000",
        "completion.scripted.0000",
        "completion.agent.0000",
    ]
    assert report.external_calls == 0
    assert report.worst_case_reservation_usd == "0.04"  # 4 agent turns at $0.01
    assert report.files_verified == 6


def test_the_fixture_refuses_a_directory_that_holds_files(tmp_path: Path) -> None:
    (tmp_path / "keep.txt").write_text("mine")
    with pytest.raises(ConfigError, match="already holds files"):
        write_fixture(tmp_path)
    assert (tmp_path / "keep.txt").read_text() == "mine"


@pytest.mark.parametrize(
    "victim",
    ["datasets/completion.jsonl", "student/model.safetensors", "script.py", "actions.json"],
)
def test_a_tampered_input_is_named(fixture_config: Path, victim: str) -> None:
    path = fixture_config.parent / victim
    with open(path, "ab") as handle:
        handle.write(b"\n")
    with pytest.raises(IntegrityError, match=victim.split("/")[-1]):
        preflight(load_config(fixture_config))
    done = wsm("benchmark", "preflight", "--config", str(fixture_config))
    assert done.returncode == 2
    line = done.stderr.decode().strip()
    assert "error[integrity_mismatch]" in line and victim.split("/")[-1] in line
    assert len(line.splitlines()) == 1


def test_overlapping_partitions_are_refused(fixture_config: Path) -> None:
    def overlap(data: dict[str, Any]) -> None:
        data["datasets"][0]["partitions"]["private"] = [12, 32]

    edit_config(fixture_config, overlap)
    with pytest.raises(ConfigError, match=r"completion\.public and completion\.private overlap"):
        preflight(load_config(fixture_config))


def test_a_private_item_copied_into_public_is_refused(fixture_config: Path) -> None:
    data = fixture_config.parent / "datasets" / "completion.jsonl"
    lines = data.read_text().splitlines()
    private = json.loads(lines[20])
    lines[3] = json.dumps({**private, "id": "innocent-looking"})
    data.write_text("\n".join(lines) + "\n")
    repin(fixture_config, data)
    with pytest.raises(ConfigError, match="public case 'innocent-looking' repeats private case"):
        preflight(load_config(fixture_config))


def _use_policy(config: Path, **fields: Any) -> None:
    """Point the agent arm at a policy file (a local one unless ``fields`` say otherwise)."""
    policy = config.parent / "policy.json"
    body = {
        "schema_version": 1,
        "model": "local/scripted",
        "endpoint": "http://127.0.0.1:9/v1",
        "credential_env": "LOCAL_KEY",
        "max_turns": 3,
        "max_output_tokens": 256,
        "max_input_tokens": 4000,
        **fields,
    }
    policy.write_text(json.dumps(body))

    def use_policy(data: dict[str, Any]) -> None:
        data["runtime"] = {"backend": "bwrap", "policy": {"path": "policy.json", "sha256": ""}}

    edit_config(config, use_policy)
    repin(config, policy)


def test_an_unknown_price_is_an_error_never_zero(fixture_config: Path) -> None:
    _use_policy(
        fixture_config,
        model="fireworks/unpriced-model",
        endpoint="https://example.invalid/v1",
        credential_env="FIREWORKS_API_KEY",
        max_turns=4,
    )
    with pytest.raises(UnpricedModel, match="fireworks/unpriced-model"):
        preflight(load_config(fixture_config))


def test_a_priced_policy_counts_its_external_calls(fixture_config: Path) -> None:
    _use_policy(fixture_config)
    report = preflight(load_config(fixture_config))
    assert report.external_calls == 3  # min(limits.policy_turns=4, policy.max_turns=3)
    assert report.worst_case_reservation_usd == "0.03"


def test_a_teacher_allowance_below_one_request_is_refused(fixture_config: Path) -> None:
    _use_policy(fixture_config, max_input_tokens=200000)
    with pytest.raises(
        ConfigError, match=r"teacher_request_usd=0\.01 is below one bounded request"
    ):
        preflight(load_config(fixture_config))


def test_modal_is_refused_offline(fixture_config: Path) -> None:
    edit_config(fixture_config, lambda d: d["runtime"].update(backend="modal"))
    with pytest.raises(ConfigError, match="modal"):
        preflight(load_config(fixture_config))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(schema_version=99), "schema_version 99"),
        (lambda d: d["arms"].append({"name": "baseline"}), "distinct names"),
        (lambda d: d["arms"][1].pop("script"), "needs a script"),
        (lambda d: d.update(surprise=1), "unknown field"),
        (lambda d: d["money"].update(allocation_usd="lots"), "is not an amount in USD"),
        (lambda d: d.update(seed=-1), r"seed=-1 must be in 0\.\.2\*\*32-1"),
        (lambda d: d.update(seed="one"), "Expected `int | null`"),
    ],
)
def test_bad_configs_get_one_clear_line(fixture_config: Path, change: Any, message: str) -> None:
    edit_config(fixture_config, change)
    with pytest.raises(ConfigError, match=message):
        load_config(fixture_config)
    done = wsm("benchmark", "preflight", "--config", str(fixture_config))
    assert done.returncode == 2
    assert len(done.stderr.decode().strip().splitlines()) == 1


def test_preflight_and_fixture_work_without_torch(tmp_path: Path) -> None:
    program = f"""
import sys
sys.modules["torch"] = None  # any import of torch now raises ImportError
from pathlib import Path
from mw_actors.editing import load_config, preflight, write_fixture
config = write_fixture(Path({str(tmp_path / "inputs")!r}))
print(len(preflight(load_config(config)).trials))
"""
    done = subprocess.run(
        [sys.executable, "-c", program], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "3"
