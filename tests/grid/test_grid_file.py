"""Grid files: cells, tags and one-line refusals; the leaderboard's columns and rules."""

from __future__ import annotations

import gc
import json
from pathlib import Path

import msgspec
import pytest

from mw_actors.grid import (
    CellOutcome,
    GridSpec,
    cell_tag,
    leaderboard,
    leaderboard_csv,
    leaderboard_markdown,
    load_grid,
    read_grid,
    setting_column,
)
from mw_actors.serve_learn import OFFICIAL_SCENARIOS
from mw_errors import ConfigError, EvidenceError
from tests.processes import mw

GRID = """\
tag: g1
scenarios: [synthetic_l1, synthetic_l2]
methods: [mwm-local, blind]
models: [local/scripted, fireworks/accounts/fireworks/models/glm-5p3-flash]
train_split: 48
runs: shared/runs
allocation: 5
"""


def test_a_grid_names_every_cell_once_in_a_stable_order(tmp_path: Path) -> None:
    path = tmp_path / "grid.yaml"
    path.write_text(GRID)
    grid = load_grid(path)
    assert [(c.scenario, c.method, c.model) for c in grid.cells][:3] == [
        ("synthetic_l1", "mwm-local", "local/scripted"),
        ("synthetic_l1", "mwm-local", "fireworks/accounts/fireworks/models/glm-5p3-flash"),
        ("synthetic_l1", "blind", "local/scripted"),
    ]
    assert len(grid.cells) == 8
    assert grid.cells[0].tag == "g1.synthetic_l1.mwm-local.local-scripted"
    assert grid.cells[1].learner_model == grid.cells[1].model  # by default, the same
    assert grid.settings == {"train_split": 48}
    assert grid.runs == str(tmp_path / "shared" / "runs")  # relative to the grid file
    assert load_grid(path) == grid  # the same file names the same cells
    as_json = tmp_path / "grid.json"
    as_json.write_text(json.dumps({**_yaml_fields(), "allocation": "5"}))
    assert [c.tag for c in load_grid(as_json).cells] == [c.tag for c in grid.cells]


def test_a_grids_paths_survive_the_grid_json_a_run_keeps(tmp_path: Path) -> None:
    # grid.json is what status, report and a resume read the grid from: a grid file
    # with paths (runs, a launch config) must encode and decode unchanged.
    path = tmp_path / "grid.yaml"
    path.write_text(GRID + "config: launch/config.yaml\n")
    grid = load_grid(path)
    assert grid.settings["config"] == str(tmp_path / "launch" / "config.yaml")
    kept = msgspec.json.decode(msgspec.json.encode(grid), type=GridSpec)
    assert kept == grid


def _yaml_fields() -> dict[str, object]:
    return {
        "tag": "g1",
        "scenarios": ["synthetic_l1", "synthetic_l2"],
        "methods": ["mwm-local", "blind"],
        "models": ["local/scripted", "fireworks/accounts/fireworks/models/glm-5p3-flash"],
        "train_split": 48,
    }


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("bogus: 1\n", "unknown field `bogus`"),
        ("learner_models: [local/scripted]\n", "learner_models has 1 names for 2 models"),
        ("max_parallel: 0\n", "max_parallel 0"),
    ],
)
def test_a_bad_grid_is_refused_in_one_line(tmp_path: Path, change: str, message: str) -> None:
    path = tmp_path / "grid.yaml"
    path.write_text(GRID + change)
    with pytest.raises(ConfigError, match=message) as refused:
        load_grid(path)
    assert "\n" not in refused.value.render()


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("methods", "[]", "methods list is empty"),
        ("models", "[a, a]", "models must be distinct"),
        ("allocation", "-1", "allocation -1"),
        ("tag", "'../up'", "is not a run name"),
        ("scenarios", "['../x']", "../x"),
    ],
)
def test_a_bad_field_is_refused(tmp_path: Path, field: str, value: str, message: str) -> None:
    lines = [line for line in GRID.splitlines() if not line.startswith(f"{field}:")]
    path = tmp_path / "grid.yaml"
    path.write_text("\n".join([*lines, f"{field}: {value}"]) + "\n")
    with pytest.raises(ConfigError, match=message):
        load_grid(path)


def test_a_file_that_is_not_yaml_or_is_missing_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read grid file"):
        load_grid(tmp_path / "none.yaml")
    (tmp_path / "broken.yaml").write_text("tag: [unclosed\n")
    with pytest.raises(ConfigError, match="not YAML or JSON"):
        load_grid(tmp_path / "broken.yaml")


def test_cell_tags_are_run_names_and_stay_distinct_when_long() -> None:
    long_a, long_b = "p/" + "m" * 200 + "a", "p/" + "m" * 200 + "b"
    a = cell_tag("g", "retail_l1", "mwm", long_a, long_a)
    b = cell_tag("g", "retail_l1", "mwm", long_b, long_b)
    assert len(a) <= 128 and len(b) <= 128 and a != b
    assert cell_tag("g", "s", "m", "x/y", "x/z") == "g.s.m.x-y.x-z"  # its own learner: named
    assert cell_tag("g", "s", "slb:rag", "m", "m") == "g.s.slb-rag.m"  # a benchmark method
    assert cell_tag("g", "s", "pkg.mod:Class", "m", "m") == "g.s.pkg.mod-Class.m"


