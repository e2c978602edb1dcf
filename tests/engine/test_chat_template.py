"""Chat templates: real-world template styles render exactly; every failure is a TemplateError.

The templates below are faithful paraphrases of the ones shipped in tokenizer_config.json by
SmolLM2 / Qwen2.5 (ChatML), Llama 3.x, Phi-3 and Mistral-Instruct.
"""

from __future__ import annotations

import sys
import time
from datetime import datetime

import pytest

from app.engine.chat_template import ChatTemplate
from app.engine.types import Message
from app.errors import TemplateError
from tests.bounds import AT_ONCE_S

SMOLLM2 = (
    "{% for message in messages %}"
    "{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by "
    "Hugging Face<|im_end|>\\n' }}"
    "{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

QWEN25 = """\
{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\\n\\n# Tools\\n\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
    {%- else %}
        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful \
assistant.<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if not (message.role == "system" and loop.first) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""

LLAMA3 = """\
{{- bos_token }}
{%- if not date_string is defined %}
    {%- set date_string = strftime_now("%d %b %Y") %}
{%- endif %}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}
{{- "Cutting Knowledge Date: December 2023\\n" }}
{{- "Today Date: " + date_string + "\\n\\n" }}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- for message in messages %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'
        + message['content'] | trim + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""

PHI3 = (
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}"
    "{{'<|system|>\\n' + message['content'] + '<|end|>\\n'}}"
    "{% elif message['role'] == 'user' %}"
    "{{'<|user|>\\n' + message['content'] + '<|end|>\\n'}}"
    "{% elif message['role'] == 'assistant' %}"
    "{{'<|assistant|>\\n' + message['content'] + '<|end|>\\n'}}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% else %}{{ eos_token }}{% endif %}"
)

MISTRAL = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token }}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}"
    "{% endif %}"
    "{% endfor %}"
)

CHAT = [
    {"role": "user", "content": "Hi there"},
    {"role": "assistant", "content": "Hello! How can I help?"},
    {"role": "user", "content": "Grüß dich, 你好 😀"},
]
WITH_SYSTEM = [{"role": "system", "content": "Be brief."}, *CHAT]


def test_smollm2_inserts_default_system_prompt():
    template = ChatTemplate(SMOLLM2, bos_token="<|im_start|>", eos_token="<|im_end|>")
    assert template.render(CHAT) == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
        "Hugging Face<|im_end|>\n"
        "<|im_start|>user\nHi there<|im_end|>\n"
        "<|im_start|>assistant\nHello! How can I help?<|im_end|>\n"
        "<|im_start|>user\nGrüß dich, 你好 😀<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    with_system = template.render(WITH_SYSTEM, add_generation_prompt=False)
    assert with_system.startswith("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user")
    assert "SmolLM" not in with_system
    assert with_system.endswith("😀<|im_end|>\n")


def test_qwen25_system_branches_and_tools_as_json():
    template = ChatTemplate(QWEN25, eos_token="<|im_end|>")
    assert template.render(WITH_SYSTEM[:2]) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nHi there<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert template.render(CHAT[:1]).startswith(
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
        "assistant.<|im_end|>\n<|im_start|>user\n"
    )
    tool = {"type": "function", "function": {"name": "météo", "description": "Wetter <heute>"}}
    rendered = template.render(CHAT[:1], tools=[tool])
    # Non-ASCII and HTML characters stay as they are (transformers' tojson, not Jinja's).
    assert (
        '\n{"type": "function", "function": {"name": "météo", "description": '
        '"Wetter <heute>"}}\n</tools><|im_end|>\n' in rendered
    )


