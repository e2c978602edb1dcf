"""bench/attention_layouts.py: every formulation computes the same attention as a plain
reference, the grouped one writes the step's rows into the bound buffer itself (no copy of
the past), and its rows do not depend on how many ran together."""

from __future__ import annotations

import numpy as np
import pytest

from bench import attention_layouts as layouts

SHAPE = layouts.Shape("tiny", q_heads=6, kv_heads=2, dim=16)


def reference(keys, values, queries, rows):
    """Causal softmax attention of the last ``rows`` positions, each query head on its
    group's KV head."""
    total, group, dim = keys.shape[0], SHAPE.group, SHAPE.dim
    out = []
    for p in range(total - rows, total):
        q = queries[p].reshape(SHAPE.q_heads, dim)
        heads = []
        for h in range(SHAPE.q_heads):
            scores = keys[: p + 1, h // group] @ q[h] / np.sqrt(dim)
            probs = np.exp(scores - scores.max())
            heads.append((probs / probs.sum()) @ values[: p + 1, h // group])
        out.append(np.concatenate(heads))
    return np.stack(out)


FLOAT_FORMS = [form for form in layouts.FORMS if form not in layouts.CACHE_TYPES]


@pytest.mark.parametrize("form", FLOAT_FORMS)
def test_each_formulation_is_attention(form):
    keys, values, queries = layouts._sequence(SHAPE, 40)
    step = layouts.Step(form, SHAPE, 3, 2, 1, keys, values, queries)
    np.testing.assert_allclose(step.run(), reference(keys, values, queries, 3), atol=1e-5)


def _int8(x: np.ndarray) -> np.ndarray:
    """``x`` as the int8 cache holds it, read back (one scale, round to nearest)."""
    scale = layouts.INT8_SCALE
    return (np.clip(np.rint(x / scale), -128, 127) * scale).astype(np.float32)


def test_the_int8_cache_form_is_attention_over_the_int8_values():
    """ORT's quantized-cache GroupQueryAttention computes attention over K and V as the int8
    cache holds them (the past bound as int8, the step's own rows quantized as written)."""
    keys, values, queries = layouts._sequence(SHAPE, 40)
    step = layouts.Step("gqa-int8", SHAPE, 3, 2, 1, keys, values, queries)
    np.testing.assert_allclose(step.run(), reference(_int8(keys), _int8(values), queries, 3),
                               atol=1e-5)
    assert step._keep[0].dtype == np.int8  # the cache is a quarter of the fp32 bytes



def test_the_float16_form_is_attention_over_the_float16_values():
    """The app's default conversion: K and V as its float16 buffers hold them (the past
    bound as float16, the step's own rows rounded as written), read back as float32."""
    keys, values, queries = layouts._sequence(SHAPE, 40)
    step = layouts.Step("grouped-f16", SHAPE, 3, 2, 1, keys, values, queries)
    half = [x.astype(np.float16).astype(np.float32) for x in (keys, values)]
    np.testing.assert_allclose(step.run(), reference(*half, queries, 3), atol=1e-5)
    assert step._keep[0].dtype == np.float16  # half the fp32 bytes
    assert step._keep[0][0, :, 37:].any()  # the step's rows were written into the buffer


def test_the_grouped_form_writes_the_new_rows_in_place():
    keys, values, queries = layouts._sequence(SHAPE, 40)
    step = layouts.Step("grouped", SHAPE, 2, 1, 1, keys, values, queries)
    new = np.full((1, 2, SHAPE.kv_heads * SHAPE.dim), 7.0, np.float32)
    step.io.bind_cpu_input("key", new)
    step.run()
    buffer = step._keep[0]  # layer 0's K, bound as TensorScatter's input and output
    assert (buffer[0, 38:] == 7.0).all()
    np.testing.assert_array_equal(buffer[0, :38], keys[:38])


def test_the_grouped_rows_do_not_depend_on_how_many_ran():
    assert layouts.same_rows("grouped", SHAPE, (37, 64), 1).startswith("yes")
