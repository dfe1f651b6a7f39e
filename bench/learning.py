"""Does MWM learn the hidden policies? The knowledge probe on banking L1-L3, beside baselines.

    python bench/learning.py [--scenarios banking_l1,...] [--seeds 3] [--right 0.5 | --random]
                             [--jobs N] [--losses]

For each scenario and seed, the whole serving stream is played through the
benchmark's own ``Env``, tools and verifier by a simulated agent (a fixture
that reads the task's ground truth, which no method sees): it looks the case
up, then takes the right decision with probability ``--right`` and otherwise a
random other valid decision (one of the stream's decisions that the case's tools accept:
no batch decision on a single case, no leg the case lacks), and finishes; with ``--random``
it takes any valid decision, the right one included, alike. Each episode's record is
``protocol.episode_record``, as mw makes it. At each window's boundary the
world models are fitted on the records of the blocks served before it
(DESIGN.md promise 4), and the window's tests are played by the probe's
player (``mw_actors.serve_learn.learners``), which looks the case up as served
episodes did, takes the world model's top-ranked action and finishes; the
benchmark's verifier scores it. Scores are Hidden / Fully Specified (0-100),
the mean over seeds. World models, all on the same records:

- majority: the most common outcome that scored;
- nearest success: RAG's idea, the outcome of the most similar served case
  that scored 100 (BM25);
- decision tree: a plain tree on the parsed facts (numbers included, every block
  alike), its splits chosen on the outcomes that scored (``decision_tree_ranker``);
- mwm: MWM's ``wm`` (``learners.fit``, as the campaign fits it);
- oracle: the ground truth (the player's ceiling).

``--losses`` adds where MWM loses its hidden tests, over every seed: per family of test (the
benchmark's own ``z.family`` label: ``A_electronics``, ``F_batch``, ...) and per kind of
mistake (the right action's form against the one MWM took, ids and list items left out). The
bench reads that label as it reads the ground truth, for the table; no model sees it.

The fitting time per block is MWM's, on this machine. Every scenario and seed is
probed in its own process (``--jobs`` at once). On a test, the player's look-ups
are made once and every model acts on the same text; the verifier replays an
action only once per test (``learners.look_up`` and ``act``).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import random
import re
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mw_actors.serve_learn.learners import (  # noqa: E402
    Lookups,
    Ranker,
    Served,
    act,
    case_of,
    decision_tree_ranker,
    fit,
    look_up,
    majority_ranker,
    manual_of,
    nearest_success_ranker,
    parse_record,
    required_parameters,
)

BLOCK = 12
_LIST = re.compile(r"\[.*\]", re.DOTALL)
MODELS = ("majority", "nearest success", "decision tree", "mwm", "oracle")


def _signature_of(action: Any) -> tuple[str, tuple[tuple[str, str], ...]]:
    """A ground-truth action without its case id: what a decision is, across cases."""
    kept = tuple(sorted((k, repr(v)) for k, v in action.kwargs.items() if k != "case_id"))
    return action.name, kept


def _valid(scratch: Any, task: Any, actions: list[Any]) -> bool:
    """Whether the case's tools accept ``actions`` (a decision this case can take)."""
    scratch.reset(task)
    return not any(str(scratch.step(action).observation).startswith("Error") for action in actions)


def serve(
    bundle: Any, right: float | None, rng: random.Random, upto: int | None = None
) -> list[Served]:
    """The serving stream played by the simulated agent: each episode's record and reward.

    ``right`` None: fully random, each valid decision (the right one too) alike. ``upto``:
    only the stream's first episodes (the decisions' pool is still the whole stream's).
    """
    from servelearnbench import agent, protocol
    from servelearnbench.engine.types import Action

    serving = list(bundle["serving"])
    protocol.stamp_serving(serving)
    decisions: dict[Any, list[Any]] = {}
    for task in serving:
        if task.actions:
            decisions.setdefault(_signature_of(task.actions[0]), task.actions)
    pool = list(decisions.values())
    env = agent.new_env(bundle)
    scratch = agent.new_env(bundle)  # where an alternative is tried before it is taken
    tools = {t["function"]["name"] for t in env.tools_info}
    served = []
    for position, task in enumerate(serving[:upto]):
        env.reset(task)
        trace: list[dict[str, Any]] = []

        def step(name: str, kwargs: dict[str, Any], trace: list[dict[str, Any]] = trace) -> str:
            observation = str(env.step(Action(name=name, kwargs=kwargs)).observation)
            trace.append({"kind": "tool", "name": name, "args": kwargs, "obs": observation})
            return observation

        case_id = (task.z or {}).get("case_id")
        if case_id and "get_case_details" in tools:
            found = json.loads(step("get_case_details", {"case_id": case_id}))
            for kind in ("account", "merchant", "payee"):
                value = found.get(f"{kind}_id") if isinstance(found, dict) else None
                if value and f"get_{kind}_details" in tools:
                    step(f"get_{kind}_details", {f"{kind}_id": value})
        actions = list(task.actions)
        if actions and (right is None or rng.random() >= right):
            others = [a for a in pool if _signature_of(a[0]) != _signature_of(actions[0])]
            rng.shuffle(others)
            valid = []
            for alternative in others:
                moved = [
                    Action(name=a.name, kwargs={**a.kwargs, "case_id": case_id})
                    if "case_id" in a.kwargs
                    else a
                    for a in alternative
                ]
                if _valid(scratch, task, moved):
                    valid.append(moved)
                    if right is not None:
                        break  # one wrong decision is enough
            if right is None:  # fully random: any valid decision, the right one included
                actions = rng.choice([actions, *valid])
            elif valid:
                actions = valid[0]
        for action in actions:
            step(action.name, dict(action.kwargs))
        env.step(Action(name="finish", kwargs={}))
        trace.append({"kind": "finish", "name": "finish", "args": {}, "obs": agent.FINISH_ACK})
        reward = float(env.compute_reward().reward)
        record = protocol.episode_record(task.instruction, trace, reward)
        served.append(
            Served(
                block=position // BLOCK,
                task_id=task.task_id,
                timestamp=position + 1,
                instruction=task.instruction,
                reward=reward,
                record=record,
            )
        )
    return served


