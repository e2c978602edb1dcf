"""The shipped catalog, variant selection and the "fits this machine" hint."""

from __future__ import annotations

import re

import pytest

from app.engine import policy
from app.errors import HearthError
from app.models.catalog import (
    CatalogEntry,
    MachineInfo,
    Variant,
    choose_variant,
    fit_report,
    load_catalog,
    parse_catalog,
    probe_machine,
)

EXPECTED_REPOS = {
    "onnx-community/Qwen3-0.6B-ONNX",
    "onnx-community/Qwen3-1.7B-ONNX",
    "onnx-community/Qwen3-4B-ONNX",
    "onnx-community/Llama-3.2-3B-Instruct",
    "onnx-community/gemma-3-1b-it-ONNX",
    "onnx-community/Qwen2.5-Coder-1.5B-Instruct",
    "microsoft/phi-4-onnx",
    "microsoft/Phi-3-mini-4k-instruct-onnx",
    "microsoft/Phi-3.5-mini-instruct-onnx",
    "microsoft/Phi-4-mini-instruct-onnx",
    "onnx-community/Qwen2.5-0.5B-Instruct",
    "onnx-community/Qwen2.5-1.5B-Instruct",
    "onnx-community/Llama-3.2-1B-Instruct",
    "HuggingFaceTB/SmolLM2-360M-Instruct",
    "HuggingFaceTB/SmolLM2-135M-Instruct",
}


def test_shipped_catalog_lists_the_curated_models_with_complete_entries():
    catalog = load_catalog()
    assert {e.repo for e in catalog} == EXPECTED_REPOS
    for entry in catalog:
        assert re.fullmatch(r"[0-9a-f]{40}|main", entry.revision), entry.id
        assert entry.license and entry.context_length >= 4096 and entry.parameters > 1e8
        assert entry.format in ("genai", "optimum")
        assert {v.provider for v in entry.variants} == {"cpu", "dml", "cuda"}, entry.id
        for variant in entry.variants:
            assert variant.size_bytes > 1e8 and variant.ram_bytes > 0
            if variant.provider != "cpu":
                assert variant.vram_bytes
            if entry.format == "genai":
                assert variant.subfolder and not variant.include
            else:
                assert variant.include and any(p.startswith("onnx/model_") for p in variant.include)


def test_lookup_by_id_or_repo_and_variant_by_name_or_provider():
    catalog = load_catalog()
    entry = catalog.get("onnx-community/qwen2.5-0.5b-instruct")
    assert entry is catalog.get("qwen2.5-0.5b-instruct")
    assert entry.variant("cuda").name == "cuda-q4f16"
    assert entry.variant("cpu-q4").provider == "cpu"
    with pytest.raises(HearthError, match="Choose one of: cpu-q4"):
        entry.variant("tpu")
    with pytest.raises(HearthError, match="hearth models catalog"):
        catalog.get("gpt-5")


def test_include_patterns_select_top_level_files_and_one_onnx_variant():
    variant = load_catalog().get("smollm2-135m-instruct").variant("cpu")
    chosen = [
        p
        for p in (
            "config.json",
            "tokenizer.json",
            "chat_template.jinja",
            "onnx/model_q4.onnx",
            "onnx/model_q4.onnx_data",
            "onnx/model_q4f16.onnx",
            "onnx/model.onnx",
            "onnx/config.json",
            "runs/events.json",
            "README.md",
            "model.safetensors",
        )
        if variant.selects(p)
    ]
    assert chosen == [
        "config.json",
        "tokenizer.json",
        "chat_template.jinja",
        "onnx/model_q4.onnx",
        "onnx/model_q4.onnx_data",
    ]
    assert variant.local_path("onnx/model_q4.onnx") == "onnx/model_q4.onnx"


def test_subfolder_variants_strip_the_folder():
    variant = load_catalog().get("phi-3-mini-4k-instruct").variant("cpu")
    sub = "cpu_and_mobile/cpu-int4-rtn-block-32-acc-level-4"
    assert variant.subfolder == sub
    assert variant.selects(f"{sub}/genai_config.json")
    assert not variant.selects("cpu_and_mobile/cpu-int4-rtn-block-32/genai_config.json")
    assert not variant.selects("README.md")
    assert variant.local_path(f"{sub}/tokenizer.json") == "tokenizer.json"


def test_variant_is_chosen_for_the_provider_with_cpu_fallback():
    entry = load_catalog().get("phi-4-mini-instruct")
    assert choose_variant(entry, "cuda").provider == "cuda"
    assert choose_variant(entry, "dml").subfolder == "gpu/gpu-int4-rtn-block-32"
    assert choose_variant(entry, "coreml").provider == "cpu"
    cpu_only = CatalogEntry(
        "x",
        "X",
        "o/x",
        "main",
        "mit",
        1,
        1,
        "optimum",
        "",
        (Variant("only", "cpu", include=("*.json",)),),
    )
    assert choose_variant(cpu_only, "cuda").name == "only"


