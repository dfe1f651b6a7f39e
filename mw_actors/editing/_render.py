"""The report as Markdown and as a self-contained offline HTML page (inline SVG plots)."""

from __future__ import annotations

import html

from .._svg import Bars, Point, bar_chart, scatter_chart
from ._report import Report, StepReport, TrialReport

__all__ = ["render_html", "render_markdown"]


def _num(value: float | None) -> str:
    return "—" if value is None else f"{value:.6f}"


def _verdict(value: bool | None) -> str:
    return "n/a" if value is None else ("yes" if value else "no")


def render_markdown(report: Report) -> str:
    """The report as Markdown: labels, arms, trials, checks, budget. No private text."""
    labels = ", ".join(report.labels) or "none"
    lines = [
        f"# wsm benchmark: {report.campaign}",
        "",
        f"- labels: {labels}",
        f"- runtime: {report.backend} (isolated: {_verdict(report.isolated)})",
        f"- finished: {_verdict(report.finished)}",
        f"- config sha256: `{report.config_sha256}`",
        *([] if report.seed is None else [f"- seed (WSM_SEED): {report.seed}"]),
        "",
        "## Arms",
        "",
        "| arm | trials | graded | mean task loss | mean regression loss |",
        "|---|---:|---:|---:|---:|",
    ]
    for arm, s in report.arms.items():
        lines.append(
            f"| {arm} | {s.trials} | {s.graded} | {_num(s.mean_task_loss)} | "
            f"{_num(s.mean_regression_loss)} |"
        )
    lines += [
        "",
        "## Trials",
        "",
        "| trial | outcome | task loss | regression loss | steps | receipts | export sha256 |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for t in report.trials:
        digest = f"`{t.file_sha256[:16]}`" if t.file_sha256 else "—"
        lines.append(
            f"| {t.trial_id} | {t.outcome} | {_num(t.task_loss)} | {_num(t.regression_loss)} | "
            f"{t.steps} | {len(t.receipts)} | {digest} |"
        )
    reasons = [t for t in report.trials if t.reason]
    if reasons:
        lines += ["", "Reasons:", ""]
        lines += [f"- {t.trial_id}: {t.reason}" for t in reasons]
    c = report.checks
    tolerance = "exact" if c.tolerance is None else f"{c.tolerance:g}"
    lines += [
        "",
        "## Checks",
        "",
        f"- scripted edit worse than baseline: {_verdict(c.scripted_worse_than_baseline)}",
        f"- agent restores the baseline (tolerance {tolerance}): "
        f"{_verdict(c.agent_restores_baseline)}",
        "",
        "## Budget",
        "",
        f"- allocation: ${report.budget.allocation_usd}",
        f"- reserved: ${report.budget.reserved_usd}",
        f"- spent: ${report.budget.spent_usd}",
        "",
    ]
    return "\n".join(lines)


def _short(digest: str | None) -> str:
    return "none" if digest is None else digest[:12]


def _loss_bars(report: Report) -> str:
    arms = list(report.arms.items())
    task = [s.mean_task_loss for _, s in arms]
    regression = [s.mean_regression_loss for _, s in arms]
    bars = Bars(
        [arm for arm, _ in arms],
        [("task loss", task), ("regression loss", regression)],
        [
            [
                f"{arm}: mean task loss {_num(v)} over {s.graded} graded"
                for (arm, s), v in zip(arms, task, strict=True)
            ],
            [
                f"{arm}: mean regression loss {_num(v)}"
                for (arm, _), v in zip(arms, regression, strict=True)
            ],
        ],
    )
    return bar_chart(bars, x_label="arm", y_label="mean loss (lower is better)")


def _scatter(report: Report) -> str:
    """A point per graded trial; trials on the same spot share one, its tooltip names all."""
    arms = list(report.arms)
    spots: dict[tuple[float, float], list[TrialReport]] = {}
    for t in report.trials:
        if t.task_loss is not None and t.regression_loss is not None:
            spots.setdefault((t.task_loss, t.regression_loss), []).append(t)
    points = [
        Point(
            x,
            y,
            f"{', '.join(t.trial_id for t in here)}: task {_num(x)}, regression {_num(y)}",
            arms.index(here[0].arm) if here[0].arm in arms else 0,
        )
        for (x, y), here in spots.items()
    ]
    return scatter_chart(points, arms, x_label="task loss", y_label="regression loss")


def _step_html(step: StepReport) -> str:
    e = html.escape
    given = "".join(
        f"<div class='arg'>{e(name)}:</div><pre>{e(str(value))}</pre>"
        for name, value in step.arguments.items()
    )
    changed = (
        "unchanged"
        if step.before_sha256 == step.after_sha256
        else f"{_short(step.before_sha256)} &rarr; {_short(step.after_sha256)}"
    )
    weights = (
        f"<code title='before {e(step.before_sha256 or 'none')}, after "
        f"{e(step.after_sha256 or 'none')}'>{_short(step.after_sha256)}</code> ({changed})"
    )
    output = (
        f"<div class='out'>last output: <code>{e(step.output)}</code></div>" if step.output else ""
    )
    return (
        f"<li><b>turn {step.turn}: {e(step.tool)}</b>{given}"
        f"<div>&rarr; {e(step.result)}; weights {weights}</div>{output}</li>"
    )


def _walkthrough(trial: TrialReport, *, opened: bool) -> str:
    e, open_ = html.escape, " open" if opened else ""
    steps = "".join(_step_html(s) for s in trial.step_log) or (
        "<li>no tool call: this arm leaves the weights as they are</li>"
        if trial.arm == "baseline"
        else "<li>no step recorded</li>"
    )
    export = (
        f"export <code>{e(trial.file_sha256)}</code> (tensor payload "
        f"<code>{e(trial.payload_sha256 or 'none')}</code>)"
        if trial.file_sha256
        else "no export"
    )
    return (
        f"<details{open_}><summary>{e(trial.trial_id)}: {e(trial.outcome)}, "
        f"{len(trial.step_log)} steps</summary><ol class='steps'>{steps}</ol>"
        f"<p>{export}; task loss {_num(trial.task_loss)}, regression loss "
        f"{_num(trial.regression_loss)}"
        + (f"; {e(trial.reason)}" if trial.reason else "")
        + "</p></details>"
    )


def render_html(report: Report) -> str:
    """A self-contained offline page: no script, no external asset."""
    rows = "".join(
        f"<tr><td>{html.escape(t.trial_id)}</td><td>{html.escape(t.outcome)}</td>"
        f"<td>{_num(t.task_loss)}</td><td>{_num(t.regression_loss)}</td><td>{t.steps}</td>"
        f"<td><code>{html.escape((t.file_sha256 or '—')[:16])}</code></td>"
        f"<td>{html.escape(t.reason or '')}</td></tr>"
        for t in report.trials
    )
    c = report.checks
    seed = "" if report.seed is None else f"; seed (WSM_SEED) {report.seed}"
    # A small campaign's trials are open to read; a large one's open on a click.
    opened = len(report.trials) <= 6
    walkthroughs = "".join(_walkthrough(t, opened=opened) for t in report.trials)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>wsm benchmark: {html.escape(report.campaign)}</title>
<style>
body {{ font: 15px/1.45 system-ui, sans-serif; max-width: 56em; margin: 2em auto; color: #222; }}
table {{ border-collapse: collapse; }} td, th {{ border: 1px solid #ccc; padding: 4px 8px; }}
.labels {{ color: #a33; }} summary {{ cursor: pointer; }} pre {{ background: #f6f6f6;
padding: 4px 8px; margin: 2px 0; white-space: pre-wrap; }} .steps li {{ margin-bottom: .6em; }}
.arg, .out {{ color: #555; font-size: 13px; }}
</style></head><body>
<h1>wsm benchmark: {html.escape(report.campaign)}</h1>
<p class="labels">labels: {html.escape(", ".join(report.labels) or "none")}{seed}</p>
<p>Three arms edit the same student: <b>baseline</b> leaves the weights as they are,
<b>scripted</b> applies a frozen edit, <b>agent</b> edits through tool calls. Each export is
graded in a separate process on the private task partition and on a regression partition
(mean next-token loss; lower is better). Runtime: {html.escape(report.backend)}
(isolated: {_verdict(report.isolated)}). Hover a bar or a point for its numbers.</p>
<h2>1. Loss per arm</h2>{_loss_bars(report)}
<h2>2. Task against regression, per trial</h2>{_scatter(report)}
<h2>3. Trials</h2>
<table><tr><th>trial</th><th>outcome</th><th>task loss</th><th>regression loss</th>
<th>steps</th><th>export</th><th>reason</th></tr>{rows}</table>
<h2>4. What each trial did</h2>
<p>Each tool call in order: what it was given, what came of it, and the working weights'
file hash after it (hover the hash for before and after).</p>
{walkthroughs}
<h2>5. Checks</h2>
<ul><li>scripted edit worse than baseline: {_verdict(c.scripted_worse_than_baseline)}</li>
<li>agent restores the baseline: {_verdict(c.agent_restores_baseline)}</li></ul>
<h2>6. Budget</h2>
<p>allocation ${report.budget.allocation_usd}, reserved ${report.budget.reserved_usd},
spent ${report.budget.spent_usd}</p>
</body></html>
"""
