"""KV caches, one class per decode path, with one small API.

Every cache knows exactly what its tensors cover: the token ids (``tokens``) and the content
hashes of the images behind placeholder tokens (``images``: ``(first position, hash)``), so a
new turn can find the prefix it shares (``shared_with_prompt``: the common token prefix, cut
before the first image whose hash differs), cut back to where the cache can rewind
(``rewind_point``), ``trim_to`` it and feed only the rest. ``trim_to`` is transactional: it
validates first and raises ``CacheRewindError`` without touching anything when the cut is
impossible; the caller then resets.

A cache owns its tokens, image keys, tensors (and a recurrent cache its checkpoints) and
nothing else: it is handed to ``Decoder.feed`` / ``Decoder.step`` (``stream_generate`` takes
it as an argument), and the decoder keeps its own record of what its IOBinding holds. Only
the cache changes its ``tokens`` — through ``commit``, ``append_step``, ``trim_to``,
``reset`` and ``import_arrays`` — and its ``images`` (``note_images``, ``trim_to``). What differs
between the decode paths is declared as capabilities the decoder asks, never as a type test:

- ``feeds_whole_sequence``: the graph has no KV I/O; every step re-feeds all the tokens.
- ``max_step``: the longest chunk one step may feed (None: any).
- ``bounded_by_context``: the KV never holds more than the model's context.
- ``window``: positions a sliding window keeps (None: the cache never evicts).
- ``exportable``: ``export_arrays`` gives exact host copies (for disk snapshots).
- ``rebinds_each_step``: a step's outputs are new tensors, bound again for the next step.
- ``steady_step``: the graph writes the KV in place, so right after a one-token step the same
  binding serves the next one, up to ``capacity`` positions (see ``Decoder.step``).
- ``rewinds_anywhere``: ``trim_to`` works for any length the cache covers (what speculation's
  rejected guesses need); ``rewind_point(length)`` says where a cut to ``length`` may land.

``tensors`` is the list of KV tensors; it is replaced, never changed in place, whenever the
tensors change, so its identity tells a binder whether what it bound is still current.

- ``RebindCache``: growing past/present graphs. The ``present.*`` OrtValues a step returns are
  bound as the next step's ``past_key_values.*`` as they are: no host copy.
- ``SharedBufferCache``: GroupQueryAttention graphs. One buffer per K and V, bound as both the
  past input and the present output; the attention mask covers only the valid length, so a
  rewind just moves the cursor. Capacity grows in buckets.
- ``SlidingWindowCache``: attention sinks plus a sliding window over a rebind graph.
- ``RecurrentCache``: hybrid recurrent models: growing KV for the attention layers plus fixed
  states for the conv / linear-attention layers. States cannot be cut back, so the cache keeps
  a few checkpoints taken at turn boundaries (``checkpoint()``) and rewinds only to those.
- ``TokenOnlyCache``: graphs without KV I/O; the whole sequence is fed every step.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np
import onnxruntime as ort

from app.engine.kv_binder import BindInput, BindOutput, as_ortvalue
from app.engine.kv_ops import KVOps, empty_kv
from app.engine.types import KVLayer, StateTensor

_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


class CacheRewindError(Exception):
    """The cache cannot be cut back to the requested length; nothing was changed."""


def _host_value(array: np.ndarray, device: str) -> ort.OrtValue:
    """An ORT-owned copy of ``array`` (numpy memory may go away)."""
    value = ort.OrtValue.ortvalue_from_shape_and_type(list(array.shape), array.dtype.type,
                                                      device, 0)
    value.update_inplace(np.ascontiguousarray(array))
    return value


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token id sequences."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


#: An image behind a prompt's placeholder tokens: (position of its first placeholder token,
#: content hash of the image, as ``app.chat.parts.ImagePart`` keeps it).
ImageKey = tuple[int, str]


def image_cut(length: int, ours: Sequence[ImageKey], theirs: Sequence[ImageKey]) -> int:
    """``length`` (a common token prefix) cut before the first image, starting inside it, that
    the two sides do not both hold with the same hash: equal placeholder tokens in front of
    different images never share their KV."""
    if not ours and not theirs:
        return length
    mine, other = set(ours), set(theirs)
    for start, _ in sorted(mine ^ other):
        if start < length:
            return start
        break
    return length


class KVCache(ABC):
    """A decode path's cache state: the token ids covered and the tensors that hold them."""

    feeds_whole_sequence = False
    bounded_by_context = True
    rebinds_each_step = False
    steady_step = False
    window: int | None = None
    rewinds_anywhere = True
    #: Positions the tensors hold before they must grow or evict (0: not fixed).
    capacity = 0

    def __init__(self) -> None:
        self._tokens: list[int] = []
        #: The token ids the tensors cover. Read-only for everyone but the cache (the list is
        #: the cache's own and stays the same object for its whole life).
        self.tokens: Sequence[int] = self._tokens
        #: ``append_step(token)``: the cache now also covers ``token``, whose KV a steady step
        #: wrote in place. The list's own bound method: the decode hot path pays no frame.
        self.append_step = self._tokens.append
        #: The KV tensors (see the module docstring: replaced whenever they change).
        self.tensors: list = []
        #: The images behind placeholder tokens the cache covers, as ``ImageKey`` pairs in
        #: position order (``note_images``; empty for a text-only conversation).
        self.images: list[ImageKey] = []

    def __len__(self) -> int:
        return len(self._tokens)

    @property
    def max_step(self) -> int | None:
        """The longest chunk one step may feed; None when any length fits."""
        return None

    @property
    def exportable(self) -> bool:
        """Whether ``export_arrays`` can give exact host copies."""
        return False

    @property
    def next_position(self) -> int:
        """Absolute position id of the next token fed."""
        return len(self._tokens)

    @property
    def kv_length(self) -> int:
        """Number of positions held in the KV tensors (the attention mask's past part)."""
        return len(self._tokens)

    def common_prefix(self, ids: Sequence[int], images: Sequence[ImageKey] = ()) -> int:
        """The prefix of ``ids`` (with the images behind its placeholders, ``images``) whose
        KV this cache holds: equal token ids, cut before the first image that differs."""
        return image_cut(common_prefix_length(self._tokens, ids), self.images, images)

    def shared_with_prompt(self, prompt_ids: Sequence[int],
                           images: Sequence[ImageKey] = ()) -> int:
        """The tokens a run of ``prompt_ids`` over this cache could keep: the common prefix
        (``images``: the prompt's, see ``common_prefix``), less the prompt's last token (it
        must run for the logits that start the reply). Where the cache cuts to is
        ``rewind_point`` of this."""
        return min(self.common_prefix(prompt_ids, images), max(len(prompt_ids) - 1, 0))

    def note_images(self, images: Sequence[ImageKey]) -> None:
        """The prompt just fed holds ``images``: the cache covers those starting within it
        (what it held before, up to the prompt's shared prefix, is the same by construction)."""
        self.images = sorted(key for key in set(images) if key[0] < len(self._tokens))

    def can_trim_to(self, length: int) -> bool:
        return 0 <= length <= len(self._tokens)

    def rewind_point(self, length: int) -> int:
        """The length a rewind to ``length`` should cut to: ``length`` itself for caches that
        cut anywhere (``trim_to`` then says whether it can), the nearest checkpoint at or
        before it for those that cannot."""
        return length

    def checkpoint(self) -> None:  # noqa: B027 - optional hook
        """A turn boundary is here (called around a prompt's prefill): a cache that cannot be
        cut back keeps its state at this length to rewind to later; others ignore it."""

    def trim_to(self, length: int) -> None:
        """Drop everything after the first ``length`` tokens."""
        if not self.can_trim_to(length):
            raise CacheRewindError(f"cannot rewind a cache of {len(self._tokens)} to {length}")
        if length < len(self._tokens):
            self._trim_tensors(length)
            del self._tokens[length:]
            if self.images:
                self.images = [key for key in self.images if key[0] < length]

    def reset(self) -> None:
        self.trim_to(0)

    @property
    def nbytes(self) -> int:
        """Bytes held by the KV tensors (for the memory budget of parked caches)."""
        return 0

    def export_arrays(self) -> list[np.ndarray]:
        """Host copies of the KV tensors' valid positions, in layer order (K, V, K, V …).

        Raises NotImplementedError where ``exportable`` is false."""
        raise NotImplementedError(f"{type(self).__name__} cannot be exported")

    def import_arrays(self, tokens: Sequence[int], arrays: Sequence[np.ndarray]) -> None:
        """Replace the cache's content with exported arrays covering ``tokens``."""
        raise NotImplementedError(f"{type(self).__name__} cannot be imported")

    def _set_tokens(self, tokens: Sequence[int]) -> None:
        self._tokens[:] = tokens  # the same list: ``tokens`` and ``append_step`` stay valid
        self.images = []  # the caller says which images it holds (``note_images``)

    @abstractmethod
    def _trim_tensors(self, length: int) -> None: ...

    def make_room(self, new_count: int) -> None:  # noqa: B027 - optional hook
        """Called before a step of ``new_count`` tokens: a sliding window evicts, a shared
        buffer grows (replacing ``tensors``)."""

    def bind(self, io: ort.IOBinding, bind_input: BindInput, bind_output: BindOutput) -> None:  # noqa: B027
        """Bind the past inputs and present outputs on ``io`` for the next step.

        ``bind_input`` / ``bind_output`` are the decoder's per-step KV binders (kv_binder)."""

    def commit(self, outputs: Sequence, new_tokens: Sequence[int]) -> None:
        """Adopt a finished step's KV outputs (bound after the logits, in layer order; empty
        unless ``rebinds_each_step``); the cache now also covers ``new_tokens``."""
        self._tokens.extend(new_tokens)


