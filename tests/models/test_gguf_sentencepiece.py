"""SentencePiece ("llama") vocabularies rebuilt from GGUF metadata encode and decode exactly
as SentencePiece itself does (Llama 2, Mistral, TinyLlama and Phi-3 GGUFs use them)."""

from __future__ import annotations

import json

import pytest

from app.engine.engine import Engine
from app.engine.tokenizer import Tokenizer
from app.engine.types import GenerationSettings, Message, SamplingSettings
from app.models.gguf.convert import convert_gguf
from tests.models.tiny_spm import LLAMA2_TEMPLATE, PADDED_VOCAB, train_spm, write_spm_gguf

TEXTS = [
    "",
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "the",
    " leading space",
    "   three leading spaces",
    "trailing space ",
    "trailing spaces   ",
    "multiple   inner    spaces",
    " ",
    "    ",
    "line one\nline two\n\nafter a blank line\n",
    "\n",
    "tabs\tand\r\ncarriage returns",
    "café crème brûlée, über müsli, naïve señor",
    "Zürich café résumé",
    "北京欢迎你。我们喜欢中文",
    "中文 and English 混合",
    "emoji 😀🎉 ❤️ and 😀😀😀",
    "unknown letters: жёлтый Ωμέγα ﷺ 🦙 𝔘𝔫𝔦",
    "digits 1234567890 and 3.14159",
    "def main():\n    return print('hello')  # code",
    "        nested  =  value    with   gaps",
    "▁already▁has▁metaspace",
    "<0x41> looks like a byte piece",
    "< s> and </ s> [INST] hi [/INST]",
    "[PAD400] is an unused token's text",
    "mixed: Hello 世界 😀 ü\n  ok",
]


@pytest.fixture(scope="module", params=[True, False], ids=["dummy-prefix", "no-prefix"])
def converted(request, tmp_path_factory):
    """(sentencepiece model, converted folder, Hearth tokenizer) for a tiny GGUF."""
    add_prefix = request.param
    sp = train_spm(add_dummy_prefix=add_prefix)
    root = tmp_path_factory.mktemp("spm")
    src = root / "spm.gguf"
    write_spm_gguf(src, sp, add_space_prefix=None if add_prefix else False)
    dest = convert_gguf(src, root / "model")
    cfg = json.loads((dest / "tokenizer_config.json").read_text())
    tok = Tokenizer.from_files(
        dest / "tokenizer.json",
        bos_token=cfg["bos_token"],
        eos_token=cfg["eos_token"],
        add_bos_token=cfg["add_bos_token"],
    )
    return sp, dest, tok


@pytest.mark.parametrize("text", TEXTS)
def test_encode_matches_sentencepiece(converted, text):
    sp, _, tok = converted
    want = sp.encode(text)
    assert tok.encode(text) == want, [tok.id_to_token(i) for i in tok.encode(text)]
    # BOS: the GGUF says add_bos_token, so a prompt gets exactly one BOS in front
    assert tok.encode(text, add_special_tokens=True) == [sp.bos_id(), *want]


@pytest.mark.parametrize("text", TEXTS)
def test_decode_matches_sentencepiece(converted, text):
    sp, _, tok = converted
    ids = sp.encode(text)
    assert tok.decode(ids) == sp.decode(ids)
    assert tok.decode([sp.bos_id(), *ids, sp.eos_id()]) == sp.decode(ids)


def test_byte_fallback_pieces_decode_like_sentencepiece(converted):
    """Unknown characters become ``<0xNN>`` pieces; runs of them decode to their UTF-8 text,
    and wholly invalid runs to one U+FFFD per byte, as in SentencePiece.

    Known difference: a run mixing valid and invalid UTF-8 (``A`` then a cut-off ``€``)
    becomes U+FFFD for every byte of the run in the ``tokenizers`` ByteFallback decoder,
    while SentencePiece keeps the valid part; only a model emitting broken UTF-8 shows it."""
    sp, _, tok = converted
    ids = sp.encode("🦙 ж")
    assert any(sp.is_byte(i) for i in ids)
    assert tok.byte_fallback_ids == frozenset(i for i in range(sp.vocab_size()) if sp.is_byte(i))
    byte = {b: sp.piece_to_id(f"<0x{b:02X}>") for b in range(256)}
    for seq in ([0xF0, 0x9F], [0xFF], [0xE2, 0x82], [0xE2, 0x82, 0xAC], [0xF0, 0x9F, 0xA6, 0x99]):
        ids = [byte[b] for b in seq]
        assert tok.decode(ids) == sp.decode(ids)


