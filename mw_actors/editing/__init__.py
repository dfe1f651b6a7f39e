"""The weight-editing benchmark: ``wsm benchmark preflight | run | report | regrade``.

A campaign compares three arms on a small student model (unchanged weights,
a frozen scripted edit, an editing agent). Each trial edits in a sandbox,
exports tensors, and is graded in a separate process on private partitions.
Reports are rebuilt from the retained evidence, byte for byte; any artifact
can be regraded against its receipt. See docs/design/editing.md.

Nothing here imports torch at import time: preflight and report run without it.
"""

from .._hashing import file_sha256, payload_sha256
from .._smollm2 import SnapshotManifest, import_smollm2
from ._actions import ACTIONS_SCHEMA_VERSION, ActionsFile, Finish, RunPython, Undo, load_actions
from ._campaign import CampaignOptions, prepare_run, run_campaign
from ._config import (
    CONFIG_SCHEMA_VERSION,
    BenchmarkConfig,
    Loaded,
    PolicyFile,
    Student,
    Trial,
    load_config,
    load_policy,
    pin_student,
)
from ._datasets import read_cases
from ._fixture import write_fixture
from ._grading import GRADER_VERSION, Fingerprint, GradeRequest, GradeResult, serve_one
from ._grid import EditCell, EditGridSpec, EditJob, EditOutcome, TaskLosses, read_edit_cell
from ._kind import EDITING, EditingSubmission
from ._layout import RunLayout
from ._preflight import PreflightReport, preflight
from ._regrade import RegradeOutcome, regrade
from ._render import render_html, render_markdown
from ._report import Report, build_report, load_receipt, render_json
from .records import EDITING_RECORDS, Receipt, TrialEnded

__all__ = [
    "ACTIONS_SCHEMA_VERSION",
    "CONFIG_SCHEMA_VERSION",
    "EDITING",
    "EDITING_RECORDS",
    "GRADER_VERSION",
    "ActionsFile",
    "BenchmarkConfig",
    "CampaignOptions",
    "EditCell",
    "EditGridSpec",
    "EditJob",
    "EditOutcome",
    "EditingSubmission",
    "Fingerprint",
    "Finish",
    "GradeRequest",
    "GradeResult",
    "Loaded",
    "PolicyFile",
    "PreflightReport",
    "Receipt",
    "RegradeOutcome",
    "Report",
    "RunLayout",
    "RunPython",
    "SnapshotManifest",
    "Student",
    "TaskLosses",
    "Trial",
    "TrialEnded",
    "Undo",
    "build_report",
    "file_sha256",
    "import_smollm2",
    "load_actions",
    "load_config",
    "load_policy",
    "load_receipt",
    "payload_sha256",
    "pin_student",
    "preflight",
    "prepare_run",
    "read_cases",
    "read_edit_cell",
    "regrade",
    "render_html",
    "render_json",
    "render_markdown",
    "run_campaign",
    "serve_one",
    "write_fixture",
]
