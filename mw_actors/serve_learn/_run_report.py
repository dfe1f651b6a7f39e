"""``mw report RUN_DIR``: one serve-and-learn run, from its journal, results and ledgers.

No provider is called and nothing is measured: the report is a pure function
of the run directory's files, so a rebuild gives the same bytes. It holds:

- each window's held-out test scores, Hidden and Fully Specified, and the
  version it was tested on;
- the learning curve: the mean serving reward of each block of 12, with the
  window boundaries marked;
- the spend over time, per meter (host, learner, judge), against the allocation;
- per learned version, the card the host saw, and its diff from the version
  before it;
- the episodes that ended ``unknown`` or ``budget_blocked``;
- those episodes and the tests that failed, step by step (:mod:`._trajectories`):
  what the host was asked and did, its score line and cost, its version's card.

``--json`` gives the figures, ``--markdown`` and ``--html`` (one self-contained
page: inline SVG, no script, no network) show the same ones. No evaluator is
shown, nor the verifier's detail (it may name the expected answer): only what the
journal and the host saw. ``figures_only`` leaves the trajectories out, for a page
that holds no task text.
"""

from __future__ import annotations

import difflib
import html
import itertools
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path

import msgspec

import meters
from mw_errors import ConfigError

from .._core import Entry, read_journal
from .._svg import Bars, Series, bar_chart, line_chart
from ._score import score_file
from ._spec import CAMPAIGN_RECORDS
from ._trajectories import (
    Trajectory,
    anchor,
    trajectories,
    trajectories_html,
    trajectories_markdown,
)
from .records import BlockLearned, EpisodeEnded, ServeLearnEnded, ServeLearnStarted, WindowTested

__all__ = [
    "RunReport",
    "WindowScores",
    "build_run_report",
    "render_run_html",
    "render_run_json",
    "render_run_markdown",
    "window_scores",
]

METERS = {"host": "ledger.jsonl", "learner": "learner/ledger.jsonl", "judge": "judge/ledger.jsonl"}


class WindowScores(msgspec.Struct, frozen=True):
    window: int
    version: int | None  # the version it was tested on (None: its tests are not all in)
    hidden: float | None
    fully_specified: float | None
    tests: int


class BlockReward(msgspec.Struct, frozen=True):
    block: int  # the block of the serving stream (12 cases each)
    window: int  # the window its first case belongs to
    reward: float  # 100 x the mean serving reward
    cases: int


class SpendPoint(msgspec.Struct, frozen=True):
    meter: str
    seconds: float  # since the campaign's start
    usd: str  # the meter's spend so far


class VersionCard(msgspec.Struct, frozen=True):
    version: int
    block: int
    cases: int
    digest: str
    card: str | None  # None: the method keeps no card
    diff: list[str]  # unified diff from the version before it


class OddEpisode(msgspec.Struct, frozen=True):
    task_id: str
    phase: str
    window: int
    status: str


class RunReport(msgspec.Struct, frozen=True, kw_only=True):
    tag: str
    scenario: str
    method: str
    model: str
    state: str  # the end record's, or "unknown" without one
    allocation_usd: str
    hidden: float | None  # the setting scores, as mw score computes them (ended runs)
    fully_specified: float | None
    n_test: int
    windows: list[WindowScores]
    blocks: list[BlockReward]
    spend: list[SpendPoint]
    spend_usd: dict[str, str]  # per meter, in all
    versions: list[VersionCard]
    odd: list[OddEpisode]
    trajectories: list[Trajectory] = []  # the odd episodes and the failed tests, whole


def _mean(values: Sequence[float]) -> float | None:
    return round(100 * sum(values) / len(values), 4) if values else None


def window_scores(records: Sequence[object]) -> list[WindowScores]:
    """Each window's test episodes ended so far: 100 x the mean reward per category."""
    tested = {r.window: r.version for r in records if isinstance(r, WindowTested)}
    by: dict[int, dict[str, list[float]]] = {}
    for r in records:
        if isinstance(r, EpisodeEnded) and r.phase == "test":
            by.setdefault(r.window, {"hidden": [], "fully_specified": []}).setdefault(
                r.category, []
            ).append(r.reward)
    return [
        WindowScores(
            w,
            tested.get(w),
            _mean(rewards["hidden"]),
            _mean(rewards["fully_specified"]),
            sum(len(v) for v in rewards.values()),
        )
        for w, rewards in sorted(by.items())
    ]


