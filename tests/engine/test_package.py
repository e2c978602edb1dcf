"""Model folder reader: both real layouts, variant choice, and clear errors for bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from app.engine.onnx_file import inspect_onnx
from app.engine.package import choose_variant, read_model_folder
from app.engine.types import GenerationSettings
from app.errors import ModelLoadError, ProviderError
from tests.fixtures.tiny_tokenizer import CHATML_TEMPLATE


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _edit_json(path: Path, **changes) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    path.write_text(json.dumps(data), encoding="utf-8")


def _tiny_graph(op_type: str = "Relu", domain: str = "") -> onnx.ModelProto:
    weight = numpy_helper.from_array(np.arange(16, dtype=np.float32).reshape(4, 4), "W")
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["y"]),
        helper.make_node(op_type, ["y"], ["z"], domain=domain),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 4])],
        [weight],
    )
    opsets = [helper.make_opsetid("", 17)]
    if domain:
        opsets.append(helper.make_opsetid(domain, 1))
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 10
    return model


def _with_external_data(folder: Path) -> Path:
    """Re-save the folder's graph with its weights in onnx/model.onnx_data."""
    path = folder / "onnx" / "model.onnx"
    model = onnx.load(path)
    path.unlink()
    onnx.save(model, path, save_as_external_data=True, location="model.onnx_data", size_threshold=0)
    return folder / "onnx" / "model.onnx_data"


# ---------------------------------------------------------------- the two layouts


def test_optimum_layout_is_normalised(plain_model_dir):
    spec = read_model_folder(plain_model_dir)
    assert spec.layout == "optimum"
    assert spec.model_path == plain_model_dir / "onnx" / "model.onnx"
    assert spec.variant == "model"
    assert spec.tokenizer_path == plain_model_dir / "tokenizer.json"
    assert spec.name == plain_model_dir.name
    assert spec.context_length == 512
    assert spec.eos_token_ids == (2,)
    assert spec.pad_token_id == 0
    assert (spec.bos_token, spec.eos_token) == ("<|im_start|>", "<|im_end|>")
    assert spec.chat_template == CHATML_TEMPLATE
    assert spec.kv_geometry == (2, 16)
    assert spec.sliding_window is None
    assert spec.extra_special_tokens["pad_token"] == "<|endoftext|>"
    assert spec.generation_defaults == {"do_sample": False}
    assert GenerationSettings.from_model(spec.generation_defaults).sampling.greedy


def test_optimum_cli_layout_with_model_at_root(plain_model_root_dir):
    spec = read_model_folder(plain_model_root_dir)
    assert spec.layout == "optimum"
    assert spec.model_path == plain_model_root_dir / "model.onnx"


def test_genai_layout_is_normalised(gqa_model_dir):
    spec = read_model_folder(gqa_model_dir)
    assert spec.layout == "genai"
    assert spec.variant == "genai"
    assert spec.model_path == gqa_model_dir / "model.onnx"
    assert spec.context_length == 512
    assert spec.eos_token_ids == (2,)
    assert spec.pad_token_id == 0
    assert spec.chat_template == CHATML_TEMPLATE  # from chat_template.jinja
    assert spec.kv_geometry == (2, 16)
    assert spec.io_names["input_ids"] == "input_ids"
    assert spec.io_names["present_key_names"] == "present.%d.key"
    assert "position_ids" not in spec.io_names
    assert spec.generation_defaults["max_length"] == 512
    assert spec.generation_defaults["top_k"] == 1
    assert "diversity_penalty" not in spec.generation_defaults
    assert GenerationSettings.from_model(spec.generation_defaults).sampling.greedy  # do_sample


