"""The grader's student: a Llama-family causal LM evaluated with plain torch.

The grader owns its forward pass (about forty lines, checked against
transformers' ``LlamaForCausalLM`` in the tests) so that a grade depends on
this file and torch, not on a transformers release. Only this module and the
grader import torch.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import msgspec
import torch
import torch.nn.functional as F

from mw_errors import ConfigError, GradingFailed

__all__ = ["LlamaShape", "Student", "load_student"]


class LlamaShape(msgspec.Struct, frozen=True):
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    eps: float
    rope_theta: float
    tied: bool

    @classmethod
    def from_config(cls, path: Path) -> LlamaShape:
        """Read a transformers ``config.json`` of a Llama model.

        Raises:
            ConfigError: the model is not a plain Llama (other activation, rope scaling, bias).
        """
        c: dict[str, Any] = json.loads(path.read_text())
        if c.get("model_type") not in ("llama", "mistral") or c.get("hidden_act", "silu") != "silu":
            raise ConfigError(f"{path}: the grader evaluates Llama models with silu, not this one")
        rope = c.get("rope_parameters") or {}
        scaling = c.get("rope_scaling")
        if rope.get("rope_type", "default") != "default" or scaling:
            raise ConfigError(f"{path}: rope scaling is not supported by the grader")
        if c.get("attention_bias") or c.get("mlp_bias"):
            raise ConfigError(f"{path}: biased attention or MLP is not supported by the grader")
        heads = int(c["num_attention_heads"])
        return cls(
            hidden=int(c["hidden_size"]),
            layers=int(c["num_hidden_layers"]),
            heads=heads,
            kv_heads=int(c.get("num_key_value_heads") or heads),
            head_dim=int(c.get("head_dim") or c["hidden_size"] // heads),
            vocab=int(c["vocab_size"]),
            eps=float(c.get("rms_norm_eps", 1e-6)),
            rope_theta=float(rope.get("rope_theta", c.get("rope_theta", 10000.0))),
            tied=bool(c.get("tie_word_embeddings", False)),
        )


def _norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    variance = x.pow(2).mean(-1, keepdim=True)
    return weight * (x * torch.rsqrt(variance + eps))


def _rotate(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Student:
    """Weights plus shape; ``nll(ids, start)`` is the per-token loss from ``start``."""

    def __init__(self, shape: LlamaShape, weights: dict[str, torch.Tensor]) -> None:
        self.shape = shape
        self.w = weights
        self.head = (
            weights["model.embed_tokens.weight"] if shape.tied else weights["lm_head.weight"]
        )
        exponent = torch.arange(0, shape.head_dim, 2, dtype=torch.int64).float() / shape.head_dim
        self.inv_freq = 1.0 / (shape.rope_theta**exponent)

    def logits(self, ids: torch.Tensor) -> torch.Tensor:
        s, w = self.shape, self.w
        length = ids.shape[0]
        x = w["model.embed_tokens.weight"][ids]
        freqs = torch.outer(torch.arange(length, dtype=torch.float32), self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        group = s.heads // s.kv_heads
        for layer in range(s.layers):
            p = f"model.layers.{layer}."
            h = _norm(x, w[p + "input_layernorm.weight"], s.eps)
            q = (h @ w[p + "self_attn.q_proj.weight"].T).view(length, s.heads, s.head_dim)
            k = (h @ w[p + "self_attn.k_proj.weight"].T).view(length, s.kv_heads, s.head_dim)
            v = (h @ w[p + "self_attn.v_proj.weight"].T).view(length, s.kv_heads, s.head_dim)
            q = q.transpose(0, 1)
            k = k.transpose(0, 1)
            q = q * cos + _rotate(q) * sin
            k = k * cos + _rotate(k) * sin
            k = k.repeat_interleave(group, dim=0)
            v = v.transpose(0, 1).repeat_interleave(group, dim=0)
            attn = F.scaled_dot_product_attention(
                q, k, v, is_causal=True, scale=1.0 / math.sqrt(s.head_dim)
            )
            attn = attn.transpose(0, 1).reshape(length, s.heads * s.head_dim)
            x = x + attn @ w[p + "self_attn.o_proj.weight"].T
            h = _norm(x, w[p + "post_attention_layernorm.weight"], s.eps)
            gate = F.silu(h @ w[p + "mlp.gate_proj.weight"].T)
            x = x + (gate * (h @ w[p + "mlp.up_proj.weight"].T)) @ w[p + "mlp.down_proj.weight"].T
        return _norm(x, w["model.norm.weight"], s.eps) @ self.head.T

    def nll(self, ids: list[int], start: int) -> tuple[float, int]:
        """Mean negative log-likelihood of ``ids[start:]`` given what precedes each token."""
        tokens = torch.tensor(ids, dtype=torch.int64)
        logits = self.logits(tokens[:-1])
        losses = F.cross_entropy(logits[start - 1 :], tokens[start:], reduction="none")
        return float(losses.mean()), int(losses.numel())


def _expected(shape: LlamaShape) -> set[str]:
    names = {"model.embed_tokens.weight", "model.norm.weight"}
    if not shape.tied:
        names.add("lm_head.weight")
    for layer in range(shape.layers):
        p = f"model.layers.{layer}."
        names |= {p + n + ".weight" for n in ("input_layernorm", "post_attention_layernorm")}
        names |= {p + f"self_attn.{n}_proj.weight" for n in "qkvo"}
        names |= {p + f"mlp.{n}_proj.weight" for n in ("gate", "up", "down")}
    return names


def load_student(config: Path, weights: Path) -> Student:
    """Load exported weights for grading, in float32.

    Raises:
        GradingFailed: the export lacks a tensor, has an extra one, or a tensor's shape is wrong.
    """
    from safetensors.torch import load_file

    shape = LlamaShape.from_config(config)
    tensors = load_file(str(weights))
    tensors.pop("lm_head.weight", None) if shape.tied else None
    expected = _expected(shape)
    if set(tensors) != expected:
        missing = sorted(expected - set(tensors))[:3]
        extra = sorted(set(tensors) - expected)[:3]
        raise GradingFailed(
            f"the export's tensors do not fit the model: missing {missing}, extra {extra}"
        )
    student = Student(shape, {name: t.to(torch.float32) for name, t in tensors.items()})
    if tuple(student.w["model.embed_tokens.weight"].shape) != (shape.vocab, shape.hidden):
        raise GradingFailed("the export's embedding does not fit the model's vocabulary")
    return student
