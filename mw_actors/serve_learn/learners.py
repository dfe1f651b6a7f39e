"""What a learner is measured with, offline and for $0 (``mw probe``, ``bench/learning.py``).

- the world model MWM fits on served episodes (:func:`fit`), from the records a
  campaign journals (:class:`Served`, :func:`parse_record`, :func:`case_of`);
- the probe's deterministic player (:func:`play_test`, with the look-ups served
  episodes used first: :class:`Lookups`, :func:`required_parameters`); to compare
  several rankers on one test, :func:`look_up` once and :func:`act` per ranker,
  which replays the verifier only for an action not scored yet;
- the manual a scenario's host may read (:func:`manual_of`), which ``fit`` reads
  for the figures it prints;
- the simple baselines a learner is judged against, on the same records: the
  majority action, the nearest past success (RAG's idea) and a plain decision tree.

A ranker (:data:`Ranker`) maps a case's text to the actions, best first.
"""

from ._probe import (
    Looked,
    Lookups,
    Ranker,
    act,
    decision_tree_ranker,
    look_up,
    majority_ranker,
    nearest_success_ranker,
    play_test,
    required_parameters,
)
from ._slb import manual_of
from ._worldmodel import SCORED, Case, Served, WorldModel, case_of, fit, parse_record

__all__ = [
    "SCORED",
    "Case",
    "Looked",
    "Lookups",
    "Ranker",
    "Served",
    "WorldModel",
    "act",
    "case_of",
    "decision_tree_ranker",
    "fit",
    "look_up",
    "majority_ranker",
    "manual_of",
    "nearest_success_ranker",
    "parse_record",
    "play_test",
    "required_parameters",
]