def test_genai_config_details(gqa_model_dir, tmp_path):
    folder = _copy(gqa_model_dir, tmp_path / "m")
    (folder / "chat_template.jinja").unlink()
    _edit_json(
        folder / "tokenizer_config.json",
        chat_template=[
            {"name": "tool_use", "template": "TOOLS"},
            {"name": "default", "template": "DEFAULT"},
        ],
    )
    config = json.loads((folder / "genai_config.json").read_text())
    config["_name_or_path"] = "microsoft/Phi-3-mini-4k-instruct"
    model = config["model"]
    model["eos_token_id"] = [2, 0, 2]
    model["decoder"]["sliding_window"] = {"window_size": 64, "slide_key_value_cache": False}
    model["decoder"]["session_options"] = {
        "log_id": "onnxruntime-genai",
        "intra_op_num_threads": 1,
        "graph_optimization_level": "ORT_ENABLE_BASIC",
        "session.disable_prepacking": "1",
        "provider_options": [
            {"DML": {"device_id": "1"}},
            {"CUDAExecutionProvider": {"enable_cuda_graph": "0"}},
        ],
    }
    config["search"].update(do_sample=True, temperature=0.6, top_k=40, top_p=0.9)
    (folder / "genai_config.json").write_text(json.dumps(config))

    spec = read_model_folder(folder)
    assert spec.name == "Phi-3-mini-4k-instruct"
    assert spec.chat_template == "DEFAULT"
    assert spec.eos_token_ids == (2, 0)
    assert spec.sliding_window == 64
    assert spec.session_options["intra_op_num_threads"] == 1
    assert spec.session_options["graph_optimization_level"] == "ORT_ENABLE_BASIC"
    assert spec.session_options["config_entries"] == {"session.disable_prepacking": "1"}
    assert spec.provider_options == (
        {"dml": {"device_id": "1"}},
        {"cuda": {"enable_cuda_graph": "0"}},
    )
    sampling = GenerationSettings.from_model(spec.generation_defaults,
                                             {"min_p": 0.05, "seed": 7}).sampling
    assert (sampling.temperature, sampling.top_k, sampling.top_p) == (0.6, 40, 0.9)
    assert (sampling.min_p, sampling.seed) == (0.05, 7)


def test_optimum_config_details(plain_model_dir, tmp_path):
    folder = _copy(plain_model_dir, tmp_path / "m")
    _edit_json(
        folder / "config.json",
        _name_or_path="HuggingFaceTB/SmolLM2-135M-Instruct",
        max_position_embeddings=None,
        n_positions=2048,
        sliding_window=128,
    )
    _edit_json(
        folder / "generation_config.json", eos_token_id=[2, 0], temperature=0.2, do_sample=True
    )
    _edit_json(
        folder / "tokenizer_config.json",
        bos_token={"__type": "AddedToken", "content": "<|im_start|>"},
        eos_token={"content": "<|im_end|>", "special": True},
        add_bos_token=True,
    )
    spec = read_model_folder(folder)
    assert spec.name == "SmolLM2-135M-Instruct"
    assert spec.context_length == 2048
    assert spec.sliding_window == 128
    assert spec.eos_token_ids == (2, 0)
    assert (spec.bos_token, spec.eos_token) == ("<|im_start|>", "<|im_end|>")
    assert spec.add_bos_token is True
    assert GenerationSettings.from_model(spec.generation_defaults).sampling.temperature == 0.2

    _edit_json(folder / "config.json", use_sliding_window=False)  # Qwen2 style: window off
    assert read_model_folder(folder).sliding_window is None


def test_eos_falls_back_to_the_tokenizer(plain_model_dir, tmp_path):
    folder = _copy(plain_model_dir, tmp_path / "m")
    _edit_json(folder / "config.json", eos_token_id=None)
    _edit_json(folder / "generation_config.json", eos_token_id=None)
    assert read_model_folder(folder).eos_token_ids == (2,)  # <|im_end|> in tokenizer.json


# ---------------------------------------------------------------- variants


@pytest.fixture()
def many_variants(plain_model_dir, tmp_path):
    folder = _copy(plain_model_dir, tmp_path / "variants")
    source = folder / "onnx" / "model.onnx"
    for name in ("model_q4", "model_fp16", "model_q4f16", "model_int8", "model_quantized"):
        shutil.copy(source, folder / "onnx" / f"{name}.onnx")
    return folder


@pytest.mark.parametrize(
    ("provider", "expected"),
    [
        ("cpu", "model_q4"),
        ("cuda", "model_q4f16"),
        ("dml", "model_q4f16"),
        ("coreml", "model"),
    ],
)
def test_variant_follows_the_provider(many_variants, provider, expected):
    spec = read_model_folder(many_variants, provider=provider)
    assert spec.variant == expected
    assert spec.model_path == many_variants / "onnx" / f"{expected}.onnx"


