"""Terminal commands over the engine: ``chat`` and ``generate``.

Their flags and JSON output are a contract that benchmarks and checks rely on: keep them stable.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

from app.engine.types import GenerationSettings, Message, SamplingSettings
from app.errors import HearthError
from app.machine import PROVIDERS
from app.options import SPECULATION_MODES
from app.text import clean_text


def _add_model_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model_dir", type=Path, help="model folder (either ONNX layout)")
    parser.add_argument("--provider", choices=PROVIDERS, help="execution provider to use")
    parser.add_argument("--variant", help="Optimum graph variant, e.g. model_q4 or fp16")
    parser.add_argument("--threads", type=int, help="CPU threads for ONNX Runtime")
    parser.add_argument("--inexact", action="store_true",
                        help="faster 4-bit prompts on kernels that round otherwise: a reply "
                             "may then change with what the cache held (default: exact)")
    d, g = SamplingSettings(), GenerationSettings()
    model = "default: the model's generation config, else"
    parser.add_argument("--max-new-tokens", type=int, default=None,
                        help=f"longest reply in tokens ({model} {g.max_new_tokens})")
    parser.add_argument("--temperature", type=float,
                        help=f"randomness, 0 = always the likeliest token ({model} "
                             f"{d.temperature:g})")
    parser.add_argument("--top-k", type=int,
                        help=f"pick among the K likeliest tokens, 0 = off ({model} {d.top_k})")
    parser.add_argument("--top-p", type=float,
                        help=f"pick among the likeliest tokens that add up to P, 1 = off "
                             f"({model} {d.top_p:g})")
    parser.add_argument("--min-p", type=float,
                        help=f"drop tokens less likely than P x the likeliest, 0 = off "
                             f"({model} {d.min_p:g})")
    parser.add_argument("--repetition-penalty", type=float,
                        help=f"discourage repeating tokens, 1 = off ({model} "
                             f"{d.repetition_penalty:g})")
    parser.add_argument("--presence-penalty", type=float,
                        help=f"discourage tokens already used, 0 = off "
                             f"(default: {d.presence_penalty:g})")
    parser.add_argument("--frequency-penalty", type=float,
                        help=f"discourage tokens by how often they were used, 0 = off "
                             f"(default: {d.frequency_penalty:g})")
    parser.add_argument("--seed", type=int,
                        help="random seed, for a reproducible sampled reply (default: a new "
                             "one each time)")
    parser.add_argument("--stop", action="append", default=[],
                        help="stop string (repeatable; default: none)")
    parser.add_argument("--json", action="store_true", help="print JSON results")
    parser.add_argument(
        "--speculation", choices=SPECULATION_MODES, default=None,
        help="speculative decoding: auto (default: on where it pays), off, lookup (n-grams of "
        "the prompt and reply), draft (a small model, see --draft)",
    )
    parser.add_argument("--draft", type=Path,
                        help="draft model: an id from 'hearth models list' or a folder (same "
                             "tokenizer)")


def register(subparsers) -> None:
    gen = subparsers.add_parser("generate", help="complete a prompt and print the result")
    _add_model_options(gen)
    source = gen.add_mutually_exclusive_group(required=True)
    source.add_argument("--prompt", help="prompt text")
    source.add_argument("--prompt-tokens", help="raw token ids, comma separated")
    gen.add_argument(
        "--chat",
        action="store_true",
        help="wrap the prompt as a user message with the chat template",
    )
    gen.add_argument("--system", help="system prompt (with --chat)")
    gen.set_defaults(func=run_generate)

    chat = subparsers.add_parser("chat", help="chat with a model in the terminal")
    _add_model_options(chat)
    chat.add_argument("--system", help="system prompt")
    chat.add_argument(
        "--script",
        type=Path,
        help='scripted chat: JSON {"system", "turns": [...], "max_new_tokens"}',
    )
    chat.add_argument(
        "--no-cache", action="store_true", help="prefill every turn from scratch (for comparison)"
    )
    chat.set_defaults(func=run_chat)


_SAMPLING_FLAGS = ("temperature", "top_k", "top_p", "min_p", "repetition_penalty",
                   "presence_penalty", "frequency_penalty", "seed", "max_new_tokens")


def sampling_from_args(
    args: argparse.Namespace, defaults: dict, overrides: dict | None = None
) -> GenerationSettings:
    """Settings from the model's generation defaults, then a script's, then the flags
    (through ``GenerationSettings.from_model``: a greedy model config stays greedy)."""
    chosen: dict = {}
    for source in (overrides or {}), vars(args):
        chosen.update({key: source[key] for key in _SAMPLING_FLAGS
                       if source.get(key) is not None})
    chosen["stop_strings"] = tuple(args.stop or (overrides or {}).get("stop", ()))
    chosen["speculation"] = getattr(args, "speculation", None)
    return GenerationSettings.from_model(defaults, chosen)


def _load(args: argparse.Namespace):
    from app.engine.engine import Engine

    engine = Engine.load(
        args.model_dir, provider=args.provider, variant=args.variant, threads=args.threads,
        exact=not getattr(args, "inexact", False),
    )
    draft_dir = getattr(args, "draft", None)
    if draft_dir is not None:
        engine.attach_draft(draft_dir, threads=args.threads)
    elif getattr(args, "speculation", None) == "draft":
        raise HearthError("--speculation draft needs a draft model.",
                          hint="Name its folder with --draft.")
    return engine


@contextmanager
def _interrupt_sets(cancel: threading.Event):
    """While active, the first Ctrl-C sets ``cancel``; a second one raises KeyboardInterrupt."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        if cancel.is_set():
            raise KeyboardInterrupt
        cancel.set()

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _stream(chunks, *, echo: bool):
    """Print a reply as it streams; return (tokens, text, finish_reason, stats)."""
    tokens, parts = [], []
    final = None
    for chunk in chunks:
        if chunk.token_id is not None:
            tokens.append(chunk.token_id)
        if chunk.text:
            parts.append(chunk.text)
            if echo:
                sys.stdout.write(chunk.text)
                sys.stdout.flush()
        if chunk.finish_reason is not None:
            final = chunk
    return tokens, "".join(parts), final.finish_reason, final.stats


