"""Metering under the runtime: wire meters as actors, and the budget they reserve from.

``start_meter`` runs a wire meter (:mod:`meters`) as a supervised
``MeterActor``; ``run_meter`` is ``mw meter``'s runtime of its own. The
``BudgetReserver`` actor holds a campaign's one allocation: every reservation
is journaled (``BUDGET_RECORDS``) before a meter forwards, and
``rebuild_budget`` settles it again on a resume. Importing this module loads
the HTTP stack; ``import mw_actors`` does not. See docs/design/meters.md.
"""

from __future__ import annotations

from ._metering import MeterActor, MeterPlace, MeterStats, run_meter, start_meter
from ._public import public_module as _public_module
from ._reserver import (
    BUDGET_RECORDS,
    BudgetReclaimed,
    BudgetReserved,
    BudgetReserver,
    BudgetSettled,
    ReserverClient,
    rebuild_budget,
)

__all__ = [
    "BUDGET_RECORDS",
    "BudgetReclaimed",
    "BudgetReserved",
    "BudgetReserver",
    "BudgetSettled",
    "MeterActor",
    "MeterPlace",
    "MeterStats",
    "ReserverClient",
    "rebuild_budget",
    "run_meter",
    "start_meter",
]

_public_module(globals(), __all__, __name__)