def test_llama3_headers_date_and_trim():
    template = ChatTemplate(LLAMA3, bos_token="<|begin_of_text|>", eos_token="<|eot_id|>")
    rendered = template.render(
        [{"role": "system", "content": "  Be brief. "}, {"role": "user", "content": " Hi "}],
        date_string="26 Jul 2024",
    )
    assert rendered == (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
        "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
        "Be brief.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    before = datetime.now().strftime("%d %b %Y")
    today = template.render(CHAT[:1])  # strftime_now fills in the date
    after = datetime.now().strftime("%d %b %Y")
    assert f"Today Date: {before}\n" in today or f"Today Date: {after}\n" in today


def test_phi3_roles_and_eos_without_generation_prompt():
    template = ChatTemplate(PHI3, bos_token="<s>", eos_token="<|endoftext|>")
    assert template.render(WITH_SYSTEM[:3], add_generation_prompt=False) == (
        "<|system|>\nBe brief.<|end|>\n<|user|>\nHi there<|end|>\n"
        "<|assistant|>\nHello! How can I help?<|end|>\n<|endoftext|>"
    )
    assert template.render(CHAT[:1]) == "<|user|>\nHi there<|end|>\n<|assistant|>\n"


def test_mistral_renders_alternating_roles():
    template = ChatTemplate(MISTRAL, bos_token="<s>", eos_token="</s>")
    assert template.render(CHAT) == (
        "<s>[INST] Hi there [/INST]Hello! How can I help?</s>[INST] Grüß dich, 你好 😀 [/INST]"
    )


def test_mistral_refuses_non_alternating_roles_with_its_message():
    template = ChatTemplate(MISTRAL, bos_token="<s>", eos_token="</s>", origin="Mistral-7B")
    with pytest.raises(TemplateError, match="Conversation roles must alternate") as info:
        template.render([CHAT[0], CHAT[0]])
    assert "Mistral-7B" in str(info.value)
    with pytest.raises(TemplateError, match="Only user and assistant roles"):
        template.render([CHAT[0], {"role": "system", "content": "Be brief."}])


def test_missing_special_token_renders_empty_not_none():
    template = ChatTemplate(
        "{{ bos_token }}|{{ eos_token }}|{{ unk_token }}",
        bos_token=None,
        eos_token="</s>",
        special_tokens={"pad_token": "x"},
    )
    assert template.render([]) == "|</s>|"


def test_extra_variables_and_special_tokens_reach_the_template():
    template = ChatTemplate(
        "{{ pad_token }} {{ enable_thinking }} {{ tools is none }} {{ documents is none }}",
        special_tokens={"pad_token": "<pad>"},
    )
    assert template.render([], enable_thinking=False) == "<pad> False True True"


def test_messages_may_be_message_objects():
    template = ChatTemplate(SMOLLM2)
    as_dicts = template.render(CHAT)
    assert template.render([Message(**m) for m in CHAT]) == as_dicts


def test_tojson_indent_and_loopcontrols_and_generation_block():
    template = ChatTemplate(
        "{% for m in messages %}{% if loop.index0 == 2 %}{% break %}{% endif %}"
        "{% if m.role == 'user' %}{% continue %}{% endif %}"
        "{% generation %}[{{ m.content }}]{% endgeneration %}{% endfor %}"
        "{{ {'ü': [1, 2]} | tojson(indent=2) }}"
    )
    assert template.render(CHAT) == '[Hello! How can I help?]{\n  "ü": [\n    1,\n    2\n  ]\n}'


def test_compiled_once_rendered_many_times_alike():
    template = ChatTemplate(QWEN25)
    long_chat = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i}"}
        for i in range(400)
    ]
    outputs = {template.render(long_chat) for _ in range(10)}
    assert len(outputs) == 1


# -- failures -------------------------------------------------------------------------------


def test_syntax_error_names_origin_and_line():
    with pytest.raises(TemplateError, match=r"of my-model has a syntax error on line 2") as info:
        ChatTemplate("ok\n{% for m in messages %}{{ m.content }}", origin="my-model")
    assert "endfor" in str(info.value)


def test_unknown_tag_is_a_syntax_error():
    with pytest.raises(TemplateError, match="syntax error"):
        ChatTemplate("{% do messages.append(1) %}")


def test_undefined_attribute_access_fails_clearly():
    template = ChatTemplate("{{ messages[0].metadata.author }}", origin="m")
    with pytest.raises(TemplateError, match=r"of m failed: .*metadata"):
        template.render(CHAT)


