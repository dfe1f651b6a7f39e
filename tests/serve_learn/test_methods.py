"""Methods declare what the campaign must give them; nothing asks a method's name."""

from __future__ import annotations

from pathlib import Path

import pytest

from mw_actors.serve_learn import CampaignSpec, check_campaign, models_reached
from mw_actors.serve_learn._methods import METHODS, Blind, Learner, MwmLocal, learner_of
from mw_errors import ConfigError


@pytest.mark.parametrize(
    ("name", "learner"),
    [("mwm", "llm"), ("mwm-local", "local"), ("blind", None), ("slb:rag", "local")],
)
def test_who_learns_is_read_from_the_method_not_its_name(name: str, learner: Learner) -> None:
    assert learner_of(name) == learner


class Needy(Blind):
    name = "needy"
    requires = ("mw_no_such_module_anywhere",)


class Scholar(MwmLocal):
    """A method of a third party whose versions an LLM learns."""

    name = "scholar"
    learner = "llm"


def test_a_module_a_method_requires_is_named_before_anything_starts(
    dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(METHODS, "needy", Needy)
    spec = CampaignSpec(tag="n", scenario="synthetic_l1", dataset=dataset, runs=tmp_path,
                        method="needy")  # fmt: skip
    with pytest.raises(ConfigError) as caught:
        check_campaign(spec)
    assert "mw_no_such_module_anywhere" in caught.value.message
    assert "\n" not in caught.value.render()
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_a_new_method_that_learns_with_an_llm_reaches_the_learner_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(METHODS, "scholar", Scholar)
    reached = models_reached("synthetic_l1", "scholar", "local/scripted", "local/learner", "j")
    assert reached == ["local/scripted", "local/learner"]
    assert models_reached("synthetic_l1", "mwm-local", "local/scripted", "local/learner", "j") == [
        "local/scripted"
    ]
