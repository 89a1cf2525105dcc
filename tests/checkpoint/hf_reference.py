"""transformers' side of tests/checkpoint/hf_families_test.cpp.

  hf_reference.py make DIR CASE[:DTYPE]...
      For each CASE, a tiny random model made by transformers itself, saved
      with save_pretrained into DIR/CASE (DTYPE float32, the default, or
      bfloat16, which is also sharded, with model.safetensors.index.json),
      and DIR/CASE/reference.
      safetensors: `tokens` (4, 9) int64 and transformers' float32 `logits`
      (4, 8, vocab) of tokens[:, :-1] with the `loss` (the mean cross-entropy
      of tokens[:, 1:]).
  hf_reference.py check EXPORT:DIR...
      Loads each EXPORT with AutoModelForCausalLM.from_pretrained and prints
      a JSON line: the difference of its logits on DIR's tokens from DIR's
      reference, its largest entry relative to the largest reference logit
      ("relative") and its norm relative to the reference's ("l2"), and the
      architecture it loaded as.
  hf_reference.py tokenize EXPORT:TEXT_FILE...
      For each pair, AutoTokenizer.from_pretrained(EXPORT)'s ids of the
      UTF-8 text in TEXT_FILE (read as bytes: newlines as they are), without
      and with its special tokens, its BOS and EOS ids and the text it
      decodes the ids to (special tokens skipped, as Baton's decode skips
      them), as a JSON line.

  hf_reference.py generate N DIR...
      Greedy generation with transformers' KV cache from each DIR (a made case):
      N tokens after the first 5 of DIR's reference tokens, no EOS; writes
      DIR/generate.safetensors: `prompt` (5,), `tokens` (N,) and the
      float32 `logits` (N, vocab) each token was chosen from.
  hf_reference.py generate_text EXPORT TEXT N
      AutoTokenizer and AutoModelForCausalLM from EXPORT: greedy generate of
      at most N tokens after TEXT (with the tokenizer's special tokens),
      stopping at the generation config's EOS; prints a JSON line with the
      decoded text (special tokens skipped) and the new ids.

Offline (HF_HUB_OFFLINE=1): nothing is downloaded. Exit 3 where torch or
transformers does not import, so the test skips saying why.
"""

import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
try:
    import torch
    import transformers
    from safetensors.torch import load_file, save_file
except Exception as e:  # noqa: BLE001 - any import failure means "skip"
    print(f"cannot import torch and transformers: {e}")
    sys.exit(3)

VOCAB = 61
SHAPE = dict(
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=VOCAB,
    rms_norm_eps=1e-5,
)


def config_of(case):
    if case == "llama31":
        # Llama 3.1's RoPE scaling over an 8-position "pre-training"
        # context, so that the ramp falls inside the 8 frequency pairs.
        return transformers.LlamaConfig(
            **SHAPE,
            rope_theta=500000.0,
            rope_scaling=dict(
                rope_type="llama3",
                factor=8.0,
                low_freq_factor=1.0,
                high_freq_factor=4.0,
                original_max_position_embeddings=256,
            ),
            max_position_embeddings=512,
        )
    if case == "llama32_tied":
        return transformers.LlamaConfig(
            **SHAPE,
            rope_theta=500000.0,
            rope_scaling=dict(
                rope_type="llama3",
                factor=32.0,
                low_freq_factor=1.0,
                high_freq_factor=4.0,
                original_max_position_embeddings=64,
            ),
            tie_word_embeddings=True,
        )
    if case == "qwen3":
        return transformers.Qwen3Config(**SHAPE, head_dim=16, rope_theta=1e6)
    if case == "qwen3_yarn":
        return transformers.Qwen3Config(
            **SHAPE,
            head_dim=16,
            rope_theta=1e6,
            rope_scaling=dict(
                rope_type="yarn", factor=4.0, original_max_position_embeddings=16
            ),
            max_position_embeddings=64,
        )
    raise SystemExit(f"unknown case {case}")


def sharpen(model, scale):
    """Weights far from the init's near-uniform attention and logits, so a
    wrong rotation, norm or tie shows (milder for bf16, whose rounding the
    larger weights amplify past its tolerance)."""
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.3 * noise)
            else:
                p.copy_(scale * noise)


