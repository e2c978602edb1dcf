"""The model's tokenizer: a thin wrapper over Hugging Face ``tokenizers`` with Hearth's rules.

Rules that matter for chat:

* A chat-rendered prompt already contains its special tokens (``<|im_start|>``, ``<s>`` …) as
  text; :meth:`Tokenizer.encode` parses them into their ids and never adds a BOS that is
  already there.
* BOS is added only when asked (``add_special_tokens=True``) *and* the model's
  ``tokenizer_config.json`` says so (``add_bos_token``). The tokenizer.json post-processor is
  never run, so a template-rendered prompt cannot get a second BOS or a stray EOS.
* The streaming detokenizer needs two facts the library does not expose directly: which ids
  :meth:`decode` skips (:attr:`Tokenizer.special_ids`) and which ids are SentencePiece
  byte-fallback pieces ``<0xNN>`` whose text depends on their neighbours
  (:attr:`Tokenizer.byte_fallback_ids`).
* Text a user wrote is never parsed into control tokens: :meth:`Tokenizer.encode_protected`
  encodes a rendered prompt whose special tokens are real while the placeholders standing for
  the user's own ``<|im_end|>`` & co. become their plain text (see ``Engine.encode_chat``).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import tokenizers

from app.errors import ModelLoadError

_HINT = "Download or import the model again."


_GIL_RELEASE_CHARS = 2000
# Private-use plane 16: the text copy's stand-ins for the real special tokens start at its
# first code point; callers' placeholders (chat_template.placeholder_chars) come from its end.
SENTINEL_BASE = 0x100000


class Tokenizer:
    """Text ↔ token ids for one model.

    Build it with :meth:`from_files` (or directly from a ``tokenizers.Tokenizer``). The BOS and
    EOS token strings come from the model's ``tokenizer_config.json``; when given they must
    exist in the vocabulary.
    """

    def __init__(
        self,
        inner: tokenizers.Tokenizer,
        *,
        bos_token: str | None = None,
        eos_token: str | None = None,
        add_bos_token: bool = False,
        source: str = "",
        config: dict[str, Any] | None = None,
    ) -> None:
        self._inner = inner
        self._single_texts: dict[tuple[int, bool], str] = {}
        self._source = source or "the tokenizer"
        self.bos_token = bos_token
        self.eos_token = eos_token
        self.add_bos_token = add_bos_token
        self._bos_id = self._require(bos_token, "beginning-of-text")
        self._eos_id = self._require(eos_token, "end-of-text")
        if add_bos_token and self._bos_id is None:
            raise ModelLoadError(
                f"{self._source} is configured to start every text with a BOS token, "
                "but no BOS token is named.",
                hint=_HINT,
            )
        added = inner.get_added_tokens_decoder()
        self.special_ids: frozenset[int] = frozenset(i for i, t in added.items() if t.special)
        """Ids that ``decode(..., skip_special_tokens=True)`` leaves out."""
        self._special_added = tuple(sorted((i, t) for i, t in added.items() if t.special))
        self.special_tokens: tuple[str, ...] = tuple(t.content for _, t in self._special_added)
        """The special tokens' strings (``<|im_start|>`` …): control tokens when written in a
        prompt, so user text that contains one must go through :meth:`encode_protected`."""
        self._special_pattern = _alternation(self.special_tokens)
        self._text_copy: tuple[tokenizers.Tokenizer, dict[int, int], dict[str, str]] | None = None
        self._text_copy_lock = threading.Lock()
        if config is None:
            config = json.loads(inner.to_str())
        self.byte_fallback_ids: frozenset[int] = _byte_fallback_ids(config, inner)
        """Ids of ``<0xNN>`` pieces that a ByteFallback decoder joins with their neighbours.
        Empty for byte-level BPE (GPT-2 style) tokenizers."""

    # -- construction ------------------------------------------------------------------

    @classmethod
    def from_files(
        cls,
        tokenizer_json: Path | str,
        *,
        bos_token: str | None = None,
        eos_token: str | None = None,
        add_bos_token: bool = False,
    ) -> Tokenizer:
        """Load ``tokenizer.json``.

        Raises ``ModelLoadError`` naming the file when it is missing, unreadable, not JSON,
        rejected by the tokenizers library, or lacks the named BOS/EOS tokens.
        """
        path = Path(tokenizer_json)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ModelLoadError(f"The tokenizer file {path} is missing.", hint=_HINT) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ModelLoadError(
                f"The tokenizer file {path} cannot be read ({exc}).", hint=_HINT
            ) from exc
        try:
            config = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ModelLoadError(
                f"The tokenizer file {path} is corrupt: it is not valid JSON "
                f"(line {exc.lineno}, column {exc.colno}: {exc.msg}).",
                hint=_HINT,
            ) from exc
        if not isinstance(config, dict) or "model" not in config:
            raise ModelLoadError(
                f"The tokenizer file {path} is corrupt: it has no tokenizer model in it.",
                hint=_HINT,
            )
        try:
            inner = tokenizers.Tokenizer.from_str(text)
        except Exception as exc:  # the Rust side raises plain Exception subclasses
            raise ModelLoadError(
                f"The tokenizer file {path} is corrupt: the tokenizers library rejects it ({exc}).",
                hint=_HINT,
            ) from exc
        return cls(
            inner,
            bos_token=bos_token,
            eos_token=eos_token,
            add_bos_token=add_bos_token,
            source=f"The tokenizer file {path}",
            config=config,
        )

    def _require(self, token: str | None, what: str) -> int | None:
        if token is None:
            return None
        token_id = self._inner.token_to_id(token)
        if token_id is None:
            raise ModelLoadError(
                f"{self._source} does not contain the {what} token {token!r} that the model's "
                "configuration names.",
                hint=_HINT,
            )
        return token_id

    # -- text <-> ids ------------------------------------------------------------------

    def encode(self, text: str, *, add_special_tokens: bool = False) -> list[int]:
        """Token ids of ``text``. Special tokens written in the text become their ids.

        ``add_special_tokens=True`` prepends BOS when the model wants one and the text does
        not already start with it; nothing else is ever added.
        """
        if len(text) > _GIL_RELEASE_CHARS:
            # encode_batch releases the GIL while it works; encode holds it (~90 ms for a
            # 24k-token chat), which would freeze the UI thread.
            ids: list[int] = self._inner.encode_batch([text], add_special_tokens=False)[0].ids
        else:
            ids = self._inner.encode(text, add_special_tokens=False).ids
        if (
            add_special_tokens
            and self.add_bos_token
            and self._bos_id is not None
            and (not ids or ids[0] != self._bos_id)
        ):
            ids.insert(0, self._bos_id)
        return ids

    def contains_special(self, text: str) -> bool:
        """Whether ``text`` contains a special token's string."""
        return self._special_pattern is not None and self._special_pattern.search(text) is not None

    def encode_protected(self, text: str, literals: Mapping[str, str]) -> list[int]:
        """Token ids of a rendered prompt in which user text has been protected.

        Special-token strings in ``text`` are the template's own and become their ids, exactly
        as :meth:`encode` would make them. Each key of ``literals`` is a placeholder character
        standing for user text (a forged ``<|im_end|>``, say), which is encoded as plain text:
        never as a control token. Everything else tokenizes as :meth:`encode` would (the
        tokenizer's own splitting at added tokens runs once over the whole prompt, so
        whitespace-stripping tokens and a Metaspace "first" prefix behave the same). Private-use
        characters of plane 16 that are not placeholders become U+FFFD here. No BOS is added.
        """
        inner, back, sentinels = self._text_tokenizer()
        pattern = _alternation((*self.special_tokens, *literals))
        text = _STRAY.sub(lambda m: m.group() if m.group() in literals else "\ufffd", text)
        if pattern is not None:
            text = pattern.sub(lambda m: sentinels.get(m.group()) or literals[m.group()], text)
        if len(text) > _GIL_RELEASE_CHARS:
            ids: list[int] = inner.encode_batch([text], add_special_tokens=False)[0].ids
        else:
            ids = inner.encode(text, add_special_tokens=False).ids
        return [back.get(i, i) for i in ids]

    def _text_tokenizer(self) -> tuple[tokenizers.Tokenizer, dict[int, int], dict[str, str]]:
        """A copy of the tokenizer that encodes special-token strings as text, with one
        private-use stand-in per special token (an added token with the same strip and
        normalisation flags, so the library splits the prompt where it did before). Built once,
        never changed afterwards, so threads may share it."""
        with self._text_copy_lock:
            if self._text_copy is None:
                copy = tokenizers.Tokenizer.from_str(self._inner.to_str())
                copy.encode_special_tokens = True
                back: dict[int, int] = {}
                sentinels: dict[str, str] = {}
                for k, (token_id, token) in enumerate(self._special_added):
                    char = chr(SENTINEL_BASE + k)
                    copy.add_tokens([tokenizers.AddedToken(
                        char, single_word=token.single_word, lstrip=token.lstrip,
                        rstrip=token.rstrip, normalized=token.normalized, special=False,
                    )])
                    back[copy.token_to_id(char)] = token_id
                    sentinels[token.content] = char
                self._text_copy = (copy, back, sentinels)
            return self._text_copy

    def decode(self, ids: Iterable[int], *, skip_special_tokens: bool = True) -> str:
        """The text of ``ids`` (special tokens left out unless ``skip_special_tokens=False``)."""
        if not isinstance(ids, list):
            ids = [int(i) for i in ids]
        return self._inner.decode(ids, skip_special_tokens=skip_special_tokens)

    def decode_one(self, token_id: int, *, skip_special_tokens: bool = True) -> str:
        """``decode([token_id])``, remembered: the streaming detokenizer asks for the text of
        a one-token frame once per generated token."""
        key = (token_id, skip_special_tokens)
        text = self._single_texts.get(key)
        if text is None:
            text = self._inner.decode([token_id], skip_special_tokens=skip_special_tokens)
            self._single_texts[key] = text
        return text

    def token_to_id(self, token: str) -> int | None:
        return self._inner.token_to_id(token)

    def id_to_token(self, token_id: int) -> str | None:
        return self._inner.id_to_token(int(token_id))

    # -- facts -------------------------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        """Number of ids, added tokens included (the model's logits may be padded wider)."""
        return self._inner.get_vocab_size(with_added_tokens=True)

    @property
    def bos_token_id(self) -> int | None:
        return self._bos_id

    @property
    def eos_token_id(self) -> int | None:
        return self._eos_id

    @property
    def inner(self) -> tokenizers.Tokenizer:
        """The wrapped ``tokenizers.Tokenizer`` (for callers that need more)."""
        return self._inner

    def __repr__(self) -> str:
        return (
            f"Tokenizer(vocab_size={self.vocab_size}, bos={self.bos_token!r}, "
            f"eos={self.eos_token!r}, add_bos_token={self.add_bos_token})"
        )


_STRAY = re.compile("[\U00100000-\U0010fffd]")


def _alternation(strings: Iterable[str]) -> re.Pattern[str] | None:
    """A pattern matching any of ``strings``, longest first (as the tokenizer matches)."""
    ordered = sorted(set(strings), key=len, reverse=True)
    return re.compile("|".join(map(re.escape, ordered))) if ordered else None


def _byte_fallback_ids(config: dict[str, Any], inner: tokenizers.Tokenizer) -> frozenset[int]:
    """The ``<0xNN>`` piece ids, if the decoder chain contains a ByteFallback step."""
    if not _has_decoder(config.get("decoder"), "ByteFallback"):
        return frozenset()
    ids = []
    for byte in range(256):
        token_id = inner.token_to_id(f"<0x{byte:02X}>")
        if token_id is not None:
            ids.append(token_id)
    return frozenset(ids)


def _has_decoder(node: Any, kind: str) -> bool:
    if not isinstance(node, dict):
        return False
    if node.get("type") == kind:
        return True
    children: Sequence[Any] = node.get("decoders") or ()
    return any(_has_decoder(child, kind) for child in children)