@pytest.mark.parametrize(
    ("requested", "expected"),
    [
        ("fp16", "model_fp16"),
        ("model_int8", "model_int8"),
        ("fp32", "model"),
        ("q4f16", "model_q4f16"),
        ("model_q4.onnx", "model_q4"),
    ],
)
def test_variant_override(many_variants, requested, expected):
    assert read_model_folder(many_variants, variant=requested).variant == expected


def test_unknown_variant_lists_the_available_ones(many_variants):
    with pytest.raises(ModelLoadError) as err:
        read_model_folder(many_variants, variant="q8")
    assert "'q8'" in str(err.value)
    assert "model_fp16" in str(err.value) and "model_q4f16" in str(err.value)


def test_variant_preferences():
    assert choose_variant(["model", "model_fp16", "model_int8"], "cpu") == "model_int8"
    assert choose_variant(["model", "model_fp16"], "cpu") == "model"
    assert choose_variant(["model", "model_q4"], "cuda") == "model_q4"
    assert choose_variant(["model", "model_fp16", "model_q4"], "cuda") == "model_fp16"
    assert choose_variant(["decoder_model_merged", "model"], "cpu") == "model"
    assert choose_variant(["model_q4", "model_fp16"], "coreml") == "model_fp16"
    with pytest.raises(KeyError):
        choose_variant(["model"], "cpu", "q4")


def test_genai_layout_rejects_a_foreign_variant(gqa_model_dir):
    assert read_model_folder(gqa_model_dir, variant="genai").variant == "genai"
    with pytest.raises(ModelLoadError, match="no variant 'q4'"):
        read_model_folder(gqa_model_dir, variant="q4")


def test_unknown_provider_is_refused(plain_model_dir):
    with pytest.raises(ProviderError, match="cpu, dml, cuda, coreml"):
        read_model_folder(plain_model_dir, provider="tpu")


# ---------------------------------------------------------------- the ONNX file check


def test_inspect_onnx_agrees_with_onnx(gqa_model_dir):
    summary = inspect_onnx(gqa_model_dir / "model.onnx")
    model = onnx.load(gqa_model_dir / "model.onnx")
    assert summary.op_types == {(n.domain, n.op_type) for n in model.graph.node}
    assert ("com.microsoft", "GroupQueryAttention") in summary.op_types
    assert summary.nodes == len(model.graph.node)
    assert summary.initializers == len(model.graph.initializer)
    assert summary.ir_version == model.ir_version
    assert summary.opsets == {o.domain: o.version for o in model.opset_import}
    assert summary.external_data == {}


