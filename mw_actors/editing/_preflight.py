"""``wsm benchmark preflight``: check every input before anything runs.

It verifies the pinned file hashes and the partitions, prices the schedule's
worst case, and loads no tensor and contacts no provider (torch need not be
installed).
"""

from __future__ import annotations

from decimal import Decimal

import msgspec

from meters import usd
from mw_errors import ConfigError

from .._hashing import verify_file
from ._actions import load_actions
from ._config import Loaded, PolicyFile, load_policy
from ._datasets import check_partitions, read_cases

__all__ = ["PreflightReport", "preflight", "trial_envelope"]


class PreflightReport(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    labels: list[str]
    backend: str
    trials: list[str]
    external_calls: int
    worst_case_reservation_usd: str
    allocation_usd: str
    files_verified: int


def check_runtime(loaded: Loaded) -> None:
    """Refuse runtimes that cannot run here.

    Raises:
        ConfigError: the backend is ``modal``, which needs the network.
    """
    if loaded.config.runtime.backend == "modal":
        raise ConfigError(
            "runtime.backend 'modal' needs a cloud account and the network, and this run is "
            "offline",
            hint="use runtime.backend 'bwrap' (isolated) or pass --local-trusted",
        )


def agent_turns(loaded: Loaded, policy: PolicyFile | None) -> int:
    """The most turns one agent trial may take."""
    turns = loaded.config.limits.policy_turns
    return min(turns, policy.max_turns) if policy is not None else turns


def trial_envelope(loaded: Loaded, arm: str, policy: PolicyFile | None) -> Decimal:
    """A trial's worst-case cost: every agent turn at the teacher request allowance.

    The synthetic agent reserves the same envelope as a policy would, so a
    fixture run exercises the money path it stands in for (and spends $0).
    """
    if arm != "agent":
        return Decimal(0)
    return agent_turns(loaded, policy) * loaded.teacher_request


def load_checked_policy(loaded: Loaded) -> PolicyFile | None:
    """The policy file, hash-checked and priced; None when the agent is synthetic.

    Raises:
        IntegrityError: the policy file changed.
        UnpricedModel: the policy's model has no price.
        ConfigError: the teacher allowance cannot cover one bounded request.
    """
    ref = loaded.config.runtime.policy
    if ref is None:
        return None
    path = loaded.resolve(ref.path)
    verify_file(path, ref.sha256, what="policy file")
    policy = load_policy(path)
    if loaded.prices is None:
        raise ConfigError(
            "the agent's policy calls a provider, but the config has no money section",
            hint="add money.prices, money.allocation_usd and money.teacher_request_usd",
        )
    price = loaded.prices.price(policy.model)
    worst = loaded.prices.worst_case(
        policy.model,
        policy.max_input_tokens,
        min(policy.max_output_tokens, price.max_output_tokens),
    )
    if worst > loaded.teacher_request:
        raise ConfigError(
            f"money.teacher_request_usd={loaded.teacher_request} is below one bounded request "
            f"of {policy.model} ({usd(worst)} at {policy.max_input_tokens} input and "
            f"{policy.max_output_tokens} output tokens)",
            hint="raise teacher_request_usd or lower the policy's token limits",
        )
    return policy


def preflight(loaded: Loaded) -> PreflightReport:
    """Verify the inputs of a loaded config and price its schedule.

    Raises:
        IntegrityError: a pinned file changed (the file is named).
        ConfigError: partitions overlap, a file is missing, the runtime cannot run.
        UnpricedModel: a model has no price.
    """
    config = loaded.config
    check_runtime(loaded)
    verified = 0
    student = loaded.resolve(config.student.path)
    for name, digest in sorted(config.student.files.items()):
        verify_file(student / name, digest, what="student file")
        verified += 1
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        if name not in config.student.files:
            raise ConfigError(f"student.files must pin {name}")
    for dataset in config.datasets:
        path = loaded.resolve(dataset.file.path)
        verify_file(path, dataset.file.sha256, what=f"dataset {dataset.task}")
        verified += 1
        check_partitions(read_cases(path), dataset, str(path))
    for arm in config.arms:
        if arm.script is not None:
            verify_file(loaded.resolve(arm.script.path), arm.script.sha256, what="script")
            verified += 1
    if config.runtime.actions is not None:
        path = loaded.resolve(config.runtime.actions.path)
        verify_file(path, config.runtime.actions.sha256, what="actions file")
        load_actions(path)
        verified += 1
    policy = load_checked_policy(loaded)
    verified += policy is not None
    trials = loaded.trials()
    agents = sum(trial.arm == "agent" for trial in trials)
    calls = agents * agent_turns(loaded, policy) if policy is not None else 0
    worst = sum((trial_envelope(loaded, t.arm, policy) for t in trials), Decimal(0))
    if worst > 0 and config.money is None:
        raise ConfigError("the schedule reserves money, but the config has no money section")
    return PreflightReport(
        name=config.name,
        labels=list(config.labels),
        backend=config.runtime.backend,
        trials=[trial.id for trial in trials],
        external_calls=calls,
        worst_case_reservation_usd=usd(worst),
        allocation_usd=usd(loaded.allocation),
        files_verified=verified,
    )