def _summary(stats, engine) -> str:
    return (
        f"[{stats.prompt_tokens} prompt tokens ({stats.reused_tokens} reused), "
        f"{stats.generated_tokens} generated, TTFT {stats.ttft_ms:.0f} ms, "
        f"{stats.decode_tok_s:.1f} tok/s, {engine.provider_report.summary()}, "
        f"context {stats.context_used}/{stats.context_max}]"
    )


def stats_record(stats) -> dict:
    """A reply's figures as the ``stats`` object of the JSON output."""
    return {
        "prompt_tokens": stats.prompt_tokens,
        "reused_tokens": stats.reused_tokens,
        "prefilled_tokens": stats.prefilled_tokens,
        "generated_tokens": stats.generated_tokens,
        "ttft_ms": round(stats.ttft_ms, 3),
        "decode_tok_s": round(stats.decode_tok_s, 3),
        "provider": stats.provider,
        "context_used": stats.context_used,
        "context_max": stats.context_max,
        "reuse_refused": stats.reuse_refused,
        "speculation": stats.speculation,
        "proposed": stats.proposed,
        "accepted": stats.accepted,
        "target_steps": stats.target_steps,
        "speculation_note": stats.speculation_note,
    }


def _result_json(tokens, text, finish, stats, *, turn: int | None = None) -> str:
    record = {
        "tokens": tokens,
        "text": text,
        "finish_reason": finish,
        "stats": stats_record(stats),
    }
    if turn is not None:
        record = {"turn": turn, **record}
    return json.dumps(record, ensure_ascii=False)


def _clean_text_args(args: argparse.Namespace) -> None:
    """Lone surrogates (undecodable terminal bytes) in text flags become U+FFFD."""
    for name in ("prompt", "system"):
        if isinstance(getattr(args, name, None), str):
            setattr(args, name, clean_text(getattr(args, name)))
    args.stop = [clean_text(s) for s in args.stop or []]


