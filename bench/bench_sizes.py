"""Decode and TTFT on models of the sizes people run, against llama.cpp and memory bandwidth.

    .venv/bin/python bench/bench_sizes.py [--sizes 0.5b,1.5b] [--prompt 128] [--decode 32]
        [--threads 2] [--qtype q4_0] [--keep DIR] [--vocab N] [--profile]

For each size a random-weight llama model of that shape (Qwen2.5-0.5B / -1.5B's dimensions,
llama layout, tied embeddings) is written as a GGUF with the ``gguf`` package — random
Q4_0 (or Q4_1) blocks, so writing 1.5B takes seconds —, converted by Hearth
(``convert_gguf``, precision native: the same 4-bit weights) and timed in both engines on the
same prompt ids: TTFT for ``--prompt`` tokens, then ``--decode`` greedy steps. Hearth runs as
the app does (``Engine.load``: exact, calibrated at load, which no TTFT counts), then in the
opt-in inexact mode (one-row steps wherever they are faster; the fp32 prompt session
where the kernel measurement says so, its sentence printed). llama.cpp
runs when ``llama_cpp`` is importable, in a child process (bench/llama_peer.py); otherwise,
or when it fails, Hearth's figures are printed with the reason.

The memory-bandwidth bound: the bytes of weights one decode step reads (every matrix; the
tied token table is read whole by the output layer; one embedding row is noise) divided by
the step time, against the machine's copy bandwidth (best of a few numpy copies of a 1 GiB
array, read + write counted). Prints the CPU kind first and the load average beside each
figure: on a shared machine they move. Never asserts.

``--vocab N`` gives every shape that vocabulary instead of Qwen2.5's 151,936 (how much of a
step the tied output layer takes, in both engines). ``--profile`` adds, for Hearth's exact
decode steps (ORT profiling on a second session), the kernel time per step of each group of
4-bit matmuls — the output layer and the layers' matmuls by their inner size K — with the
bytes of weights each reads and the rate it reads them at, and the other operators' share.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from gguf import GGMLQuantizationType as Q
from gguf import GGUFWriter, quants

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.engine.engine import Engine
from app.models.gguf.convert import convert_gguf
from bench.decode_profile import profile_decode_steps
from bench.llama_peer import available, describe, run_llama_cpp


@dataclass(frozen=True)
class Shape:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int = 151936
    context: int = 4096

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


SHAPES = {  # Qwen2.5's dimensions, llama layout (no q/k/v bias)
    "0.5b": Shape(hidden=896, layers=24, heads=14, kv_heads=2, ffn=4864),
    "1.5b": Shape(hidden=1536, layers=28, heads=12, kv_heads=2, ffn=8960),
}
QTYPES = {"q4_0": Q.Q4_0, "q4_1": Q.Q4_1}
WEIGHT_STD = 0.02


def load_average() -> str:
    return f"load {os.getloadavg()[0]:.1f}"


def byte_level_alphabet() -> list[str]:
    """GPT-2's bytes→unicode table, in byte order (a tokenizer both engines load)."""
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
          + list(range(ord("®"), ord("ÿ") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    table = dict(zip(bs, cs, strict=True))
    return [chr(table[b]) for b in range(256)]


def random_blocks(n: int, k: int, qtype: Q, rng: np.random.Generator) -> np.ndarray:
    """Random, well-formed blocks for an [n, k] matrix: uniform 4-bit codes, one fp16 scale
    (and for Q4_1 a minimum) per block so that the weights spread by ``WEIGHT_STD``."""
    block, size = quants.GGML_QUANT_SIZES[qtype]
    count = n * k // block
    blocks = rng.integers(0, 256, size=(count, size), dtype=np.uint8)
    d = np.full((count, 1), WEIGHT_STD / 4.6, np.float16).view(np.uint8)  # codes: std ~4.6
    blocks[:, 0:2] = d
    if qtype == Q.Q4_1:  # m = -7.5 d: codes centred on zero (Q4_0's centre is -d/2)
        blocks[:, 2:4] = np.full((count, 1), -7.5 * WEIGHT_STD / 4.6, np.float16).view(np.uint8)
    return blocks.reshape(n, -1)


def write_gguf(path: Path, shape: Shape, qtype: Q, seed: int = 0) -> int:
    """Write the random model; returns the bytes of weights a decode step reads."""
    rng = np.random.default_rng(seed)
    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", *byte_level_alphabet(), "he"]
    types = [3, 3, 3] + [1] * 257
    tokens += [f"<unused{i}>" for i in range(shape.vocab - len(tokens))]
    types += [5] * (shape.vocab - len(types))
    w = GGUFWriter(str(path), "llama")
    w.add_name(f"random-llama-{path.stem}")
    w.add_block_count(shape.layers)
    w.add_context_length(shape.context)
    w.add_embedding_length(shape.hidden)
    w.add_feed_forward_length(shape.ffn)
    w.add_head_count(shape.heads)
    w.add_head_count_kv(shape.kv_heads)
    w.add_rope_freq_base(1000000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_dimension_count(shape.head_dim)
    w.add_file_type(2 if qtype == Q.Q4_0 else 3)  # MOSTLY_Q4_0 / MOSTLY_Q4_1
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(["h e"])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(False)
    read = 0

    def matrix(name: str, n: int, k: int) -> None:
        nonlocal read
        raw = random_blocks(n, k, qtype, rng)
        read += raw.nbytes
        w.add_tensor(name, raw, raw_dtype=qtype)

    def norm(name: str) -> None:
        nonlocal read
        data = (1.0 + 0.1 * rng.standard_normal(shape.hidden)).astype(np.float32)
        read += data.nbytes
        w.add_tensor(name, data)

    h, kv = shape.hidden, shape.kv_heads * shape.head_dim
    matrix("token_embd.weight", shape.vocab, h)  # tied: the output layer reads it whole
    for i in range(shape.layers):
        p = f"blk.{i}."
        norm(p + "attn_norm.weight")
        norm(p + "ffn_norm.weight")
        matrix(p + "attn_q.weight", h, h)
        matrix(p + "attn_k.weight", kv, h)
        matrix(p + "attn_v.weight", kv, h)
        matrix(p + "attn_output.weight", h, h)
        matrix(p + "ffn_gate.weight", shape.ffn, h)
        matrix(p + "ffn_up.weight", shape.ffn, h)
        matrix(p + "ffn_down.weight", h, shape.ffn)
    norm("output_norm.weight")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return read


def copy_bandwidth(gib: float = 1.0, tries: int = 3) -> float:
    """The machine's memory bandwidth in GB/s: a numpy copy of a large array (bytes read +
    bytes written over the time), best of ``tries``."""
    src = np.ones(int(gib * 2**30) // 8, dtype=np.float64)
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(tries):
        t = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t)
    return 2 * src.nbytes / best / 1e9


def time_hearth(folder: Path, ids: list[int], decode: int, threads: int, exact: bool = True):
    """(load s, TTFT ms, decode tok/s, rows per one-token step, what the prompt plan says)."""
    t = time.perf_counter()
    engine = Engine.load(folder, threads=threads, exact=exact)
    load = time.perf_counter() - t
    decoder = engine.decoder
    decoder.choose_rows(pairs=False)
    cache = decoder.new_cache()
    t0 = time.perf_counter()
    tok = int(np.argmax(decoder.feed(cache, ids)))
    ttft = time.perf_counter() - t0
    t1 = time.perf_counter()
    for _ in range(decode):
        tok = int(np.argmax(decoder.step(cache, tok)))
    return (load, ttft * 1000, decode / (time.perf_counter() - t1), decoder.step_rows,
            engine.prompt_plan.note)


def matmul_groups(model_path: Path) -> dict[str, tuple[str, int]]:
    """MatMulNBits node name -> (its group: ``lm_head`` or ``K=<inner size>``, bytes of
    weights it reads: codes, scales, zero points)."""
    model = onnx.load(str(model_path), load_external_data=False)
    sizes = {t.name: int(np.prod(t.dims)) * onnx.helper.tensor_dtype_to_np_dtype(
        t.data_type).itemsize for t in model.graph.initializer}
    groups = {}
    for node in model.graph.node:
        if node.op_type != "MatMulNBits":
            continue
        k = next(a.i for a in node.attribute if a.name == "K")
        group = "lm_head" if "lm_head" in node.name else f"K={k}"
        groups[node.name] = (group, sum(sizes.get(x, 0) for x in node.input[1:]))
    return groups


def profile_decode(engine: Engine, ids: list[int], decode: int, threads: int):
    """Kernel time of ``decode`` exact steps after ``ids``, on a profiling session:
    (ms per step wall, [(group, ms per step, MB read per step or 0)])."""
    wall, events, runs = profile_decode_steps(engine, ids, decode, threads, "hearth-bench-sizes")
    cut = runs[0][0]
    groups = matmul_groups(engine.spec.model_path)
    totals: dict[str, list[float]] = {}
    for e in events:
        if e.get("cat") != "Node" or not e["name"].endswith("_kernel_time") or e["ts"] < cut:
            continue
        node = e["name"][: -len("_kernel_time")]
        group, nbytes = groups.get(node, (e["args"]["op_name"], 0))
        entry = totals.setdefault(group, [0.0, 0.0])
        entry[0] += e["dur"] / 1000 / decode
        entry[1] += nbytes / decode / 1e6
    rows = sorted(((g, ms, mb) for g, (ms, mb) in totals.items()), key=lambda r: -r[1])
    return wall, rows


def print_profile(wall: float, rows, bandwidth: float) -> None:
    kernels = sum(ms for _, ms, _ in rows)
    print(f"  profiled exact steps: {wall:.1f} ms wall, {kernels:.1f} ms in kernels")
    for group, ms, mb in rows:
        if ms / kernels < 0.01:
            continue
        rate = f", {mb:6.1f} MB at {mb / ms:5.1f} GB/s ({mb / ms / bandwidth:.0%})" if mb else ""
        print(f"    {group:18s} {ms:7.2f} ms/step {ms / kernels:4.0%}{rate}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="0.5b,1.5b")
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--decode", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--qtype", choices=list(QTYPES), default="q4_0")
    parser.add_argument("--keep", default=None, help="write the files here and keep them")
    parser.add_argument("--vocab", type=int, default=None,
                        help="every shape with this vocabulary (default: Qwen2.5's)")
    parser.add_argument("--profile", action="store_true",
                        help="Hearth's decode kernel time per matmul group and op")
    args = parser.parse_args()
    peer = available()
    print(describe() + ("" if peer else ": Hearth's figures only (no llama.cpp column)"))
    bandwidth = copy_bandwidth()
    print(f"memory bandwidth (numpy copy of 1 GiB, read + write): {bandwidth:.1f} GB/s "
          f"({load_average()})", flush=True)
    qtype = QTYPES[args.qtype]
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(args.keep) if args.keep else Path(tmp)
        base.mkdir(parents=True, exist_ok=True)
        for size in args.sizes.split(","):
            shape = SHAPES[size]
            if args.vocab:
                shape = dataclasses.replace(shape, vocab=args.vocab)
            gguf = base / f"{size}-{args.qtype}.gguf"
            t = time.perf_counter()
            read = write_gguf(gguf, shape, qtype)
            written = time.perf_counter() - t
            folder = base / f"{size}-{args.qtype}-hearth"
            if folder.exists():  # --keep: a conversion of this very file (same seed)
                shutil.rmtree(folder)
            t = time.perf_counter()
            convert_gguf(gguf, folder)
            converted = time.perf_counter() - t
            onnx_bytes = (folder / "model.onnx.data").stat().st_size
            print(f"\n{size} ({shape.layers} layers, hidden {shape.hidden}, ffn {shape.ffn}, "
                  f"vocab {shape.vocab}), {args.qtype}: GGUF {gguf.stat().st_size / 2**20:.0f} "
                  f"MiB written in {written:.1f} s; Hearth conversion {converted:.1f} s, "
                  f"model.onnx.data {onnx_bytes / 2**20:.0f} MiB ({load_average()})", flush=True)
            ids = [int(x) for x in np.random.default_rng(1).integers(3, 259, args.prompt)]
            for label, exact in (("hearth", True), ("inexact", False)):
                load, ttft, rate, rows, prompts = time_hearth(folder, ids, args.decode,
                                                              args.threads, exact)
                if exact:
                    ours = (ttft, rate)
                bound = onnx_bytes * rate / 1e9
                print(f"  {label:9s} load {load:5.1f} s  TTFT {ttft:8.0f} ms  decode {rate:6.2f} "
                      f"tok/s (steps as {rows} row(s))  weights read {bound:5.1f} GB/s = "
                      f"{bound / bandwidth:.0%} of the bound ({bandwidth * 1e9 / onnx_bytes:.1f} "
                      f"tok/s)  ({load_average()})", flush=True)
                if not exact:  # the kernel measurement's choice (app/engine/kernel_timing.py)
                    print(f"            {prompts}", flush=True)
            if args.profile:
                engine = Engine.load(folder, threads=args.threads)
                print_profile(*profile_decode(engine, ids, args.decode, args.threads),
                              bandwidth)
                del engine
            got = run_llama_cpp(gguf, ids, args.decode, args.threads) if peer else None
            if isinstance(got, str):
                print(f"  llama.cpp  no figures: {got}")
            elif got is not None:
                p_ttft, p_rate = got
                print(f"  llama.cpp                TTFT {p_ttft:8.0f} ms  decode {p_rate:6.2f} "
                      f"tok/s                     weights read {read * p_rate / 1e9:5.1f} GB/s "
                      f"= {read * p_rate / 1e9 / bandwidth:.0%} of the bound "
                      f"({bandwidth * 1e9 / read:.1f} tok/s)  ({load_average()})", flush=True)
                print(f"  ratio (exact hearth / llama.cpp): TTFT {ours[0] / p_ttft:.2f}x, decode "
                      f"{ours[1] / p_rate:.2f}x")
    return 0


if __name__ == "__main__":
    from app.cpu import describe_machine

    print(describe_machine(), flush=True)  # every figure below is for this CPU kind
    raise SystemExit(main())
