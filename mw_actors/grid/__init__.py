"""Campaign grids: the cells of one campaign kind, under one budget.

A serve-and-learn grid's cells are scenarios x methods x models, an editing
grid's students x arms x seeds.

A grid file names the cells (:func:`load_grid`); its ``kind`` says whose they
are, and that campaign kind's ``GridKind`` (``mw_actors.kinds``) checks the file,
runs each cell and reads it back. :func:`run_grid` runs every cell as an
ordinary campaign of that kind, through an executor, all of them reserving
from the grid's one budget, and resumes a grid a killed driver left. The
leaderboard and the status are rebuilt from the cells' files alone. See
docs/design/grid.md.
"""

from ..editing import (
    EditCell,
    EditGridSpec,
    EditJob,
    EditOutcome,
    TaskLosses,
    read_edit_cell,
)
from ..serve_learn import (
    Cell,
    CellOutcome,
    GridSpec,
    cell_flags,
    cell_tag,
    curve_svg,
    read_cell,
    setting_column,
)
from ._grid_file import grid_kind, load_grid
from ._ray import BudgetRelay, RayExecutor, RelayBudget, import_ray
from ._report import (
    Leaderboard,
    describe_run,
    describe_status,
    grid_status,
    leaderboard,
    leaderboard_csv,
    leaderboard_html,
    leaderboard_markdown,
    verify_cells,
)
from ._run import (
    CellJob,
    Executor,
    GridPlace,
    GridRun,
    LocalExecutor,
    grid_outcomes,
    grid_running,
    in_grid_order,
    read_grid,
    run_grid,
    run_job,
)
from ._view import attach_grid, grid_frame, grid_outcomes_now, grid_status_now, render_grid
from .records import GRID_RECORDS

__all__ = [
    "GRID_RECORDS",
    "BudgetRelay",
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
    "RelayBudget",
    "TaskLosses",
    "attach_grid",
    "cell_flags",
    "cell_tag",
    "curve_svg",
    "describe_run",
    "describe_status",
    "grid_frame",
    "grid_kind",
    "grid_outcomes",
    "grid_outcomes_now",
    "grid_running",
    "grid_status",
    "grid_status_now",
    "import_ray",
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
    "verify_cells",
]