def run_generate(args: argparse.Namespace) -> int:
    _clean_text_args(args)
    engine = _load(args)
    settings = sampling_from_args(args, engine.spec.generation_defaults)
    if args.prompt_tokens is not None:
        try:
            ids = [int(t) for t in args.prompt_tokens.split(",") if t.strip()]
        except ValueError as exc:
            raise HearthError("--prompt-tokens takes comma-separated integers.") from exc
    elif args.chat:
        messages = [Message("system", args.system)] if args.system else []
        ids = engine.encode_chat([*messages, Message("user", args.prompt)])
    else:
        ids = engine.tokenizer.encode(args.prompt, add_special_tokens=True)
    cancel = threading.Event()
    with _interrupt_sets(cancel):
        result = _stream(engine.generate(ids, settings, cancel=cancel), echo=not args.json)
    if args.json:
        print(_result_json(*result))
    else:
        print()
        print(_summary(result[3], engine), file=sys.stderr)
    return 0


def run_chat(args: argparse.Namespace) -> int:
    _clean_text_args(args)
    engine = _load(args)
    if args.script is not None:
        return _run_script(engine, args)
    settings = sampling_from_args(args, engine.spec.generation_defaults)
    system = args.system
    messages: list[Message] = []
    last_stats = None
    editing = line_editing()
    print(
        f"Chatting with {engine.spec.name} on {engine.provider_report.summary()}. "
        "Commands: /system TEXT, /reset, /stats, /quit. Ctrl-C stops a reply."
        + (" Arrows edit the line; Up and Down recall earlier ones." if editing else ""),
        file=sys.stderr,
    )
    while True:
        try:
            line = input("> ")
        except (EOFError, KeyboardInterrupt):
            print(file=sys.stderr)
            return 0
        text = clean_text(line.strip())
        if not text:
            continue
        if text in ("/quit", "/exit"):
            return 0
        if text == "/reset":
            messages.clear()
            print("(conversation cleared)", file=sys.stderr)
            continue
        if text.startswith("/system"):
            system = text[len("/system") :].strip() or None
            print(f"(system prompt {'set' if system else 'cleared'})", file=sys.stderr)
            continue
        if text == "/stats":
            print(_summary(last_stats, engine) if last_stats else "(no reply yet)", file=sys.stderr)
            continue
        messages.append(Message("user", text))
        convo = ([Message("system", system)] if system else []) + messages
        cancel = threading.Event()
        try:
            with _interrupt_sets(cancel):
                _, reply, finish, last_stats = _stream(
                    engine.chat(convo, settings, cancel=cancel, reuse=not args.no_cache), echo=True
                )
        except HearthError as exc:
            messages.pop()
            print(f"\n{exc}", file=sys.stderr)
            continue
        except KeyboardInterrupt:
            print(file=sys.stderr)
            return 130
        messages.append(Message("assistant", reply))
        note = " (stopped)" if finish == "cancelled" else ""
        print(f"\n{_summary(last_stats, engine)}{note}", file=sys.stderr)


def line_editing() -> bool:
    """Arrow keys, Home / End and a history (Up / Down) for ``input()``: the standard
    library's readline where this Python has it (Linux, macOS; not Windows, whose console
    edits lines itself). The history lasts the session: nothing is written to disk."""
    try:
        import readline
    except ImportError:
        return False
    readline.parse_and_bind("set enable-bracketed-paste on")
    return True


def _run_script(engine, args: argparse.Namespace) -> int:
    try:
        script = json.loads(args.script.read_text(encoding="utf-8"))
        turns = [clean_text(turn) for turn in script["turns"]]
        system = script.get("system") or args.system
        system = clean_text(system) if system else None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise HearthError(
            f"Cannot read the chat script {args.script}: {exc}.",
            hint='It must be JSON like {"system": "...", "turns": ["..."], "max_new_tokens": 64}.',
        ) from exc
    settings = sampling_from_args(args, engine.spec.generation_defaults, script)
    messages = [Message("system", system)] if system else []
    for number, turn in enumerate(turns, start=1):
        messages.append(Message("user", turn))
        result = _stream(engine.chat(messages, settings, reuse=not args.no_cache), echo=False)
        messages.append(Message("assistant", result[1]))
        if args.json:
            print(_result_json(*result, turn=number), flush=True)
        else:
            print(f"user: {turn}\nassistant: {result[1]}\n{_summary(result[3], engine)}\n")
    return 0