class TokenOnlyCache(KVCache):
    """No KV tensors: the decoder re-feeds ``tokens`` every step."""

    feeds_whole_sequence = True

    def _trim_tensors(self, length: int) -> None:
        pass

    @property
    def kv_length(self) -> int:
        return 0

    @property
    def next_position(self) -> int:
        return 0


class _LayeredCache(KVCache):
    """A cache over the graph's KV layers on one device."""

    def __init__(self, layers: Sequence[KVLayer], ops: KVOps, device: str) -> None:
        super().__init__()
        self._layers = tuple(layers)
        self._ops = ops
        self._device = device


    def _empty_kv(self) -> list:
        """Empty K and V tensors per layer (length 0), in layer order."""
        values = []
        for layer in self._layers:
            shape = [1, layer.kv_heads, 0, layer.head_dim]
            values.append(empty_kv(shape, layer.dtype, self._device))
            values.append(empty_kv(shape, layer.dtype, self._device))
        return values
    def _dtypes(self) -> list[str]:
        return [layer.dtype for layer in self._layers for _ in (0, 1)]

    @property
    def exportable(self) -> bool:
        return self._device == "cpu" and all(layer.dtype != "bfloat16" for layer in self._layers)

    def _check_exportable(self) -> None:
        if not self.exportable:
            raise NotImplementedError("only float32/float16 caches on the CPU can be exported")

    def _bytes_per_position(self) -> int:
        return sum(2 * layer.kv_heads * layer.head_dim * _BYTES[layer.dtype]
                   for layer in self._layers)