def test_external_data_is_found_and_checked(plain_model_dir, tmp_path):
    folder = _copy(plain_model_dir, tmp_path / "m")
    data = _with_external_data(folder)
    summary = inspect_onnx(folder / "onnx" / "model.onnx")
    assert summary.external_data == {"model.onnx_data": data.stat().st_size}
    assert read_model_folder(folder).model_path.name == "model.onnx"

    with data.open("r+b") as handle:  # a download cut short
        handle.truncate(data.stat().st_size // 2)
    with pytest.raises(ModelLoadError, match=r"model\.onnx_data is truncated"):
        read_model_folder(folder)

    data.unlink()
    with pytest.raises(ModelLoadError) as err:
        read_model_folder(folder)
    assert "'model.onnx_data', which is missing" in str(err.value)
    assert "download" in str(err.value).lower()


def test_external_data_outside_the_folder_is_refused(plain_model_dir, tmp_path):
    folder = _copy(plain_model_dir, tmp_path / "m")
    model = _tiny_graph()
    weight = model.graph.initializer[0]
    weight.ClearField("raw_data")
    weight.ClearField("float_data")
    weight.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "../../secret.bin"), ("offset", "0"), ("length", "64")):
        entry = weight.external_data.add()
        entry.key, entry.value = key, value
    (folder / "onnx" / "model.onnx").write_bytes(model.SerializeToString())
    (tmp_path / "secret.bin").write_bytes(b"\0" * 64)
    with pytest.raises(ModelLoadError, match="outside its own folder"):
        read_model_folder(folder)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "is truncated"),
        (b"\x00\xffthis is not protobuf at all" * 10, "is not a valid ONNX model"),
        (b"<html><body>404 Not Found</body></html>", "is not a valid ONNX model"),
        (
            b"version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 123\n",
            "Git LFS pointer",
        ),
        (b"", "is empty"),
    ],
)
def test_corrupt_onnx_file_is_named(plain_model_dir, tmp_path, content, message):
    folder = _copy(plain_model_dir, tmp_path / "m")
    path = folder / "onnx" / "model.onnx"
    if content is None:
        content = path.read_bytes()[: path.stat().st_size * 2 // 3]
    path.write_bytes(content)
    with pytest.raises(ModelLoadError) as err:
        read_model_folder(folder)
    assert str(path) in str(err.value)
    assert message in str(err.value)


# ---------------------------------------------------------------- bad folders


def test_missing_folder(tmp_path):
    with pytest.raises(ModelLoadError, match="does not exist"):
        read_model_folder(tmp_path / "nope")


def test_a_file_instead_of_a_folder(tmp_path):
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")
    with pytest.raises(ModelLoadError, match="hearth import-gguf"):
        read_model_folder(gguf)
    text = tmp_path / "notes.txt"
    text.write_text("hi")
    with pytest.raises(ModelLoadError, match="is a file, not a model folder"):
        read_model_folder(text)


def test_empty_folder(tmp_path):
    with pytest.raises(ModelLoadError, match="is empty"):
        read_model_folder(tmp_path)


def test_gguf_folder_points_to_the_importer(tmp_path):
    (tmp_path / "SmolLM2-135M-Instruct-Q4_1.gguf").write_bytes(b"GGUF")
    with pytest.raises(ModelLoadError) as err:
        read_model_folder(tmp_path)
    assert "hearth import-gguf" in str(err.value)
    assert "SmolLM2-135M-Instruct-Q4_1.gguf" in str(err.value)


def test_repository_root_with_several_builds(gqa_model_dir, tmp_path):
    _copy(gqa_model_dir, tmp_path / "cpu_and_mobile" / "cpu-int4-rtn-block-32")
    _copy(gqa_model_dir, tmp_path / "directml" / "directml-int4-awq-block-128")
    with pytest.raises(ModelLoadError) as err:
        read_model_folder(tmp_path)
    assert "cpu_and_mobile/cpu-int4-rtn-block-32" in str(err.value)
    assert "directml/directml-int4-awq-block-128" in str(err.value)


def test_pytorch_checkout_without_onnx(plain_model_dir, tmp_path):
    folder = _copy(plain_model_dir, tmp_path / "m")
    shutil.rmtree(folder / "onnx")
    (folder / "model.safetensors").write_bytes(b"\0")
    with pytest.raises(ModelLoadError, match="no ONNX graph"):
        read_model_folder(folder)


def test_onnx_without_config(plain_model_dir, tmp_path):
    folder = _copy(plain_model_dir, tmp_path / "m")
    (folder / "config.json").unlink()
    with pytest.raises(ModelLoadError, match=r"neither genai_config\.json nor config\.json"):
        read_model_folder(folder)


@pytest.mark.parametrize("name", ["genai_config.json", "tokenizer_config.json"])
def test_malformed_json_gives_line_and_column(gqa_model_dir, tmp_path, name):
    folder = _copy(gqa_model_dir, tmp_path / "m")
    (folder / name).write_text('{\n  "model": {\n    "context_length": 512,\n  }\n}\n')
    with pytest.raises(ModelLoadError) as err:
        read_model_folder(folder)
    assert str(folder / name) in str(err.value)
    assert "line 4, column 3" in str(err.value)


def test_malformed_generation_config(plain_model_dir, tmp_path):
    folder = _copy(plain_model_dir, tmp_path / "m")
    (folder / "generation_config.json").write_text('{"eos_token_id": [2,')
    with pytest.raises(ModelLoadError, match=r"generation_config\.json is not valid JSON"):
        read_model_folder(folder)


def test_genai_model_file_missing(gqa_model_dir, tmp_path):
    folder = _copy(gqa_model_dir, tmp_path / "m")
    (folder / "model.onnx").unlink()
    with pytest.raises(ModelLoadError) as err:
        read_model_folder(folder)
    assert "genai_config.json names the model file 'model.onnx'" in str(err.value)


def test_genai_model_file_outside_the_folder(gqa_model_dir, tmp_path):
    folder = _copy(gqa_model_dir, tmp_path / "m")
    config = json.loads((folder / "genai_config.json").read_text())
    config["model"]["decoder"]["filename"] = "../other/model.onnx"
    (folder / "genai_config.json").write_text(json.dumps(config))
    _copy(gqa_model_dir, tmp_path / "other")
    with pytest.raises(ModelLoadError, match="outside its folder"):
        read_model_folder(folder)


def test_genai_config_without_decoder(gqa_model_dir, tmp_path):
    folder = _copy(gqa_model_dir, tmp_path / "m")
    (folder / "genai_config.json").write_text('{"model": {"context_length": 512}}')
    with pytest.raises(ModelLoadError, match=r"'model\.decoder'"):
        read_model_folder(folder)


def test_missing_tokenizer(plain_model_dir, tmp_path):
    folder = _copy(plain_model_dir, tmp_path / "m")
    (folder / "tokenizer.json").unlink()
    with pytest.raises(ModelLoadError, match=r"has no tokenizer\.json"):
        read_model_folder(folder)
    (folder / "tokenizer.model").write_bytes(b"\0")
    with pytest.raises(ModelLoadError, match="SentencePiece"):
        read_model_folder(folder)


def test_missing_context_length(plain_model_dir, tmp_path):
    folder = _copy(plain_model_dir, tmp_path / "m")
    _edit_json(folder / "config.json", max_position_embeddings=None)
    with pytest.raises(ModelLoadError, match="no context length"):
        read_model_folder(folder)


# ---------------------------------------------------------------- context and window per family
#
# Minimal config.json / genai_config.json fields as the families' real files carry them. The
# context limit is the model's context; the policy window is set only where every layer attends
# to a bounded span by design (Mistral 7B v0.1's rolling buffer), never from a per-layer local
# window (Gemma 3, Phi-3-mini-4k) or a window switched off or as long as the context.

_GEMMA3_LAYERS = (["sliding_attention"] * 5 + ["full_attention"]) * 3
OPTIMUM_FAMILIES = {
    "llama-3.2": (
        {"model_type": "llama", "max_position_embeddings": 131072,
         "rope_scaling": {"rope_type": "llama3", "factor": 32.0,
                          "original_max_position_embeddings": 8192}},
        131072, None,
    ),
    "qwen3": (
        {"model_type": "qwen3", "max_position_embeddings": 40960, "sliding_window": None,
         "use_sliding_window": False, "max_window_layers": 28},
        40960, None,
    ),
    "qwen2.5": (
        {"model_type": "qwen2", "max_position_embeddings": 32768, "sliding_window": 32768,
         "use_sliding_window": False},
        32768, None,
    ),
    "gemma-3-1b": (
        {"model_type": "gemma3_text", "max_position_embeddings": 32768, "sliding_window": 512,
         "sliding_window_pattern": 6},
        32768, None,
    ),
    "gemma-3-1b-transformers-5": (
        {"model_type": "gemma3_text", "max_position_embeddings": 32768, "sliding_window": 512,
         "layer_types": _GEMMA3_LAYERS},
        32768, None,
    ),
    "gemma-3-4b-multimodal": (
        {"model_type": "gemma3",
         "text_config": {"max_position_embeddings": 131072, "sliding_window": 1024,
                         "layer_types": _GEMMA3_LAYERS}},
        131072, None,
    ),
    "phi-3-mini-4k": (
        {"model_type": "phi3", "max_position_embeddings": 4096, "sliding_window": 2047},
        4096, None,
    ),
    "phi-4-mini": (
        {"model_type": "phi3", "max_position_embeddings": 131072,
         "original_max_position_embeddings": 4096, "sliding_window": 262144},
        131072, None,
    ),
    "mistral-7b-v0.1": (
        {"model_type": "mistral", "max_position_embeddings": 32768, "sliding_window": 4096},
        32768, 4096,
    ),
    "mistral-7b-v0.3": (
        {"model_type": "mistral", "max_position_embeddings": 32768, "sliding_window": None},
        32768, None,
    ),
    "smollm3": (
        {"model_type": "smollm3", "max_position_embeddings": 65536, "sliding_window": None,
         "use_sliding_window": False, "no_rope_layers": [1, 1, 1, 0]},
        65536, None,
    ),
}


@pytest.mark.parametrize("family", sorted(OPTIMUM_FAMILIES))
def test_optimum_context_and_window_per_family(plain_model_dir, tmp_path, family):
    fields, context, window = OPTIMUM_FAMILIES[family]
    folder = _copy(plain_model_dir, tmp_path / "m")
    config = json.loads((folder / "config.json").read_text())
    for key in ("max_position_embeddings", "sliding_window", "model_type"):
        config.pop(key, None)
    config.update(fields)
    (folder / "config.json").write_text(json.dumps(config))
    spec = read_model_folder(folder)
    assert (spec.context_length, spec.sliding_window) == (context, window)


GENAI_FAMILIES = {
    "llama-3.2": ({"type": "llama", "context_length": 131072}, None, 131072, None),
    "qwen3": ({"type": "qwen3", "context_length": 40960}, None, 40960, None),
    "gemma-3-1b": (
        {"type": "gemma3_text", "context_length": 32768},
        {"window_size": 512, "slide_key_value_cache": False},
        32768, None,
    ),
    "phi-3-mini-4k": (
        {"type": "phi3", "context_length": 4096},
        {"window_size": 2047, "slide_key_value_cache": False},
        4096, None,
    ),
    "phi-4-mini": ({"type": "phi3", "context_length": 131072}, None, 131072, None),
    "mistral-7b-v0.1": (
        {"type": "mistral", "context_length": 32768},
        {"window_size": 4096, "slide_key_value_cache": True},
        32768, 4096,
    ),
    "smollm3": ({"type": "smollm3", "context_length": 65536}, None, 65536, None),
    # onnxruntime-genai's builder names gpt-oss "gptoss" (GptOssForCausalLM less
    # "ForCausalLM"); Hearth's conversions before said "gpt-oss": a local window either way
    "gpt-oss (genai)": (
        {"type": "gptoss", "context_length": 131072},
        {"window_size": 128, "slide_key_value_cache": False},
        131072, None,
    ),
    "gpt-oss (gguf)": (
        {"type": "gpt-oss", "context_length": 131072},
        {"window_size": 128, "slide_key_value_cache": False},
        131072, None,
    ),
    # genai lists the layers its model class marks local: some layers only → a local window
    "local layers listed": (
        {"type": "newfamily", "context_length": 32768},
        {"window_size": 512, "slide_key_value_cache": False, "layers": [0]},
        32768, None,
    ),
    # ...and none ([]) for a model without local layers: Mistral keeps its policy window
    "mistral, no local layers": (
        {"type": "mistral", "context_length": 32768},
        {"window_size": 4096, "slide_key_value_cache": True, "layers": []},
        32768, 4096,
    ),
}


@pytest.mark.parametrize("family", sorted(GENAI_FAMILIES))
def test_genai_context_and_window_per_family(gqa_model_dir, tmp_path, family):
    fields, window_section, context, window = GENAI_FAMILIES[family]
    folder = _copy(gqa_model_dir, tmp_path / "m")
    config = json.loads((folder / "genai_config.json").read_text())
    config["model"].update(fields)
    config["search"]["max_length"] = context
    if window_section is not None:
        config["model"]["decoder"]["sliding_window"] = window_section
    (folder / "genai_config.json").write_text(json.dumps(config))
    spec = read_model_folder(folder)
    assert (spec.context_length, spec.sliding_window) == (context, window)


# ---------------------------------------------------------------- ONNX Runtime model packages

_TOKEN_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
                "special_tokens_map.json")


