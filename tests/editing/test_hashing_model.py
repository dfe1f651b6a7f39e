"""Artifact hashes that survive header reordering, and a grader forward pass that is right."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from mw_actors.editing import file_sha256, payload_sha256
from mw_errors import IntegrityError


def _safetensors(
    path: Path, tensors: dict[str, bytes], metadata: dict[str, str], order: list[str]
) -> None:
    """Write a float32 safetensors file by hand, with the header keys in ``order``."""
    header: dict[str, object] = {}
    data = b""
    for name in sorted(tensors):
        blob = tensors[name]
        header[name] = {
            "dtype": "F32",
            "shape": [len(blob) // 4],
            "data_offsets": [len(data), len(data) + len(blob)],
        }
        data += blob
    ordered = {"__metadata__": metadata} | {k: header[k] for k in order}
    raw = json.dumps(ordered).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)


def test_payload_hash_ignores_header_order_and_metadata(tmp_path: Path) -> None:
    tensors = {"a": struct.pack("<2f", 1.0, 2.0), "b": struct.pack("<3f", 3.0, 4.0, 5.0)}
    one, two = tmp_path / "one.safetensors", tmp_path / "two.safetensors"
    # Two metadata keys in different orders: what two processes may well write.
    _safetensors(one, tensors, {"format": "pt", "step": "1"}, ["a", "b"])
    _safetensors(two, tensors, {"step": "1", "format": "pt"}, ["b", "a"])
    assert file_sha256(one) != file_sha256(two)
    assert payload_sha256(one) == payload_sha256(two)


def test_payload_hash_sees_a_changed_value_or_name(tmp_path: Path) -> None:
    base = tmp_path / "base.safetensors"
    _safetensors(base, {"a": struct.pack("<f", 1.0)}, {}, ["a"])
    changed = tmp_path / "changed.safetensors"
    _safetensors(changed, {"a": struct.pack("<f", 1.5)}, {}, ["a"])
    renamed = tmp_path / "renamed.safetensors"
    _safetensors(renamed, {"b": struct.pack("<f", 1.0)}, {}, ["b"])
    digests = {payload_sha256(p) for p in (base, changed, renamed)}
    assert len(digests) == 3


def test_payload_hash_refuses_a_file_that_is_not_safetensors(tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.safetensors"
    bogus.write_bytes(struct.pack("<Q", 10) + b"not json!!")
    with pytest.raises(IntegrityError, match="bad header"):
        payload_sha256(bogus)
    cut = tmp_path / "cut.safetensors"
    _safetensors(cut, {"a": struct.pack("<4f", 1, 2, 3, 4)}, {}, ["a"])
    cut.write_bytes(cut.read_bytes()[:-4])
    with pytest.raises(IntegrityError, match="outside the file"):
        payload_sha256(cut)


def test_the_grader_forward_pass_matches_transformers(fixture_master: Path) -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from mw_actors.editing._model import load_student

    student_dir = fixture_master.parent / "student"
    student = load_student(student_dir / "config.json", student_dir / "model.safetensors")
    reference = transformers.AutoModelForCausalLM.from_pretrained(student_dir, dtype=torch.float32)
    ids = torch.tensor([5, 17, 200, 3, 99, 45, 12, 80, 81, 82, 83])
    with torch.inference_mode():
        ours = student.logits(ids)
        theirs = reference(ids[None]).logits[0]
    assert torch.allclose(ours, theirs, atol=1e-5, rtol=1e-5)