def forward(model, tokens):
    with torch.no_grad():
        out = model(input_ids=tokens[:, :-1], labels=tokens[:, 1:].clone())
    logits = out.logits.float()
    loss = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.size(-1)), tokens[:, 1:].reshape(-1)
    )
    return logits, loss


def make(case, folder, dtype="float32"):
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config_of(case))
    sharpen(model, 0.4 if dtype == "float32" else 0.15)
    model = model.to(getattr(torch, dtype)).eval()
    tokens = torch.randint(0, VOCAB, (4, 9), generator=torch.Generator().manual_seed(1))
    logits, loss = forward(model, tokens)
    # Sharded where bf16, so both folder forms are read.
    model.save_pretrained(
        folder, max_shard_size="20KB" if dtype != "float32" else "1GB"
    )
    save_file(
        {"tokens": tokens, "logits": logits.contiguous(), "loss": loss.reshape(1)},
        os.path.join(folder, "reference.safetensors"),
    )
    print(json.dumps({"case": case, "loss": loss.item(), "architecture": type(model).__name__}))


def check(export, folder):
    ref = load_file(os.path.join(folder, "reference.safetensors"))
    model = transformers.AutoModelForCausalLM.from_pretrained(export, dtype=torch.float32).eval()
    logits, loss = forward(model, ref["tokens"])
    diff = logits - ref["logits"]
    print(
        json.dumps(
            {
                "relative": (diff.abs().max() / ref["logits"].abs().max()).item(),
                "l2": (diff.norm() / ref["logits"].norm()).item(),
                "loss": loss.item(),
                "architecture": type(model).__name__,
            }
        )
    )


def tokenize(export, text):
    tok = transformers.AutoTokenizer.from_pretrained(export)
    ids = tok(text, add_special_tokens=False)["input_ids"]
    print(
        json.dumps(
            {
                "ids": ids,
                "with_special": tok(text)["input_ids"],
                "bos": tok.bos_token_id,
                "eos": tok.eos_token_id,
                "decoded": tok.decode(ids, skip_special_tokens=True),
                "class": type(tok).__name__,
            }
        )
    )


def generate(folder, n):
    ref = load_file(os.path.join(folder, "reference.safetensors"))
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    prompt = ref["tokens"][0, :5]
    with torch.no_grad():
        out = model.generate(
            prompt.view(1, -1),
            max_new_tokens=n,
            min_new_tokens=n,
            do_sample=False,
            use_cache=True,
            output_logits=True,
            return_dict_in_generate=True,
        )
    save_file(
        {
            "prompt": prompt.contiguous(),
            "tokens": out.sequences[0, 5:].contiguous(),
            "logits": torch.cat([l.float() for l in out.logits]).contiguous(),
        },
        os.path.join(folder, "generate.safetensors"),
    )
    print(json.dumps({"generated": out.sequences[0, 5:].tolist()}))


def generate_text(export, text, n):
    tok = transformers.AutoTokenizer.from_pretrained(export)
    model = transformers.AutoModelForCausalLM.from_pretrained(export, dtype=torch.float32).eval()
    ids = tok(text, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=n, do_sample=False, use_cache=True)
    new = out[0, ids.size(1):]
    print(
        json.dumps(
            {
                "text": tok.decode(out[0], skip_special_tokens=True),
                "ids": new.tolist(),
            }
        )
    )


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "make":
        for spec in sys.argv[3:]:
            case, _, dtype = spec.partition(":")
            make(case, os.path.join(sys.argv[2], spec.replace(":", "_")), dtype or "float32")
    elif len(sys.argv) > 3 and sys.argv[1] == "generate":
        for folder in sys.argv[3:]:
            generate(folder, int(sys.argv[2]))
    elif len(sys.argv) == 5 and sys.argv[1] == "generate_text":
        generate_text(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    elif len(sys.argv) > 2 and sys.argv[1] == "tokenize":
        for pair in sys.argv[2:]:
            export, text_file = pair.split(":")
            with open(text_file, "rb") as f:
                tokenize(export, f.read().decode("utf-8"))
    elif len(sys.argv) > 2 and sys.argv[1] == "check":
        for pair in sys.argv[2:]:
            check(*pair.split(":"))
    else:
        raise SystemExit(__doc__)
