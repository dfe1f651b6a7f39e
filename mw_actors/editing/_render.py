"""The report as Markdown and as a self-contained offline HTML page (inline SVG plots)."""

from __future__ import annotations

import html

from ._report import Report, TrialReport

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


_COLORS = {"baseline": "#4c72b0", "scripted": "#dd8452", "agent": "#55a868"}


def _bars(report: Report) -> str:
    arms = [(arm, s) for arm, s in report.arms.items()]
    values = [v for _, s in arms for v in (s.mean_task_loss, s.mean_regression_loss) if v]
    top = max(values, default=1.0) * 1.1
    width, height, pad = 480, 220, 40
    slot = (width - 2 * pad) / max(len(arms), 1)
    parts = [f'<svg viewBox="0 0 {width} {height}" role="img" aria-label="loss per arm">']
    parts.append(
        f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" '
        'stroke="#333"/>'
    )
    for i, (arm, s) in enumerate(arms):
        for j, (label, value) in enumerate(
            (("task", s.mean_task_loss), ("regression", s.mean_regression_loss))
        ):
            if value is None:
                continue
            bar = (height - 2 * pad) * value / top
            x = pad + i * slot + 8 + j * (slot / 2 - 8)
            opacity = "1" if label == "task" else "0.55"
            parts.append(
                f'<rect x="{x:.1f}" y="{height - pad - bar:.1f}" width="{slot / 2 - 12:.1f}" '
                f'height="{bar:.1f}" fill="{_COLORS.get(arm, "#888")}" opacity="{opacity}">'
                f"<title>{html.escape(arm)} {label}: {value:.6f}</title></rect>"
            )
        parts.append(
            f'<text x="{pad + (i + 0.5) * slot:.1f}" y="{height - pad + 16}" '
            f'text-anchor="middle">{html.escape(arm)}</text>'
        )
    parts.append(f'<text x="{pad}" y="16">mean loss (solid: task, light: regression)</text>')
    parts.append("</svg>")
    return "".join(parts)


def _scatter(trials: list[TrialReport]) -> str:
    points = [t for t in trials if t.task_loss is not None and t.regression_loss is not None]
    width, height, pad = 480, 260, 44
    parts = [
        f'<svg viewBox="0 0 {width} {height}" role="img" aria-label="task against regression">'
    ]
    if not points:
        return parts[0] + '<text x="20" y="40">no graded trial</text></svg>'
    xs = [t.task_loss for t in points if t.task_loss is not None]
    ys = [t.regression_loss for t in points if t.regression_loss is not None]
    x0, x1 = min(xs), max(xs)
    y0, y1 = min(ys), max(ys)
    span_x, span_y = (x1 - x0) or 1.0, (y1 - y0) or 1.0

    def sx(v: float) -> float:
        return pad + (width - 2 * pad) * (v - x0) / span_x

    def sy(v: float) -> float:
        return height - pad - (height - 2 * pad) * (v - y0) / span_y

    parts.append(
        f'<rect x="{pad}" y="{pad}" width="{width - 2 * pad}" height="{height - 2 * pad}" '
        'fill="none" stroke="#ccc"/>'
    )
    for t in points:
        assert t.task_loss is not None
        assert t.regression_loss is not None
        parts.append(
            f'<circle cx="{sx(t.task_loss):.1f}" cy="{sy(t.regression_loss):.1f}" r="6" '
            f'fill="{_COLORS.get(t.arm, "#888")}"><title>{html.escape(t.trial_id)}: task '
            f"{t.task_loss:.6f}, regression {t.regression_loss:.6f}</title></circle>"
        )
    parts.append(f'<text x="{width / 2}" y="{height - 8}" text-anchor="middle">task loss</text>')
    mid = height / 2
    parts.append(
        f'<text x="12" y="{mid}" transform="rotate(-90 12 {mid})" '
        'text-anchor="middle">regression loss</text>'
    )
    parts.append("</svg>")
    return "".join(parts)


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
    legend = "".join(
        f'<span class="key" style="background:{color}"></span>{arm} '
        for arm, color in _COLORS.items()
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>wsm benchmark: {html.escape(report.campaign)}</title>
<style>
body {{ font: 15px/1.45 system-ui, sans-serif; max-width: 56em; margin: 2em auto; color: #222; }}
table {{ border-collapse: collapse; }} td, th {{ border: 1px solid #ccc; padding: 4px 8px; }}
svg {{ width: 100%; max-width: 480px; font-size: 12px; }} .key {{ display: inline-block;
width: 12px; height: 12px; margin: 0 4px 0 12px; }} .labels {{ color: #a33; }}
</style></head><body>
<h1>wsm benchmark: {html.escape(report.campaign)}</h1>
<p class="labels">labels: {html.escape(", ".join(report.labels) or "none")}</p>
<p>Three arms edit the same student: <b>baseline</b> leaves the weights as they are,
<b>scripted</b> applies a frozen edit, <b>agent</b> edits through tool calls. Each export is
graded in a separate process on the private task partition and on a regression partition
(mean next-token loss; lower is better). Runtime: {html.escape(report.backend)}
(isolated: {_verdict(report.isolated)}).</p>
<h2>1. Loss per arm</h2><p>{legend}</p>{_bars(report)}
<h2>2. Task against regression, per trial</h2>{_scatter(report.trials)}
<h2>3. Trials</h2>
<table><tr><th>trial</th><th>outcome</th><th>task loss</th><th>regression loss</th>
<th>steps</th><th>export</th><th>reason</th></tr>{rows}</table>
<h2>4. Checks</h2>
<ul><li>scripted edit worse than baseline: {_verdict(c.scripted_worse_than_baseline)}</li>
<li>agent restores the baseline: {_verdict(c.agent_restores_baseline)}</li></ul>
<h2>5. Budget</h2>
<p>allocation ${report.budget.allocation_usd}, reserved ${report.budget.reserved_usd},
spent ${report.budget.spent_usd}</p>
</body></html>
"""