def _blocks(records: Sequence[object]) -> list[BlockReward]:
    served = sorted(
        (r for r in records if isinstance(r, EpisodeEnded) and r.phase == "serving"),
        key=lambda r: r.timestamp,
    )
    out = []
    for start in range(0, len(served), 12):
        block = served[start : start + 12]
        reward = _mean([r.reward for r in block])
        assert reward is not None
        out.append(BlockReward(start // 12, block[0].window, reward, len(block)))
    return out


def _spend(root: Path, start: float) -> tuple[list[SpendPoint], dict[str, str]]:
    points, totals = [], {}
    for meter, name in METERS.items():
        path = root / name
        if not path.is_file():
            continue
        spent = Decimal(0)
        for line in sorted(meters.read_ledger(path), key=lambda x: (x.ended, x.id)):
            spent += Decimal(line.cost_usd)
            points.append(SpendPoint(meter, round(max(line.ended - start, 0.0), 3), str(spent)))
        totals[meter] = meters.usd(spent)
    return points, totals


def _versions(root: Path, tag: str, records: Sequence[object]) -> list[VersionCard]:
    learned = sorted(
        {r.version: r for r in records if isinstance(r, BlockLearned)}.values(),
        key=lambda r: r.version,
    )
    out, before = [], ""
    for r in learned:
        path = root / tag / "checkout" / "versions" / r.digest / "card.md"
        card = path.read_text() if path.is_file() else None
        diff = (
            list(
                difflib.unified_diff(
                    before.splitlines(),
                    card.splitlines(),
                    f"v{r.version - 1}",
                    f"v{r.version}",
                    lineterm="",
                )
            )
            if card is not None
            else []
        )
        out.append(VersionCard(r.version, r.block, r.cases, r.digest, card, diff))
        before = card if card is not None else before
    return out


def _prices(root: Path) -> meters.PriceTable | None:
    """The run's prices, to cost each episode shown (None: the run kept none, or bad)."""
    try:
        return meters.load_prices(root / "prices.json")
    except ConfigError:
        return None


def build_run_report(root: Path, *, figures_only: bool = False) -> RunReport:
    """The report of the serve-and-learn run in ``root``.

    ``figures_only`` leaves out the trajectories (and with them every task's text).

    Raises:
        ConfigError: ``root`` holds no serve-and-learn campaign.
    """
    journal = root / "journal"
    if not journal.is_dir():
        raise ConfigError(
            f"{root} holds no campaign (no journal/)", hint="pass a run directory: $MW_RUNS/TAG"
        )
    entries: list[Entry] = read_journal(journal, CAMPAIGN_RECORDS)
    records = [e.rec for e in entries]
    started = next((e for e in entries if isinstance(e.rec, ServeLearnStarted)), None)
    if started is None:
        raise ConfigError(
            f"{root} holds no serve-and-learn campaign that started",
            hint="wsm benchmark report RUN_DIR reports a weight-editing run",
        )
    begun: ServeLearnStarted = started.rec  # type: ignore[assignment]
    ended = [r for r in records if isinstance(r, ServeLearnEnded)]
    results = sorted((root / "task" / "results").glob("*.jsonl"))
    score = score_file(results[0]) if ended and results else None
    spend, totals = _spend(root, started.t)
    return RunReport(
        tag=begun.tag,
        scenario=begun.scenario,
        method=begun.method,
        model=begun.model,
        state=ended[-1].state if ended else "unknown",
        allocation_usd=begun.allocation_usd,
        hidden=None if score is None else score.hidden,
        fully_specified=None if score is None else score.fully_specified,
        n_test=0 if score is None else score.n_test,
        windows=window_scores(records),
        blocks=_blocks(records),
        spend=spend,
        spend_usd=totals,
        versions=_versions(root, begun.tag, records),
        odd=[
            OddEpisode(r.task_id, r.phase, r.window, r.status)
            for r in records
            if isinstance(r, EpisodeEnded) and r.status in ("unknown", "budget_blocked")
        ],
        trajectories=[] if figures_only else trajectories(records, begun.model, _prices(root)),
    )


def render_run_json(report: RunReport) -> str:
    return msgspec.json.format(msgspec.json.encode(report), indent=2).decode() + "\n"


def _score(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def render_run_markdown(report: RunReport) -> str:
    r = report
    lines = [
        f"# {r.tag}: {r.scenario}, {r.method}, {r.model}",
        "",
        f"State: {r.state}. Hidden {_score(r.hidden)}, Fully Specified "
        f"{_score(r.fully_specified)} ({r.n_test} tests). Spend: "
        + (", ".join(f"{m} ${usd}" for m, usd in r.spend_usd.items()) or "none")
        + f" of ${r.allocation_usd}.",
        "",
        "## Test scores per window",
        "",
        "| window | version | tests | hidden | fully specified |",
        "|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {w.window} | {'-' if w.version is None else f'v{w.version}'} | {w.tests} | "
        f"{_score(w.hidden)} | {_score(w.fully_specified)} |"
        for w in r.windows
    ]
    lines += ["", "## Learning curve (serving reward per block)", ""]
    lines += ["| block | window | cases | reward |", "|---:|---:|---:|---:|"]
    lines += [f"| {b.block} | {b.window} | {b.cases} | {b.reward:.1f} |" for b in r.blocks]
    lines += ["", "## Versions", ""]
    for v in r.versions:
        lines += [f"### v{v.version} (from block {v.block}, {v.cases} cases)", ""]
        if v.card is None:
            lines += ["(this method keeps no card)", ""]
        else:
            lines += ["```diff", *v.diff, "```", ""]
    lines += ["## Episodes that ended unknown or budget_blocked", ""]
    lines += [f"- {e.task_id} ({e.phase}, window {e.window}): {e.status}" for e in r.odd] or [
        "none"
    ]
    lines += ["", TRAJECTORIES, ""]
    lines += trajectories_markdown(r.trajectories) if r.trajectories else [_FIGURES_ONLY]
    return "\n".join(lines) + "\n"


MAX_POINTS = 200  # per meter on the page; the JSON keeps every line


def _thinned(points: list[SpendPoint]) -> list[SpendPoint]:
    """At most MAX_POINTS of ``points``, evenly spaced, the last always among them."""
    if len(points) <= MAX_POINTS:
        return points
    step = len(points) / MAX_POINTS
    kept = [points[int(i * step)] for i in range(MAX_POINTS - 1)]
    return [*kept, points[-1]]


def _spend_chart(report: RunReport) -> str:
    series = []
    for meter in report.spend_usd:
        points = _thinned([p for p in report.spend if p.meter == meter])
        tips = [f"{meter}: ${p.usd} at {p.seconds:.1f} s" for p in points]
        series.append(Series(meter, [(p.seconds, float(p.usd)) for p in points], tips))
    allocation = float(report.allocation_usd)
    spent = max((float(p.usd) for p in report.spend), default=0.0)
    note = ""
    if spent and allocation > 1.25 * spent:  # it would flatten the spend to the axis
        share = 100 * sum(float(v) for v in report.spend_usd.values()) / allocation
        note = (
            f"<p class='none'>the allocation, ${html.escape(report.allocation_usd)}, is off "
            f"the chart: the run spent {share:.2f}% of it</p>"
        )
        top = spent * 1.25
    else:
        end = max((p.seconds for p in report.spend), default=0.0)
        tip = f"allocation ${report.allocation_usd}"
        series.append(Series("allocation", [(0.0, allocation), (end, allocation)], [tip] * 2, True))
        top = allocation or 1.0
    chart = line_chart(series, x_label="seconds since the start", y_label="USD", y_max=top)
    return chart + note


def _windows_chart(report: RunReport) -> str:
    windows = report.windows
    hidden_tips = [
        f"window {w.window}: Hidden {_score(w.hidden)} ({w.tests} tests)" for w in windows
    ]
    full_tips = [f"window {w.window}: Fully Specified {_score(w.fully_specified)}" for w in windows]
    bars = Bars(
        [f"w{w.window}" for w in windows],
        [
            ("Hidden", [w.hidden for w in windows]),
            ("Fully Specified", [w.fully_specified for w in windows]),
        ],
        [hidden_tips, full_tips],
    )
    return bar_chart(bars, x_label="window", y_label="test score", y_max=100)


def _curve_chart(report: RunReport) -> str:
    blocks = report.blocks
    boundaries = [
        (b.block, f"window {b.window} begins")
        for before, b in itertools.pairwise(blocks)
        if b.window != before.window
    ]
    tips = [f"block {b.block} (window {b.window}): {b.reward:.1f} over {b.cases}" for b in blocks]
    line = Series("serving reward", [(b.block, b.reward) for b in blocks], tips)
    return line_chart(
        [line],
        x_label="block of 12 served cases",
        y_label="mean reward",
        y_max=100,
        marks=boundaries,
    )


def _diff_html(diff: Sequence[str]) -> str:
    def line(d: str) -> str:
        kind = "add" if d.startswith("+") else "del" if d.startswith("-") else "same"
        return f"<span class='{kind}'>{html.escape(d)}</span>"

    return "<pre class='diff'>" + "\n".join(line(d) for d in diff) + "</pre>"


def _versions_html(report: RunReport) -> str:
    parts = []
    for v in report.versions:
        body = (
            "<p class='none'>this method keeps no card</p>"
            if v.card is None
            else _diff_html(v.diff)
        )
        parts.append(
            f"<details id='v{v.version}'><summary>v{v.version}: "
            f"from block {v.block}, {v.cases} cases "
            f"<code>{html.escape(v.digest[:12])}</code></summary>{body}</details>"
        )
    return "".join(parts) or "<p class='none'>no version learned</p>"


def _odd_html(report: RunReport) -> str:
    e = html.escape
    shown = {(t.task_id, t.phase, t.window): n for n, t in enumerate(report.trajectories)}

    def task(o: OddEpisode) -> str:
        number = shown.get((o.task_id, o.phase, o.window))
        name = e(o.task_id)
        return name if number is None else f"<a href='#{anchor(number)}'>{name}</a>"

    rows = "".join(
        f"<tr><td>{task(o)}</td><td>{e(o.phase)}</td><td>{o.window}</td><td>{e(o.status)}</td></tr>"
        for o in report.odd
    )
    if not rows:
        return "<p class='none'>none</p>"
    return (
        f"<table><tr><th>task</th><th>phase</th><th>window</th><th>status</th></tr>{rows}</table>"
    )


STYLE = (
    "body{font-family:system-ui,sans-serif;margin:2em;max-width:60em}"
    "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2em .6em}"
    "pre.diff{background:#f8f8f8;padding:.6em;overflow-x:auto}.add{color:#1e8449}"
    ".del{color:#c0392b}.none{color:#777}summary{cursor:pointer}"
    "details.episode pre{white-space:pre-wrap;margin:.3em 0}pre.asked{background:#eef3f8;"
    "padding:.5em}pre.said{color:#555}pre.obs{background:#f8f8f8;padding:.4em}"
    ".kind{font-size:80%;color:#777}"
)

TRAJECTORIES = "## Odd episodes and failed tests, step by step"
_FIGURES_ONLY = "none (or left out: a figures-only report)"


def render_run_html(report: RunReport) -> str:
    """One self-contained page: figures as inline SVG with tooltips, cards as diffs."""
    r, e = report, html.escape
    spend = ", ".join(f"{e(m)} ${e(usd)}" for m, usd in r.spend_usd.items()) or "none"
    title = f"{r.tag}: {r.scenario}, {r.method}"
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{e(title)}</title>"
        f"<style>{STYLE}</style></head><body><h1>{e(title)}</h1>"
        f"<p>Host model {e(r.model)}. State: <b>{e(r.state)}</b>. Hidden "
        f"<b>{_score(r.hidden)}</b>, Fully Specified <b>{_score(r.fully_specified)}</b> "
        f"({r.n_test} tests). Spend: {spend} of ${e(r.allocation_usd)}.</p>"
        f"<h2>Test scores per window</h2>{_windows_chart(r)}"
        "<h2>Learning curve</h2><p>the mean reward of each block of 12 served cases; "
        f"dashed lines mark where a window begins</p>{_curve_chart(r)}"
        f"<h2>Spend over time</h2>{_spend_chart(r)}"
        f"<h2>Versions: the card the host saw</h2>{_versions_html(r)}"
        f"<h2>Episodes that ended unknown or budget_blocked</h2>{_odd_html(r)}"
        f"<h2>{e(TRAJECTORIES[3:])}</h2>"
        + (
            trajectories_html(r.trajectories, {v.version for v in r.versions if v.card})
            if r.trajectories
            else f"<p class='none'>{e(_FIGURES_ONLY)}</p>"
        )
        + "</body></html>\n"
    )
