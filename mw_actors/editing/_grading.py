"""Grading: the messages between host and grader process, and the grader itself.

The host never grades in its own process. It starts the grader (``python -m
mw_actors.editing.grader``), writes one :class:`GradeRequest` to its stdin, and reads one
:class:`GradeAnswer` from its stdout. The grader:

1. computes the runtime fingerprint and, for a regrade, refuses before
   loading anything if it differs from the frozen one;
2. checks the hashes of the export and of the partition files;
3. scores every case as the mean next-token loss of its completion;
4. writes the per-case scores (restricted: they are private) and answers
   with the partition means and the scores file's hash.

Only :func:`grade` imports torch.
"""

from __future__ import annotations

import hashlib
import platform
import time
from importlib import metadata
from pathlib import Path

import msgspec

from mw_errors import FingerprintMismatch, GradingFailed, IntegrityError, MwError

from .._hashing import file_sha256
from ._datasets import read_cases

__all__ = [
    "GRADER_VERSION",
    "CaseScore",
    "Fingerprint",
    "GradeAnswer",
    "GradeRequest",
    "GradeResult",
    "Scores",
    "fingerprint",
    "fingerprint_diff",
    "grade",
    "serve_one",
]

GRADER_VERSION = "mw-grader/1"
_PACKAGES = ("mw", "torch", "numpy", "safetensors", "tokenizers")


class Fingerprint(msgspec.Struct, frozen=True, kw_only=True):
    """What a grade's numbers depend on besides its inputs."""

    python: str
    packages: dict[str, str]
    torch_threads: int
    torch_interop_threads: int
    deterministic_algorithms: bool
    omp_num_threads: str | None
    git_commit: str
    machine: str
    grader_version: str = GRADER_VERSION


class GradeRequest(msgspec.Struct, frozen=True, kw_only=True):
    trial_id: str
    model_config: str
    tokenizer: str
    weights: str
    weights_sha256: str
    partitions: dict[str, str]  # name -> cases file
    partition_sha256: dict[str, str]
    max_tokens_per_case: int
    threads: int
    omp_num_threads: str | None
    git_commit: str
    scores_out: str
    expect_fingerprint: Fingerprint | None = None


class CaseScore(msgspec.Struct, frozen=True):
    id: str
    loss: float
    tokens: int


class Scores(msgspec.Struct, frozen=True):
    """The per-case results of one grade: private, kept under ``restricted/``."""

    trial_id: str
    grader_version: str
    partitions: dict[str, list[CaseScore]]


class GradeResult(msgspec.Struct, frozen=True, kw_only=True):
    grader_version: str
    fingerprint: Fingerprint
    means: dict[str, float]
    cases: dict[str, int]
    tokens: int
    scores_sha256: str
    seconds: float


class GradeAnswer(msgspec.Struct, frozen=True, kw_only=True):
    result: GradeResult | None = None
    error_code: str | None = None
    error: str | None = None


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "absent"


def fingerprint(threads: int, omp_num_threads: str | None, git_commit: str) -> Fingerprint:
    """This process's fingerprint, after setting torch's thread count to ``threads``."""
    import torch

    torch.set_num_threads(threads)
    return Fingerprint(
        python=platform.python_version(),
        packages={name: _version(name) for name in _PACKAGES},
        torch_threads=torch.get_num_threads(),
        torch_interop_threads=torch.get_num_interop_threads(),
        deterministic_algorithms=torch.are_deterministic_algorithms_enabled(),
        omp_num_threads=omp_num_threads,
        git_commit=git_commit,
        machine=platform.machine(),
    )


def fingerprint_diff(frozen: Fingerprint, now: Fingerprint) -> list[str]:
    """``field: frozen -> now`` for every field that differs."""
    old, new = msgspec.structs.asdict(frozen), msgspec.structs.asdict(now)
    diff = []
    for key in old:
        if key == "packages":
            for name in sorted(set(old[key]) | set(new[key])):
                a, b = old[key].get(name), new[key].get(name)
                if a != b:
                    diff.append(f"packages.{name}: {a} -> {b}")
        elif old[key] != new[key]:
            diff.append(f"{key}: {old[key]} -> {new[key]}")
    return diff


def _score(request: GradeRequest) -> tuple[dict[str, list[CaseScore]], int]:
    import torch
    from tokenizers import Tokenizer

    from ._model import load_student

    student = load_student(Path(request.model_config), Path(request.weights))
    tokenizer = Tokenizer.from_file(request.tokenizer)
    limit = request.max_tokens_per_case
    results: dict[str, list[CaseScore]] = {}
    total = 0
    with torch.inference_mode():
        for name, path in sorted(request.partitions.items()):
            scores = []
            for case in read_cases(Path(path)):
                prompt = tokenizer.encode(case.prompt, add_special_tokens=False).ids
                completion = tokenizer.encode(case.completion, add_special_tokens=False).ids
                if not prompt:  # the first token has nothing to be predicted from
                    prompt, completion = completion[:1], completion[1:]
                completion = completion[: limit - 1]
                prompt = prompt[-(limit - len(completion)) :]
                if not completion:
                    raise GradingFailed(f"case {case.id!r} has no completion token to score")
                loss, count = student.nll(prompt + completion, len(prompt))
                scores.append(CaseScore(case.id, loss, count))
                total += count
            results[name] = scores
    return results, total


def grade(request: GradeRequest) -> GradeResult:
    """Grade one export (in the grader process).

    Raises:
        FingerprintMismatch: a regrade's runtime differs from the frozen one (before loading).
        IntegrityError: the export or a partition file changed.
        GradingFailed: the export does not fit the model, or a case cannot be scored.
    """
    started = time.perf_counter()
    now = fingerprint(request.threads, request.omp_num_threads, request.git_commit)
    if request.expect_fingerprint is not None:
        diff = fingerprint_diff(request.expect_fingerprint, now)
        if diff:
            raise FingerprintMismatch("the runtime differs from the receipt's: " + "; ".join(diff))
    if file_sha256(request.weights) != request.weights_sha256:
        raise IntegrityError(f"the export {request.weights} does not match its recorded hash")
    for name, path in request.partitions.items():
        if file_sha256(path) != request.partition_sha256[name]:
            raise IntegrityError(f"partition file {path} does not match its recorded hash")
    partitions, tokens = _score(request)
    scores = Scores(request.trial_id, GRADER_VERSION, partitions)
    data = msgspec.json.encode(scores) + b"\n"
    out = Path(request.scores_out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(data)
    return GradeResult(
        grader_version=GRADER_VERSION,
        fingerprint=now,
        means={n: sum(c.loss for c in s) / len(s) for n, s in partitions.items()},
        cases={n: len(s) for n, s in partitions.items()},
        tokens=tokens,
        scores_sha256=hashlib.sha256(data).hexdigest(),
        seconds=time.perf_counter() - started,
    )


def serve_one(stdin: bytes) -> bytes:
    """Decode one request, grade it, and encode the answer (errors included)."""
    try:
        request = msgspec.json.decode(stdin, type=GradeRequest)
        answer = GradeAnswer(result=grade(request))
    except MwError as exc:
        answer = GradeAnswer(error_code=exc.code, error=exc.message)
    except msgspec.DecodeError as exc:
        answer = GradeAnswer(error_code="grading_failed", error=f"bad request: {exc}")
    return msgspec.json.encode(answer)
