"""The offline benchmark fixture: a tiny random causal LM, synthetic data, a config.

``write_fixture(DIR)`` creates::

    student/            config.json, model.safetensors, tokenizer.json (byte-level)
    datasets/completion.jsonl   public [0,16), private [16,32), regression [32,48)
    script.py           the scripted baseline: a frozen edit that damages the weights
    actions.json        the synthetic agent: damage, then an explicit undo, then finish
    config.json         the benchmark config, every file pinned by its SHA-256

Everything is seeded, so two fixtures hold the same tensors. It needs numpy,
safetensors and tokenizers, not torch.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import msgspec

from mw_errors import ConfigError

from .._hashing import file_sha256
from ._actions import ACTIONS_SCHEMA_VERSION
from ._config import CONFIG_SCHEMA_VERSION, pin_student

__all__ = ["FIXTURE_PRICES", "write_fixture"]

FIXTURE_PRICES = {
    "schema_version": 1,
    "date": "2026-11-30",
    "models": {
        "local/scripted": {
            "input_per_mtok": "0.10",
            "cached_input_per_mtok": "0.05",
            "output_per_mtok": "0.40",
            "max_output_tokens": 256,
        }
    },
}

HIDDEN, INTERMEDIATE, LAYERS, HEADS, KV_HEADS, HEAD_DIM, VOCAB = 64, 128, 2, 4, 2, 16, 257
MODEL_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "attention_bias": False,
    "mlp_bias": False,
    "hidden_act": "silu",
    "hidden_size": HIDDEN,
    "intermediate_size": INTERMEDIATE,
    "num_hidden_layers": LAYERS,
    "num_attention_heads": HEADS,
    "num_key_value_heads": KV_HEADS,
    "head_dim": HEAD_DIM,
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "tie_word_embeddings": True,
    "vocab_size": VOCAB,
    "bos_token_id": VOCAB - 1,
    "eos_token_id": VOCAB - 1,
    "torch_dtype": "float32",
}

DAMAGE = """\
# Damage the weights: add seeded noise to the token embeddings (tied to the output head).
import os

import numpy as np
from safetensors.numpy import load_file, save_file

weights = load_file("model.safetensors")
name = "model.embed_tokens.weight"
seed = int(os.environ.get("WSM_SEED", "1234"))  # a grid's seed, if the trial has one
noise = np.random.default_rng(seed).normal(0.0, 0.5, weights[name].shape)
weights[name] = (weights[name] + noise).astype(weights[name].dtype)
save_file(weights, "model.safetensors", metadata={"format": "pt"})
print("damaged", name)
"""

INSPECT = """\
from safetensors.numpy import load_file

