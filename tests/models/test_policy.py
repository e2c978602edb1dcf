"""The one build policy: the build order per provider."""

from __future__ import annotations

import pytest

from app.engine import policy
from app.engine.policy import best_genai_folder, best_graph, graph_precision


@pytest.mark.parametrize(
    ("provider", "expected"),
    [("cpu", "model_q4"), ("cuda", "model_q4f16"), ("dml", "model_q4f16"), ("coreml", "model")],
)
def test_graph_order_per_provider(provider, expected):
    stems = ["model", "model_fp16", "model_q4", "model_q4f16", "model_int8", "model_quantized"]
    assert best_graph(stems, provider) == expected


def test_graph_precision_and_unknown_names_rank_last():
    assert graph_precision("model") == "fp32" and graph_precision("model_Q4") == "q4"
    assert graph_precision("decoder_model_merged_int8") == "int8"
    assert best_graph(["weird", "model_fp16"], "cpu") == "model_fp16"
    assert best_graph(["decoder_model_merged", "model"], "cpu") == "model"
    assert set(policy.PRECISION_ORDER) == {"cpu", "cuda", "dml", "coreml"}


def test_genai_folder_per_provider():
    folders = ["cpu_and_mobile/cpu-int4", "cuda/cuda-int4", "directml/directml-int4"]
    assert best_genai_folder(folders, "cpu") == "cpu_and_mobile/cpu-int4"
    assert best_genai_folder(folders, "cuda") == "cuda/cuda-int4"
    assert best_genai_folder(folders, "dml") == "directml/directml-int4"
    assert best_genai_folder(["gpu/gpu-int4", "cpu/cpu-int4"], "cuda") == "gpu/gpu-int4"
    assert best_genai_folder(["only"], "cuda") == "only"


def test_package_variant_per_provider():
    variants = [
        ("npu", "QNNExecutionProvider", "npu"),
        ("gpu", "CUDAExecutionProvider", "gpu"),
        ("dml", "DmlExecutionProvider", "gpu"),
        ("cpu", "CPUExecutionProvider", "cpu"),
    ]
    assert policy.best_package_variant(variants, "cpu") == "cpu"
    assert policy.best_package_variant(variants, "cuda") == "gpu"
    assert policy.best_package_variant(variants, "dml") == "dml"
    assert policy.best_package_variant(variants, "coreml") == "cpu"
    assert policy.best_package_variant(variants[:2], "dml") is None  # QNN / CUDA only
    base = [("ov", "OpenVINOExecutionProvider", None), ("base", None, None)]
    assert policy.best_package_variant(base, "cuda") == "base"  # a base model runs anywhere
    assert policy.package_variant_provider(None, "gpu") is None
    assert policy.package_variant_provider("cuda", None) == "cuda"
