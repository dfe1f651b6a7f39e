"""meters: wire meters for model providers (a library of its own; never imports mw_actors).

Prices, usage extraction, the ledger, budget arithmetic, the endpoints a
meter forwards and the proxy that uses them live here. Errors root at
:class:`mw_errors.MeterError`.
"""

from mw_errors import MeterError, UnpricedModel

from ._adapter import ResponsesEvents
from ._budget import (
    Blocked,
    Budget,
    BudgetStatistics,
    Granted,
    Reclaimed,
    Reservation,
    Reserver,
    reserve_waiting,
)
from ._ledger import (
    LEDGER_SCHEMA_VERSION,
    STATUSES,
    Ledger,
    LedgerLine,
    LedgerSummary,
    attempt_holder,
    encode_summary,
    lost_attempt,
    read_ledger,
    summarize,
    summary_name,
    write_atomically,
)
from ._money import parse_usd, usd
from ._prices import (
    PRICES_SCHEMA_VERSION,
    ModelPrice,
    PriceTable,
    load_prices,
    parse_prices,
)
from ._proxy import LocalReserver, Meter, MeterConfig, MeterStatistics, serve_meter
from ._server import (
    AbortConnection,
    Handler,
    LastChunk,
    Request,
    Response,
    ServerLimits,
    bind_http,
    check_bind_address,
    openai_error,
    serve_http,
    serve_on,
    serve_until_signal,
)
from ._transport import LeanPool, LeanTransport
from ._usage import (
    ChatStream,
    InvalidUsage,
    ResponsesStream,
    ServerSentEvent,
    SSEParser,
    Usage,
    chat_usage,
    responses_usage,
    usage_or_none,
)
from ._wire import Listener

__all__ = [
    "LEDGER_SCHEMA_VERSION",
    "PRICES_SCHEMA_VERSION",
    "STATUSES",
    "AbortConnection",
    "Blocked",
    "Budget",
    "BudgetStatistics",
    "ChatStream",
    "Granted",
    "Handler",
    "InvalidUsage",
    "LastChunk",
    "LeanPool",
    "LeanTransport",
    "Ledger",
    "LedgerLine",
    "LedgerSummary",
    "Listener",
    "LocalReserver",
    "Meter",
    "MeterConfig",
    "MeterError",
    "MeterStatistics",
    "ModelPrice",
    "PriceTable",
    "Reclaimed",
    "Request",
    "Reservation",
    "Reserver",
    "Response",
    "ResponsesEvents",
    "ResponsesStream",
    "SSEParser",
    "ServerLimits",
    "ServerSentEvent",
    "UnpricedModel",
    "Usage",
    "attempt_holder",
    "bind_http",
    "chat_usage",
    "check_bind_address",
    "encode_summary",
    "load_prices",
    "lost_attempt",
    "openai_error",
    "parse_prices",
    "parse_usd",
    "read_ledger",
    "reserve_waiting",
    "responses_usage",
    "serve_http",
    "serve_meter",
    "serve_on",
    "serve_until_signal",
    "summarize",
    "summary_name",
    "usage_or_none",
    "usd",
    "write_atomically",
]