weights = load_file("model.safetensors")
print(len(weights), "tensors,", sum(w.size for w in weights.values()), "parameters")
"""

_WORDS = ["red", "blue", "green", "small", "large", "quiet", "bright", "cold", "warm", "old"]
_NOUNS = ["river", "stone", "garden", "window", "market", "forest", "letter", "bridge"]


def _cases() -> list[dict[str, str]]:
    pairs = random.Random(7).sample([(a, b) for a in range(10) for b in range(10)], 32)
    cases = [  # the task: add two small numbers
        {"id": f"add-{i:02d}", "prompt": f"Q: {a} + {b} = ?\nA:", "completion": f" {a + b}"}
        for i, (a, b) in enumerate(pairs)
    ]
    for i in range(16):  # regression: plain text the edit must not disturb
        word, noun = _WORDS[i % len(_WORDS)], _NOUNS[(3 * i) % len(_NOUNS)]
        cases.append(
            {"id": f"text-{i:02d}", "prompt": "Say:", "completion": f" the {word} {noun} is near."}
        )
    return cases


def _tokenizer(path: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {symbol: index for index, symbol in enumerate(alphabet)}
    vocab["<|endoftext|>"] = len(alphabet)
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(["<|endoftext|>"])
    tokenizer.save(str(path))


def _weights(path: Path) -> None:
    import numpy as np
    from safetensors.numpy import save_file

    rng = np.random.default_rng(20261130)

    def normal(rows: int, cols: int) -> Any:
        return rng.normal(0.0, 0.02, (rows, cols)).astype(np.float32)

    def ones() -> Any:
        return np.ones(HIDDEN, np.float32)

    tensors = {"model.embed_tokens.weight": normal(VOCAB, HIDDEN)}
    for layer in range(LAYERS):
        p = f"model.layers.{layer}."
        tensors[p + "input_layernorm.weight"] = ones()
        tensors[p + "post_attention_layernorm.weight"] = ones()
        tensors[p + "self_attn.q_proj.weight"] = normal(HEADS * HEAD_DIM, HIDDEN)
        tensors[p + "self_attn.k_proj.weight"] = normal(KV_HEADS * HEAD_DIM, HIDDEN)
        tensors[p + "self_attn.v_proj.weight"] = normal(KV_HEADS * HEAD_DIM, HIDDEN)
        tensors[p + "self_attn.o_proj.weight"] = normal(HIDDEN, HEADS * HEAD_DIM)
        tensors[p + "mlp.gate_proj.weight"] = normal(INTERMEDIATE, HIDDEN)
        tensors[p + "mlp.up_proj.weight"] = normal(INTERMEDIATE, HIDDEN)
        tensors[p + "mlp.down_proj.weight"] = normal(HIDDEN, INTERMEDIATE)
    tensors["model.norm.weight"] = ones()
    save_file(tensors, str(path), metadata={"format": "pt"})
    path.chmod(0o644)  # safetensors writes 0600; the sandbox's user must read the snapshot


def _ref(root: Path, path: Path) -> dict[str, str]:
    return {"path": str(path.relative_to(root)), "sha256": file_sha256(path)}


def write_fixture(output: Path, *, student: Path | None = None) -> Path:
    """Write the fixture into ``output`` (new or empty); return the config's path.

    With ``student`` (a snapshot directory, e.g. from ``wsm model
    import-smollm2``), the config uses that model instead of the tiny random
    one and runs the scripted arms only: a smoke campaign on a real model.

    Raises:
        ConfigError: ``output`` already holds files, or ``student`` is not a snapshot.
    """
    if output.exists() and (not output.is_dir() or any(output.iterdir())):
        raise ConfigError(
            f"{output} already holds files", hint="pass a new or empty --output directory"
        )
    # A given student is pinned (and refused if it is no snapshot) before anything is written.
    if student is not None:
        student = student.resolve()
        pinned = pin_student(student)  # by its absolute path
    output.mkdir(parents=True, exist_ok=True)
    if student is None:
        student = output / "student"
        student.mkdir()
        (student / "config.json").write_text(json.dumps(MODEL_CONFIG, indent=2) + "\n")
        _weights(student / "model.safetensors")
        _tokenizer(student / "tokenizer.json")
        pinned = pin_student(student, "student")  # beside the config
        arms: list[dict[str, object]] = [
            {"name": "baseline"},
            {"name": "scripted"},
            {"name": "agent"},
        ]
        name, labels = "wsm-fixture", ["synthetic", "exploratory"]
    else:
        arms = [{"name": "baseline"}, {"name": "scripted"}]
        name, labels = f"wsm-smoke-{student.name}", ["smoke", "exploratory"]
    datasets = output / "datasets"
    datasets.mkdir()
    data = datasets / "completion.jsonl"
    data.write_text("".join(json.dumps(case) + "\n" for case in _cases()))
    script = output / "script.py"
    script.write_text(
        '"""The scripted baseline: a frozen edit that damages the weights."""\n\n' + DAMAGE
    )
    actions = output / "actions.json"
    actions.write_text(
        json.dumps(
            {
                "schema_version": ACTIONS_SCHEMA_VERSION,
                "actions": [
                    {"tool": "run_python", "code": INSPECT},
                    {"tool": "run_python", "code": DAMAGE},
                    {"tool": "undo"},
                    {"tool": "finish"},
                ],
            },
            indent=2,
        )
        + "\n"
    )
    config = {
        "schema_version": CONFIG_SCHEMA_VERSION,
        "name": name,
        "labels": labels,
        "student": msgspec.to_builtins(pinned),
        "datasets": [
            {
                "task": "completion",
                "file": _ref(output, data),
                "partitions": {"public": [0, 16], "private": [16, 32], "regression": [32, 48]},
            }
        ],
        "arms": [
            {**arm, "script": _ref(output, script)} if arm["name"] == "scripted" else arm
            for arm in arms
        ],
        "repeats": 1,
        "limits": {"policy_turns": 4, "output_tokens": 4096, "wall_seconds": 120.0},
        "runtime": {"backend": "bwrap", "actions": _ref(output, actions)}
        if len(arms) == 3
        else {"backend": "bwrap"},
        "money": {
            "prices": FIXTURE_PRICES,
            "allocation_usd": "1.00",
            "teacher_request_usd": "0.01",
        },
        "grading": {"tolerance": 1e-6, "max_tokens_per_case": 64, "threads": 1},
    }
    path = output / "config.json"
    path.write_bytes(msgspec.json.format(msgspec.json.encode(config), indent=2) + b"\n")
    return path
