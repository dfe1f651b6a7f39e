"""Serve-and-learn campaigns: ServeLearnBench with the MWM method.

The scenario reader (evaluators kept apart from anything an agent sees), the
schedule (blocks of 12, each window's test version), the synthetic evolving
scenario, the acting loop, the methods (``mwm-local``, ``blind``), the
campaign as supervised actors, and the scorer (``mw score``, as ``slb score``
computes it). See docs/design/serve_learn.md.
"""

from ._backends import (
    BUILTIN_BACKENDS,
    Backend,
    Endpoint,
    keys_for,
    resolve_endpoint,
    split_model,
)
from ._campaign import run_campaign
from ._checks import Journaled, check_campaign, read_journaled
from ._codex import CodexInstall, find_codex
from ._export_inspect import export_inspect
from ._grid import Cell, GridSpec, cell_flags, cell_tag
from ._grid_board import CellOutcome, curve_svg, read_cell, setting_column
from ._kind import SERVE_LEARN
from ._launch import LaunchConfig, load_launch_config
from ._manual import ManualReport, run_manual_tests
from ._methods import METHODS, make_method
from ._outputs import write_outputs
from ._probe_run import PROBED_METHODS, ProbeReport, RunScores, probe_run, render_probe
from ._run_report import (
    RunReport,
    WindowScores,
    build_run_report,
    render_run_html,
    render_run_json,
    render_run_markdown,
    window_scores,
)
from ._scenario import Scenario, Task, Window, read_evaluators, read_scenario
from ._schedule import BLOCK_SIZE, Plan, WindowPlan, plan
from ._score import (
    OFFICIAL_SCENARIOS,
    Averages,
    SettingScore,
    averages,
    score_file,
    score_table,
)
from ._settings import (
    Flags,
    campaign_settings,
    describe_launch,
    launch_spec,
    manual_spec,
    train_split,
)
from ._spec import CAMPAIGN_RECORDS, LOCAL_MODELS, CampaignSpec, RunDir, Submission, models_reached
from ._synthetic import dataset_for, ensure_synthetic, is_synthetic, write_synthetic
from .records import SERVE_LEARN_RECORDS, AllocationRaised, EpisodeEnded, EpisodeStarted

__all__ = [
    "BLOCK_SIZE",
    "BUILTIN_BACKENDS",
    "CAMPAIGN_RECORDS",
    "LOCAL_MODELS",
    "METHODS",
    "OFFICIAL_SCENARIOS",
    "PROBED_METHODS",
    "SERVE_LEARN",
    "SERVE_LEARN_RECORDS",
    "AllocationRaised",
    "Averages",
    "Backend",
    "CampaignSpec",
    "Cell",
    "CellOutcome",
    "CodexInstall",
    "Endpoint",
    "EpisodeEnded",
    "EpisodeStarted",
    "Flags",
    "GridSpec",
    "Journaled",
    "LaunchConfig",
    "ManualReport",
    "Plan",
    "ProbeReport",
    "RunDir",
    "RunReport",
    "RunScores",
    "Scenario",
    "SettingScore",
    "Submission",
    "Task",
    "Window",
    "WindowPlan",
    "WindowScores",
    "averages",
    "build_run_report",
    "campaign_settings",
    "cell_flags",
    "cell_tag",
    "check_campaign",
    "curve_svg",
    "dataset_for",
    "describe_launch",
    "ensure_synthetic",
    "export_inspect",
    "find_codex",
    "is_synthetic",
    "keys_for",
    "launch_spec",
    "load_launch_config",
    "make_method",
    "manual_spec",
    "models_reached",
    "plan",
    "probe_run",
    "read_cell",
    "read_evaluators",
    "read_journaled",
    "read_scenario",
    "render_probe",
    "render_run_html",
    "render_run_json",
    "render_run_markdown",
    "resolve_endpoint",
    "run_campaign",
    "run_manual_tests",
    "score_file",
    "score_table",
    "setting_column",
    "split_model",
    "train_split",
    "window_scores",
    "write_outputs",
    "write_synthetic",
]
