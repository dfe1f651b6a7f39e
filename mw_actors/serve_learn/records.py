"""A serve-and-learn campaign's journal records, for whoever reads its journal.

Status, attach and the daemon read a campaign through these; the schema and the
rules for evolving it are in docs/design/serve_learn.md.
"""

from __future__ import annotations

from ._records import (
    SERVE_LEARN_RECORDS,
    AllocationRaised,
    BlockLearned,
    CampaignEnded,
    CampaignStarted,
    EpisodeEnded,
    EpisodeStarted,
    WindowTested,
)

__all__ = [
    "SERVE_LEARN_RECORDS",
    "AllocationRaised",
    "BlockLearned",
    "CampaignEnded",
    "CampaignStarted",
    "EpisodeEnded",
    "EpisodeStarted",
    "WindowTested",
]
