"""How far two runs of one graph may differ where they compute the same thing in another
order (one row or several, a whole prompt or chunks), on any CPU.

Each CPU kind's kernels block their sums in their own way (app/cpu.py), so such bounds come
from the number formats, never from what one machine measured: a test asserts equality
within ``kv_atol`` only where bit-for-bit equality is not promised.
"""

from __future__ import annotations

#: float32 KV: the same float32 sums in another order differ in their last bits (~1e-6 on
#: the tiny graphs' O(10) logits)
FLOAT32_ATOL = 1e-4
#: A half-precision KV stores each K and V rounded to its format; where two paths' float32
#: values differ in their last bits, an element can round to the neighbouring value: one unit
#: in the last place at 1.0 (float16 2^-10, bfloat16 2^-7) bounds what that does to a logit
#: (measured on the plain graphs: up to 4e-5 for float16, 1.3e-3 for bfloat16, depending on
#: the prompt and the CPU, so the float32 bound held only by luck)
HALF_KV_ATOL = {"float16": 2.0**-10, "bfloat16": 2.0**-7}


def kv_atol(kv_dtype: str) -> float:
    """The logit tolerance for a graph whose KV is ``kv_dtype`` ("float32", "float16",
    "bfloat16")."""
    return HALF_KV_ATOL.get(kv_dtype, FLOAT32_ATOL)