def test_every_normal_piece_round_trips(converted):
    """Each piece of the vocabulary, as text, encodes the way SentencePiece encodes it."""
    sp, _, tok = converted
    for i in range(sp.vocab_size()):
        if sp.is_control(i) or sp.is_unknown(i) or sp.is_byte(i):
            continue
        text = sp.id_to_piece(i).replace("▁", " ")
        assert tok.encode(text) == sp.encode(text), text


def test_tokenizer_files(converted):
    sp, dest, tok = converted
    cfg = json.loads((dest / "tokenizer_config.json").read_text())
    assert (cfg["bos_token"], cfg["eos_token"], cfg["unk_token"]) == ("<s>", "</s>", "<unk>")
    assert cfg["add_bos_token"] is True and cfg["add_eos_token"] is False
    assert cfg["chat_template"] == LLAMA2_TEMPLATE
    assert tok.vocab_size == PADDED_VOCAB
    assert (tok.bos_token_id, tok.eos_token_id) == (sp.bos_id(), sp.eos_id())
    # special tokens written in a rendered prompt are parsed, never split into pieces
    text = "<s>[INST] Hello [/INST] Hi</s>"
    assert tok.encode(text) == [
        sp.bos_id(),
        *sp.encode("[INST] Hello [/INST] Hi"),
        sp.eos_id(),
    ]


def test_added_tokens(tmp_path):
    """Added tokens: CONTROL ones are special (left out of decoded text), USER_DEFINED ones
    (such as ``<think>``) are whole tokens whose text is kept, as in llama.cpp."""
    sp = train_spm()
    src = tmp_path / "spm.gguf"
    write_spm_gguf(src, sp, added_tokens={"<think>": False, "<|end|>": True})
    dest = convert_gguf(src, tmp_path / "model")
    tok = Tokenizer.from_files(dest / "tokenizer.json", bos_token="<s>", eos_token="</s>")
    think, end = sp.vocab_size(), sp.vocab_size() + 1
    assert tok.encode("<think>") == [think] and tok.encode("<|end|>") == [end]
    assert think not in tok.special_ids and {end, sp.bos_id(), sp.eos_id()} <= tok.special_ids
    ids = [sp.bos_id(), think, *sp.encode("Hello world"), end]
    # the pieces keep their ▁ after an added token, as in llama.cpp's detokenizer
    assert tok.decode(ids) == "<think> Hello world"
    assert tok.decode(ids, skip_special_tokens=False) == "<s><think> Hello world<|end|>"
    cfg = json.loads((dest / "tokenizer_config.json").read_text())
    assert cfg["added_tokens_decoder"][str(think)]["special"] is False
    assert cfg["added_tokens_decoder"][str(end)]["special"] is True


def test_tiny_model_chats_through_engine(tmp_path):
    """End to end: the converted SentencePiece model loads in the engine, renders a Llama 2
    prompt with exactly one BOS and streams a decoded reply."""
    sp = train_spm()
    src = tmp_path / "spm.gguf"
    write_spm_gguf(src, sp)
    dest = convert_gguf(src, tmp_path / "model")
    engine = Engine.load(dest, provider="cpu", threads=1)
    try:
        messages = [Message("user", "Hello, how are you?")]
        prompt = engine.render(messages)
        assert prompt == "<s>[INST] Hello, how are you? [/INST]"
        ids = engine.encode_chat(messages)
        assert ids == [sp.bos_id(), *sp.encode("[INST] Hello, how are you? [/INST]")]
        settings = GenerationSettings(sampling=SamplingSettings(temperature=0.0), max_new_tokens=8)
        chunks = list(engine.chat(messages, settings))
        reply_ids = [c.token_id for c in chunks if c.token_id is not None]
        assert chunks[-1].finish_reason is not None
        assert 1 <= len(reply_ids) <= 8
        text = "".join(c.text for c in chunks)
        want = sp.decode([i for i in reply_ids if i < sp.vocab_size()])
        assert text == want
    finally:
        engine.close()
