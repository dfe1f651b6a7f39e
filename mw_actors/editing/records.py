"""A weight-editing campaign's journal records and receipts, for whoever reads them.

Status, attach and the daemon read a campaign through these; the schema and the
rules for evolving it are in docs/design/editing.md.
"""

from __future__ import annotations

from ._records import (
    EDITING_RECORDS,
    RECEIPT_SCHEMA_VERSION,
    ArtifactHashes,
    CampaignEnded,
    CampaignStarted,
    Comparison,
    Outcome,
    PolicyIntent,
    Receipt,
    TrialEnded,
    TrialExported,
    TrialGraded,
    TrialRegraded,
    TrialReserved,
    TrialStarted,
    TrialStep,
)

__all__ = [
    "EDITING_RECORDS",
    "RECEIPT_SCHEMA_VERSION",
    "ArtifactHashes",
    "CampaignEnded",
    "CampaignStarted",
    "Comparison",
    "Outcome",
    "PolicyIntent",
    "Receipt",
    "TrialEnded",
    "TrialExported",
    "TrialGraded",
    "TrialRegraded",
    "TrialReserved",
    "TrialStarted",
    "TrialStep",
]
