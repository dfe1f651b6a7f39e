"""The benchmark's config schema (versioned msgspec Structs) and its loader.

Paths in a config are relative to the config file's directory. Every input
file is pinned by its SHA-256; ``preflight`` and ``run`` refuse a file that
no longer matches. See docs/design/editing.md for the evolution rules: new
fields get defaults, a removed or retyped field bumps ``schema_version``.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Literal

import msgspec

from meters import PriceTable, parse_prices, parse_usd
from mw_errors import ConfigError

__all__ = [
    "ARMS",
    "CONFIG_SCHEMA_VERSION",
    "POLICY_SCHEMA_VERSION",
    "Arm",
    "BenchmarkConfig",
    "Dataset",
    "FileRef",
    "Grading",
    "Limits",
    "Loaded",
    "Money",
    "Partitions",
    "PolicyFile",
    "RuntimeSpec",
    "Student",
    "Trial",
    "load_config",
    "load_policy",
    "pin_student",
]

CONFIG_SCHEMA_VERSION = 1
POLICY_SCHEMA_VERSION = 1
ARMS = ("baseline", "scripted", "agent")
ArmName = Literal["baseline", "scripted", "agent"]


class FileRef(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A file, relative to the config's directory, pinned by its SHA-256."""

    path: str
    sha256: str