def _oracle(task: Any) -> Ranker:
    action = task.actions[0] if task.actions else None
    if action is None:
        return lambda text: []
    shown = ", ".join(
        f"{k}={v if isinstance(v, str) else json.dumps(v)}"
        for k, v in sorted(action.kwargs.items())
        if k != "case_id"
    )
    return lambda text: [f"{action.name}({shown})"]


def form_of(action: str) -> str:
    """An action as a kind of decision: a list argument's items left out (``[...]``)."""
    return _LIST.sub("[...]", action) if action else "(nothing)"


def mistake_of(right: str, taken: str) -> str:
    """What kind of mistake taking ``taken`` for ``right`` is, in a line."""
    if form_of(right) == form_of(taken) and "[...]" in form_of(right):
        return f"{form_of(right)}, its items decided wrong"
    return f"{form_of(right)} -> {form_of(taken)}"


def probe_scenario(
    name: str,
    right: float | None,
    seed: int,
    windows: Sequence[int] | None = None,
    models: Sequence[str] = MODELS,
) -> dict[str, Any]:
    """Each of ``models`` on the tests of ``windows`` (all by default), after serving the stream
    up to the last of those windows' boundaries."""
    from servelearnbench import agent, protocol, scenarios, scoring

    bundle = scenarios.get_bundle(name, fresh=True)
    domain = bundle["meta"]["domain"]
    manual = manual_of(bundle)
    windows = range(scenarios.n_windows(bundle)) if windows is None else windows
    rng = random.Random(seed)
    last = max(protocol.stamp_test(bundle["test_set"](w), bundle["serving"], w) for w in windows)
    served = serve(bundle, right, rng, upto=last // BLOCK * BLOCK)
    env = agent.new_env(bundle)
    required = required_parameters(env)
    serving = list(bundle["serving"])
    protocol.stamp_serving(serving)
    scores: dict[str, dict[str, list[float]]] = {
        m: {"hidden": [], "fully_specified": []} for m in models
    }
    skipped: dict[str, int] = dict.fromkeys(models, 0)
    per_window: dict[str, list[float]] = {m: [] for m in models}
    lost: list[tuple[str, str, bool]] = []  # MWM's hidden tests: (family, mistake, lost)
    fit_seconds: list[float] = []
    for window in windows:
        tests = bundle["test_set"](window)
        end = protocol.stamp_test(tests, bundle["serving"], window)
        version = end // BLOCK  # blocks learned by the window's boundary
        known = served[: version * BLOCK]
        cases = [c for c in (case_of(s) for s in known) if c is not None]
        started = time.perf_counter()
        model = fit(known, now=version - 1, manual=manual) if known else None
        fit_seconds.append(time.perf_counter() - started)
        lookups = Lookups.learn([parse_record(s.record) for s in known])

        def mwm(text: str, model: Any = model) -> list[str]:
            return [] if model is None else model.ranked(text)  # as wm ranks, items filled

        made: dict[str, Callable[[], Ranker]] = {
            "majority": lambda cases=cases: majority_ranker(cases),
            "nearest success": lambda cases=cases: nearest_success_ranker(cases),
            "decision tree": lambda cases=cases, now=version - 1: decision_tree_ranker(cases, now),
            "mwm": lambda mwm=mwm: mwm,
        }
        rankers = {m: made[m]() for m in models if m in made}  # only those asked for
        window_rewards: dict[str, list[float]] = {m: [] for m in models}
        for task in tests:
            category = scoring.category(domain, (task.z or {}).get("slice"))
            looked, rewarded = look_up(env, task, lookups), {}  # shared by the models
            for model_name in models:
                rank = _oracle(task) if model_name == "oracle" else rankers[model_name]
                played = act(env, looked, rank, lookups, required, rewarded)
                reward = 0.0 if played.reward is None else played.reward
                skipped[model_name] += played.reward is None
                scores[model_name][category].append(reward)
                if category == "hidden":
                    window_rewards[model_name].append(reward)
                if category == "hidden" and model_name == "mwm":
                    right = next(iter(_oracle(task)("")), "")
                    family = str((task.z or {}).get("family", "-"))
                    lost.append((family, mistake_of(right, played.action), reward < 1.0))
        for model_name in models:
            rewards = window_rewards[model_name]
            per_window[model_name].append(100 * sum(rewards) / len(rewards) if rewards else 0.0)
    return {
        "scores": {
            m: {k: 100 * sum(v) / len(v) if v else 0.0 for k, v in by.items()}
            for m, by in scores.items()
        },
        "windows": per_window,
        "skipped": skipped,
        "lost": lost,
        "fit_seconds": max(fit_seconds, default=0.0),
    }


def losses(name: str, tests: Sequence[tuple[str, str, bool]], top: int = 8) -> str:
    """Where MWM lost ``name``'s hidden tests: per family (lost of all), per kind of mistake."""
    families: dict[str, list[int]] = {}
    for family, _, was_lost in tests:
        families.setdefault(family, [0, 0])[0] += was_lost
        families[family][1] += 1
    mistakes: dict[str, int] = {}
    for _, mistake, was_lost in tests:
        if was_lost:
            mistakes[mistake] = mistakes.get(mistake, 0) + 1
    total = sum(was_lost for *_, was_lost in tests)
    by_family = sorted(families.items(), key=lambda kv: (-kv[1][0], kv[0]))
    lines = [f"{name}: MWM lost {total} of {len(tests)} hidden tests; by family: " + ", ".join(
        f"{family} {lost}/{of}" for family, (lost, of) in by_family if lost
    )]  # fmt: skip
    lines += [
        f"  {count:4d}  {mistake}"
        for mistake, count in sorted(mistakes.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scenarios", default="banking_l1,banking_l2,banking_l3")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--right", type=float, default=0.5)
    parser.add_argument(
        "--jobs", type=int, default=os.cpu_count() or 1, help="seeds probed at once (processes)"
    )
    parser.add_argument(
        "--random", action="store_true", help="a fully random serving agent (ignores --right)"
    )
    parser.add_argument(
        "--losses",
        action="store_true",
        help="where MWM loses its hidden tests: per family of test, per kind of mistake",
    )
    args = parser.parse_args()
    names = args.scenarios.split(",")
    table: dict[str, dict[str, tuple[float, float]]] = {m: {} for m in MODELS}
    windows: dict[str, dict[str, list[float]]] = {}
    slowest = 0.0
    right = None if args.random else args.right
    started = time.perf_counter()
    with concurrent.futures.ProcessPoolExecutor(args.jobs) as pool:  # every scenario and seed
        probed = {
            (name, seed): pool.submit(probe_scenario, name, right, seed)
            for name in names
            for seed in range(args.seeds)
        }
        results = {key: future.result() for key, future in probed.items()}
    for name in names:
        runs = [results[name, seed] for seed in range(args.seeds)]
        for model in MODELS:
            hidden = statistics.mean(r["scores"][model]["hidden"] for r in runs)
            full = statistics.mean(r["scores"][model]["fully_specified"] for r in runs)
            table[model][name] = (hidden, full)
        windows[name] = {
            m: [statistics.mean(ws) for ws in zip(*(r["windows"][m] for r in runs), strict=True)]
            for m in MODELS
        }
        slowest = max(slowest, *(r["fit_seconds"] for r in runs))
        print(f"{name}: skipped per model {runs[0]['skipped']} (seed 0)", file=sys.stderr)
    agent = "fully random" if args.random else f"right {args.right:.0%} of the time"
    print(f"serving agent {agent}; mean of {args.seeds} seeds; H / F")
    print("| world model | " + " | ".join(names) + " | mean H |")
    print("|---|" + "---|" * (len(names) + 1))
    for model in MODELS:
        cells = [f"{table[model][n][0]:.0f} / {table[model][n][1]:.0f}" for n in names]
        mean_h = statistics.mean(table[model][n][0] for n in names)
        print(f"| {model} | " + " | ".join(cells) + f" | {mean_h:.1f} |")
    for name in names:
        print(f"{name} hidden per window: " + "; ".join(
            f"{m} " + " ".join(f"{x:.0f}" for x in windows[name][m]) for m in MODELS
        ))  # fmt: skip
    if args.losses:
        for name in names:
            tests = [t for seed in range(args.seeds) for t in results[name, seed]["lost"]]
            print(losses(name, tests))
    print(f"slowest MWM fit (all blocks so far): {slowest:.2f} s (goal <= 2 s per block)")
    print(f"probed in {time.perf_counter() - started:.0f} s with {args.jobs} processes")


if __name__ == "__main__":
    main()
