"""Hostile chat templates: every attack ends in a TemplateError naming the template within
2 s and under 256 MB, and the engine's environment stays usable.

Each attack runs in a child process with a 1.5 GB address-space limit and a timeout, so that a
regression fails the test instead of exhausting the shared machine. The child measures the
render's time and its peak Python allocation (tracemalloc) and reports them as JSON.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from app.engine.chat_template import ChatTemplate
from app.errors import TemplateError
from tests.bounds import AT_ONCE_S

ROOT = Path(__file__).resolve().parents[2]
MAX_SECONDS = 2.0
MAX_PEAK_BYTES = 256 * 2**20

_CHILD = r"""
import json, resource, sys, time, tracemalloc
limit = 1536 * 2**20
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
from app.engine.chat_template import ChatTemplate
from app.errors import TemplateError
source = sys.stdin.read()
template = ChatTemplate(source, origin="/models/evil-model")
tracemalloc.start()
start = time.perf_counter()
try:
    template.render([{"role": "user", "content": "hi " * 2000}])
    outcome, message = "rendered", ""
except TemplateError as exc:
    outcome, message = "TemplateError", str(exc)
except BaseException as exc:
    outcome, message = type(exc).__name__, str(exc)[:300]
seconds = time.perf_counter() - start
peak = tracemalloc.get_traced_memory()[1]
tracemalloc.stop()
ok = ChatTemplate("{{ messages[0].content }}").render([{"role": "user", "content": "ok"}])
print(json.dumps({"outcome": outcome, "message": message, "seconds": seconds, "peak": peak,
                  "usable": ok == "ok"}))
