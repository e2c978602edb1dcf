"""How long tests let a promise to the user take.

A test that checks "Stop / Cancel / Quit / a refusal happens at once" bounds the wait with
``AT_ONCE_S``: generous enough for a loaded 2-core CI machine, far below what breaking the
promise costs (a whole reply, a 30 s template limit, a child's 60 s sleep, a stalled socket's
30 s). Such tests also assert what stopping left behind, so the bound is a backstop, not the
check. Speed figures are measured in bench/, never asserted here.
"""

AT_ONCE_S = 5.0