class RebindCache(_LayeredCache):
    """Growing past/present cache; present OrtValues are rebound as the next past."""

    rebinds_each_step = True

    def __init__(self, layers: Sequence[KVLayer], ops: KVOps, device: str) -> None:
        super().__init__(layers, ops, device)
        # OrtValues, or the raw values the decoder's output reader returns (see kv_binder)
        self.tensors = self._empty()

    def _empty(self) -> list:
        return self._empty_kv()

    def _trim_tensors(self, length: int) -> None:
        if length == 0:
            self.tensors = self._empty()
            return
        self.tensors = [
            self._ops.truncate(as_ortvalue(value), dtype, length)
            for value, dtype in zip(self.tensors, self._dtypes(), strict=True)
        ]

    @property
    def nbytes(self) -> int:
        return self._bytes_per_position() * self.kv_length

    def export_arrays(self) -> list[np.ndarray]:
        self._check_exportable()
        return [as_ortvalue(value).numpy() for value in self.tensors]

    def import_arrays(self, tokens: Sequence[int], arrays: Sequence[np.ndarray]) -> None:
        self._check_exportable()
        self.tensors = [_host_value(array, self._device) for array in arrays]
        self._set_tokens(tokens)

    def bind(self, io: ort.IOBinding, bind_input: BindInput, bind_output: BindOutput) -> None:
        # The presents of the last step are this step's pasts: rebound every step, no copy.
        past = self.tensors
        for i, layer in enumerate(self._layers):
            bind_input(layer.past_key, past[2 * i])
            bind_input(layer.past_value, past[2 * i + 1])
            bind_output(layer.present_key)
            bind_output(layer.present_value)

    def commit(self, outputs: Sequence, new_tokens: Sequence[int]) -> None:
        self.tensors = list(outputs)
        super().commit(outputs, new_tokens)


