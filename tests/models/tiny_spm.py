"""A tiny SentencePiece BPE vocabulary in a tiny GGUF, written as llama.cpp writes one
(test helper).

``train_spm`` trains a real SentencePiece BPE model at test time with Llama 2's trainer
settings (identity normalization, extra whitespace kept, digits split, byte fallback);
``write_spm_gguf`` stores its vocabulary the way llama.cpp's ``convert_hf_to_gguf.py``
(``_create_vocab_sentencepiece`` / ``_set_vocab_sentencepiece``) does, in a tiny random Llama.
``rewrite_gguf`` copies a GGUF file adding metadata and tensors (the rope-scaling tests use it
too, since ``GGUFWriter`` cannot append to a written file).
"""

from __future__ import annotations

import functools
import io
from collections.abc import Callable
from pathlib import Path

import numpy as np
import sentencepiece as spm
from gguf import GGMLQuantizationType as Q
from gguf import GGUFReader, GGUFValueType, GGUFWriter

from tests.models.tiny_gguf import HIDDEN, write_tiny_gguf

# llama.cpp's SentencePieceTokenTypes
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
VOCAB_SIZE = 400
PADDED_VOCAB = 416  # config.json vocab_size larger than the model: [PADn] UNUSED tokens
LLAMA2_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}"
    "{% if m['role'] == 'user' %}{{ '[INST] ' + m['content'] + ' [/INST]' }}"
    "{% elif m['role'] == 'assistant' %}{{ ' ' + m['content'] + eos_token }}{% endif %}"
    "{% endfor %}"
)
CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "A café in Zürich serves crème brûlée and über-fresh müsli.",
    "Hello world! How are you today? I am fine, thank you.",
    "北京欢迎你。我们喜欢中文和学习。中文很有意思。",
    "Emoji are fun 😀 and 🎉 and ❤️ too, 😀😀 twice.",
    "Numbers like 12345 and 3.14159 appear in text, 2024 too.",
    "The the the then there their they them these those.",
    "Naïve coöperation résumé façade jalapeño señor.",
    "In the beginning was the word, and the word was with the model.",
    "def main():",
    "    return print('hello')  # indented code",
    "        nested  =  value    with   gaps",
]


@functools.lru_cache(maxsize=4)
def _trained_proto(add_dummy_prefix: bool) -> bytes:
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS * 8),
        model_writer=model,
        model_type="bpe",
        vocab_size=VOCAB_SIZE,
        character_coverage=1.0,
        byte_fallback=True,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        add_dummy_prefix=add_dummy_prefix,
        split_digits=True,
        allow_whitespace_only_pieces=True,
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        num_threads=1,
        minloglevel=2,
    )
    return model.getvalue()


def train_spm(add_dummy_prefix: bool = True) -> spm.SentencePieceProcessor:
    """A deterministic SentencePiece BPE model (vocabulary 400, 256 byte pieces)."""
    return spm.SentencePieceProcessor(model_proto=_trained_proto(add_dummy_prefix))


def spm_vocab(
    sp: spm.SentencePieceProcessor, size: int = PADDED_VOCAB
) -> tuple[list[str], list[float], list[int]]:
    """(tokens, scores, token types) as llama.cpp's converter lists them."""
    tokens = [f"[PAD{i}]" for i in range(size)]
    scores = [-10000.0] * size
    types = [UNUSED] * size
    for i in range(sp.vocab_size()):
        tokens[i] = sp.id_to_piece(i)
        scores[i] = sp.get_score(i)
        if sp.is_unknown(i):
            types[i] = UNKNOWN
        elif sp.is_control(i):
            types[i] = CONTROL
        elif sp.is_unused(i):
            types[i] = UNUSED
        elif sp.is_byte(i):
            types[i] = BYTE
        else:
            types[i] = NORMAL
    return tokens, scores, types


def rewrite_gguf(
    src: Path,
    dest: Path,
    *,
    add_metadata: Callable[[GGUFWriter], None] | None = None,
    tensors: dict[str, np.ndarray] | None = None,
) -> None:
    """Copy ``src`` to ``dest`` with more metadata (written by ``add_metadata``) and with
    float32 ``tensors`` added or replacing the file's own."""
    reader = GGUFReader(src)
    arch = str(reader.fields["general.architecture"].contents())
    w = GGUFWriter(str(dest), arch)
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        sub = field.types[-1] if field.types[0] == GGUFValueType.ARRAY else None
        w.add_key_value(key, field.contents(), field.types[0], sub_type=sub)
    if add_metadata is not None:
        add_metadata(w)
    extra = dict(tensors or {})
    for t in reader.tensors:
        if t.name in extra:
            w.add_tensor(t.name, extra.pop(t.name))
        elif t.tensor_type in (Q.F32, Q.F16):
            w.add_tensor(t.name, np.array(t.data))
        else:
            w.add_tensor(t.name, np.array(t.data), raw_dtype=t.tensor_type)
    for name, array in extra.items():
        w.add_tensor(name, array)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_spm_gguf(
    path: Path,
    sp: spm.SentencePieceProcessor,
    *,
    add_bos: bool = True,
    add_space_prefix: bool | None = None,
    added_tokens: dict[str, bool] | None = None,
    seed: int = 0,
) -> None:
    """A tiny random Llama whose vocabulary is ``sp``'s, with a Llama 2 chat template.

    ``add_space_prefix`` None leaves ``tokenizer.ggml.add_space_prefix`` out (as for Llama 2).
    ``added_tokens`` (text → special) take the ids after SentencePiece's own, as llama.cpp
    places a tokenizer's added tokens: CONTROL when special, USER_DEFINED otherwise."""
    plain = path.with_suffix(".plain.gguf")
    write_tiny_gguf(plain, tokenizer=False, seed=seed)
    tokens, scores, types = spm_vocab(sp)
    for i, (text, special) in enumerate((added_tokens or {}).items(), start=sp.vocab_size()):
        tokens[i], scores[i], types[i] = text, -1000.0, CONTROL if special else USER_DEFINED

    def tokenizer(w: GGUFWriter) -> None:
        w.add_tokenizer_model("llama")
        w.add_tokenizer_pre("default")
        w.add_token_list(tokens)
        w.add_token_scores(scores)
        w.add_token_types(types)
        w.add_bos_token_id(sp.bos_id())
        w.add_eos_token_id(sp.eos_id())
        w.add_unk_token_id(sp.unk_id())
        w.add_add_bos_token(add_bos)
        w.add_add_eos_token(False)
        if add_space_prefix is not None:
            w.add_add_space_prefix(add_space_prefix)
        w.add_chat_template(LLAMA2_TEMPLATE)

    rng = np.random.default_rng(seed)
    embedding = (rng.standard_normal((len(tokens), HIDDEN)) * 0.5).astype(np.float32)
    rewrite_gguf(plain, path, add_metadata=tokenizer, tensors={"token_embd.weight": embedding})
    plain.unlink()
