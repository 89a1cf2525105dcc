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

  hf_reference.py deepseek_moe FILE
      transformers' DeepseekV3MoE block on random weights and inputs: its
      weights, input, output and input gradient (deepseek_moe below).
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
    if case == "qwen3_moe":
        # 8 experts of which a token uses 2, renormalised (as
        # Qwen3-30B-A3B's config.json); every block sparse.
        return transformers.Qwen3MoeConfig(
            **SHAPE,
            head_dim=16,
            rope_theta=1e6,
            num_experts=8,
            num_experts_per_tok=2,
            moe_intermediate_size=24,
            norm_topk_prob=True,
            decoder_sparse_step=1,
        )
    raise SystemExit(f"unknown case {case}")


def router_margin(model, tokens):
    """The smallest gap, over every MoE layer and token, between the k-th
    and (k+1)-th routing probability: Baton routes the same tokens only
    where float error cannot flip a choice. inf for a dense model."""
    gaps = []

    def hook(module, inputs, output):
        probs = torch.softmax(output[0].double(), dim=-1)
        top = probs.topk(module.top_k + 1, dim=-1).values
        gaps.append((top[:, -2] - top[:, -1]).min().item())

    handles = [
        m.register_forward_hook(hook)
        for m in model.modules()
        if type(m).__name__.endswith("TopKRouter")
    ]
    forward(model, tokens)
    for h in handles:
        h.remove()
    return min(gaps) if gaps else float("inf")


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
    margin = router_margin(model, tokens)
    # Sharded where bf16, so both folder forms are read.
    model.save_pretrained(
        folder, max_shard_size="20KB" if dtype != "float32" else "1GB"
    )
    save_file(
        {
            "tokens": tokens,
            "logits": logits.contiguous(),
            "loss": loss.reshape(1),
            "router_margin": torch.tensor([margin], dtype=torch.float64),
        },
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


def deepseek_moe(path):
    """transformers' DeepseekV3MoE (sigmoid scores, 4 groups of which a
    token uses 2, a score correction bias, top 3, weights renormalised and
    scaled by 2.5, one shared expert) on random weights and inputs: its
    weights, the input, the output and the input's gradient for a random
    output gradient, and the routing margin, into PATH (safetensors)."""
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3MoE

    config = transformers.DeepseekV3Config(
        hidden_size=32,
        moe_intermediate_size=16,
        n_routed_experts=8,
        num_experts_per_tok=3,
        n_group=4,
        topk_group=2,
        routed_scaling_factor=2.5,
        norm_topk_prob=True,
        n_shared_experts=1,
        hidden_act="silu",
    )
    torch.manual_seed(0)
    moe = DeepseekV3MoE(config).float()
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in moe.parameters():
            p.copy_(0.3 * torch.randn(p.shape, generator=gen))
        moe.gate.e_score_correction_bias.copy_(
            0.05 * torch.randn(8, generator=gen))
    x = torch.randn(2, 12, 32, generator=gen, requires_grad=True)
    g = torch.randn(2, 12, 32, generator=gen)
    out = moe(x)
    (out * g).sum().backward()
    # The margins Baton needs to choose alike: the k-th and (k+1)-th group
    # scores and, within the kept groups, expert choices.
    with torch.no_grad():
        scores = (x.reshape(-1, 32) @ moe.gate.weight.t()).sigmoid()
        choice = scores + moe.gate.e_score_correction_bias
        groups = choice.view(-1, 4, 2).topk(2, -1).values.sum(-1)
        top_groups = groups.topk(3, -1).values
        group_gap = (top_groups[:, 1] - top_groups[:, 2]).min()
        kept = torch.zeros_like(groups).scatter_(1, groups.topk(2, -1).indices, 1)
        masked = choice.masked_fill(
            ~kept.bool().unsqueeze(-1).expand(-1, 4, 2).reshape(-1, 8), float("-inf"))
        top = masked.topk(4, -1).values
        choice_gap = (top[:, 2] - top[:, 3]).min()
    save_file(
        {
            "gate.weight": moe.gate.weight.detach().contiguous(),
            "gate.e_score_correction_bias": moe.gate.e_score_correction_bias.contiguous(),
            "experts.gate_up_proj": moe.experts.gate_up_proj.detach().contiguous(),
            "experts.down_proj": moe.experts.down_proj.detach().contiguous(),
            "shared_experts.gate_proj.weight": moe.shared_experts.gate_proj.weight.detach().contiguous(),
            "shared_experts.up_proj.weight": moe.shared_experts.up_proj.weight.detach().contiguous(),
            "shared_experts.down_proj.weight": moe.shared_experts.down_proj.weight.detach().contiguous(),
            "x": x.detach().contiguous(),
            "g": g,
            "out": out.detach().contiguous(),
            "x_grad": x.grad.contiguous(),
            "margin": torch.tensor([min(group_gap, choice_gap).item()], dtype=torch.float64),
        },
        path,
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
    elif len(sys.argv) == 3 and sys.argv[1] == "deepseek_moe":
        deepseek_moe(sys.argv[2])
    elif len(sys.argv) > 2 and sys.argv[1] == "check":
        for pair in sys.argv[2:]:
            check(*pair.split(":"))
    else:
        raise SystemExit(__doc__)
