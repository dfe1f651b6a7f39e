"""The daemon, its control socket, and campaign status.

``campaign_status(run_dir)`` works with or without a daemon: it reads the
campaign's journal and its lock. See docs/design/daemon.md.
"""

from mw_errors import DaemonError

from ..editing import EditingSubmission
from ._attach import attach_campaign
from ._client import DaemonPaths, connect, daemon_running, subscribe
from ._daemon import Daemon, DaemonOptions, peer_uid
from ._process import (
    Detached,
    ask,
    campaign_tags,
    daemon_pid,
    serve_in_foreground,
    start_detached,
    status_line,
    statuses,
    stop_detached,
)
from ._protocol import (
    PROTOCOL_VERSION,
    Cancel,
    Event,
    ListCampaigns,
    Resume,
    Shutdown,
    Status,
    Submit,
    Tail,
)
from ._status import CAMPAIGN_RECORDS, ActorState, CampaignStatus, campaign_status

__all__ = [
    "CAMPAIGN_RECORDS",
    "PROTOCOL_VERSION",
    "ActorState",
    "CampaignStatus",
    "Cancel",
    "Daemon",
    "DaemonError",
    "DaemonOptions",
    "DaemonPaths",
    "Detached",
    "EditingSubmission",
    "Event",
    "ListCampaigns",
    "Resume",
    "Shutdown",
    "Status",
    "Submit",
    "Tail",
    "ask",
    "attach_campaign",
    "campaign_status",
    "campaign_tags",
    "connect",
    "daemon_pid",
    "daemon_running",
    "peer_uid",
    "serve_in_foreground",
    "start_detached",
    "status_line",
    "statuses",
    "stop_detached",
    "subscribe",
]
