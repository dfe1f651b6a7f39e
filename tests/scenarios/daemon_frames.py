"""What a hostile or careless client sends the daemon's control socket, as tables.

``KILLERS`` once ended the daemon (and every campaign in it); ``BAD_TAGS``
would have named files outside the runs directory. ``fuzz_frames`` makes
random and structured frames; none is a request that could succeed (no
valid campaign, no shutdown, no cancel of a running campaign).
"""

from __future__ import annotations

import json
import random
import struct
from typing import Any

BAD_TAGS = [
    "n\0ul",
    "deep/er",
    "../escaped",
    "/absolute",
    "..",
    ".hidden",
    "",
    "-leading-dash",
    "a" * 129,
    "tab\there",
    "new\nline",
    "spa ce",
    "é",
]

# (why, the request as the wire carries it, a word the refusal must name)
KILLERS: list[tuple[str, dict[str, Any], str]] = [
    ("an editing spec without its config",
     {"type": "Submit", "kind": "editing", "tag": "e", "spec": {}}, "config"),
    *[
        (f"tag {tag!r}", {"type": "Submit", "kind": "serve-learn", "tag": tag,
                          "spec": {"scenario": "synthetic_l1", "train_split": 12}}, "tag")
        for tag in BAD_TAGS
    ],
    *[(f"status of {tag!r}", {"type": "Status", "tag": tag}, "tag") for tag in BAD_TAGS[:4]],
    *[(f"tail of {tag!r}", {"type": "Tail", "tag": tag}, "tag") for tag in BAD_TAGS[:4]],
    ("a tag that is a number", {"type": "Cancel", "tag": 7}, "Expected `str`"),
]  # fmt: skip


def frame(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


def _value(rng: random.Random, depth: int = 0) -> Any:
    kinds = ["str", "int", "none", "bool", "float"] + (["list", "dict"] if depth < 3 else [])
    kind = rng.choice(kinds)
    if kind == "str":
        return rng.choice([*BAD_TAGS, "synthetic_l1", "x", "\ud7ff", "%00", "a" * 5000])
    if kind == "int":
        return rng.choice([0, -1, 1, 2**31, -(2**63), 10**30])
    if kind == "float":
        return rng.choice([0.5, -1e308, 1e308])
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "list":
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    if kind == "dict":
        return {str(_value(rng, 3)): _value(rng, depth + 1) for _ in range(rng.randint(0, 4))}
    return None


_BAD_SPECS: list[dict[str, Any]] = [
    {},
    {"config": 3},
    {"config": "/nonexistent/config.json"},
    {"scenario": "synthetic_l1", "train_split": 0},
    {"scenario": "synthetic_l1", "concurrency": 0},
    {"scenario": "synthetic_l1", "allocation_usd": "-1"},
    {"scenario": "synthetic_l1", "allocation_usd": "NaN"},
    {"scenario": "nope"},
    {"scenario": "synthetic_l1", "unknown": 1},
    {"scenario": "../../etc", "dataset": "/nonexistent"},
]


def structured(rng: random.Random, live_tag: str) -> dict[str, Any]:
    """A request of the protocol's shape with hostile fields; never one that succeeds."""
    kind = rng.choice(["Submit", "Status", "Cancel", "Resume", "Tail", "ListCampaigns", "Hello"])
    tag = rng.choice([*BAD_TAGS, "fine-but-unknown", _value(rng)])
    if tag == live_tag:
        tag = "not-" + live_tag
    message: dict[str, Any] = {"type": kind, "tag": tag}
    if kind == "Submit":
        message["kind"] = rng.choice(["serve-learn", "editing", "other", 5, None])
        message["spec"] = rng.choice([*_BAD_SPECS, _value(rng)])
        if rng.random() < 0.3:
            message["secrets"] = _value(rng)
    elif kind == "Tail":
        message["records"] = _value(rng)
    elif kind == "Hello":
        message = {"type": "Hello", "version": _value(rng), "role": _value(rng)}
    if rng.random() < 0.2:
        message[str(_value(rng, 3))] = _value(rng)  # a field nobody knows
    return message


def fuzz_frames(rng: random.Random, live_tag: str) -> list[bytes]:
    """One connection's frames after the handshake: garbage, near-misses and hostile requests."""
    frames = []
    for _ in range(rng.randint(1, 3)):
        shape = rng.random()
        if shape < 0.2:
            frames.append(frame(rng.randbytes(rng.randint(0, 64))))
        elif shape < 0.3:
            frames.append(struct.pack(">I", rng.choice([2**32 - 1, 9 << 20])) + b"{")
        elif shape < 0.4:
            frames.append(frame(json.dumps(_value(rng)).encode()))
        elif shape < 0.45:
            frames.append(frame(b"[" * 5000 + b"]" * 5000))
        else:
            frames.append(frame(json.dumps(structured(rng, live_tag)).encode()))
    return frames


# Seconds after a Submit that the daemon is killed (-9): before the campaign's journal
# holds its start, each once stranded it (neither resumed nor listed on restart).
KILL_DELAYS = [0.0, 0.5, 1.0, 2.0, 3.0]
