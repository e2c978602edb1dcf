"""Turn a stream of token ids into text that is safe to show as it arrives.

Two layers:

1. **Incremental decoding** with the prefix-offset / read-offset technique of vLLM and TGI.
   Decoding one token on its own is wrong for most tokenizers (SentencePiece drops the leading
   space of the first piece, byte-level BPE splits UTF-8 characters across tokens), and
   decoding the whole reply every step costs O(length). So we decode a *frame*: the tokens
   released in the previous step (context) plus the new ones, and emit what the frame's text
   gained over the context's text. Both decodes start at the same token, so whatever the
   decoder does at the start of a text happens to both and cancels out. Text is held back
   while it ends in U+FFFD (an incomplete UTF-8 character) and, for SentencePiece
   byte-fallback tokenizers, while the reply ends in ``<0xNN>`` pieces, because the
   ByteFallback decoder turns a whole run of byte pieces into U+FFFDs when the run turns out
   invalid, retroactively. Skipped special tokens are dropped before they reach the frame,
   exactly as ``tokenizers`` drops them before its decoder runs.

2. **Stop strings**: the longest suffix of the released text that could still grow into a
   stop string is held back; when a stop string appears, only the text before it is emitted.

Invariant: the concatenation of every :meth:`StreamingDetokenizer.add` result and
:meth:`StreamingDetokenizer.finish` equals ``tokenizer.decode(all_ids)``, or, when a stop
string occurs, that text up to (not including) the first occurrence.
"""

from __future__ import annotations

from collections.abc import Iterable

from app.engine.tokenizer import Tokenizer

REPLACEMENT_CHAR = "\ufffd"


class StreamingDetokenizer:
    """Streams one reply's text; make a new one per reply.

    ``add(token_id)`` returns the new text that is safe to show now (often ``""``);
    ``finish()`` returns what was held back. After a stop string, ``stop_hit`` names it and
    everything further is ignored. The cost per token does not grow with the reply: the
    frame holds only the tokens since the last release plus one release of context.
    """

    def __init__(
        self,
        tokenizer: Tokenizer,
        *,
        stop_strings: Iterable[str] = (),
        skip_special_tokens: bool = True,
    ) -> None:
        self._tokenizer = tokenizer
        self._skip = skip_special_tokens
        self._hidden = tokenizer.special_ids if skip_special_tokens else frozenset()
        self._byte_pieces = tokenizer.byte_fallback_ids
        self._stops = tuple(dict.fromkeys(s for s in stop_strings if s))
        # The frame: context tokens ids[:read] (their text is frame_text, already released)
        # followed by tokens not released yet.
        self._ids: list[int] = []
        self._read = 0
        self._frame_text = ""
        self._pending = ""  # released by decoding, held back as a possible stop-string start
        self._pieces: list[str] = []
        self._finished = False
        self.stop_hit: str | None = None

    @property
    def text(self) -> str:
        """Everything emitted so far."""
        if len(self._pieces) > 1:
            self._pieces = ["".join(self._pieces)]
        return self._pieces[0] if self._pieces else ""

    def add(self, token_id: int) -> str:
        """Take the next generated token; return the text that became safe to show."""
        if self._finished:
            raise RuntimeError("StreamingDetokenizer.add() after finish()")
        if self.stop_hit is not None or token_id in self._hidden:
            return ""
        self._ids.append(int(token_id))
        return self._emit(self._release_stops(self._decode_step(final=False)))

    def finish(self) -> str:
        """End of the reply: flush everything held back (nothing after a stop string)."""
        if self._finished:
            return ""
        self._finished = True
        if self.stop_hit is not None:
            return ""
        return self._emit(self._release_stops(self._decode_step(final=True), final=True))

    # -- layer 1: incremental decoding -------------------------------------------------

    def _decode_step(self, *, final: bool) -> str:
        ids = self._ids
        end = len(ids)
        if not final and self._byte_pieces:
            # A run of byte pieces at the end may still become invalid: wait for its end.
            while end > self._read and ids[end - 1] in self._byte_pieces:
                end -= 1
        if end <= self._read:
            return ""
        text = self._tokenizer.decode(ids[:end], skip_special_tokens=self._skip)
        if len(text) <= len(self._frame_text):
            return ""  # nothing new yet (e.g. an empty piece): keep the frame as it is
        if not final and text.endswith(REPLACEMENT_CHAR):
            return ""  # an incomplete UTF-8 character: wait for its other bytes
        new_text = text[len(self._frame_text) :]
        # Slide the frame: the tokens just released become the next step's context.
        del ids[: self._read]
        self._read = end - self._read
        if self._read == 1:  # the usual case: one token released per step
            self._frame_text = self._tokenizer.decode_one(ids[0], skip_special_tokens=self._skip)
        else:
            self._frame_text = self._tokenizer.decode(
                ids[: self._read], skip_special_tokens=self._skip
            )
        return new_text

    # -- layer 2: stop strings ---------------------------------------------------------

    def _release_stops(self, new_text: str, *, final: bool = False) -> str:
        """Pass text through the stop-string filter; return what may be shown now."""
        if not self._stops:
            return new_text
        if not new_text and not final:
            return ""
        buffer = self._pending + new_text
        first_at, first_stop = -1, None
        for stop in self._stops:
            at = buffer.find(stop)
            if at != -1 and (first_at == -1 or at < first_at):
                first_at, first_stop = at, stop
        # A partial stop string starting earlier may still complete into an earlier match.
        held_from = len(buffer) - (0 if final else self._longest_stop_prefix_suffix(buffer))
        if first_stop is not None and first_at <= held_from:
            self.stop_hit = first_stop
            self._pending = ""
            return buffer[:first_at]
        self._pending = buffer[held_from:]
        return buffer[:held_from]

    def _longest_stop_prefix_suffix(self, buffer: str) -> int:
        """Length of the longest suffix of ``buffer`` that is a proper prefix of a stop."""
        best = 0
        for stop in self._stops:
            for size in range(min(len(stop) - 1, len(buffer)), best, -1):
                if buffer.endswith(stop[:size]):
                    best = size
                    break
        return best

    def _emit(self, text: str) -> str:
        if text:
            self._pieces.append(text)
        return text