def test_fit_report_levels_and_reasons():
    variant = Variant(
        "v",
        "cuda",
        subfolder="gpu",
        size_bytes=2_000_000_000,
        ram_bytes=3_000_000_000,
        vram_bytes=4_000_000_000,
    )
    roomy = MachineInfo(
        ram_bytes=32_000_000_000,
        vram_bytes=24_000_000_000,
        disk_free_bytes=500_000_000_000,
        provider="cuda",
    )
    assert fit_report(variant, roomy).level == "ok" and fit_report(variant, roomy).fits
    tight = MachineInfo(4_000_000_000, 24_000_000_000, 500_000_000_000)
    assert fit_report(variant, tight).level == "tight"
    small = MachineInfo(2_000_000_000, 2_000_000_000, 2_500_000_000)
    report = fit_report(variant, small)
    assert report.level == "no" and not report.fits
    assert any("RAM" in r for r in report.reasons)
    assert any("GPU memory" in r for r in report.reasons)
    assert any("disk" in r for r in report.reasons)
    unknown = MachineInfo(None, None, None)
    report = fit_report(variant, unknown)
    assert report.level == "ok" and "not detected" in report.reasons[0]


def test_probe_machine_reads_ram_and_disk(tmp_path):
    machine = probe_machine(tmp_path / "not" / "yet", provider="cpu")
    assert machine.ram_bytes and machine.ram_bytes > 100_000_000
    assert machine.disk_free_bytes and machine.disk_free_bytes > 0
    assert machine.provider == "cpu"
    assert probe_machine().provider in ("cpu", "dml", "cuda")


def test_malformed_catalogs_are_rejected():
    base = {
        "id": "a",
        "name": "A",
        "repo": "o/a",
        "context_length": 1,
        "parameters": 1,
        "format": "optimum",
    }
    with pytest.raises(ValueError, match="exactly one"):
        parse_catalog({"models": [{**base, "variants": [{"name": "v", "provider": "cpu"}]}]})
    with pytest.raises(ValueError, match="unknown provider"):
        parse_catalog(
            {"models": [{**base, "variants": [{"name": "v", "provider": "tpu", "subfolder": "x"}]}]}
        )
    variant = {"name": "v", "provider": "cpu", "subfolder": "x"}
    with pytest.raises(ValueError, match="duplicate catalog id"):
        parse_catalog({"models": [{**base, "variants": [variant]}] * 2})


def test_unreadable_catalog_file_is_a_hearth_error(tmp_path):
    broken = tmp_path / "catalog.json"
    broken.write_text("{not json")
    with pytest.raises(HearthError, match="Reinstall Hearth"):
        load_catalog(broken)


def test_every_entry_says_where_its_revision_comes_from():
    for entry in load_catalog():
        if entry.revision == "main":
            assert not entry.revision_verified, entry.id
            assert "could not be confirmed" in entry.notes, entry.id
        else:
            assert entry.revision_verified and entry.notes, entry.id


def test_every_variant_names_a_provider_the_policy_knows_and_a_plausible_size():
    for entry in load_catalog():
        for variant in entry.variants:
            assert variant.provider in policy.PRECISION_ORDER, (entry.id, variant.name)
            # int4 weights (~0.55 B/param) up to q4 with a float32 embedding table (~1.6)
            per_parameter = variant.size_bytes / entry.parameters
            assert 0.3 < per_parameter < 2.0, (entry.id, variant.name, per_parameter)
            assert entry.context_for(variant) >= 4096
            if variant.provider == "cpu":
                assert variant.ram_bytes >= variant.size_bytes, (entry.id, variant.name)
            else:
                assert variant.vram_bytes >= 0.9 * variant.size_bytes, (entry.id, variant.name)


def test_gated_entries_name_their_licence_url():
    for entry in (e for e in load_catalog() if e.gated):
        assert entry.license_url and entry.license_url.startswith("https://"), entry.id
    base = {"id": "g", "name": "G", "repo": "o/g", "context_length": 1, "parameters": 1,
            "format": "optimum", "gated": True,
            "variants": [{"name": "v", "provider": "cpu", "subfolder": "x"}]}
    with pytest.raises(ValueError, match="names no license_url"):
        parse_catalog({"models": [base]})
    assert parse_catalog({"models": [{**base, "license_url": "https://x"}]}).get("g").gated


def test_the_catalog_covers_current_models_for_every_size_of_machine():
    catalog = load_catalog()
    assert max(e.parameters for e in catalog) >= 7e9  # one option for machines with the memory
    coder = catalog.get("qwen2.5-coder-1.5b-instruct")
    assert "coding model" in coder.description and coder.license == "apache-2.0"
    for key in ("qwen3-0.6b", "qwen3-1.7b", "qwen3-4b", "llama-3.2-3b-instruct", "gemma-3-1b-it"):
        entry = catalog.get(key)
        assert choose_variant(entry, "cpu").name == "cpu-q4", key
        assert choose_variant(entry, "cuda").name == "cuda-q4f16", key
    assert choose_variant(catalog.get("phi-4"), "cpu").subfolder.startswith("cpu_and_mobile/")
    assert choose_variant(catalog.get("phi-4-mini-instruct"), "dml").subfolder.startswith("gpu/")


