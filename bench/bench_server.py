"""Bounded load test of ``hearth serve`` over loopback.

    python bench/bench_server.py MODEL_DIR [--clients 4] [--seconds 10] [--max-tokens 24]
                                 [--queue 8] [--turns 4]
    python -m tests.fixtures.tiny_models gqa /tmp/tiny && python bench/bench_server.py /tmp/tiny

Starts the server in this process on 127.0.0.1 (a free port), then runs ``--clients``
concurrent clients (the official openai client, streaming) for ``--seconds``; each holds a
conversation of up to ``--turns`` turns, resending it whole as real clients do. Both bounds
are flags with small defaults and the run stops by itself (each request also has a timeout).
Reports throughput, queue wait (from the server's records) and TTFT percentiles (p50 / p95),
and checks that every request either completed or got a clean 429 / 503: the exit status is 1
otherwise. Never asserts on time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import openai

from app.engine.engine import Engine
from app.server.app import HearthApi
from app.server.config import ServerConfig
from app.server.executor import ThreadEngineExecutor
from app.server.runner import ServerRunner

QUESTIONS = ["Tell me about lighthouses.", "And the keepers?", "What did they eat?",
             "Summarise that in a sentence.", "Anything else?", "Thanks, one last fact?"]


@dataclass
class Tally:
    lock: threading.Lock = field(default_factory=threading.Lock)
    completed: int = 0
    refused_429: int = 0
    refused_503: int = 0
    failures: list[str] = field(default_factory=list)
    ttft_ms: list[float] = field(default_factory=list)
    latency_ms: list[float] = field(default_factory=list)
    tokens: int = 0
    cached: int = 0
    prompt: int = 0


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def client_loop(url: str, model: str, deadline: float, args, tally: Tally, index: int) -> None:
    client = openai.OpenAI(base_url=url, api_key="bench", max_retries=0,
                           timeout=args.seconds + 30)
    messages: list[dict] = []
    while time.monotonic() < deadline:
        if len(messages) >= 2 * args.turns:
            messages = []
        messages.append({"role": "user",
                         "content": f"[client {index}] {QUESTIONS[len(messages) // 2]}"})
        began = time.perf_counter()
        first = None
        text = []
        try:
            stream = client.chat.completions.create(
                model=model, messages=messages, max_tokens=args.max_tokens, temperature=0,
                stream=True, stream_options={"include_usage": True})
            use = None
            for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    first = first or time.perf_counter()
                    text.append(chunk.choices[0].delta.content)
                if chunk.usage is not None:
                    use = chunk.usage
        except openai.RateLimitError as exc:
            with tally.lock:
                tally.refused_429 += 1
            time.sleep(min(float(exc.response.headers.get("Retry-After", 1)), 0.5))
            messages.pop()
            continue
        except openai.APIStatusError as exc:
            with tally.lock:
                if exc.status_code == 503:
                    tally.refused_503 += 1
                else:
                    tally.failures.append(f"{exc.status_code}: {exc.message}")
            messages.pop()
            continue
        except Exception as exc:
            with tally.lock:
                tally.failures.append(f"{type(exc).__name__}: {exc}")
            return
        end = time.perf_counter()
        messages.append({"role": "assistant", "content": "".join(text)})
        with tally.lock:
            if use is None:
                tally.failures.append("a stream ended without its usage chunk")
                continue
            tally.completed += 1
            tally.latency_ms.append((end - began) * 1000)
            tally.ttft_ms.append(((first or end) - began) * 1000)
            tally.tokens += use.completion_tokens
            tally.prompt += use.prompt_tokens
            tally.cached += use.prompt_tokens_details.cached_tokens


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--max-tokens", type=int, default=24)
    parser.add_argument("--queue", type=int, default=8)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--threads", type=int)
    args = parser.parse_args(argv)
    if args.clients < 1 or not 0 < args.seconds <= 600:
        parser.error("--clients must be ≥ 1 and --seconds within (0, 600]")
    model_dir = args.model_dir

    executor = ThreadEngineExecutor(lambda: Engine.load(model_dir, threads=args.threads))
    served = executor.start()
    api = HearthApi(executor, ServerConfig(port=0, queue=args.queue))
    runner = ServerRunner(api)
    address = runner.start()
    print(f"serving {served.id} at {address.base_url}; {args.clients} clients for "
          f"{args.seconds:g} s, max_tokens {args.max_tokens}, queue {args.queue}")
    tally = Tally()
    started = time.monotonic()
    deadline = started + args.seconds
    threads = [threading.Thread(target=client_loop, daemon=True,
                                args=(address.base_url, served.id, deadline, args, tally, i))
               for i in range(args.clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()) + 30)
    hung = sum(thread.is_alive() for thread in threads)
    elapsed = time.monotonic() - started
    runner.stop()
    executor.close()

    records = [r for r in api.admission.records if r.status == "ok"]
    queued = [r.queued_ms for r in records]
    print(f"requests: {tally.completed} completed, {tally.refused_429} got 429, "
          f"{tally.refused_503} got 503, {len(tally.failures)} failed, {hung} clients hung")
    print(f"throughput: {tally.completed / elapsed:.2f} req/s, {tally.tokens / elapsed:.1f} "
          f"completion tok/s over {elapsed:.1f} s")
    print(f"TTFT ms: p50 {percentile(tally.ttft_ms, 50):.1f}  p95 "
          f"{percentile(tally.ttft_ms, 95):.1f}")
    print(f"queue wait ms: p50 {percentile(queued, 50):.1f}  p95 {percentile(queued, 95):.1f}")
    print(f"latency ms: p50 {percentile(tally.latency_ms, 50):.1f}  p95 "
          f"{percentile(tally.latency_ms, 95):.1f}")
    if tally.prompt:
        print(f"prompt tokens from the KV cache: {tally.cached}/{tally.prompt} "
              f"({100 * tally.cached / tally.prompt:.0f}%)")
    for failure in tally.failures[:5]:
        print(f"failure: {failure}")
    clean = not tally.failures and not hung and tally.completed > 0
    print("every request completed or got a clean 429 / 503" if clean
          else "SOME REQUESTS FAILED")
    return 0 if clean else 1


if __name__ == "__main__":
    from app.cpu import describe_machine

    print(describe_machine(), flush=True)  # every figure below is for this CPU kind
    sys.exit(main())
