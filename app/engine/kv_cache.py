"""KV caches, one class per decode path, with one small API.

Every cache knows exactly which token ids its tensors cover (``tokens``), so a new turn can
find the common prefix, ``trim_to`` it and feed only the rest. ``trim_to`` is transactional:
it validates first and raises ``CacheRewindError`` without touching anything when the cut is
impossible; the caller then resets.

Per step the decoder asks the cache to ``bind`` its past inputs and present outputs on an
IOBinding, runs the graph, and hands the outputs back through ``commit``.

- ``RebindCache``: growing past/present graphs. The ``present.*`` OrtValues a step returns are
  bound as the next step's ``past_key_values.*`` as they are: no host copy.
- ``SharedBufferCache``: GroupQueryAttention graphs. One buffer per K and V, bound as both the
  past input and the present output; the attention mask covers only the valid length, so a
  rewind just moves the cursor. Capacity grows in buckets.
- ``TokenOnlyCache``: graphs without KV I/O; the whole sequence is fed every step.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np
import onnxruntime as ort

from app.engine.kv_binder import BindInput, BindOutput, as_ortvalue, kv_binder
from app.engine.kv_ops import KVOps, empty_kv
from app.engine.types import KVLayer

_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


class CacheRewindError(Exception):
    """The cache cannot be cut back to the requested length; nothing was changed."""


def _exportable(layers: Sequence[KVLayer], device: str) -> None:
    if device != "cpu" or any(layer.dtype == "bfloat16" for layer in layers):
        raise NotImplementedError("only float32/float16 caches on the CPU can be exported")


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


class KVCache(ABC):
    """A decode path's cache state: the token ids covered and the tensors that hold them."""

    #: Whether the KV can never hold more than the model's context (false for sliding windows).
    bounded_by_context = True

    def __init__(self) -> None:
        self.tokens: list[int] = []

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def next_position(self) -> int:
        """Absolute position id of the next token fed."""
        return len(self.tokens)

    @property
    def kv_length(self) -> int:
        """Number of positions held in the KV tensors (the attention mask's past part)."""
        return len(self.tokens)

    def common_prefix(self, ids: Sequence[int]) -> int:
        return common_prefix_length(self.tokens, ids)

    def can_trim_to(self, length: int) -> bool:
        return 0 <= length <= len(self.tokens)

    def trim_to(self, length: int) -> None:
        """Drop everything after the first ``length`` tokens."""
        if not self.can_trim_to(length):
            raise CacheRewindError(f"cannot rewind a cache of {len(self.tokens)} to {length}")
        if length < len(self.tokens):
            self._trim_tensors(length)
            del self.tokens[length:]

    def reset(self) -> None:
        self.trim_to(0)

    @property
    def nbytes(self) -> int:
        """Bytes held by the KV tensors (for the snapshot budget)."""
        return 0

    def export_arrays(self) -> list[np.ndarray]:
        """Host copies of the KV tensors' valid positions, in layer order (K, V, K, V …).

        Raises NotImplementedError where an exact export is not possible (device tensors,
        bfloat16, sliding windows)."""
        raise NotImplementedError(f"{type(self).__name__} cannot be exported")

    def import_arrays(self, tokens: Sequence[int], arrays: Sequence[np.ndarray]) -> None:
        """Replace the cache's content with exported arrays covering ``tokens``."""
        raise NotImplementedError(f"{type(self).__name__} cannot be imported")

    @abstractmethod
    def _trim_tensors(self, length: int) -> None: ...

    def make_room(self, new_count: int) -> None:  # noqa: B027 - optional hook
        """Called before a step of ``new_count`` tokens; a sliding window evicts here."""

    @abstractmethod
    def bind(self, io: ort.IOBinding, new_count: int, *, rebind: bool) -> bool:
        """Bind past inputs and present outputs for a step feeding ``new_count`` tokens.

        ``rebind`` says ``io`` may hold another cache's tensors. Returns whether ``commit``
        needs the step's outputs (bound after the logits, in layer order)."""

    def commit(self, outputs: Sequence[ort.OrtValue], new_tokens: Sequence[int]) -> None:
        """Adopt a finished step's KV outputs; the cache now also covers ``new_tokens``."""
        self.tokens.extend(new_tokens)