@pytest.mark.parametrize(
    "source",
    [
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{{ cycler.__init__.__globals__ }}",
        "{{ joiner.__init__.__globals__['os'] }}",
        "{{ messages.append({'role': 'user'}) }}",
        "{{ raise_exception.__globals__ }}",
        "{{ ''.__class__ }}",
        "{{ messages.__class__.__base__ }}",
        "{{ (messages|first).update({'role': 'x'}) }}",
    ],
)
def test_sandbox_escapes_are_refused(source):
    template = ChatTemplate(source, origin="evil-model")
    with pytest.raises(TemplateError, match="evil-model") as info:
        template.render(CHAT)
    message = str(info.value)
    assert "sandbox forbids" in message or "failed" in message
    assert "<class" not in message  # nothing leaked into the message


def test_sandbox_escape_is_reported_as_such():
    template = ChatTemplate("{{ ''.__class__.__mro__ }}")
    with pytest.raises(TemplateError, match="sandbox forbids"):
        template.render([])


def test_runaway_output_is_capped():
    template = ChatTemplate(
        "{% for i in range(100000) %}{% for j in range(100000) %}xxxxxxxxxx{% endfor %}"
        "{% endfor %}",
        max_chars=200_000,
    )
    start = time.perf_counter()
    with pytest.raises(TemplateError, match="more than 200,000 characters"):
        template.render([])
    assert time.perf_counter() - start < 5


@pytest.mark.parametrize(
    "source",
    [
        "{{ 'x' * 1000000000 }}",
        "{% set s = namespace(v='xx') %}{% for i in range(64) %}{% set s.v = s.v + s.v %}"
        "{% endfor %}{{ s.v|length }}",
        "{{ ['a'] * 10**9 }}",
        "{{ 10 ** 100000000 }}",
        "{{ 'ab'|replace('', 'x' * 999999) }}",
        "{{ 'a'|center(1000000000) }}",
        "{{ 'a'.ljust(1000000000) }}",
        "{{ '%01000000000d' % 1 }}",
        "{{ '%*d' % (1000000000, 1) }}",
        "{{ '{:>1000000000}'.format('a') }}",
        "{{ '%01000000000d'|format(1) }}",
        "{{ 'x'|indent(1000000000, true) }}",
    ],
)
def test_gigantic_values_are_refused_quickly(source):
    start = time.perf_counter()  # compiling must not evaluate anything either
    template = ChatTemplate(source, max_chars=1_000_000)
    with pytest.raises(TemplateError, match=r"stopped|failed"):
        template.render([])
    assert time.perf_counter() - start < AT_ONCE_S


@pytest.mark.parametrize(
    "source",
    [
        # Empty loop bodies produce no output and call nothing: only the time guard stops them.
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
        "{% for a in messages[0].content %}{% for b in messages[0].content %}"
        "{% for c in messages[0].content %}{% endfor %}{% endfor %}{% endfor %}",
    ],
)
def test_endless_loops_are_stopped_by_the_time_limit(source):
    template = ChatTemplate(source, time_limit_s=0.3, origin="slow-model")
    start = time.perf_counter()
    with pytest.raises(TemplateError, match=r"slow-model ran for more than 0.3 s"):
        template.render([{"role": "user", "content": "x" * 5000}])
    assert time.perf_counter() - start < 3


def test_infinite_recursion_fails_cleanly():
    template = ChatTemplate("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}")
    with pytest.raises(TemplateError, match=r"recursed too deeply|failed"):
        template.render([])


def test_trace_function_is_restored_after_success_and_failure():
    def tracer(frame, event, arg):
        return None

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        ChatTemplate(SMOLLM2).render(CHAT)
        assert sys.gettrace() is tracer
        with pytest.raises(TemplateError):
            ChatTemplate(MISTRAL).render(WITH_SYSTEM)
        assert sys.gettrace() is tracer
    finally:
        sys.settrace(previous)


def test_template_error_inside_raises_templateerror_not_jinja_error():
    template = ChatTemplate("{{ messages[0]['content'] + 1 }}")
    with pytest.raises(TemplateError, match="TypeError"):
        template.render(CHAT)


# -- the bounded sandbox renders exactly what stock Jinja renders ---------------------------

