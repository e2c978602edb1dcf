"""Prefix-cache benchmark: an 8-turn chat with and without KV reuse.

    python bench/bench_chat_reuse.py MODEL_DIR [--turns 8] [--reply 32] [--threads N]
    python bench/bench_chat_reuse.py MODEL_DIR --thinking [--turns 8] [--reply 32]

Each turn adds a user message of the same length. Prints TTFT per turn, reused / prefilled
tokens, and TTFT(last turn) / TTFT(turn 1) with reuse (target ≤ 1.3) and without (grows with
the history). When onnxruntime-genai is installed and the folder is in its layout, the same
token sequences are driven through it too: continuing one generator (rewind to len − 1, then
append the pending token and the new turn) and re-creating the generator every turn.
Never asserts on time.

``--thinking`` measures a reasoning model's chat instead: the folder's ChatML model runs with
a Qwen3-like template (the generation prompt opens ``<think>``) in two versions, one that
drops earlier turns' reasoning as Qwen3's does and one that writes it back
(``reasoning_content``), and prints reused vs prefilled tokens per turn for both. Dropping
earlier thinking changes the re-rendered prompt, so each turn rewinds the cache to where the
last reply's thinking began.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.engine.engine import Engine
from app.engine.types import GenerationSettings, Message, SamplingSettings
from bench.genai_peer import genai_model

QUESTIONS = [
    "Tell me one fact about lighthouses and the people who kept them running at night.",
    "Now tell me one fact about ships and the sailors who steered them through the fog.",
    "What is one thing about harbours that surprises most people who visit them today?",
    "Describe the sound of the sea on a calm evening in two short and simple sentences.",
    "Which birds live near the coast, and what do they usually eat during the winter?",
    "How did people find their way at sea before satellites and radio were invented?",
    "Give me a short piece of advice for someone who is walking along the cliffs today.",
    "Finally, summarise what we talked about in this conversation in a single sentence.",
]


def run_hearth(engine: Engine, turns: int, reply: int, reuse: bool):
    settings = GenerationSettings(sampling=SamplingSettings(temperature=0.0),
                                  max_new_tokens=reply)
    messages = [Message("system", "You are a friendly assistant. Answer briefly.")]
    rows, transcript = [], []
    caches = engine.conversation_caches()  # each run starts from an empty cache
    for turn in range(turns):
        messages.append(Message("user", QUESTIONS[turn % len(QUESTIONS)]))
        chunks = list(engine.chat(messages, settings, caches=caches, conversation_id="bench",
                                  reuse=reuse))
        text = "".join(c.text for c in chunks)
        stats = chunks[-1].stats
        rows.append(stats)
        transcript.append(engine.encode_chat(messages))
        messages.append(Message("assistant", text))
    return rows, transcript


_THINK_PROMPT = (
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n"
    "{% else %}<think>\n{% endif %}{% endif %}"
)
#: Qwen3's rule: reasoning only after the last user message (earlier turns' is dropped)
QWEN3_DROPS = (
    "{% set ns = namespace(last=-1) %}{% for m in messages %}"
    "{% if m.role == 'user' %}{% set ns.last = loop.index0 %}{% endif %}{% endfor %}"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n"
    "{% if m.role == 'assistant' and loop.index0 > ns.last and m.reasoning_content %}"
    "<think>\n{{ m.reasoning_content }}\n</think>\n\n{% endif %}{{ m.content }}<|im_end|>\n"
    "{% endfor %}" + _THINK_PROMPT
)
#: the same template writing every turn's reasoning back as it was generated
KEEPS_REASONING = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n"
    "{% if m.role == 'assistant' and m.reasoning_content %}<think>\n"
    "{{ m.reasoning_content }}{% endif %}{{ m.content }}<|im_end|>\n{% endfor %}"
    + _THINK_PROMPT
)


def with_template(model_dir: Path, template: str, into: Path) -> Path:
    """A copy of ``model_dir`` (its files linked, not copied) that uses ``template``."""
    into.mkdir(parents=True)
    for item in model_dir.iterdir():
        if item.name not in ("tokenizer_config.json", "chat_template.jinja"):
            (into / item.name).symlink_to(item.resolve())
    config_path = model_dir / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8")) if config_path.exists() else {}
    config["chat_template"] = template
    (into / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return into


def run_thinking(engine: Engine, turns: int, reply: int):
    """One chat of ``turns`` turns whose replies keep their thinking apart; each turn's
    stats and whether its tokens equal a run from an empty cache."""
    settings = GenerationSettings(sampling=SamplingSettings(temperature=0.0),
                                  max_new_tokens=reply)
    messages = [Message("system", "You are a friendly assistant. Answer briefly.")]
    caches = engine.conversation_caches()
    rows = []
    for turn in range(turns):
        messages.append(Message("user", QUESTIONS[turn % len(QUESTIONS)]))
        chunks = list(engine.chat(messages, settings, caches=caches, conversation_id="think"))
        fresh = list(engine.chat(messages, settings, reuse=False))
        same = ([c.token_id for c in chunks if c.token_id is not None]
                == [c.token_id for c in fresh if c.token_id is not None])
        rows.append((chunks[-1].stats, same))
        messages.append(Message("assistant", "".join(c.text for c in chunks),
                                "".join(c.reasoning for c in chunks)))
    return rows


def main_thinking(args: argparse.Namespace) -> int:
    results = {}
    with tempfile.TemporaryDirectory(prefix="hearth-think-") as tmp:
        for name, template in (("drops", QWEN3_DROPS), ("keeps", KEEPS_REASONING)):
            folder = with_template(args.model_dir, template, Path(tmp) / name)
            engine = Engine.load(folder, threads=args.threads)
            results[name] = run_thinking(engine, args.turns, args.reply)
            engine.close()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"thinking chat over {args.model_dir.name}: {args.turns} turns, {args.reply}-token "
          "replies, greedy")
    print(f"{'turn':>4} | {'Qwen3-like (drops earlier thinking)':^38} | "
          f"{'writes thinking back':^30}")
    print(f"{'':>4} | {'prompt':>7} {'reused':>7} {'prefill':>8} {'think':>6} {'= fresh':>7} | "
          f"{'prompt':>7} {'reused':>7} {'prefill':>8} {'= fresh':>7}")
    for turn, ((a, same_a), (b, same_b)) in enumerate(
            zip(results["drops"], results["keeps"], strict=True)):
        print(f"{turn + 1:>4} | {a.prompt_tokens:>7} {a.reused_tokens:>7} "
              f"{a.prefilled_tokens:>8} {a.reasoning_tokens:>6} {same_a!s:>7} | "
              f"{b.prompt_tokens:>7} {b.reused_tokens:>7} {b.prefilled_tokens:>8} "
              f"{same_b!s:>7}")
    for name, rows in results.items():
        reused = sum(s.reused_tokens for s, _ in rows)
        prefilled = sum(s.prefilled_tokens for s, _ in rows)
        print(f"{name}: reused {reused}, prefilled {prefilled} tokens in all; "
              f"every turn equals a fresh run: {all(same for _, same in rows)}")
    return 0


def run_genai(model_dir: Path, prompts: list[list[int]], reply: int, threads: int,
              continue_generator: bool) -> list[float] | None:
    with genai_model(model_dir, threads) as model:
        if model is None:
            return None
        import onnxruntime_genai as og

        ttfts = []
        generator, held = None, []
        for prompt in prompts:
            params = og.GeneratorParams(model)
            params.set_search_options(max_length=len(prompt) + reply + 8, do_sample=False)
            start = time.perf_counter()
            if continue_generator and generator is not None:
                common = 0
                while (common < min(len(held), len(prompt)) - 1
                       and held[common] == prompt[common]):
                    common += 1
                # The last generated token is pending (its KV is not computed yet).
                generator.rewind_to(common)
                generator.append_tokens(prompt[common:])
            else:
                params.set_search_options(max_length=prompt_len_cap(prompt, reply), do_sample=False)
                generator = og.Generator(model, params)
                generator.append_tokens(prompt)
            generator.generate_next_token()
            ttfts.append((time.perf_counter() - start) * 1000)
            for _ in range(reply - 1):
                if generator.is_done():
                    break
                generator.generate_next_token()
            held = list(generator.get_sequence(0))
        return ttfts


def prompt_len_cap(prompt: list[int], reply: int) -> int:
    return len(prompt) + reply + 2048  # room for later turns when continuing


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--reply", type=int, default=32)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--thinking", action="store_true",
                        help="measure a thinking chat under a Qwen3-like template")
    args = parser.parse_args()
    if args.thinking:
        return main_thinking(args)

    engine = Engine.load(args.model_dir, threads=args.threads)
    print(f"model {engine.spec.name}  path {engine.decode_path}  "
          f"{engine.provider_report.summary()}")
    run_hearth(engine, 1, 4, reuse=False)  # warm-up: first-run costs out of turn 1
    with_reuse, prompts = run_hearth(engine, args.turns, args.reply, reuse=True)
    without, _ = run_hearth(engine, args.turns, args.reply, reuse=False)
    threads = args.threads or engine.decoder.session.get_session_options().intra_op_num_threads
    genai_cont = run_genai(args.model_dir, prompts, args.reply, threads, True)
    genai_new = run_genai(args.model_dir, prompts, args.reply, threads, False)

    header = (f"{'turn':>4} {'prompt':>7} {'reused':>7} {'prefill':>8} {'TTFT ms':>9} "
              f"{'no-reuse TTFT':>14}")
    if genai_cont:
        header += f" {'genai cont.':>12} {'genai new':>10}"
    print(header)
    for turn, (a, b) in enumerate(zip(with_reuse, without, strict=True)):
        line = (f"{turn + 1:>4} {a.prompt_tokens:>7} {a.reused_tokens:>7} "
                f"{a.prefilled_tokens:>8} {a.ttft_ms:>9.1f} {b.ttft_ms:>14.1f}")
        if genai_cont:
            line += f" {genai_cont[turn]:>12.1f} {genai_new[turn]:>10.1f}"
        print(line)
    ratio = with_reuse[-1].ttft_ms / with_reuse[0].ttft_ms
    ratio_no = without[-1].ttft_ms / without[0].ttft_ms
    print(f"TTFT(turn {args.turns}) / TTFT(turn 1): with reuse {ratio:.2f} (target <= 1.3), "
          f"without reuse {ratio_no:.2f}")
    if genai_cont:
        print(f"onnxruntime-genai: continuing {genai_cont[-1] / genai_cont[0]:.2f}, "
              f"re-created {genai_new[-1] / genai_new[0]:.2f}")
    return 0


if __name__ == "__main__":
    from app.cpu import describe_machine

    print(describe_machine(), flush=True)  # every figure below is for this CPU kind
    sys.exit(main())
