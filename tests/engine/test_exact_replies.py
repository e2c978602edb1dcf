"""A reply never depends on the cache: on the path the app and the server take (an engine
loaded with its defaults, a ``ConversationCaches`` across turns, 4-bit graphs, prompts past the
prompt-session threshold) every turn's tokens equal a fresh run's, greedy and seeded, on the
kernels this CPU really has, and as on both kinds of CPU made on any machine: one whose
one-row steps round otherwise than its several-row runs (AVX2, AMX: two-row steps) and one
whose do not (AVX-512 VNNI: one row), tests/fixtures/quantized.py ``KERNELS``."""

from __future__ import annotations

from dataclasses import replace

import pytest

from app.engine.engine import Engine
from app.engine.prompt_session import MIN_ROWS
from app.engine.types import GenerationSettings, Message, SamplingSettings

GREEDY = GenerationSettings(sampling=SamplingSettings(temperature=0.0), max_new_tokens=16)
SEEDED = GenerationSettings(
    sampling=SamplingSettings(temperature=0.9, top_k=40, top_p=0.95, seed=1234),
    max_new_tokens=16,
)
#: model id -> (folder fixture, kind of CPU to calibrate as; None: this CPU's own kernels)
FOLDERS = {
    "int4_long_context_dir": ("int4_long_context_dir", None),
    "starter_model": ("starter_model", None),
    "int4_one_row_differs": ("int4_one_row_differs_long_dir", "one_row_differs"),
    "int4_one_row_alike": ("int4_one_row_differs_long_dir", "one_row_alike"),
}
MODELS = [
    "int4_long_context_dir",  # an onnxruntime-genai int4 graph (MatMulNBits, accuracy level 4)
    "int4_one_row_differs",  # the same graph as on a CPU that needs two-row steps
    "int4_one_row_alike",  # and as on one whose one-row steps already agree
    pytest.param("starter_model", marks=pytest.mark.starter),  # the starter's own conversion
]
SENTENCE = ("the keeper lit the lamp and logged the ships at dawn while gulls cried over the "
            "grey sea and the bell rang twice before the fog came in")
WORDS = SENTENCE.split(" ")


@pytest.fixture(scope="module")
def int4_long_context_dir(tmp_path_factory):
    """``gqa_int4_model_dir`` with room for eight turns of a character-level tokenizer."""
    from tests.fixtures.quantized import quantize_matmuls
    from tests.fixtures.tiny_models import build_gqa_model

    folder = build_gqa_model(tmp_path_factory.mktemp("int4_long"), context_length=4096)
    assert quantize_matmuls(folder / "model.onnx") > 0
    return folder


@pytest.fixture(scope="module")
def int4_one_row_differs_long_dir(tmp_path_factory):
    """``int4_long_context_dir`` whose one-token steps round otherwise than its several-row
    runs on every CPU (``perturb_one_row_steps``)."""
    from tests.fixtures.quantized import perturb_one_row_steps, quantize_matmuls
    from tests.fixtures.tiny_models import build_gqa_model

    folder = build_gqa_model(tmp_path_factory.mktemp("int4_long_differs"), context_length=4096)
    assert quantize_matmuls(folder / "model.onnx") > 0
    perturb_one_row_steps(folder / "model.onnx")
    return folder


def _user_turns(count: int) -> list[str]:
    """Short and long messages by turns: a long one's new tail is read in chunks of more than
    ``MIN_ROWS`` tokens (where a prompt session would take over), a short one's is not."""
    turns = []
    for i in range(count):
        words = WORDS[i % 7:] + WORDS[: i % 7]
        turns.append(" ".join(words * 3) if i % 2 else f"and then, {WORDS[i]}? ({i})")
    return turns


def _load(folder) -> Engine:
    return Engine.load(folder, provider="cpu", threads=1, huge_pages=False)


def _engine(model: str, request) -> Engine:
    """An engine with its defaults over ``model`` (``FOLDERS``), on its kind of CPU."""
    from tests.fixtures.quantized import load_with_kernels

    fixture, kernels = FOLDERS[model]
    folder = request.getfixturevalue(fixture)
    return _load(folder) if kernels is None else load_with_kernels(folder, kernels)


def _reply(chunks) -> tuple[list[int], object]:
    chunks = list(chunks)
    return [c.token_id for c in chunks if c.token_id is not None], chunks[-1].stats


@pytest.mark.parametrize(("model", "settings"), [
    ("int4_long_context_dir", GREEDY),
    ("int4_long_context_dir", SEEDED),
    ("int4_one_row_differs", GREEDY),
    ("int4_one_row_differs", SEEDED),
    ("int4_one_row_alike", GREEDY),
    ("int4_one_row_alike", SEEDED),
    pytest.param("starter_model", GREEDY, marks=pytest.mark.starter),
], ids=["int4-greedy", "int4-seeded", "one-row-differs-greedy", "one-row-differs-seeded",
        "one-row-alike-greedy", "one-row-alike-seeded", "starter-greedy"])