def _model_package(gqa_model_dir: Path, root: Path, variants: dict, *, style: str = "metadata"):
    """A package with one genai folder per variant and the tokenizer files in configs/.

    ``variants``: name -> (ep, device). ``style``: "metadata" (models/decoder/metadata.json
    with constraints, manifest lists component names) or "component" (component.json with the
    EP inline, manifest maps component names to paths)."""
    for name in variants:
        folder = root / "models" / "decoder" / name
        folder.mkdir(parents=True)
        for file in ("genai_config.json", "model.onnx"):
            shutil.copy(gqa_model_dir / file, folder / file)
    (root / "configs").mkdir()
    for file in _TOKEN_FILES:
        shutil.copy(gqa_model_dir / file, root / "configs" / file)
    if style == "metadata":
        manifest = {"model_name": "tiny-package", "component_models": ["decoder"]}
        descriptor = ("metadata.json", {"component_model_name": "decoder", "model_variants": {
            n: {"constraints": {"ep": ep, "device": dev}} for n, (ep, dev) in variants.items()}})
    else:
        manifest = {"schema_version": "1.0", "name": "tiny-package",
                    "components": {"decoder": "models/decoder"}}
        descriptor = ("component.json", {"model_variants": {
            n: {"ep": ep, "device": dev} for n, (ep, dev) in variants.items()}})
    (root / "manifest.json").write_text(json.dumps(manifest))
    (root / "models" / "decoder" / descriptor[0]).write_text(json.dumps(descriptor[1]))
    return root


