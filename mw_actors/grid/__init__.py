"""Campaign grids: scenarios x methods x models (or students x arms x seeds), one budget.

A grid file names the cells (:func:`load_grid`); :func:`run_grid` runs each
cell as an ordinary serve-and-learn campaign, through an executor, all of them
reserving from the grid's one budget, and resumes a grid a killed driver left.
The leaderboard and the status are rebuilt from the cells' files alone. See
docs/design/grid.md.
"""

from ._editing import (
    EditCell,
    EditGridSpec,
    EditJob,
    EditOutcome,
    TaskLosses,
    read_edit_cell,
    verify_edit_cells,
)
from ._grid_file import load_grid
from ._ray import RayExecutor
from ._report import (
    Leaderboard,
    curve_svg,
    describe_run,
    describe_status,
    grid_status,
    leaderboard,
    leaderboard_csv,
    leaderboard_html,
    leaderboard_markdown,
    setting_column,
)
from ._run import (
    CellJob,
    Executor,
    GridPlace,
    GridRun,
    LocalExecutor,
    cell_flags,
    grid_outcomes,
    grid_running,
    in_grid_order,
    read_grid,
    run_grid,
    run_job,
)
from ._serve_learn_cells import CellOutcome, read_cell
from ._spec import Cell, GridSpec, cell_tag
from ._view import attach_grid, grid_frame, grid_outcomes_now, grid_status_now, render_grid
from .records import GRID_RECORDS

__all__ = [
    "GRID_RECORDS",
    "Cell",
    "CellJob",
    "CellOutcome",
    "EditCell",
    "EditGridSpec",
    "EditJob",
    "EditOutcome",
    "Executor",
    "GridPlace",
    "GridRun",
    "GridSpec",
    "Leaderboard",
    "LocalExecutor",
    "RayExecutor",
    "TaskLosses",
    "attach_grid",
    "cell_flags",
    "cell_tag",
    "curve_svg",
    "describe_run",
    "describe_status",
    "grid_frame",
    "grid_outcomes",
    "grid_outcomes_now",
    "grid_running",
    "grid_status",
    "grid_status_now",
    "in_grid_order",
    "leaderboard",
    "leaderboard_csv",
    "leaderboard_html",
    "leaderboard_markdown",
    "load_grid",
    "read_cell",
    "read_edit_cell",
    "read_grid",
    "render_grid",
    "run_grid",
    "run_job",
    "setting_column",
    "verify_edit_cells",
]
