"""A campaign's settings are a pure function of its flags and an environment mapping."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from mw_actors.serve_learn import Flags, campaign_settings, launch_spec, train_split
from mw_errors import ConfigError


def test_a_flag_beats_the_environment_which_beats_the_launch_config(tmp_path: Path) -> None:
    config = tmp_path / "launch.yaml"
    config.write_text("host_model: local/from-config\nconcurrency: 3\ntrain_split: 36\n")
    flags = Flags(scenario="synthetic_l1", config=config)
    env = {"MW_MODEL": "local/from-env", "PATH": ""}
    assert campaign_settings(flags, {"PATH": ""})["model"] == "local/from-config"
    settings = campaign_settings(flags, env)
    assert settings["model"] == "local/from-env"
    assert (settings["concurrency"], settings["train_split"]) == (3, 36)
    given = Flags(scenario="synthetic_l1", config=config, model="local/flag", concurrency=0)
    settings = campaign_settings(given, env)
    assert (settings["model"], settings["concurrency"]) == ("local/flag", 0)  # 0 is a value
    assert train_split(None, {"MW_TRAIN_SPLIT": "24"}) == 24
    assert train_split(12, {"MW_TRAIN_SPLIT": "24"}) == 12


def test_a_host_model_given_learns_too_unless_a_learner_is_given(tmp_path: Path) -> None:
    """The seeds' model serves "for acting and learning": MW_MODEL=local/scripted takes the
    whole campaign offline, the config's learner included; MW_EVOLVER_MODEL still wins."""
    config = tmp_path / "launch.yaml"
    config.write_text("method: mwm\nhost_model: local/a\nlearner_model: local/b\n")
    flags = Flags(scenario="synthetic_l1", config=config)
    settings = campaign_settings(flags, {"PATH": ""})
    assert (settings["model"], settings["learner_model"]) == ("local/a", "local/b")
    settings = campaign_settings(flags, {"PATH": "", "MW_MODEL": "local/scripted"})
    assert (settings["model"], settings["learner_model"]) == ("local/scripted", "local/scripted")
    both = {"PATH": "", "MW_MODEL": "local/scripted", "MW_EVOLVER_MODEL": "local/c"}
    settings = campaign_settings(flags, both)
    assert (settings["model"], settings["learner_model"]) == ("local/scripted", "local/c")
    settings = campaign_settings(Flags(scenario="synthetic_l1", config=config, model="local/d"),
                                 {"PATH": ""})  # fmt: skip
    assert settings["learner_model"] == "local/d"


def test_max_tokens_is_the_benchmarks_per_call_limit_unless_given(tmp_path: Path) -> None:
    config = tmp_path / "launch.yaml"
    config.write_text("max_tokens: 512\n")
    assert campaign_settings(Flags(scenario="synthetic_l1"), {"PATH": ""})["max_tokens"] == 65536
    flags = Flags(scenario="synthetic_l1", config=config)
    assert campaign_settings(flags, {"PATH": ""})["max_tokens"] == 512
    given = Flags(scenario="synthetic_l1", config=config, max_tokens=48)
    assert campaign_settings(given, {"PATH": ""})["max_tokens"] == 48
    with pytest.raises(ConfigError, match="max_tokens 0 must be at least 1"):
        launch_spec(Flags(scenario="synthetic_l1", max_tokens=0), {"PATH": ""}, tmp_path, "t")
    config.write_text("max_tokens: 0\n")
    with pytest.raises(ConfigError, match="max_tokens must be >= 1"):
        campaign_settings(flags, {"PATH": ""})


def test_the_defaults_and_only_the_mapping_given_are_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MW_MODEL", "local/process-env")  # never read: only bin/ reads os.environ
    settings = campaign_settings(Flags(scenario="synthetic_l1"), {"PATH": ""})
    assert settings["model"] == "local/scripted" and settings["method"] == "mwm-local"
    assert settings["allocation_usd"] == Decimal(5) and settings["concurrency"] == 4
    assert settings["learner_backend"] == "builtin"  # no codex on an empty PATH
    assert settings["reasoning_effort"] == "high" and settings["secrets"] == {}


@pytest.mark.parametrize(
    ("flags", "env", "words"),
    [
        (Flags(scenario="s", allocation="-1"), {}, "--allocation -1 must be an amount from 0"),
        (Flags(scenario="s", allocation="lots"), {}, "is not an amount in USD"),
        (Flags(scenario="s", provider_latency="ttft=x"), {}, "--provider-latency: ttft='x'"),
        (Flags(scenario="s", provider_latency="rtt=1"), {}, "unknown key 'rtt'"),
        (Flags(scenario="s"), {"MW_TRAIN_SPLIT": "two"}, "MW_TRAIN_SPLIT='two'"),
        (Flags(scenario="s"), {"MW_LEARNER_BACKEND": "gpu"}, "not a learner backend"),
    ],
)
def test_a_malformed_setting_is_refused_in_one_line(
    flags: Flags, env: dict[str, str], words: str
) -> None:
    with pytest.raises(ConfigError, match=words.replace("(", r"\(")):
        campaign_settings(flags, {"PATH": "", **env})


def test_a_malformed_wm_port_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="WM_PORT='x' is not a port number"):
        launch_spec(Flags(scenario="synthetic_l1"), {"PATH": "", "WM_PORT": "x"}, tmp_path, "t")
    assert not (tmp_path / "t").exists()


def test_allocation_add_needs_a_resume(tmp_path: Path) -> None:
    flags = Flags(scenario="synthetic_l1", allocation_add="2")
    with pytest.raises(ConfigError, match="raises a campaign's allocation on --resume"):
        launch_spec(flags, {"PATH": ""}, tmp_path, "t")
    assert not (tmp_path / "t").exists()  # nothing written
