"""Numbers and URLs a careless user types: each is refused at parse time in one line.

``{runs}``, ``{ledger}`` and ``{prices}`` are filled in by the test; nothing may
appear under them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BadInput:
    argv: tuple[str, ...]
    says: str  # the one line names this


_RUN = ("serve-learn", "run", "synthetic_l1", "--runs", "{runs}", "--tag", "t")
_METER = (
    "meter", "--role", "host", "--upstream", "http://127.0.0.1:9/v1", "--key-env", "HOME",
    "--prices", "{prices}", "--ledger-dir", "{ledger}",
)  # fmt: skip

BAD_INPUTS = [
    BadInput((*_RUN, "--allocation", "-1"), "--allocation -1 must be an amount from 0"),
    BadInput((*_RUN, "--allocation", "nan"), "--allocation nan must be an amount from 0"),
    BadInput((*_RUN, "--allocation", "Infinity"), "must be an amount from 0"),
    BadInput((*_RUN, "--concurrency", "-3"), "concurrency -3 must be at least 1"),
    BadInput((*_RUN, "--concurrency", "0"), "concurrency 0 must be at least 1"),
    BadInput((*_RUN, "--train-split", "0"), "train split 0 must be at least 1"),
    BadInput((*_METER, "--allocation", "-5"), "--allocation -5 must be an amount from 0"),
    BadInput((*_METER, "--port", "99999"), "--port 99999 is not a TCP port"),
    BadInput((*_METER, "--port", "-1"), "--port -1 is not a TCP port"),
    BadInput(("meter", *_METER[1:4], "ftp://x/v1", *_METER[5:]), "is not an http(s) URL"),
    BadInput(("meter", *_METER[1:4], "localhost:8000", *_METER[5:]), "is not an http(s) URL"),
    BadInput(("provider", "--port", "99999"), "--port 99999 is not a TCP port"),
]

# Names of things that are not there: one line each, never a traceback.
MISSING = [
    (("attach", "nobody", "--runs", "{runs}", "--once"), "no journal here"),
    (("attach", "nobody", "--runs", "{runs}"), "no journal here"),
    (("journal", "check", "{runs}"), "no journal here"),
    (("serve-learn", "run", "nope", "--runs", "{runs}"), "needs a dataset (--dataset DIR)"),
    (("serve-learn", "run", "synthetic_/../x", "--runs", "{runs}"), "is not a scenario name"),
    (("serve-learn", "run", "synthetic_l1", "--runs", "{runs}", "--tag", "x", "--resume"),
     "has no campaign to resume"),
]  # fmt: skip

BAD_INPUTS += [
    BadInput((*_RUN, "--allocation", "1e100000000"), "must be an amount from 0 to 1,000,000,000"),
    BadInput((*_RUN, "--allocation", ""), "--allocation '' is not an amount in USD"),
    BadInput((*_RUN, "--allocation", "0.0000000001"), "has more than 9 decimal places"),
    BadInput((*_RUN, "--resume", "--allocation-add", "1e400000"), "must be an amount from 0 to"),
    BadInput((*_METER, "--allocation", "9e999999999"), "must be an amount from 0 to"),
    BadInput((*_RUN, "--reasoning-effort", "ultra"), "is not an effort a provider knows"),
    BadInput(("provider", "--latency", "ttft=inf"), "latency values must be from 0 to 86400"),
    BadInput(("provider", "--latency", "tps=nan"), "latency values must be from 0 to 86400"),
    BadInput(
        (*_RUN, "--resume", "--allocation-add", "-2"), "--allocation-add -2 must be an amount"
    ),
    BadInput((*_RUN, "--allocation-add", "2"), "--allocation-add raises a campaign's allocation"),
]

# Paths that cannot be used as given: ``{file}`` is a plain file, ``{long}`` a name of 300
# characters, ``{rows}`` a results file whose row is a JSON array. (program, argv, says)
BAD_PATHS: list[tuple[str, tuple[str, ...], str]] = [
    ("mw", ("serve-learn", "run", "synthetic_l1", "--runs", "{file}", "--tag", "t"),
     "Not a directory"),
    ("mw", ("daemon", "start", "--runs", "{file}"), "Not a directory"),
    ("mw", ("demo", "--runs", "{file}"), "Not a directory"),
    ("mw", ("sandbox", "exec", "--scratch", "{file}", "--", "true"), "is not a directory"),
    ("mw", ("sandbox", "exec", "--scratch", "/nonexistent-mw/s", "--", "true"),
     "/nonexistent-mw is not a directory"),
    ("mw", ("sandbox", "exec", "--scratch", "{tmp}/s", "--memory", "9" * 23, "--", "true"),
     "address_space"),
    ("mw", ("provider", "--port", "0", "--engine", "smollm2", "--model-dir", "{file}"),
     "Not a directory"),
    ("wsm", ("model", "import-smollm2", "--output", "{file}"), "Not a directory"),
    ("mw", ("serve-learn", "run", "synthetic_l1", "--runs", "/proc/self", "--tag", "t"),
     "No such file or directory"),
    ("mw", ("serve-learn", "run", "synthetic_l1", "--runs", "{tmp}/{long}", "--tag", "t"),
     "File name too long"),
    ("mw", ("score", "{rows}"), "a row is a JSON object, not list"),
]  # fmt: skip
