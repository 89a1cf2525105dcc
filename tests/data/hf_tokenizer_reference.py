"""The `tokenizers` side of tests/data/hf_tokenizer_test.cpp.

  hf_tokenizer_reference.py DIR
      Trains two byte-level BPE tokenizers with the `tokenizers` package on
      the bundled corpus and saves them as DIR/llama3/tokenizer.json (Llama
      3's split, ignore_merges, <|begin_of_text|> put first by the
      post-processor, <|end_of_text|> and reserved special tokens) and
      DIR/qwen/tokenizer.json (NFC, Qwen2's split, no BOS, <|endoftext|>,
      <|im_start|>, <|im_end|>); then DIR/cases.json: texts (corpus
      documents and adversarial ones) and each tokenizer's ids for them
      (without the post-processor's tokens), vocabulary size and the NFC of
      each text.

Exit 3 where `tokenizers` does not import, so the test skips saying why.
"""

import gzip
import json
import os
import sys
import unicodedata

try:
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers
    from tokenizers import pre_tokenizers, processors, trainers
except Exception as e:  # noqa: BLE001 - any import failure means "skip"
    print(f"cannot import tokenizers: {e}")
    sys.exit(3)

LLAMA3 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def corpus(root):
    path = os.path.join(root, "assets", "kjv.jsonl.gz")
    with gzip.open(path, "rt") as f:
        return [json.loads(line)["text"] for line in f]


def make(split, specials, nfc, ignore_merges, bos, texts):
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    if nfc:
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(split), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1200,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    if bos:
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", special_tokens=[(bos, tok.token_to_id(bos))]
        )
    return tok


def adversarial():
    every_char = "".join(chr(c) for c in range(0, 256))
    return [
        "",
        every_char,
        " " * 40 + "x" + "\n" * 30 + "\t\t \r\n",
        "1234567890" * 5 + " 3.14159 -42 1e9",
        "In the beginning<|end_of_text|>God<|begin_of_text|> created",
        "<|endoftext|><|im_start|>user\nhi<|im_end|>",
        "<|end_of_text|<|begin_of_text",
        "日本語のテキスト、中文文本。한국어 텍스트 العربية עברית ελληνικά русский",
        "emoji 👋🏽 🇫🇷 👨‍👩‍👧 and e\u0301 cafe\u0301 A\u030a \u212b",
        "don't I'LL we've She'S 's",
        "a" * 300 + "b" * 7,
        "mixedCase WORDS, punctuation!!! ... ??? --- (brackets) [x] {y}",
    ]


def main(folder):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    docs = corpus(root)
    train = docs[:400]
    reserved = [f"<|reserved_special_token_{i}|>" for i in range(4)]
    llama = make(LLAMA3, ["<|begin_of_text|>", "<|end_of_text|>"] + reserved,
                 False, True, "<|begin_of_text|>", train)
    qwen = make(QWEN, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                True, False, None, train)
    texts = [d[:3000] for d in docs[400:420]] + adversarial()
    cases = {"texts": texts, "nfc": [unicodedata.normalize("NFC", t) for t in texts]}
    for name, tok in (("llama3", llama), ("qwen", qwen)):
        os.makedirs(os.path.join(folder, name), exist_ok=True)
        tok.save(os.path.join(folder, name, "tokenizer.json"))
        cases[name] = {
            "ids": [tok.encode(t, add_special_tokens=False).ids for t in texts],
            "with_special": tok.encode(texts[0]).ids,
            "vocab_size": tok.get_vocab_size(with_added_tokens=True),
        }
    with open(os.path.join(folder, "cases.json"), "w") as f:
        json.dump(cases, f)
    print(json.dumps({name: cases[name]["vocab_size"] for name in ("llama3", "qwen")}))


if __name__ == "__main__":
    main(sys.argv[1])
