"""A thinking model with tools, end to end through the official openai client and a real
server: the reply thinks (``<think>`` … ``</think>``), then calls a tool under the tool
grammar, which starts after ``</think>``; the result goes back as a ``tool`` message and
the model thinks again and answers. The reasoning comes back apart from the answer, as
``reasoning_content``.

The model is the tiny one with its logits steered by a script (``ScriptedDecoder``): at each
step the token that writes the most of the script's next text gets the top logit, so the
engine, the reasoning splitter, the grammar, the call parser and the server all run for
real on what a thinking model writes."""

from __future__ import annotations

import json
from collections.abc import Callable

import numpy as np
import pytest

from app.engine.engine import Engine
from app.server.app import HearthApi
from app.server.config import ServerConfig
from app.server.executor import ThreadEngineExecutor
from app.server.runner import ServerRunner
from tests.engine.test_constrained import TOOLS
from tests.fixtures.tool_template import with_thinking_tool_template
from tests.server.conftest import Served

HEADER = "<|im_start|>assistant\n"
THINK_CALL = "The user wants the weather in Oslo. I will call get_weather."
CALL = {"city": "Oslo", "days": 2}
THINK_ANSWER = "The tool says 21 degrees."
ANSWER = "It is 21 degrees in Oslo."


def script(prompt: str) -> str:
    """What the scripted model wants to write after ``prompt``."""
    if "<tool_response>" in prompt:  # the tool's result is in: think, then answer
        return f"<think>\n{THINK_ANSWER}\n</think>\n\n{ANSWER}"
    if "in words" in prompt:  # it would answer in prose; a required call's grammar objects
        return f"<think>\n{THINK_CALL}\n</think>\n\nIt is sunny in Oslo, I think."
    call = json.dumps({"name": "get_weather", "arguments": CALL})
    return f"<think>\n{THINK_CALL}\n</think>\n\n<tool_call>\n{call}\n</tool_call>"


class ScriptedDecoder:
    """The tiny model's decoder with a script on top: after each step, the token whose text
    is the longest start of what the script still wants written (after the reply so far)
    gets the top logit; end of sequence when the script is done; the model's own logits once
    the reply has left the script (a grammar chose otherwise). No verify steps."""

    def __init__(self, inner, tokenizer, wants: Callable[[str], str], eos: int) -> None:
        self._inner, self._tok, self._wants, self._eos = inner, tokenizer, wants, eos
        self._texts = [tokenizer.decode([i], skip_special_tokens=False)
                       for i in range(inner.graph.vocab_size)]

    def __getattr__(self, name):
        return getattr(self._inner, name)

    @property
    def can_verify(self) -> bool:
        return False

    def feed(self, cache, ids, **options):
        return self._steer(cache, self._inner.feed(cache, ids, **options))

    def step(self, cache, token):
        return self._steer(cache, self._inner.step(cache, token))

    def _steer(self, cache, logits):
        text = self._tok.decode(list(cache.tokens), skip_special_tokens=False)
        at = text.rfind(HEADER)
        if at == -1:  # not a chat reply (the engine's own probes)
            return logits
        prompt, reply = text[:at], text[at + len(HEADER):]
        wanted = self._wants(prompt)
        if not wanted.startswith(reply):
            return logits
        rest = wanted[len(reply):]
        best = self._eos if not rest else max(
            (i for i, t in enumerate(self._texts) if t and rest.startswith(t)),
            key=lambda i: len(self._texts[i]))
        out = np.array(logits, dtype=np.float32, copy=True)
        out[best] = out.max() + 30.0
        return out


@pytest.fixture(scope="module")
def thinking_server(tmp_path_factory):
    from tests.fixtures.tiny_models import build_gqa_model

    model = build_gqa_model(tmp_path_factory.mktemp("thinking_model"), context_length=2048)
    folder = with_thinking_tool_template(model, tmp_path_factory.mktemp("t") / "thinker")

    def load() -> Engine:
        engine = Engine.load(folder)
        engine.decoder = ScriptedDecoder(engine.decoder, engine.tokenizer, script,
                                         engine.eos_token_ids[0])
        return engine

    executor = ThreadEngineExecutor(load)
    served_model = executor.start()
    api = HearthApi(executor, ServerConfig(port=0))
    runner = ServerRunner(api)
    served = Served(api, runner, executor, served_model, runner.start())
    yield served
    served.close()


def _reasoning(message) -> str:
    return (message.model_extra or {}).get("reasoning_content", "")


def test_it_thinks_calls_a_tool_reads_the_result_and_answers(thinking_server):
    client = thinking_server.client()
    model = thinking_server.model.id
    ask = [{"role": "user", "content": "What is the weather in Oslo?"}]
    first = client.chat.completions.create(model=model, messages=ask, tools=TOOLS,
                                           tool_choice="required", temperature=0,
                                           max_tokens=300)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert _reasoning(choice.message).strip() == THINK_CALL  # thought freely, apart
    assert not (choice.message.content or "").strip()
    [call] = choice.message.tool_calls
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == CALL

    history = [*ask, choice.message.model_dump(exclude_none=True),
               {"role": "tool", "tool_call_id": call.id, "content": '{"temp": 21}'}]
    second = client.chat.completions.create(model=model, messages=history, tools=TOOLS,
                                            temperature=0, max_tokens=300)
    answer = second.choices[0]
    assert answer.finish_reason == "stop" and not answer.message.tool_calls
    assert _reasoning(answer.message).strip() == THINK_ANSWER
    assert answer.message.content.strip() == ANSWER
    # the replayed call, its reasoning and the result were rendered into the prompt
    assert second.usage.prompt_tokens > first.usage.prompt_tokens + 30


def test_the_call_grammar_starts_after_the_thinking(thinking_server):
    """A model that would answer in prose where a call is required: its thinking is left as
    it was written (no grammar before ``</think>``), and after it the grammar makes a call."""
    client = thinking_server.client()
    reply = client.chat.completions.create(
        model=thinking_server.model.id, tools=TOOLS, tool_choice="required",
        messages=[{"role": "user", "content": "The weather in Oslo, in words?"}],
        temperature=0, max_tokens=300)
    choice = reply.choices[0]
    assert _reasoning(choice.message).strip() == THINK_CALL
    assert choice.finish_reason == "tool_calls" and choice.message.tool_calls
    specs = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    import jsonschema

    for call in choice.message.tool_calls:
        jsonschema.validate(json.loads(call.function.arguments), specs[call.function.name])
