"""What the serve-and-learn tests share: the synthetic scenario, written once per module."""

from __future__ import annotations

from pathlib import Path

import pytest

from mw_actors.serve_learn import write_synthetic


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_synthetic(tmp_path_factory.mktemp("dataset"))
