"""``--speculation`` / ``--draft`` on ``hearth generate`` and ``chat``, and catalog drafts."""

from __future__ import annotations

import json

import pytest

from app.cli import main
from app.models.catalog import load_catalog, parse_catalog


def _generate(capsys, folder, *extra: str) -> dict:
    code = main(["generate", str(folder), "--prompt", "The keeper trimmed the keeper trimmed",
                 "--json", "--temperature", "0", "--max-new-tokens", "24", *extra])
    assert code == 0
    return json.loads(capsys.readouterr().out)


def test_speculation_flags_give_the_same_tokens_and_report_stats(plain_model_dir, capsys):
    off = _generate(capsys, plain_model_dir, "--speculation", "off")
    lookup = _generate(capsys, plain_model_dir, "--speculation", "lookup")
    draft = _generate(capsys, plain_model_dir, "--speculation", "draft",
                      "--draft", str(plain_model_dir))
    assert off["tokens"] == lookup["tokens"] == draft["tokens"]
    assert off["stats"]["speculation"] == "off" and off["stats"]["proposed"] == 0
    assert off["stats"]["speculation_note"] is None  # off as asked: nothing to explain
    assert lookup["stats"]["speculation"] == "lookup"
    stats = draft["stats"]
    assert stats["speculation"] == "draft" and stats["accepted"] == stats["proposed"] > 0
    assert stats["target_steps"] < stats["generated_tokens"] - 1


def test_draft_mode_without_a_draft_model_is_a_clear_error(plain_model_dir, capsys):
    assert main(["generate", str(plain_model_dir), "--prompt", "x",
                 "--speculation", "draft"]) != 0
    assert "--draft" in capsys.readouterr().err


def test_catalog_drafts_name_smaller_siblings():
    catalog = load_catalog()
    drafted = {e.id: e.draft for e in catalog if e.draft}
    assert drafted == {"qwen2.5-1.5b-instruct": "qwen2.5-0.5b-instruct",
                       "smollm2-360m-instruct": "smollm2-135m-instruct"}
    for model, draft in drafted.items():
        assert catalog.get(draft).parameters < catalog.get(model).parameters
    assert catalog.get("qwen2.5-1.5b-instruct").as_dict()["draft"] == "qwen2.5-0.5b-instruct"


def test_a_draft_must_be_another_catalog_entry():
    entry = {"id": "a", "name": "A", "repo": "o/a", "context_length": 8, "parameters": 1,
             "format": "genai", "variants": [{"name": "cpu", "provider": "cpu",
                                              "subfolder": "x"}]}
    with pytest.raises(ValueError, match="draft"):
        parse_catalog({"models": [{**entry, "draft": "missing"}]})
    with pytest.raises(ValueError, match="draft"):
        parse_catalog({"models": [{**entry, "draft": "a"}]})
    assert parse_catalog({"models": [entry]}).get("a").draft is None
