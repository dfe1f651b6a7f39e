"""meters: wire meters for model providers (a library of its own; never imports mw_actors).

The proxy, usage extraction, prices, ledger and budget arithmetic land here
(issue 3). Its errors root at :class:`mw_errors.MeterError`.
"""

from mw_errors import MeterError

__all__ = ["MeterError"]