class Partitions(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Half-open line ranges ``[start, end)`` of a dataset file."""

    public: tuple[int, int]
    private: tuple[int, int]
    regression: tuple[int, int]


class Dataset(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One task's cases: JSON lines ``{"id", "prompt", "completion"}``."""

    task: str
    file: FileRef
    partitions: Partitions


class Student(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A model snapshot directory: config.json, model.safetensors, tokenizer.json."""

    path: str
    files: dict[str, str]  # file name -> sha256
    payload_sha256: str  # of model.safetensors' tensors


def pin_student(directory: Path, path: str | None = None) -> Student:
    """The snapshot in ``directory``, pinned by its files' hashes (``path``: how to name it).

    Raises:
        ConfigError: ``directory`` is not a model snapshot.
    """
    from .._hashing import file_sha256, payload_sha256
    from .._smollm2 import SNAPSHOT_FILES

    missing = [n for n in SNAPSHOT_FILES if not (directory / n).is_file()]
    if missing:
        raise ConfigError(
            f"{directory} is not a model snapshot: it lacks {', '.join(missing)}",
            hint="make one with `wsm model import-smollm2 --output DIR`",
        )
    return Student(
        path=str(directory) if path is None else path,
        files={n: file_sha256(directory / n) for n in SNAPSHOT_FILES},
        payload_sha256=payload_sha256(directory / "model.safetensors"),
    )


class Arm(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    name: ArmName
    script: FileRef | None = None  # the scripted arm's frozen edit


class Limits(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    policy_turns: int = 8
    output_tokens: int = 4096
    wall_seconds: float = 600.0


class RuntimeSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    backend: Literal["bwrap", "local", "modal"] = "bwrap"
    actions: FileRef | None = None  # the synthetic agent's actions
    policy: FileRef | None = None  # a Responses-proxy policy file


class Money(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    prices: msgspec.Raw
    allocation_usd: str
    teacher_request_usd: str


class Grading(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    tolerance: float | None = None  # absolute, per case; None means exact
    max_tokens_per_case: int = 512
    threads: int = 1


class BenchmarkConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    schema_version: int
    name: str
    student: Student
    datasets: list[Dataset]
    arms: list[Arm]
    repeats: int = 1
    seed: int | None = None  # the edits' WSM_SEED (a grid's seeds); None: not set
    labels: list[str] = []
    limits: Limits = Limits()
    runtime: RuntimeSpec = RuntimeSpec()
    money: Money | None = None
    grading: Grading = Grading()


class PolicyFile(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The Responses-proxy policy schema: which model edits, and how far it may go."""

    schema_version: int
    model: str  # "<backend>/<model id>"
    endpoint: str  # an OpenAI-compatible base URL, reached only through the wire meter
    credential_env: str  # the name of the environment variable holding the key
    max_turns: int
    max_output_tokens: int
    max_input_tokens: int


class Trial(msgspec.Struct, frozen=True):
    """One scheduled trial: ``<task>.<arm>.<index>``."""

    id: str
    task: str
    arm: ArmName
    index: int


def _decimal(value: str, field: str) -> Decimal:
    return parse_usd(value, field)


class Loaded(msgspec.Struct, frozen=True):
    """A checked config with its paths resolved."""

    path: Path
    sha256: str
    config: BenchmarkConfig
    root: Path
    prices: PriceTable | None
    allocation: Decimal
    teacher_request: Decimal

    def resolve(self, relative: str) -> Path:
        return (self.root / relative).resolve()

    def dataset(self, task: str) -> Dataset:
        return next(d for d in self.config.datasets if d.task == task)

    def arm(self, name: str) -> Arm:
        return next(a for a in self.config.arms if a.name == name)

    def trials(self) -> list[Trial]:
        """The schedule: tasks in config order, then arms in config order, then repeats."""
        return [
            Trial(id=f"{d.task}.{a.name}.{i:04d}", task=d.task, arm=a.name, index=i)
            for d in self.config.datasets
            for a in self.config.arms
            for i in range(self.config.repeats)
        ]


def _check(config: BenchmarkConfig, source: str) -> None:
    if config.schema_version != CONFIG_SCHEMA_VERSION:
        raise ConfigError(
            f"{source}: schema_version {config.schema_version} is not "
            f"{CONFIG_SCHEMA_VERSION}, the one this mw reads",
            hint="regenerate the config, or use the mw release that wrote it",
        )
    tasks = [d.task for d in config.datasets]
    if not tasks or len(set(tasks)) != len(tasks):
        raise ConfigError(f"{source}: datasets need distinct task names, got {tasks}")
    for task in tasks:
        if not task.isidentifier():
            raise ConfigError(f"{source}: task name {task!r} must be a plain identifier")
    names = [a.name for a in config.arms]
    if not names or len(set(names)) != len(names):
        raise ConfigError(f"{source}: arms need distinct names from {ARMS}, got {names}")
    for arm in config.arms:
        if (arm.name == "scripted") != (arm.script is not None):
            raise ConfigError(
                f"{source}: arm {arm.name!r} "
                + ("needs a script" if arm.name == "scripted" else "takes no script")
            )
    synthetic, llm = config.runtime.actions is not None, config.runtime.policy is not None
    if "agent" in names and synthetic == llm:
        raise ConfigError(
            f"{source}: the agent arm needs exactly one of runtime.actions "
            "(the synthetic agent) and runtime.policy (an LLM policy file)"
        )
    if config.seed is not None and not 0 <= config.seed < 2**32:
        raise ConfigError(f"{source}: seed={config.seed} must be in 0..2**32-1")
    if not 1 <= config.repeats <= 9999:
        raise ConfigError(f"{source}: repeats={config.repeats} must be in 1..9999")
    limits = config.limits
    if limits.policy_turns < 1 or limits.output_tokens < 1 or not limits.wall_seconds > 0:
        raise ConfigError(f"{source}: limits must be positive, got {limits}")
    if config.grading.tolerance is not None and not config.grading.tolerance >= 0:
        raise ConfigError(f"{source}: grading.tolerance must be >= 0 or null (exact)")
    if config.grading.max_tokens_per_case < 2 or config.grading.threads < 1:
        raise ConfigError(f"{source}: grading needs max_tokens_per_case >= 2 and threads >= 1")


def load_config(path: str | Path) -> Loaded:
    """Read and check a benchmark config. Touches no tensor and no provider.

    Raises:
        ConfigError: the file is missing, malformed, or inconsistent (one line says where).
    """
    from .._hashing import file_sha256

    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror}") from None
    try:
        config = msgspec.json.decode(data, type=BenchmarkConfig)
    except msgspec.DecodeError as exc:
        raise ConfigError(f"{path}: {exc}", hint="compare with the fixture's config.json") from None
    _check(config, str(path))
    prices = None
    allocation = teacher = Decimal(0)
    if config.money is not None:
        prices = parse_prices(bytes(config.money.prices), f"{path} money.prices")
        allocation = _decimal(config.money.allocation_usd, "money.allocation_usd")
        teacher = _decimal(config.money.teacher_request_usd, "money.teacher_request_usd")
    return Loaded(
        path=path.resolve(),
        sha256=file_sha256(path),
        config=config,
        root=path.resolve().parent,
        prices=prices,
        allocation=allocation,
        teacher_request=teacher,
    )


def load_policy(path: Path) -> PolicyFile:
    """Read a policy file.

    Raises:
        ConfigError: it is malformed or of another schema version.
    """
    try:
        policy = msgspec.json.decode(path.read_bytes(), type=PolicyFile)
    except (OSError, msgspec.DecodeError) as exc:
        raise ConfigError(f"policy file {path}: {exc}") from None
    if policy.schema_version != POLICY_SCHEMA_VERSION:
        raise ConfigError(
            f"policy file {path}: schema_version {policy.schema_version} is not "
            f"{POLICY_SCHEMA_VERSION}"
        )
    if "/" not in policy.model:
        raise ConfigError(
            f"policy file {path}: model {policy.model!r} must be named <backend>/<model id>"
        )
    if min(policy.max_turns, policy.max_output_tokens, policy.max_input_tokens) < 1:
        raise ConfigError(f"policy file {path}: turn and token limits must be positive")
    return policy
