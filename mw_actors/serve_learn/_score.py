"""``mw score``: setting scores from results JSONL, computed as ServeLearnBench's ``slb score``.

A setting score is 100 x the mean ``reward`` over a results file's ``test``
rows of one category (``hidden`` or ``fully_specified``), or null when it has
none. Averages weight every setting equally and exist only when all of their
settings are present: Hidden over the nine retail, banking and pitch settings,
Fully Specified over the six retail and banking ones.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import msgspec

from mw_errors import ConfigError

__all__ = [
    "OFFICIAL_SCENARIOS",
    "Averages",
    "SettingScore",
    "averages",
    "score_file",
    "score_table",
]

OFFICIAL_SCENARIOS = tuple(f"{d}_l{t}" for d in ("retail", "banking", "pitch") for t in (1, 2, 3))


class SettingScore(msgspec.Struct, frozen=True):
    file: str
    scenario: str
    method: str
    model: str
    hidden: float | None
    fully_specified: float | None
    n_test: int

    def line(self) -> str:
        """``hidden 91.7, fully specified None (24 tests)``, as the commands print it."""
        return f"hidden {self.hidden}, fully specified {self.fully_specified} ({self.n_test} tests)"


class Averages(msgspec.Struct, frozen=True):
    model: str
    method: str
    avg_hidden: float | None
    avg_fully_specified: float | None


def score_file(path: Path) -> SettingScore:
    """Score one results file.

    Raises:
        ConfigError: the file is missing, has no config line, or a row is malformed.
    """
    config: dict[str, Any] = {}
    rewards: dict[str, list[float]] = {"hidden": [], "fully_specified": []}
    n_test = 0
    try:
        lines = path.read_bytes().splitlines()
    except OSError as exc:
        raise ConfigError(f"cannot read results {path}: {exc.strerror}") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = msgspec.json.decode(line)
        except msgspec.DecodeError:
            raise ConfigError(f"{path}:{number}: not JSON") from None
        if not isinstance(row, dict):
            raise ConfigError(
                f"{path}:{number}: a row is a JSON object, not {type(row).__name__}",
                hint="give a results file as the benchmark's runner writes it",
            )
        if "config" in row:
            config = row["config"]
            continue
        if row.get("phase") != "test":
            continue
        try:
            rewards[row["category"]].append(float(row["reward"]))
        except (KeyError, TypeError, ValueError):
            raise ConfigError(
                f"{path}:{number}: a test row needs a category (hidden | fully_specified) "
                "and a numeric reward"
            ) from None
        n_test += 1
    if not config:
        raise ConfigError(
            f"{path} has no config line", hint='the first line is {"config": {"scenario", ...}}'
        )

    def mean(values: list[float]) -> float | None:
        return 100 * sum(values) / len(values) if values else None

    return SettingScore(
        file=str(path),
        scenario=str(config.get("scenario", "?")),
        method=str(config.get("method", "?")),
        model=str(config.get("model", "?")),
        hidden=mean(rewards["hidden"]),
        fully_specified=mean(rewards["fully_specified"]),
        n_test=n_test,
    )


def averages(scores: Iterable[SettingScore]) -> list[Averages]:
    """Per (model, method): the averages over the official settings, when all are present."""
    table: dict[tuple[str, str], dict[str, SettingScore]] = {}
    for s in scores:
        table.setdefault((s.model, s.method), {})[s.scenario] = s
    out = []
    for (model, method), cells in table.items():
        hidden = [cells[n].hidden for n in OFFICIAL_SCENARIOS if n in cells]
        full = [
            cells[n].fully_specified
            for n in OFFICIAL_SCENARIOS
            if n in cells and not n.startswith("pitch")
        ]
        complete_h = len(hidden) == 9 and None not in hidden
        complete_f = len(full) == 6 and None not in full
        out.append(
            Averages(
                model=model,
                method=method,
                avg_hidden=sum(h for h in hidden if h is not None) / 9 if complete_h else None,
                avg_fully_specified=sum(f for f in full if f is not None) / 6
                if complete_f
                else None,
            )
        )
    return out


def score_table(scores: Sequence[SettingScore]) -> str:
    """The scores as ``mw score`` prints them: one row per file, then each averages line."""

    def cell(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f}"

    lines = [
        f"{'scenario':<16} {'method':<12} {'model':<28} {'hidden':>7} {'full':>7} {'tests':>6}"
    ]
    lines += [
        f"{s.scenario:<16} {s.method:<12} {s.model:<28} {cell(s.hidden):>7} "
        f"{cell(s.fully_specified):>7} {s.n_test:>6}"
        for s in scores
    ]
    lines += [
        f"average {a.method} / {a.model}: hidden {cell(a.avg_hidden)} (over 9 settings), "
        f"fully specified {cell(a.avg_fully_specified)} (over 6)"
        for a in averages(scores)
    ]
    return "\n".join(lines)