PACKAGE_VARIANTS = {
    "qnn-npu": ("QNNExecutionProvider", "npu"),
    "cuda-fp16": ("CUDAExecutionProvider", "gpu"),
    "cpu-int4": ("CPUExecutionProvider", "cpu"),
    "dml-int4": ("DmlExecutionProvider", "gpu"),
}


@pytest.mark.parametrize("style", ["metadata", "component"])
@pytest.mark.parametrize(
    ("provider", "expected"),
    [("cpu", "cpu-int4"), ("cuda", "cuda-fp16"), ("dml", "dml-int4"), ("coreml", "cpu-int4")],
)
def test_model_package_variant_follows_the_policy(gqa_model_dir, tmp_path, style, provider,
                                                  expected):
    root = _model_package(gqa_model_dir, tmp_path / "pkg", PACKAGE_VARIANTS, style=style)
    spec = read_model_folder(root, provider=provider)
    assert spec.layout == "genai" and spec.variant == expected
    assert spec.root == root
    assert spec.model_path == root / "models" / "decoder" / expected / "model.onnx"
    assert spec.tokenizer_path == root / "configs" / "tokenizer.json"
    assert spec.chat_template == CHATML_TEMPLATE and spec.eos_token_ids == (2,)
    assert spec.name == "tiny-package"


