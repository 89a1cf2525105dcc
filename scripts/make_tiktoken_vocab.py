#!/usr/bin/env python3
"""Trains a small byte-level BPE on a JSONL corpus and writes it in tiktoken
format (one line per token: base64 bytes, space, rank), as Llama 3's
tokenizer.model is written. Made assets/kjv_tiktoken.txt:

    python3 scripts/make_tiktoken_vocab.py assets/kjv.jsonl.gz 1024 \
        assets/kjv_tiktoken.txt

Ranks 0-255 are the single bytes; each merge gets the next rank, so Baton's
TiktokenTokenizer (lowest rank merges first) replays the merges in order.
The split approximates Llama 3's with Python's re (no \\p{L}).
"""
import base64
import collections
import gzip
import json
import re
import sys

SPLIT = re.compile(
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\w]?[^\W\d_]+|\d{1,3}"
    r"| ?[^\s\w]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def main(corpus, vocab_size, out_path):
    words = collections.Counter()
    opener = gzip.open if corpus.endswith(".gz") else open
    with opener(corpus, "rt", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                for piece in SPLIT.findall(json.loads(line)["text"]):
                    words[piece.encode("utf-8")] += 1
    # Each word as a list of token byte strings, with its count.
    splits = {w: [bytes([b]) for b in w] for w in words}
    vocab = [bytes([b]) for b in range(256)]
    while len(vocab) < vocab_size:
        pairs = collections.Counter()
        for w, parts in splits.items():
            for a, b in zip(parts, parts[1:]):
                pairs[a, b] += words[w]
        if not pairs:
            break
        # Most frequent pair; ties broken by the bytes, for reproducibility.
        (a, b), _ = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        merged = a + b
        vocab.append(merged)
        for w, parts in splits.items():
            i = 0
            while i < len(parts) - 1:
                if parts[i] == a and parts[i + 1] == b:
                    parts[i:i + 2] = [merged]
                else:
                    i += 1
    with open(out_path, "w") as out:
        for rank, token in enumerate(vocab):
            out.write(base64.b64encode(token).decode("ascii") + " " +
                      str(rank) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