def test_columns_take_the_benchmarks_leaderboard_names() -> None:
    assert setting_column("banking_l1", "hidden") == "banking_H_L1"
    assert setting_column("retail_l3", "fully_specified") == "retail_F_L3"
    assert setting_column("synthetic_l1", "hidden") == "synthetic_l1_H"


def _outcome(scenario: str, hidden: float | None, full: float | None, **kw: object) -> CellOutcome:
    fields: dict[str, object] = {
        "tag": f"g.{scenario}",
        "scenario": scenario,
        "method": "mwm",
        "model": "m",
        "state": "completed",
        "hidden": hidden,
        "fully_specified": full,
        "cost_usd": "1.25",
        "served": 0,
        "hidden_so_far": None,
        "fully_specified_so_far": None,
        "tested": 0,
        "serving_total": 0,
    }
    fields.update(kw)
    return CellOutcome(**fields)  # type: ignore[arg-type]


def test_averages_need_every_official_setting_and_unknown_is_never_a_score() -> None:
    full = [
        _outcome(s, 10.0 * i, None if s.startswith("pitch") else 50.0)
        for i, s in enumerate(OFFICIAL_SCENARIOS)
    ]
    (row,) = leaderboard(full).rows
    assert row["avg_h"] == f"{sum(10.0 * i for i in range(9)) / 9:.1f}"
    assert row["avg_f"] == "50.0"
    assert row["api_cost_usd"] == "11.25"  # every cell's ledgers, summed
    assert "pitch_F_L1" not in leaderboard(full).columns  # Pitch is Hidden only
    unfinished = [*full[:8], _outcome("pitch_l3", 90.0, None, state="unknown")]
    (row,) = leaderboard(unfinished).rows
    assert row["pitch_H_L3"] == "unknown"
    assert row["avg_h"] == "" and row["avg_f"] == "50.0"
    header = leaderboard_csv(unfinished).splitlines()[0].split(",")
    assert header[:3] == ["model", "method", "retail_H_L1"]
    assert header[-3:] == ["avg_h", "avg_f", "api_cost_usd"]
    # Markdown: the row's names (model, method) left-aligned, every score right-aligned.
    rule = leaderboard_markdown(unfinished).splitlines()[1]
    assert rule == "|---|---|" + "---:|" * (len(header) - 2)


# The benchmark's read_rows leaves its files to the garbage collector.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_the_averages_match_the_benchmarks_own_summary(tmp_path: Path) -> None:
    scoring = pytest.importorskip("servelearnbench.scoring")
    from mw_actors.serve_learn import score_file

    paths, outcomes = [], []
    for i, scenario in enumerate(OFFICIAL_SCENARIOS):
        path = tmp_path / f"{scenario}.jsonl"
        config = {"config": {"scenario": scenario, "method": "rag", "model": "m"}}
        rows = [
            {"phase": "test", "category": c, "reward": (i + k) % 3 / 2}
            for k, c in enumerate(["hidden", "hidden", "fully_specified", "hidden"])
            if not (scenario.startswith("pitch") and c == "fully_specified")
        ]
        path.write_text("\n".join(json.dumps(r) for r in [config, *rows]) + "\n")
        paths.append(str(path))
        score = score_file(path)
        outcomes.append(_outcome(scenario, score.hidden, score.fully_specified, method="rag"))
    theirs = scoring.summarize(paths)[("m", "rag")]
    gc.collect()  # its open files close here, inside the test that made them
    (row,) = leaderboard(outcomes).rows
    assert row["avg_h"] == f"{theirs['avg_h']:.1f}"
    assert row["avg_f"] == f"{theirs['avg_f']:.1f}"
    for scenario in OFFICIAL_SCENARIOS:
        assert row[setting_column(scenario, "hidden")] == f"{theirs[scenario]['hidden']:.1f}"


def test_a_cells_learning_curve_is_drawn_from_its_windows() -> None:
    from mw_actors.grid import curve_svg
    from mw_actors.serve_learn import WindowScores

    windows = [WindowScores(0, 1, 25.0, 100.0, 12), WindowScores(1, 2, 75.0, None, 6)]
    svg = curve_svg(_outcome("retail_l1", None, None, windows=windows))
    assert svg.startswith("<svg") and svg.count("<circle") == 3  # a point per score
    assert "window 1: Hidden 75.0 (6 tests)" in svg
    assert "no window tested yet" in curve_svg(_outcome("retail_l1", None, None))
    page = leaderboard_html_of([_outcome("retail_l1", 50.0, 100.0, windows=windows)])
    assert page.count("<svg") == 1 and "Learning curves" in page


def leaderboard_html_of(outcomes: list[CellOutcome]) -> str:
    from mw_actors.grid import leaderboard_html

    return leaderboard_html(outcomes, title="t <&>")


@pytest.mark.parametrize("damage", [b"{not json", b'{"tag": 5}', b'{"kind": "editing"}'])
def test_a_damaged_grid_json_is_one_clear_line(tmp_path: Path, damage: bytes) -> None:
    place = tmp_path / "runs" / "g1"
    place.mkdir(parents=True)
    (place / "grid.json").write_bytes(damage)
    with pytest.raises(EvidenceError, match="is not a grid mw wrote"):
        read_grid(tmp_path / "runs", "g1")
    done = mw("grid", "status", "g1", "--runs", str(tmp_path / "runs"))
    assert done.returncode != 0
    assert len(done.stderr.strip().splitlines()) == 1 and "grid.json" in done.stderr