def _bucket(needed: int, limit: int, step: int = 256, grow_by: int | None = None) -> int:
    """Capacity for ``needed`` positions: doubling from ``step``, capped at ``limit``;
    with ``grow_by``, doubling only while below it, then ``grow_by`` positions at a time
    (256, 512, 1024, 1536, … for 512: at most ``needed + grow_by``)."""
    capacity = step
    while capacity < needed:
        capacity = capacity + grow_by if grow_by and capacity >= grow_by else capacity * 2
    return max(needed, min(capacity, limit))


#: Grouped attention's buckets grow by this many positions past the first doubling: its
#: MatMuls read the whole capacity, so a doubling would cost up to 2x a step's reads. A
#: growth copies the buffers once per ``GROUPED_GROW_BY`` steps (at 4k, ~34 positions' worth
#: a step) against ~``GROUPED_GROW_BY / 2`` spare positions read every step: 512 read 1,536
#: positions for a 1,088-token chat (starter: 65 tok/s; 128: 1,152 positions, 81 tok/s).
GROUPED_GROW_BY = 128


class SharedBufferCache(_LayeredCache):
    """GroupQueryAttention cache: one buffer per K and V, shared by past input and present
    output. Rewind moves the cursor; the attention mask hides everything after it."""

    steady_step = True

    def __init__(
        self,
        layers: Sequence[KVLayer],
        ops: KVOps,
        device: str,
        max_length: int,
        initial_capacity: int = 256,
        *,
        grouped: bool = False,
    ) -> None:
        super().__init__(layers, ops, device)
        self._max_length = max_length
        self._initial = min(initial_capacity, max_length)
        #: Grouped attention reads every position of the capacity: spare positions are
        #: zeros (finite: 0 x NaN would be NaN), buckets grow by ``GROUPED_GROW_BY``.
        self.grouped = grouped
        self._grow_by = GROUPED_GROW_BY if grouped else None
        #: Positions the buffers hold (0 before the first step).
        self.capacity = 0

    def _allocate(self, capacity: int) -> None:
        if not self.tensors and self.grouped:
            self.tensors = [
                _host_value(np.zeros((1, layer.kv_heads, capacity, layer.head_dim),
                                     np.dtype(layer.dtype)), self._device)
                for layer in self._layers
                for _ in (0, 1)
            ]
        elif not self.tensors:
            self.tensors = [
                empty_kv([1, layer.kv_heads, capacity, layer.head_dim], layer.dtype, self._device)
                for layer in self._layers
                for _ in (0, 1)
            ]
        else:
            extra = capacity - self.capacity
            self.tensors = [
                self._ops.pad(value, dtype, extra)
                for value, dtype in zip(self.tensors, self._dtypes(), strict=True)
            ]
        self.capacity = capacity

    def ensure_capacity(self, needed: int) -> bool:
        """Grow the buffers to hold ``needed`` positions; True if they were reallocated."""
        if needed > self._max_length:
            raise CacheRewindError(
                f"{needed} positions exceed the cache's maximum of {self._max_length}"
            )
        if needed <= self.capacity:
            return False
        self._allocate(_bucket(needed, self._max_length, max(self._initial, 1), self._grow_by))
        return True

    def make_room(self, new_count: int) -> None:
        # Capped: a step past the context is refused by the decoder with a readable error.
        self.ensure_capacity(min(self.kv_length + new_count, self._max_length))

    def _trim_tensors(self, length: int) -> None:
        pass  # the cursor (len(tokens)) moves; stale positions are masked and overwritten

    def export_arrays(self) -> list[np.ndarray]:
        self._check_exportable()
        n = self.kv_length
        return [value.numpy()[:, :, :n] for value in self.tensors]

    def import_arrays(self, tokens: Sequence[int], arrays: Sequence[np.ndarray]) -> None:
        self._check_exportable()
        n = len(tokens)
        capacity = _bucket(min(n + 1, self._max_length), self._max_length,
                           max(self._initial, 1), self._grow_by)
        buffers = []
        for array in arrays:
            full = np.zeros((*array.shape[:2], capacity, *array.shape[3:]), dtype=array.dtype)
            full[:, :, :n] = array
            buffers.append(_host_value(full, self._device))
        self.tensors, self.capacity = buffers, capacity
        self._set_tokens(tokens)

    @property
    def nbytes(self) -> int:
        return self._bytes_per_position() * self.capacity

    def bind(self, io: ort.IOBinding, bind_input: BindInput, bind_output: BindOutput) -> None:
        for i, layer in enumerate(self._layers):
            key, value = self.tensors[2 * i], self.tensors[2 * i + 1]
            io.bind_ortvalue_input(layer.past_key, key)
            io.bind_ortvalue_input(layer.past_value, value)
            io.bind_ortvalue_output(layer.present_key, key)
            io.bind_ortvalue_output(layer.present_value, value)


