"""GenerationSettings.from_model: the one way a model's defaults become settings."""

from __future__ import annotations

import pytest

from app.engine.types import GenerationSettings, SamplingSettings


def test_hearths_defaults_when_the_model_says_nothing():
    assert GenerationSettings.from_model({}) == GenerationSettings()


def test_do_sample_false_is_greedy_and_an_override_wins():
    assert GenerationSettings.from_model({"do_sample": False, "temperature": 0.9}).sampling.greedy
    chosen = GenerationSettings.from_model({"do_sample": False}, {"temperature": 0.8})
    assert chosen.sampling.temperature == 0.8


def test_model_values_are_taken_where_valid_and_overrides_go_on_top():
    defaults = {"temperature": 0.6, "top_k": 40, "top_p": 0.9, "min_p": 0.05,
                "repetition_penalty": 1.1, "max_new_tokens": 64, "max_length": 4096,
                "do_sample": True}
    settings = GenerationSettings.from_model(
        defaults, {"top_p": 0.5, "seed": 3, "presence_penalty": 0.4, "frequency_penalty": 0.2,
                   "max_new_tokens": None, "stop_strings": ["END"],
                   "context_policy": "truncate_oldest"})
    assert settings.sampling == SamplingSettings(
        temperature=0.6, top_k=40, top_p=0.5, min_p=0.05, repetition_penalty=1.1,
        presence_penalty=0.4, frequency_penalty=0.2, seed=3)
    assert settings.max_new_tokens == 64  # None overrides are skipped; max_length is ignored
    assert settings.stop_strings == ("END",) and settings.context_policy == "truncate_oldest"


@pytest.mark.parametrize("bad", [{"temperature": -1}, {"top_p": 0}, {"top_p": 1.5},
                                 {"top_k": 2.5}, {"top_k": True}, {"min_p": 2},
                                 {"repetition_penalty": 0}, {"max_new_tokens": 0},
                                 {"temperature": "hot"}])
def test_invalid_model_values_are_ignored(bad):
    assert GenerationSettings.from_model(bad) == GenerationSettings()


def test_an_unknown_override_is_a_bug_not_silence():
    with pytest.raises(ValueError, match="unknown generation setting"):
        GenerationSettings.from_model({}, {"temprature": 0.1})
