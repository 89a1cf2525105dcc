#!/usr/bin/env python3
"""Trains a byte-level BPE with the `tokenizers` package on a JSONL corpus
and saves it as a Hugging Face tokenizer.json the way Qwen3's is built
(NFC, Qwen2's split, ByteLevel, <|endoftext|> <|im_start|> <|im_end|>, no
BOS). Made assets/kjv_tokenizer.json with the project's venv:

    $(scripts/setup.sh --venv)/bin/python scripts/make_hf_tokenizer.py \
        assets/kjv.jsonl.gz 2000 assets/kjv_tokenizer.json
"""
import gzip
import json
import sys

from tokenizers import Regex, Tokenizer, decoders, models, normalizers
from tokenizers import pre_tokenizers, trainers

QWEN_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def main(corpus, vocab_size, out):
    with gzip.open(corpus, "rt") as f:
        texts = [json.loads(line)["text"] for line in f]
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        texts,
        trainers.BpeTrainer(
            vocab_size=int(vocab_size),
            special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        ),
    )
    tok.save(out)


if __name__ == "__main__":
    main(*sys.argv[1:])
