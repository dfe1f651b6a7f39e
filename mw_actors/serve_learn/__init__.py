"""Serve-and-learn campaigns: ServeLearnBench with the MWM method.

This slice holds the scenario reader (evaluators kept apart from anything an
agent sees), the schedule (blocks of 12, each window's test version) and the
scorer (``mw score``, as ``slb score`` computes it). See docs/design/serve_learn.md.
"""

from ._scenario import Scenario, Task, Window, read_evaluators, read_scenario
from ._schedule import BLOCK_SIZE, Plan, WindowPlan, plan
from ._score import OFFICIAL_SCENARIOS, Averages, SettingScore, averages, score_file

__all__ = [
    "BLOCK_SIZE",
    "OFFICIAL_SCENARIOS",
    "Averages",
    "Plan",
    "Scenario",
    "SettingScore",
    "Task",
    "Window",
    "WindowPlan",
    "averages",
    "plan",
    "read_evaluators",
    "read_scenario",
    "score_file",
]
