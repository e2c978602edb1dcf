"""Streaming detokenizer: exact text, no half characters, no stop-string leaks, O(1) per token.

The central invariant, checked on real text and on random token sequences from a byte-level
BPE and two SentencePiece byte-fallback tokenizers: everything ``add`` returned plus
``finish()`` equals ``tokenizer.decode(all_ids)``; with stop strings, that text up to the
first stop string.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from app.engine.detokenizer import REPLACEMENT_CHAR, StreamingDetokenizer
from app.engine.tokenizer import Tokenizer
from tests.engine.test_tokenizer import FALLBACK_TEXT, KINDS, SAMPLES, load_tokenizer


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory) -> dict[str, Tokenizer]:
    root = tmp_path_factory.mktemp("detok")
    return {kind: load_tokenizer(root / kind, kind) for kind in KINDS}


def stream(tok: Tokenizer, ids: Sequence[int], **kwargs) -> tuple[list[str], str, str]:
    """Feed ``ids`` one by one: (every add() result, finish(), detok.text)."""
    detok = StreamingDetokenizer(tok, **kwargs)
    outs = [detok.add(i) for i in ids]
    tail = detok.finish()
    return outs, tail, detok.text


def assert_prefix_closed(outs: list[str], expected: str) -> None:
    """Every moment's shown text is a prefix of the final text (nothing is ever retracted),
    and no incomplete character is shown."""
    shown = ""
    for out in outs:
        shown += out
        assert expected.startswith(shown), (shown, expected)


# -- exact text -------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("text", [*SAMPLES, FALLBACK_TEXT])
def test_real_text_streams_exactly(tokenizers, kind, text):
    tok = tokenizers[kind]
    ids = tok.encode(text)
    outs, tail, shown = stream(tok, ids)
    expected = tok.decode(ids)
    assert "".join(outs) + tail == expected == shown
    assert_prefix_closed(outs, expected)
    if REPLACEMENT_CHAR not in expected:
        assert all(REPLACEMENT_CHAR not in out for out in outs)


def test_multibyte_character_is_held_until_complete(tokenizers):
    tok = tokenizers["bytelevel"]
    ids = tok.encode("a😀")
    pieces = [tok.decode([i]) for i in ids]
    assert len(ids) >= 3 and pieces[1] == REPLACEMENT_CHAR  # 😀 is split across tokens
    detok = StreamingDetokenizer(tok)
    outs = [detok.add(i) for i in ids]
    assert outs[0] == "a"
    assert all(out == "" for out in outs[1:-1])
    assert outs[-1] == "😀"


def test_byte_fallback_run_is_held_until_it_ends(tokenizers):
    tok = tokenizers["sp_llama"]
    ids = tok.encode("中 ok")
    assert [tok.id_to_token(i) for i in ids[:5]] == ["▁", "<0xE4>", "<0xB8>", "<0xAD>", "▁o"]
    detok = StreamingDetokenizer(tok)
    outs = [detok.add(i) for i in ids]
    # The three byte pieces of 中 show nothing; the next normal piece releases 中.
    assert outs[:5] == ["", "", "", "", "中 o"]
    assert "".join(outs) + detok.finish() == "中 ok"


def test_valid_byte_run_turned_invalid_is_not_retracted(tokenizers):
    """ByteFallback turns a whole byte run into U+FFFDs when it ends invalid: 中 must not
    have been shown before that is known."""
    tok = tokenizers["sp_llama"]
    byte = {b: tok.token_to_id(f"<0x{b:02X}>") for b in range(256)}
    ids = [byte[0xE4], byte[0xB8], byte[0xAD], byte[0xE4], *tok.encode("ok")]
    outs, tail, _ = stream(tok, ids)
    expected = tok.decode(ids)
    assert expected.startswith(REPLACEMENT_CHAR * 4)
    assert "".join(outs) + tail == expected
    assert_prefix_closed(outs, expected)


@pytest.mark.parametrize("kind", ["sp_llama", "sp_metaspace"])
def test_skipped_special_token_does_not_eat_the_next_space(tokenizers, kind):
    tok = tokenizers[kind]
    hello, world = tok.encode("Hello"), tok.encode("world")
    ids = [*hello, tok.bos_token_id, *world, tok.eos_token_id]
    outs, tail, _ = stream(tok, ids)
    assert "".join(outs) + tail == tok.decode(ids) == "Hello world"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("skip", [True, False])
def test_random_token_sequences_stream_exactly(tokenizers, kind, skip):
    tok = tokenizers[kind]
    rng = random.Random(f"{kind}-{skip}")
    vocab = list(range(tok.vocab_size))
    bytes_ = sorted(tok.byte_fallback_ids) or [
        i for i in vocab if REPLACEMENT_CHAR in tok.decode([i])
    ]
    special = sorted(tok.special_ids)
    for _ in range(150):
        ids = []
        for _ in range(rng.randint(1, 40)):
            roll = rng.random()
            pool = bytes_ if roll < 0.45 else special if roll < 0.5 else vocab
            ids.append(rng.choice(pool))
        outs, tail, shown = stream(tok, ids, skip_special_tokens=skip)
        expected = tok.decode(ids, skip_special_tokens=skip)
        assert "".join(outs) + tail == expected == shown, ids
        assert_prefix_closed(outs, expected)


# -- stop strings -----------------------------------------------------------------------


def one_char_ids(tok: Tokenizer, text: str) -> list[int]:
    """Token ids of ``text`` encoded character by character, so stop strings span tokens."""
    ids: list[int] = []
    for ch in text:
        ids.extend(tok.encode(ch))
    return ids


def test_stop_string_spanning_tokens_is_never_shown(tokenizers):
    tok = tokenizers["bytelevel"]
    ids = one_char_ids(tok, "Sure thing.\nUser: more")
    detok = StreamingDetokenizer(tok, stop_strings=["\nUser:"])
    outs = []
    for i in ids:
        outs.append(detok.add(i))
        if detok.stop_hit:
            break
    assert detok.stop_hit == "\nUser:"
    assert "".join(outs) == "Sure thing." == detok.text
    assert_prefix_closed(outs, "Sure thing.")
    assert detok.add(ids[0]) == "" and detok.finish() == ""


def test_possible_stop_prefix_is_held_then_released(tokenizers):
    tok = tokenizers["bytelevel"]
    ids = one_char_ids(tok, "a Use b")
    detok = StreamingDetokenizer(tok, stop_strings=["User:"])
    outs = [detok.add(i) for i in ids]
    assert outs[:2] == ["a", " "]
    assert outs[2:5] == ["", "", ""]  # "Use" could still become "User:"
    assert outs[5] == "Use "
    assert detok.finish() == ""
    assert detok.stop_hit is None and detok.text == "a Use b"


def test_held_prefix_is_flushed_at_finish(tokenizers):
    tok = tokenizers["bytelevel"]
    outs, tail, shown = stream(tok, one_char_ids(tok, "the end <|"), stop_strings=["<|eot|>"])
    assert "".join(outs) == "the end " and tail == "<|" and shown == "the end <|"


def test_earliest_of_several_stop_strings_wins(tokenizers):
    tok = tokenizers["bytelevel"]
    detok = StreamingDetokenizer(tok, stop_strings=["world", "lo w"])
    out = "".join(detok.add(i) for i in tok.encode("Hello world"))
    assert detok.stop_hit == "lo w" and out == "Hel"


def test_stop_string_at_the_very_start(tokenizers):
    tok = tokenizers["bytelevel"]
    outs, tail, shown = stream(tok, tok.encode("STOP here"), stop_strings=["STOP"])
    assert outs == [""] * len(outs) and shown == "" and tail == ""


@pytest.mark.parametrize("kind", ["sp_llama", "sp_metaspace"])
def test_stop_string_inside_the_final_flush(tokenizers, kind):
    tok = tokenizers[kind]
    ids = tok.encode("ok 😀")  # the emoji ends the reply as byte pieces: held until finish
    assert tok.id_to_token(ids[-1]) == "<0x80>"
    detok = StreamingDetokenizer(tok, stop_strings=["😀"])
    outs = [detok.add(i) for i in ids]
    assert detok.stop_hit is None and "".join(outs) == "ok "
    assert detok.finish() == ""
    assert detok.stop_hit == "😀" and detok.text == "ok "


@pytest.mark.parametrize("kind", KINDS)
def test_random_stop_strings(tokenizers, kind):
    tok = tokenizers[kind]
    rng = random.Random(kind)
    texts = [*SAMPLES, FALLBACK_TEXT, "User: hi\nAssistant: hello\nUser: bye"]
    checked = 0
    for _ in range(300):
        text = rng.choice(texts)
        ids = tok.encode(text)
        full = tok.decode(ids)
        if len(full) < 3:
            continue
        stops = []
        for _ in range(rng.randint(1, 3)):
            start = rng.randrange(len(full) - 1)
            stops.append(full[start : start + rng.randint(1, 5)])
        if rng.random() < 0.3:
            stops.append("never appears ~~")
        expected = full[: min(full.find(s) for s in stops if s in full)]
        detok = StreamingDetokenizer(tok, stop_strings=stops)
        outs = []
        for i in ids:
            outs.append(detok.add(i))
        outs.append(detok.finish())
        assert "".join(outs) == expected == detok.text, (text, stops)
        assert detok.stop_hit is not None and full.find(detok.stop_hit) == len(expected)
        assert_prefix_closed(outs, expected)
        checked += 1
    assert checked > 200


# -- cost -------------------------------------------------------------------------------


class RecordingTokenizer(Tokenizer):
    """The real tokenizer, remembering how many ids each decode call received."""

    def __init__(self, base: Tokenizer) -> None:
        self.__dict__.update(base.__dict__)
        self.decode_sizes: list[int] = []

    def decode(self, ids, *, skip_special_tokens=True):
        self.decode_sizes.append(len(ids))
        return super().decode(ids, skip_special_tokens=skip_special_tokens)


@pytest.mark.parametrize("kind", KINDS)
def test_work_per_token_does_not_grow_with_the_reply(tokenizers, kind):
    tok = RecordingTokenizer(tokenizers[kind])
    ids = tok.encode(" ".join([*SAMPLES, FALLBACK_TEXT] * 40))
    assert len(ids) > 2000
    detok = StreamingDetokenizer(tok, stop_strings=["never appears"])
    for i in ids:
        detok.add(i)
    detok.finish()
    assert len(detok.text) > 4000
    # A short window, never the whole reply: at most the longest run of byte-fallback pieces
    # (held until the run ends) plus a few tokens of context.
    longest_run = run = 0
    for i in ids:
        run = run + 1 if i in tok.byte_fallback_ids else 0
        longest_run = max(longest_run, run)
    assert max(tok.decode_sizes) <= longest_run + 6 < 60
    assert len(tok.decode_sizes) <= 2 * len(ids) + 2


def test_add_after_finish_is_a_bug(tokenizers):
    detok = StreamingDetokenizer(tokenizers["bytelevel"])
    detok.finish()
    assert detok.finish() == ""
    with pytest.raises(RuntimeError):
        detok.add(5)
