"""Director configuration: TOML file, environment, and which mind a session gets."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.director_config import ConfigError, DirectorConfig, choose_mind, load_config


def test_defaults_without_file_or_environment_mean_the_scripted_mind() -> None:
    config = load_config(env={})
    assert config == DirectorConfig()
    assert choose_mind("auto", config) == "script"


def test_the_environment_configures_the_endpoint_and_model() -> None:
    env = {"OPENAI_BASE_URL": "http://127.0.0.1:8000/v1", "OPENAI_API_KEY": "k", "ONSTAGE_LLM_MODEL": "qwen"}
    config = load_config(env=env)
    assert (config.base_url, config.api_key, config.model) == ("http://127.0.0.1:8000/v1", "k", "qwen")
    assert choose_mind("auto", config) == "llm"
    assert choose_mind("script", config) == "script"


def test_a_config_file_sets_the_director_table_and_the_environment_wins(tmp_path: Path) -> None:
    path = tmp_path / "onstage.toml"
    path.write_text(
        '[director]\nbase_url = "http://localhost:11434/v1"\nmodel = "llama3.2"\nbarge_in = "stale"\n'
        'timeout_s = 8.0\nsalient_sounds = ["Knock"]\n'
    )
    config = load_config(path, env={"ONSTAGE_LLM_MODEL": "qwen2.5"})
    assert config.base_url == "http://localhost:11434/v1" and config.barge_in == "stale"
    assert config.model == "qwen2.5" and config.timeout_s == 8.0 and config.salient_sounds == ("Knock",)
    assert load_config(env={"ONSTAGE_CONFIG": str(path)}).model == "llama3.2"


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('[director]\nbarge_in = "ignore"\n', "barge_in"),
        ("[director]\ncolour = 1\n", "colour"),
        ("[director]\nmax_steps = 0\n", "max_steps"),
        ("[director\n", "not valid TOML"),
        ("director = 3\n", "must be a table"),
    ],
)
def test_a_bad_config_file_is_a_clear_error(tmp_path: Path, text: str, words: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=words):
        load_config(path, env={})


def test_a_missing_config_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "nope.toml", env={})


def test_asking_for_the_llm_without_an_endpoint_is_refused() -> None:
    with pytest.raises(ConfigError, match="OPENAI_BASE_URL"):
        choose_mind("llm", DirectorConfig())
    assert choose_mind("none", DirectorConfig()) == "none"