def test_an_eight_turn_chat_with_reuse_equals_the_same_turns_without(model, settings, request):
    cached, fresh = _engine(model, request), _engine(model, request)
    assert not cached.decoder.has_prompt_session  # exact by default: one kernel family
    caches = cached.conversation_caches()
    history: list[Message] = []
    reused = []
    for turn, text in enumerate(_user_turns(8)):
        history.append(Message("user", text))
        with_cache, stats = _reply(cached.chat(history, settings, caches=caches,
                                               conversation_id="chat"))
        without, _ = _reply(fresh.chat(history, settings, reuse=False))
        assert with_cache == without, f"turn {turn}"
        reused.append(stats.reused_tokens)
        history.append(Message("assistant", cached.tokenizer.decode(with_cache)))
    assert reused[0] == 0 and all(r > 0 for r in reused[1:])  # the cache really served
    long_tails = [len(cached.encode_chat(history[: 2 * t + 1])) - reused[t] for t in range(8)]
    assert max(long_tails) > MIN_ROWS > min(long_tails)


@pytest.mark.parametrize("settings", [GREEDY, SEEDED], ids=["greedy", "seeded"])
@pytest.mark.parametrize("model", MODELS)
def test_a_regenerate_equals_a_fresh_run_and_a_repeat_equals_the_first(model, settings,
                                                                          request):
    cached, fresh = _engine(model, request), _engine(model, request)
    caches = cached.conversation_caches()
    history: list[Message] = []
    for text in _user_turns(3):
        history.append(Message("user", text))
        reply, _ = _reply(cached.chat(history, settings, caches=caches, conversation_id="c"))
        history.append(Message("assistant", cached.tokenizer.decode(reply)))
    question = history[:-1]  # Regenerate: the last reply again, from the cache
    regenerated, stats = _reply(cached.chat(question, settings, caches=caches,
                                            conversation_id="c"))
    assert stats.reused_tokens > 0
    first, _ = _reply(fresh.chat(question, settings, reuse=False))
    assert regenerated == first
    # the same request again on the warm engine's own cache (a server's repeat)
    again, stats = _reply(fresh.chat(question, settings))
    assert stats.reused_tokens > 0 and again == first


def test_the_inexact_mode_is_opt_in_and_named(gqa_int4_model_dir, avx2_kernel_choice):
    # planned as on x86 AVX2, where the inexact mode's prompt session would pay: on ARM and on
    # AVX-512 VNNI without AMX no session is opened either way, and the note says that instead
    engine = Engine.load(gqa_int4_model_dir, provider="cpu", threads=1, huge_pages=False)
    assert engine.decoder.exact
    assert "never depends on what the cache held" in engine.prompt_plan.note
    fast = Engine.load(gqa_int4_model_dir, provider="cpu", threads=1, huge_pages=False,
                       exact=False)
    assert not fast.decoder.exact
    assert "never depends" not in fast.prompt_plan.note
    reply, _ = _reply(fast.chat([Message("user", "hello")], replace(GREEDY, max_new_tokens=4)))
    assert len(reply) == 4


def test_the_model_details_say_where_exact_replies_step_in_pairs(
        int4_one_row_differs_long_dir):
    """Where the CPU's one-row kernels round otherwise (as AVX2's MatMulNBits does), exact
    replies step in pairs, and the model's details say so and how to trade it for speed."""
    from app.engine.engine import STEP_PAIRS_NOTE
    from tests.fixtures.quantized import load_with_kernels

    differs = load_with_kernels(int4_one_row_differs_long_dir, "one_row_differs")
    differs.decoder.choose_rows(pairs=False)  # a plain reply
    assert differs.decoder.step_rows == 2
    assert differs.describe().steps_note == STEP_PAIRS_NOTE
    assert "Settings ▸ Hardware" in STEP_PAIRS_NOTE
    fast = load_with_kernels(int4_one_row_differs_long_dir, "one_row_differs", exact=False)
    fast.decoder.choose_rows(pairs=False)
    assert fast.decoder.step_rows == 1 and fast.describe().steps_note is None
    alike = load_with_kernels(int4_one_row_differs_long_dir, "one_row_alike")
    alike.decoder.choose_rows(pairs=False)
    assert alike.decoder.step_rows == 1 and alike.describe().steps_note is None


def test_the_calibration_is_part_of_the_load_not_of_the_first_reply(gqa_int4_model_dir,
                                                                     monkeypatch):
    from app.engine.decoder import Decoder

    engine = _load(gqa_int4_model_dir)
    assert engine.decoder.one_row_agrees is not None  # measured while loading
    measured = []
    original = Decoder._step_difference
    monkeypatch.setattr(Decoder, "_step_difference",
                        lambda self, *a, **k: measured.append(1) or original(self, *a, **k))
    _reply(engine.chat([Message("user", "hello")], replace(GREEDY, max_new_tokens=4)))
    assert measured == []  # the first reply measured nothing
    lazy = Engine.load(gqa_int4_model_dir, provider="cpu", threads=1, huge_pages=False,
                       calibrate=False)
    assert lazy.decoder.one_row_agrees is None
    _reply(lazy.chat([Message("user", "hello")], replace(GREEDY, max_new_tokens=4)))
    assert measured and lazy.decoder.one_row_agrees is not None  # then before the reply
