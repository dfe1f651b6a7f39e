"""Safetensors vectors without torch: the same bytes as the library, read back alike."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from mw_actors import _tensorfile
from mw_actors.serve_learn._worldmodel import Served
from mw_errors import IntegrityError
from tests.processes import ROOT

VALUES = [1.0, -2.5, 3.25e-7, 1e30, 0.0]
INDEX = json.dumps({"rule": 'a "quoted" \\ back\tslash\n', "name": "Zoë ✓", "ctl": "\x01"})


def test_the_bytes_are_the_safetensors_librarys(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    library = pytest.importorskip("safetensors.torch")
    theirs, ours = tmp_path / "theirs.safetensors", tmp_path / "ours.safetensors"
    library.save_file({"evidence": torch.tensor(VALUES, dtype=torch.float32)}, str(theirs),
                      metadata={"index": INDEX})  # fmt: skip
    _tensorfile.write_f32(ours, {"evidence": VALUES}, {"index": INDEX})
    assert ours.read_bytes() == theirs.read_bytes()
    tensors, metadata = _tensorfile.read_f32(theirs)
    assert metadata == {"index": INDEX}
    assert tensors["evidence"] == torch.tensor(VALUES, dtype=torch.float32).tolist()


def test_a_file_that_is_not_one_is_refused_in_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x05\x00\x00\x00\x00\x00\x00\x00{nope")
    with pytest.raises(IntegrityError, match="not a safetensors file: bad header"):
        _tensorfile.read_f32(bad)
    _tensorfile.write_f32(bad, {"evidence": [1.0, 2.0]}, {})
    bad.write_bytes(bad.read_bytes()[:-4])  # cut short
    with pytest.raises(IntegrityError, match="is not 2 float32 values"):
        _tensorfile.read_f32(bad)


def test_a_world_model_is_saved_and_loaded_without_importing_torch(tmp_path: Path) -> None:
    served = [
        Served(block=0, task_id=f"t{n}", timestamp=n, instruction="go", reward=1.0,
               record=f"Case C-{n}. Observation: {{\"amount\": {n}}} Action: approve()")
        for n in range(12)
    ]  # fmt: skip
    served_file = tmp_path / "served.pickle"
    served_file.write_bytes(pickle.dumps(served))
    code = f"""
import sys
from pathlib import Path
from mw_actors.serve_learn._worldmodel import Served, WorldModel, fit
import pickle
served = pickle.load(open({str(served_file)!r}, "rb"))
model = fit(served, now=0)
model.save(Path({str(tmp_path)!r}), 1)
assert WorldModel.load(Path({str(tmp_path)!r})).card(1) == model.card(1)
assert "torch" not in sys.modules, "torch was imported"
"""
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