def test_model_package_falls_back_to_cpu_and_honours_a_named_variant(gqa_model_dir, tmp_path):
    variants = {"qnn-npu": PACKAGE_VARIANTS["qnn-npu"], "cpu-int4": PACKAGE_VARIANTS["cpu-int4"]}
    root = _model_package(gqa_model_dir, tmp_path / "pkg", variants)
    assert read_model_folder(root, provider="cuda").variant == "cpu-int4"
    with pytest.raises(ModelLoadError, match="without a variant 'gpu'") as err:
        read_model_folder(root, variant="gpu")
    assert "qnn-npu (QNNExecutionProvider, npu)" in str(err.value)


def test_model_package_with_only_foreign_providers_is_refused(gqa_model_dir, tmp_path):
    variants = {"qnn-npu": PACKAGE_VARIANTS["qnn-npu"],
                "ov-npu": ("OpenVINOExecutionProvider", "npu")}
    root = _model_package(gqa_model_dir, tmp_path / "pkg", variants)
    with pytest.raises(ModelLoadError, match="Hearth does not run") as err:
        read_model_folder(root)
    assert "ov-npu (OpenVINOExecutionProvider, npu)" in str(err.value)


def test_downloaded_package_with_one_variant_reads_that_one(gqa_model_dir, tmp_path):
    root = _model_package(gqa_model_dir, tmp_path / "pkg", PACKAGE_VARIANTS)
    for name in ("qnn-npu", "cuda-fp16", "dml-int4"):
        shutil.rmtree(root / "models" / "decoder" / name)  # as a download of one variant
    assert read_model_folder(root, provider="cuda").variant == "cpu-int4"
    with pytest.raises(ModelLoadError) as err:
        read_model_folder(root, variant="cuda-fp16")
    assert str(err.value).endswith("Its variants: cpu-int4 (CPUExecutionProvider, cpu).")


# -- absurd metadata ----------------------------------------------------------------------