QWEN3 = """\
{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}
    {{- "# Tools\\n\\n<tools>" }}
    {%- for tool in tools %}{{- "\\n" }}{{- tool | tojson }}{%- endfor %}
    {{- "\\n</tools><|im_end|>\\n" }}
{%- elif messages[0].role == 'system' %}
    {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string
          and not message.content.startswith('<tool_response>') %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- set content = message.content if message.content is string else '' %}
    {%- if message.role == "user" or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if '</think>' in content %}
            {%- set reasoning_content = content.split('</think>')[0].rstrip('\\n')
                .split('<think>')[-1].lstrip('\\n') %}
            {%- set content = content.split('</think>')[-1].lstrip('\\n') %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index and (loop.last or reasoning_content) %}
            {{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content.strip('\\n')
                + '\\n</think>\\n\\n' + content.lstrip('\\n') }}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\\n' + content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls or [] %}
            {%- if (loop.first and content) or not loop.first %}{{- '\\n' }}{%- endif %}
            {%- set tool_call = tool_call.function if tool_call.function else tool_call %}
            {{- '<tool_call>\\n{"name": "' }}{{- tool_call.name }}{{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}{{- '}\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or messages[loop.index0 - 1].role != "tool" %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' ~ content ~ '\\n</tool_response>' }}
        {%- if loop.last or messages[loop.index0 + 1].role != "tool" %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- endif %}
{%- endif %}
"""

GEMMA3 = """\
{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- set role = "model" if message['role'] == 'assistant' else message['role'] -%}
    {{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- else -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}{{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}{{ item['text'] | trim }}{%- endif -%}
        {%- endfor -%}
    {%- endif -%}
    {{ '<end_of_turn>\\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}{{ '<start_of_turn>model\\n' }}{%- endif -%}
"""

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Wetter für <Ort> 🌦",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
TOOL_CHAT = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Zürich?"},
    {
        "role": "assistant",
        "content": "<think>\nlook it up\n</think>\n\nChecking.",
        "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Zürich"}}}],
    },
    {"role": "tool", "content": '{"temp": 21}'},
    {"role": "tool", "content": '{"wind": 3}'},
    {"role": "assistant", "content": "21 °C, calm."},
    {"role": "user", "content": "Thanks"},
]


def _stock_render(source, messages, **variables):
    """The same template through stock Jinja configured as transformers does."""
    import json

    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
    )

    def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent,
                          separators=separators, sort_keys=sort_keys)

    def raise_exception(message):
        raise jinja2.TemplateError(message)

    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(source).render(messages=messages, **variables)


@pytest.mark.parametrize(
    ("source", "messages", "variables"),
    [
        (SMOLLM2, CHAT, {}),
        (QWEN25, WITH_SYSTEM, {"tools": TOOLS}),
        (LLAMA3, WITH_SYSTEM, {"bos_token": "<|begin_of_text|>", "date_string": "1 Jan 2025"}),
        (PHI3, WITH_SYSTEM, {"eos_token": "<|endoftext|>"}),
        (MISTRAL, CHAT, {"bos_token": "<s>", "eos_token": "</s>"}),
        (QWEN3, TOOL_CHAT, {"tools": TOOLS}),
        (QWEN3, TOOL_CHAT, {"tools": None, "enable_thinking": False}),
        (GEMMA3, WITH_SYSTEM, {"bos_token": "<bos>"}),
    ],
    ids=["smollm2", "qwen25-tools", "llama3", "phi3", "mistral", "qwen3-tools",
         "qwen3-no-thinking", "gemma3"],
)
def test_bounded_sandbox_renders_what_stock_jinja_renders(source, messages, variables):
    expected = _stock_render(
        source, messages, add_generation_prompt=True, documents=None,
        **{"tools": None, **variables},
    )
    tokens = {k: v for k, v in variables.items() if k in ("bos_token", "eos_token")}
    extra = {k: v for k, v in variables.items() if k not in tokens}
    template = ChatTemplate(source, **tokens)
    assert template.render(messages, **extra) == expected
    assert len(expected) > 40
