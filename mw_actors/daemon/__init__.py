"""Watching campaigns: their status from the run directory (the daemon comes next).

``campaign_status(run_dir)`` works with or without a daemon: it reads the
campaign's journal and its lock.
"""

from ._status import CampaignStatus, Progress, campaign_status

__all__ = ["CampaignStatus", "Progress", "campaign_status"]