def test_absurd_genai_context_length_is_refused_naming_file_and_field(gqa_model_dir, tmp_path):
    folder = _copy(gqa_model_dir, tmp_path / "m")
    config = json.loads((folder / "genai_config.json").read_text())
    config["model"]["context_length"] = 2**31
    (folder / "genai_config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match=r"genai_config\.json.*model\.context_length") as e:
        read_model_folder(folder)
    assert "2,147,483,648" in str(e.value)


def test_absurd_max_position_embeddings_is_refused(plain_model_dir, tmp_path):
    folder = _copy(plain_model_dir, tmp_path / "m")
    _edit_json(folder / "config.json", max_position_embeddings=2**40)
    with pytest.raises(ModelLoadError, match=r"config\.json.*max_position_embeddings"):
        read_model_folder(folder)


def _million_token_model(plain_model_dir, tmp_path):
    """A copy of the plain model claiming a 1M-token context: (folder, its spec, the bytes of
    one token's float32 KV)."""
    folder = _copy(plain_model_dir, tmp_path / "m")
    _edit_json(folder / "config.json", max_position_embeddings=1_000_000)
    spec = read_model_folder(folder)
    kv_heads, head_dim = spec.kv_geometry
    layers = json.loads((folder / "config.json").read_text())["num_hidden_layers"]
    return folder, spec, 2 * layers * kv_heads * head_dim * 4


def test_context_the_machine_cannot_hold_is_clamped_with_a_note(plain_model_dir, tmp_path):
    from app.engine.package import bounded_context

    _, spec, per_token = _million_token_model(plain_model_dir, tmp_path)
    clamped = bounded_context(spec, ram_bytes=per_token * 5000)
    assert clamped.context_length == 5000
    assert "1,000,000" in clamped.context_note and "max_position_embeddings" in \
        clamped.context_note
    assert bounded_context(spec, ram_bytes=per_token * 10**6).context_length == 1_000_000
    with pytest.raises(ModelLoadError, match=r"config\.json.*fewer than 256 tokens"):
        bounded_context(spec, ram_bytes=per_token * 100)


def test_float16_buffers_a_conversion_recorded_hold_twice_the_context(plain_model_dir,
                                                                       tmp_path):
    """Hearth's grouped conversion keeps float16 KV (its manifest says so): the same memory
    holds twice the tokens of the float32 worst case; an unknown record counts as float32."""
    from app.engine.package import bounded_context
    from app.manifest import Manifest

    folder, spec, per_token_fp32 = _million_token_model(plain_model_dir, tmp_path)
    for recorded, fits in (("float16", 10_000), ("float32", 5000), ("bfloat12", 5000),
                           (["float16"], 5000)):  # a hostile record: the worst case
        Manifest.path_in(folder).write_text(json.dumps(
            {"id": "m", "name": "m", "conversion": {"kv_cache": recorded}}), encoding="utf-8")
        assert bounded_context(spec, ram_bytes=per_token_fp32 * 5000).context_length == fits


def test_huge_context_costs_no_preallocated_memory_and_still_chats(plain_model_dir, gqa_model_dir,
                                                                    tmp_path):
    """A 16M-token context (allowed) once cost 2 × 128 MB of mask / position buffers in the
    decoder; at 2^31 it was 32 GB and the OOM killer. Now they grow with the conversation."""
    import tracemalloc

    from app.engine.engine import Engine
    from app.engine.package import MAX_CONTEXT_TOKENS
    from app.engine.types import Message

    plain = _copy(plain_model_dir, tmp_path / "plain")
    _edit_json(plain / "config.json", max_position_embeddings=MAX_CONTEXT_TOKENS)
    genai = _copy(gqa_model_dir, tmp_path / "genai")
    config = json.loads((genai / "genai_config.json").read_text())
    config["model"]["context_length"] = MAX_CONTEXT_TOKENS
    (genai / "genai_config.json").write_text(json.dumps(config))
    for folder in (plain, genai):
        tracemalloc.start()
        try:
            engine = Engine.load(folder, provider="cpu", threads=1, huge_pages=False)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert engine.context_length == MAX_CONTEXT_TOKENS
        assert peak < 32 * 2**20, peak
        chunks = list(engine.chat([Message("user", "Hello")],
                                  GenerationSettings.from_model({}, {"temperature": 0,
                                                                     "max_new_tokens": 4})))
        assert chunks[-1].stats.generated_tokens >= 1