class TokenOnlyCache(KVCache):
    """No KV tensors: the decoder re-feeds ``tokens`` every step."""

    def _trim_tensors(self, length: int) -> None:
        pass

    @property
    def kv_length(self) -> int:
        return 0

    @property
    def next_position(self) -> int:
        return 0

    def bind(self, io: ort.IOBinding, new_count: int, *, rebind: bool) -> bool:
        return False


class RebindCache(KVCache):
    """Growing past/present cache; present OrtValues are rebound as the next past."""

    def __init__(self, layers: Sequence[KVLayer], ops: KVOps, device: str) -> None:
        super().__init__()
        self._layers = tuple(layers)
        self._ops = ops
        self._device = device
        # OrtValues, or the raw values the decoder's output reader returns (see kv_binder)
        self._past: list = self._empty()
        self._binder_io: ort.IOBinding | None = None
        self._binder: tuple[BindInput, BindOutput] | None = None

    def _empty(self) -> list[ort.OrtValue]:
        values = []
        for layer in self._layers:
            shape = [1, layer.kv_heads, 0, layer.head_dim]
            values.append(empty_kv(shape, layer.dtype, self._device))
            values.append(empty_kv(shape, layer.dtype, self._device))
        return values

    def _dtypes(self):
        for layer in self._layers:
            yield layer.dtype
            yield layer.dtype

    def _trim_tensors(self, length: int) -> None:
        if length == 0:
            self._past = self._empty()
            return
        self._past = [
            self._ops.truncate(as_ortvalue(value), dtype, length)
            for value, dtype in zip(self._past, self._dtypes(), strict=True)
        ]

    @property
    def nbytes(self) -> int:
        return (
            sum(2 * layer.kv_heads * layer.head_dim * _BYTES[layer.dtype] for layer in self._layers)
            * self.kv_length
        )

    def export_arrays(self) -> list[np.ndarray]:
        _exportable(self._layers, self._device)
        return [value.numpy() for value in self._past]

    def import_arrays(self, tokens: Sequence[int], arrays: Sequence[np.ndarray]) -> None:
        _exportable(self._layers, self._device)
        self._past = [_host_value(array, self._device) for array in arrays]
        self.tokens = list(tokens)

    def bind(self, io: ort.IOBinding, new_count: int, *, rebind: bool) -> bool:
        # The presents of the last step are this step's pasts: rebound every step, no copy.
        if self._binder_io is not io:
            self._binder_io = io
            self._binder = kv_binder(io, self._device)
        bind_input, bind_output = self._binder
        past = self._past
        for i, layer in enumerate(self._layers):
            bind_input(layer.past_key, past[2 * i])
            bind_input(layer.past_value, past[2 * i + 1])
            bind_output(layer.present_key)
            bind_output(layer.present_value)
        return True

    def commit(self, outputs: Sequence[ort.OrtValue], new_tokens: Sequence[int]) -> None:
        self._past = list(outputs)
        super().commit(outputs, new_tokens)


def _bucket(needed: int, limit: int, step: int = 256) -> int:
    """Capacity for ``needed`` positions: doubling from ``step``, capped at ``limit``."""
    capacity = step
    while capacity < needed:
        capacity *= 2
    return max(needed, min(capacity, limit))