class SlidingWindowCache(RebindCache):
    """Attention sinks plus a sliding window (StreamingLLM) over a growing past/present graph.

    The KV tensors hold positions ``[0, sink) ∪ [evicted_end, len(tokens))``; position ids stay
    absolute. Before a step of ``count`` tokens would make the KV longer than ``capacity``, the
    oldest non-sink positions are evicted so that exactly ``capacity`` remain after the step.
    A rewind into the evicted gap is refused (the caller resets and prefills).
    """

    bounded_by_context = False

    def __init__(
        self, layers: Sequence[KVLayer], ops: KVOps, device: str, *, sink: int, capacity: int
    ) -> None:
        if capacity <= sink + 1:
            raise ValueError("the window must hold more than the sink tokens")
        super().__init__(layers, ops, device)
        self.sink = sink
        self.capacity = capacity
        self.window = capacity
        self.evicted_end = 0  # absolute position of the first kept token after the sinks
        self._held = 0

    @property
    def kv_length(self) -> int:
        return self._held

    @property
    def exportable(self) -> bool:
        return False

    def export_arrays(self) -> list[np.ndarray]:
        raise NotImplementedError("sliding-window caches are not exported")

    def import_arrays(self, tokens: Sequence[int], arrays: Sequence[np.ndarray]) -> None:
        raise NotImplementedError("sliding-window caches are not imported")

    @property
    def max_step(self) -> int:
        """The longest chunk one step may feed (leaves the sinks and half a window)."""
        return max(1, (self.capacity - self.sink) // 2)

    def can_trim_to(self, length: int) -> bool:
        if not 0 <= length <= len(self._tokens):
            return False
        return self.evicted_end == 0 or length == 0 or length >= self.evicted_end

    def _trim_tensors(self, length: int) -> None:
        if length == 0:
            self.tensors = self._empty()
            self._held, self.evicted_end = 0, 0
            return
        held = length if self.evicted_end == 0 else self.sink + (length - self.evicted_end)
        self.tensors = [
            self._ops.truncate(as_ortvalue(value), dtype, held)
            for value, dtype in zip(self.tensors, self._dtypes(), strict=True)
        ]
        self._held = held

    def make_room(self, new_count: int) -> None:
        if new_count > self.capacity - self.sink:
            raise CacheRewindError(f"a step of {new_count} tokens does not fit the window")
        overflow = self._held + new_count - self.capacity
        if overflow > 0:
            self._evict(overflow)

    def _evict(self, count: int) -> None:
        """Drop the ``count`` oldest positions after the sinks."""
        if self.evicted_end == 0:
            self.evicted_end = self.sink
        tail_start = self.sink + count
        self.tensors = [
            self._ops.cut(as_ortvalue(value), dtype, self.sink, tail_start, self._held)
            for value, dtype in zip(self.tensors, self._dtypes(), strict=True)
        ]
        self._held -= count
        self.evicted_end += count

    def commit(self, outputs: Sequence, new_tokens: Sequence[int]) -> None:
        super().commit(outputs, new_tokens)
        self._held += len(new_tokens)


def _zeros(shape: Sequence[int], dtype: str, device: str) -> ort.OrtValue:
    """An ORT-owned all-zero tensor (bfloat16 zero has the same bits as uint16 zero)."""
    host = np.zeros(tuple(shape), dtype=np.float16 if dtype == "float16" else
                    np.float32 if dtype == "float32" else np.uint16)
    if dtype == "bfloat16":
        value = empty_kv(list(shape), dtype, device)
        value.update_inplace(host)  # raw bits: zero
        return value
    return _host_value(host, device)


class RecurrentCache(_LayeredCache):
    """Hybrid recurrent models: rebind-style KV for the attention layers plus fixed-size
    conv / recurrent states (``past_conv.N``, ``past_recurrent.N``), all rebound each step.

    A state summarises every position fed, so it cannot be cut back. At each ``checkpoint()``
    (a turn boundary) the cache keeps a reference to its state tensors at that length (a
    step's outputs are new tensors, so this copies nothing); at most ``max_checkpoints`` are
    kept, the most recent. ``trim_to`` works for the current length, 0, and a checkpoint's
    length (its states come back, the KV is cut with ``kv_ops``); anything else raises
    ``CacheRewindError`` and the caller prefills from scratch. ``rewinds_anywhere`` is False,
    so speculation stays off. Not exportable: snapshots to disk are not written for it.
    """

    rebinds_each_step = True
    rewinds_anywhere = False

    def __init__(self, layers: Sequence[KVLayer], states: Sequence[StateTensor], ops: KVOps,
                 device: str, *, max_checkpoints: int = 4) -> None:
        super().__init__(layers, ops, device)
        if max_checkpoints < 1:
            raise ValueError("keep at least one checkpoint")
        self._states = tuple(states)
        self.max_checkpoints = max_checkpoints
        #: length -> the state tensors at that length, oldest checkpoint first
        self._checkpoints: dict[int, list] = {}
        self.tensors = self._empty()

    def _empty(self) -> list:
        values = self._empty_kv()
        values += [_zeros(state.shape, state.dtype, self._device) for state in self._states]
        return values

    @property
    def exportable(self) -> bool:
        return False  # snapshots hold positions on a sequence axis; states have none

    @property
    def checkpoints(self) -> list[int]:
        """The lengths this cache can rewind to besides 0 and its own, oldest first."""
        return list(self._checkpoints)

    def checkpoint(self) -> None:
        length = len(self._tokens)
        if length == 0:
            return  # a reset gives the empty state
        self._checkpoints.pop(length, None)
        self._checkpoints[length] = self.tensors[2 * len(self._layers):]
        while len(self._checkpoints) > self.max_checkpoints:
            del self._checkpoints[next(iter(self._checkpoints))]

    def can_trim_to(self, length: int) -> bool:
        return length in (0, len(self._tokens)) or (
            0 < length < len(self._tokens) and length in self._checkpoints)

    def rewind_point(self, length: int) -> int:
        if length >= len(self._tokens):
            return length
        return max((n for n in self._checkpoints if n <= length), default=0)

    def _trim_tensors(self, length: int) -> None:
        for kept in [n for n in self._checkpoints if n > length]:
            del self._checkpoints[kept]
        if length == 0:
            self.tensors = self._empty()
            return
        kv = self.tensors[: 2 * len(self._layers)]
        self.tensors = [
            *(self._ops.truncate(as_ortvalue(value), dtype, length)
              for value, dtype in zip(kv, self._dtypes(), strict=True)),
            *self._checkpoints[length],
        ]

    @property
    def nbytes(self) -> int:
        per_state = sum(int(np.prod(s.shape)) * _BYTES[s.dtype] for s in self._states)
        return self._bytes_per_position() * self.kv_length + per_state * (
            1 + len(self._checkpoints))

    def bind(self, io: ort.IOBinding, bind_input: BindInput, bind_output: BindOutput) -> None:
        past = self.tensors
        for i, layer in enumerate(self._layers):
            bind_input(layer.past_key, past[2 * i])
            bind_input(layer.past_value, past[2 * i + 1])
            bind_output(layer.present_key)
            bind_output(layer.present_value)
        offset = 2 * len(self._layers)
        for j, state in enumerate(self._states):
            bind_input(state.past, past[offset + j])
            bind_output(state.present)

    def commit(self, outputs: Sequence, new_tokens: Sequence[int]) -> None:
        self.tensors = list(outputs)
        super().commit(outputs, new_tokens)
