"""Benchmark cases and their partitions.

A dataset file holds one case per line: ``{"id", "prompt", "completion"}``.
Its config names three half-open line ranges: ``public`` (the only part a
trial's sandbox sees), ``private`` (graded as the task partition) and
``regression``. The ranges must not overlap, and no public case may repeat a
private one, by id or by text.
"""

from __future__ import annotations

import hashlib
import itertools
from pathlib import Path

import msgspec

from mw_errors import ConfigError

from ._config import Dataset

__all__ = ["PARTITIONS", "Case", "check_partitions", "read_cases", "split"]

PARTITIONS = ("public", "private", "regression")


class Case(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    id: str
    prompt: str
    completion: str

    def text_digest(self) -> str:
        return hashlib.sha256(f"{self.prompt}\x00{self.completion}".encode()).hexdigest()


_decoder = msgspec.json.Decoder(Case)


def read_cases(path: Path) -> list[Case]:
    """Every case of a JSON-lines file.

    Raises:
        ConfigError: a line is not a case (file and line named).
    """
    cases = []
    with open(path, "rb") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                cases.append(_decoder.decode(line))
            except msgspec.DecodeError as exc:
                raise ConfigError(
                    f"{path}:{number}: not a case ({exc})",
                    hint='each line must be {"id": ..., "prompt": ..., "completion": ...}',
                ) from None
    return cases


def split(cases: list[Case], dataset: Dataset) -> dict[str, list[Case]]:
    """The cases of each partition, by name."""
    ranges = msgspec.structs.asdict(dataset.partitions)
    return {name: cases[ranges[name][0] : ranges[name][1]] for name in PARTITIONS}


def check_partitions(cases: list[Case], dataset: Dataset, source: str) -> None:
    """Refuse overlapping, out-of-range or empty partitions, and leaks into public.

    Raises:
        ConfigError: the partitions are unsound (which one and why, in one line).
    """
    ranges = msgspec.structs.asdict(dataset.partitions)
    for name, (start, end) in ranges.items():
        if not 0 <= start < end <= len(cases):
            raise ConfigError(
                f"{source}: partition {dataset.task}.{name} = [{start}, {end}) is empty or "
                f"outside the file's {len(cases)} cases",
                hint="partitions are half-open line ranges [start, end) of the dataset file",
            )
    ordered = sorted(ranges.items(), key=lambda item: item[1][0])
    for (first, (_, first_end)), (second, (second_start, _)) in itertools.pairwise(ordered):
        if second_start < first_end:
            raise ConfigError(
                f"{source}: partitions {dataset.task}.{first} and {dataset.task}.{second} overlap",
                hint="give each partition its own line range",
            )
    ids = [case.id for case in cases]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise ConfigError(f"{source}: case id {dup!r} appears twice in {dataset.task}")
    parts = split(cases, dataset)
    private = {case.text_digest(): case.id for case in parts["private"]}
    for case in parts["public"]:
        if case.text_digest() in private:
            raise ConfigError(
                f"{source}: public case {case.id!r} repeats private case "
                f"{private[case.text_digest()]!r} of {dataset.task}",
                hint="a private item must never be public; remove the duplicate",
            )