class SharedBufferCache(KVCache):
    """GroupQueryAttention cache: one buffer per K and V, shared by past input and present
    output. Rewind moves the cursor; the attention mask hides everything after it."""

    def __init__(
        self,
        layers: Sequence[KVLayer],
        ops: KVOps,
        device: str,
        max_length: int,
        initial_capacity: int = 256,
    ) -> None:
        super().__init__()
        self._layers = tuple(layers)
        self._ops = ops
        self._device = device
        self._max_length = max_length
        self._initial = min(initial_capacity, max_length)
        self.capacity = 0
        #: Positions the buffers bound on the decoder's IOBinding can hold; 0 while a (re)bind
        #: is due. Lets a decode step skip ``bind`` altogether (see ``Decoder.step``).
        self.bound_capacity = 0
        self._buffers: list[ort.OrtValue] = []
        self._rebind_needed = False

    def _allocate(self, capacity: int) -> None:
        if not self._buffers:
            self._buffers = [
                empty_kv([1, layer.kv_heads, capacity, layer.head_dim], layer.dtype, self._device)
                for layer in self._layers
                for _ in (0, 1)
            ]
        else:
            extra = capacity - self.capacity
            dtypes = [layer.dtype for layer in self._layers for _ in (0, 1)]
            self._buffers = [
                self._ops.pad(value, dtype, extra)
                for value, dtype in zip(self._buffers, dtypes, strict=True)
            ]
        self.capacity = capacity
        self.bound_capacity = 0

    def ensure_capacity(self, needed: int) -> bool:
        """Grow the buffers to hold ``needed`` positions; True if they were reallocated."""
        if needed > self._max_length:
            raise CacheRewindError(
                f"{needed} positions exceed the cache's maximum of {self._max_length}"
            )
        if needed <= self.capacity:
            return False
        self._allocate(_bucket(needed, self._max_length, max(self._initial, 1)))
        return True

    def _trim_tensors(self, length: int) -> None:
        pass  # the cursor (len(tokens)) moves; stale positions are masked and overwritten

    def export_arrays(self) -> list[np.ndarray]:
        _exportable(self._layers, self._device)
        n = self.kv_length
        return [value.numpy()[:, :, :n] for value in self._buffers]

    def import_arrays(self, tokens: Sequence[int], arrays: Sequence[np.ndarray]) -> None:
        _exportable(self._layers, self._device)
        n = len(tokens)
        capacity = _bucket(min(n + 1, self._max_length), self._max_length,
                           max(self._initial, 1))
        buffers = []
        for array in arrays:
            full = np.zeros((*array.shape[:2], capacity, *array.shape[3:]), dtype=array.dtype)
            full[:, :, :n] = array
            buffers.append(_host_value(full, self._device))
        self._buffers, self.capacity = buffers, capacity
        self._rebind_needed = True
        self.bound_capacity = 0
        self.tokens = list(tokens)

    @property
    def nbytes(self) -> int:
        return (
            sum(2 * layer.kv_heads * layer.head_dim * _BYTES[layer.dtype] for layer in self._layers)
            * self.capacity
        )

    def bind(self, io: ort.IOBinding, new_count: int, *, rebind: bool) -> bool:
        grew = self.ensure_capacity(self.kv_length + new_count)
        if not (rebind or grew or self._rebind_needed):
            return False  # the same buffers are still bound
        self._rebind_needed = False
        for i, layer in enumerate(self._layers):
            key, value = self._buffers[2 * i], self._buffers[2 * i + 1]
            io.bind_ortvalue_input(layer.past_key, key)
            io.bind_ortvalue_input(layer.past_value, value)
            io.bind_ortvalue_output(layer.present_key, key)
            io.bind_ortvalue_output(layer.present_value, value)
        self.bound_capacity = self.capacity
        return False


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
        self.evicted_end = 0  # absolute position of the first kept token after the sinks
        self._held = 0

    @property
    def kv_length(self) -> int:
        return self._held

    def export_arrays(self) -> list[np.ndarray]:
        raise NotImplementedError("sliding-window caches are not exported")

    @property
    def max_step(self) -> int:
        """The longest chunk one step may feed (leaves the sinks and half a window)."""
        return max(1, (self.capacity - self.sink) // 2)

    def can_trim_to(self, length: int) -> bool:
        if not 0 <= length <= len(self.tokens):
            return False
        return self.evicted_end == 0 or length == 0 or length >= self.evicted_end

    def _trim_tensors(self, length: int) -> None:
        if length == 0:
            self._past = self._empty()
            self._held, self.evicted_end = 0, 0
            return
        held = length if self.evicted_end == 0 else self.sink + (length - self.evicted_end)
        self._past = [
            self._ops.truncate(as_ortvalue(value), dtype, held)
            for value, dtype in zip(self._past, self._dtypes(), strict=True)
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
        self._past = [
            self._ops.cut(as_ortvalue(value), dtype, self.sink, tail_start, self._held)
            for value, dtype in zip(self._past, self._dtypes(), strict=True)
        ]
        self._held -= count
        self.evicted_end += count

    def commit(self, outputs: Sequence[ort.OrtValue], new_tokens: Sequence[int]) -> None:
        super().commit(outputs, new_tokens)
        self._held += len(new_tokens)