def test_new_fields_survive_as_dict():
    data = load_catalog().get("gemma-3-1b-it").as_dict()
    assert data["gated"] is False and data["license_url"] == "https://ai.google.dev/gemma/terms"
    assert data["revision_verified"] is True and data["notes"]
    assert data["checked"] and all(isinstance(fact, str) for fact in data["checked"])
    assert data["variants"][0]["size_estimated"] is False
    main = load_catalog().get("llama-3.2-3b-instruct").as_dict()
    assert main["revision_verified"] is False and main["variants"][0]["size_estimated"] is True


def test_every_entry_says_which_facts_were_checked_and_a_pin_names_its_source():
    """Issue 27: every entry lists the facts checked against public evidence, each with its
    source; a pinned entry's list starts with where its commit was seen."""
    for entry in load_catalog():
        assert entry.checked, entry.id
        assert all(":" in fact and "(" in fact for fact in entry.checked), entry.id
        if entry.revision != "main":
            revision = next(f for f in entry.checked if f.startswith("revision: "))
            assert entry.revision[:8] in revision, entry.id
            assert entry.revision in entry.notes or "tree page" in entry.notes, entry.id


def test_onnx_community_mirrors_of_llama_and_gemma_are_not_gated_but_link_their_licence():
    """Public apps fetch these mirrors without a token (issue 27); their licence still
    applies, so the entries keep linking it."""
    catalog = load_catalog()
    for key in ("llama-3.2-1b-instruct", "llama-3.2-3b-instruct", "gemma-3-1b-it"):
        entry = catalog.get(key)
        assert entry.repo.startswith("onnx-community/") and not entry.gated, key
        assert entry.license_url.startswith("https://"), key


PINNED_FROM_PUBLIC_EVIDENCE = {
    # catalog id: the commit public apps pin with the files the catalog downloads (issue 27)
    "qwen3-0.6b": "1e0a4a196ecabdf9a879664110574563d3f372d3",
    "qwen3-1.7b": "cc6a06a21d614e9b8e92a6adfab1074d4e7d2438",
    "qwen3-4b": "98ddba15d05dede4435afb63f13280abcdbc2a48",
    "gemma-3-1b-it": "a58439f40017d3b99c7d378ff525e54e0ba08ebf",
    "qwen2.5-0.5b-instruct": "cc5cc01a65cc3ff17bdb73a7de33d879f62599b0",
    "qwen2.5-1.5b-instruct": "6287331f475a3e20e8c879be8fd4bf3551ad9d34",
    "smollm2-135m-instruct": "12fd25f77366fa6b3b4b768ec3050bf629380bac",
    "smollm2-360m-instruct": "a10cc1512eabd3dde888204e902eca88bddb4951",
    "phi-4-mini-instruct": "a64b5309e58f6ac22cacdf9d143ab7455d8b9f5b",
    # pinned before, from the Hub's tree pages
    "llama-3.2-1b-instruct": "c5b77c42b9a13105f54d55be507e1a65b5b8149b",
    "phi-4": "b18be0d7e6951f64eff0ff4b6b8931158cf1235e",
    "phi-3-mini-4k-instruct": "761b19434a2b45f8656762414aaa4d39fbe2b5ca",
}


def test_entries_are_pinned_where_public_evidence_shows_the_commit_and_main_elsewhere():
    catalog = load_catalog()
    for entry in catalog:
        assert entry.revision == PINNED_FROM_PUBLIC_EVIDENCE.get(entry.id, "main"), entry.id


def test_sizes_corrected_from_public_evidence():
    catalog = load_catalog()
    gemma = catalog.get("gemma-3-1b-it")  # graph + data at a58439f4, not one 1.65 GB file
    assert gemma.variant("cpu-q4").size_bytes == 880_000_000
    assert all(v.size_bytes == 783_000_000 for v in gemma.variants if "q4f16" in v.name)
    qwen17 = catalog.get("qwen3-1.7b")  # single-file graphs, summed with their JSON files
    assert qwen17.variant("cpu-q4").size_bytes == 2_159_100_000
    assert not any(v.size_estimated for v in qwen17.variants)
    assert catalog.get("phi-3-mini-4k-instruct").variant("cuda-int4").size_bytes == 2_300_000_000
    assert catalog.get("phi-3.5-mini-instruct").variant("cpu-int4").size_bytes == 2_783_000_000
    qwen = catalog.get("qwen3-4b")
    for name in ("dml-q4f16", "cuda-q4f16"):
        variant = qwen.variant(name)
        assert variant.size_bytes == 2_840_000_000 and not variant.size_estimated
    llama = load_catalog().get("llama-3.2-3b-instruct")
    assert all(v.size_estimated for v in llama.variants)  # main was re-exported in chunks
    assert all(v.selects("onnx/model_q4f16.onnx_data_1") for v in llama.variants
               if "q4f16" in v.name)