"""

BIG = "{% set big = 'x' * 1300000 %}"
ATTACKS = {
    "lipsum": "{{ lipsum(10**8) }}",
    "lipsum_words": "{{ lipsum(1000, false, 1000000, 2000000) }}",
    "replace_filter_repeated": "{% set s = namespace(v='aaaaaaaaaa') %}{% for i in range(40) %}"
    "{% set s.v = s.v|replace('a', s.v) %}{% endfor %}{{ s.v|length }}",
    "replace_method_once": BIG + "{{ big.replace('x', big) }}",
    "replace_filter_once": BIG + "{{ big|replace('x', big) }}",
    "replace_empty_old": "{{ 'ab'|replace('', 'x' * 2999999) }}",
    "tilde_doubling": "{% set s = namespace(v='xx') %}{% for i in range(64) %}"
    "{% set s.v = s.v ~ s.v %}{% endfor %}{{ s.v|length }}",
    "tilde_many_parts": "{% set s = 'a' * 2000000 %}{{ (s ~ s ~ s)|length }}",
    "tojson_indent_int": "{{ {'a': [1]} | tojson(indent=10**9) }}",
    "tojson_indent_str": "{{ {'a': [1]} | tojson(indent=' ' * 10**6) }}",
    "tojson_separators": "{{ [1, 2] | tojson(separators=(',' * 10**6, ':')) }}",
    "slice_filter": "{{ [1]|slice(10**9)|list|length }}",
    "batch_fill": "{{ [1]|batch(10**9, 'x')|list|length }}",
    "pow_huge_exponent": "{{ 10 ** (10 ** 8) }}",
    "pow_repeated": "{% set ns = namespace(v=10) %}{% for i in range(30) %}"
    "{% set ns.v = ns.v ** 8 %}{% endfor %}{{ ns.v > 1 }}",
    "int_squaring": "{% set ns = namespace(v=2) %}{% for i in range(40) %}"
    "{% set ns.v = ns.v * ns.v %}{% endfor %}{{ ns.v > 1 }}",
    "string_multiplication": "{{ 'x' * 10**9 }}",
    "string_doubling_by_mul": "{% set s = namespace(v='x') %}{% for i in range(40) %}"
    "{% set s.v = s.v * 2 %}{% endfor %}{{ s.v|length }}",
    "list_multiplication": "{{ ['a'] * 10**9 }}",
    "list_of_big_multiplied": BIG + "{{ ([big] * 1000)|join|length }}",
    "list_doubling_by_plus": "{% set s = namespace(v=['x']) %}{% for i in range(40) %}"
    "{% set s.v = s.v + s.v %}{% endfor %}{{ s.v|length }}",
    "nested_range_loops": "{% for i in range(100000) %}{% for j in range(100000) %}"
    "{% endfor %}{% endfor %}",
    "nested_content_loops": "{% for a in messages[0].content %}{% for b in messages[0].content %}"
    "{% endfor %}{% endfor %}",
    "center_width": "{{ 'a'|center(10**9) }}",
    "indent_width": "{{ 'a'|indent(10**9) }}",
    "indent_string_prefix": BIG + "{{ ('a\\n' * 100)|indent(big) }}",
    "wordwrap_wrapstring": "{{ ('a b ' * 100000)|wordwrap(1, wrapstring='y' * 1000)|length }}",
    "format_filter_star": "{{ '%0*d'|format(10**9, 1) }}",
    "format_method_nested_width": "{{ '{:>{w}}'.format('a', w=10**9) }}",
    "format_method_positional_width": "{{ '{0:{1}}'.format('a', 10**9) }}",
    "format_method_repeats_argument": BIG + "{{ '{0}{0}{0}{0}{0}'.format(big) }}",
    "percent_width": "{{ '%01000000000d' % 1 }}",
    "percent_repeats_mapping": BIG + "{{ '%(a)s%(a)s%(a)s%(a)s' % {'a': big} }}",
    "str_ljust": "{{ 'a'.ljust(10**9) }}",
    "str_zfill": "{{ 'a'.zfill(10**9) }}",
    "str_expandtabs": "{{ ('\\t' * 100)|string|attr('expandtabs')(10**8) }}",
    "str_translate": BIG + "{{ 'aaaa'.translate({97: big})|length }}",
    "str_join_method": BIG + "{{ ''.join([big, big, big, big])|length }}",
    "int_to_bytes": "{{ (1).to_bytes(10**9, 'big')|length }}",
    "shared_nested_lists": "{% set ns = namespace(v=['abcdefgh']) %}{% for i in range(60) %}"
    "{% set ns.v = [ns.v, ns.v] %}{% endfor %}{{ ns.v|string|length }}",
    "shared_nested_tuple_hash": "{% set ns = namespace(v=(1,)) %}{% for i in range(60) %}"
    "{% set ns.v = (ns.v, ns.v) %}{% endfor %}{{ {ns.v: 1} }}",
    "namespace_inside_namespace": "{% set ns = namespace(a=1) %}{% set ns.me = ns %}{{ ns }}",
    "map_center_join": "{{ range(100000)|map('center', 1000000)|join|length }}",
    "many_big_values_held": BIG + "{% set ns = namespace(l=[]) %}{% for i in range(2000) %}"
    "{% set ns.l = ns.l + [big ~ i] %}{% endfor %}{{ ns.l|length }}",
    "block_set_buffer": BIG + "{% set x %}{% for i in range(1000) %}{{ big }}{% endfor %}"
    "{% endset %}{{ x|length }}",
    "macro_buffer": BIG + "{% macro f() %}{% for i in range(1000) %}{{ big }}{% endfor %}"
    "{% endmacro %}{{ f()|length }}",
    "filter_block_buffer": BIG + "{% filter upper %}{% for i in range(1000) %}{{ big }}"
    "{% endfor %}{% endfilter %}",
    "sum_of_lists_quadratic": "{{ (range(100000)|map('string')|map('list')|list)"
    "|sum(start=[])|length }}",
    "strftime_format": "{{ strftime_now('%c' * 10**6) }}",
    "urlize_target": BIG + "{{ ('x.com ' * 1000)|urlize(target=big)|length }}",
    "runaway_output": "{% for i in range(100000) %}{% for j in range(1000) %}"
    "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx{% endfor %}{% endfor %}",
}


def _run_attack(source: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", _CHILD],
        input=source,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("source", list(ATTACKS.values()), ids=list(ATTACKS))
def test_attack_is_refused_quickly_in_bounded_memory(source):
    result = _run_attack(source)
    assert result["outcome"] == "TemplateError", result
    assert "The chat template of /models/evil-model" in result["message"]
    assert result["seconds"] < MAX_SECONDS, result
    assert result["peak"] < MAX_PEAK_BYTES, result
    assert result["usable"]


def test_stop_event_aborts_a_slow_render():
    template = ChatTemplate(
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
        origin="/models/slow",
        time_limit_s=30,
    )
    stop = threading.Event()
    threading.Timer(0.2, stop.set).start()
    start = time.perf_counter()
    with pytest.raises(TemplateError, match=r"of /models/slow was stopped.*Stop was pressed"):
        template.render([], stop=stop)
    assert time.perf_counter() - start < AT_ONCE_S  # the time limit is 30 s


def test_stop_event_that_is_never_set_changes_nothing():
    template = ChatTemplate("{{ messages[0].content }}!")
    assert template.render([{"role": "user", "content": "hi"}], stop=threading.Event()) == "hi!"


def test_default_limits_end_a_render_within_two_seconds():
    template = ChatTemplate(
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    )
    start = time.perf_counter()
    with pytest.raises(TemplateError, match="ran for more than"):
        template.render([])
    assert time.perf_counter() - start < MAX_SECONDS


def test_large_but_legitimate_conversation_renders():
    # ~2.4 M characters through ChatML with concatenation: far more than any context window.
    template = ChatTemplate(
        "{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}"
        "{% endfor %}"
    )
    chat = [{"role": "user", "content": "word " * 1200} for _ in range(400)]
    rendered = template.render(chat)
    assert rendered.count("<|im_start|>") == 400
    assert len(rendered) > 2_400_000
