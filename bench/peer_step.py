#!/usr/bin/env python3
"""The Python peer of train_step_bench: one Llama 3 training step in PyTorch.

Written from Meta's reference Llama (llama/model.py) and torchtitan's train
loop, not from Baton's C++: token embedding, pre-norm blocks with RMSNorm,
rotary embeddings in complex form, grouped-query attention (keys and values
repeated), SwiGLU, the output projection; then cross-entropy, backward,
gradient clipping and AdamW. PyTorch 1.13 has no public
scaled_dot_product_attention, so attention is the reference's
matmul / causal mask / softmax / matmul.

Usage: peer_step.py --flavor debugmodel --threads 1 --out FILE.json
Prints and writes the median step time of --reps timed steps after warm-up.
"""

import argparse
import json
import math
import os
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn

# The flavors' shapes (Llama 3 hyper-parameters; vocabulary of the byte
# tokenizer: 256 bytes, BOS, EOS).
FLAVORS = {
    "debugmodel": dict(dim=256, n_layers=6, n_heads=16, n_kv_heads=16),
    "small": dict(dim=512, n_layers=8, n_heads=8, n_kv_heads=4),
}
VOCAB = 258
MULTIPLE_OF = 256
NORM_EPS = 1e-5
ROPE_THETA = 500000.0


def ffn_hidden(dim):
    hidden = int(2 * (4 * dim) / 3)
    return MULTIPLE_OF * ((hidden + MULTIPLE_OF - 1) // MULTIPLE_OF)


class RMSNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + NORM_EPS) * self.weight


def precompute_freqs_cis(head_dim, seq_len):
    freqs = 1.0 / (ROPE_THETA ** (torch.arange(0, head_dim, 2).float() / head_dim))
    t = torch.arange(seq_len).float()
    return torch.polar(torch.ones(seq_len, head_dim // 2), torch.outer(t, freqs))


def apply_rotary_emb(xq, xk, freqs_cis):
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    freqs_cis = freqs_cis.view(1, xq_.shape[1], 1, xq_.shape[-1])
    xq_out = torch.view_as_real(xq_ * freqs_cis).flatten(3)
    xk_out = torch.view_as_real(xk_ * freqs_cis).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


def repeat_kv(x, n_rep):
    if n_rep == 1:
        return x
    b, t, kv, d = x.shape
    return x[:, :, :, None, :].expand(b, t, kv, n_rep, d).reshape(b, t, kv * n_rep, d)


class Attention(nn.Module):
    def __init__(self, dim, n_heads, n_kv_heads):
        super().__init__()
        self.n_heads, self.n_kv_heads = n_heads, n_kv_heads
        self.head_dim = dim // n_heads
        self.wq = nn.Linear(dim, n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(n_heads * self.head_dim, dim, bias=False)

    def forward(self, x, freqs_cis, mask):
        b, t, _ = x.shape
        xq = self.wq(x).view(b, t, self.n_heads, self.head_dim)
        xk = self.wk(x).view(b, t, self.n_kv_heads, self.head_dim)
        xv = self.wv(x).view(b, t, self.n_kv_heads, self.head_dim)
        xq, xk = apply_rotary_emb(xq, xk, freqs_cis)
        rep = self.n_heads // self.n_kv_heads
        keys = repeat_kv(xk, rep).transpose(1, 2)
        values = repeat_kv(xv, rep).transpose(1, 2)
        xq = xq.transpose(1, 2)
        scores = torch.matmul(xq, keys.transpose(2, 3)) / math.sqrt(self.head_dim)
        scores = F.softmax((scores + mask).float(), dim=-1).type_as(xq)
        out = torch.matmul(scores, values)
        return self.wo(out.transpose(1, 2).contiguous().view(b, t, -1))


class FeedForward(nn.Module):
    def __init__(self, dim):
        super().__init__()
        hidden = ffn_hidden(dim)
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, dim, n_heads, n_kv_heads):
        super().__init__()
        self.attention = Attention(dim, n_heads, n_kv_heads)
        self.feed_forward = FeedForward(dim)
        self.attention_norm = RMSNorm(dim)
        self.ffn_norm = RMSNorm(dim)

    def forward(self, x, freqs_cis, mask):
        h = x + self.attention(self.attention_norm(x), freqs_cis, mask)
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    def __init__(self, dim, n_layers, n_heads, n_kv_heads, seq_len):
        super().__init__()
        self.tok_embeddings = nn.Embedding(VOCAB, dim)
        self.layers = nn.ModuleList(
            Block(dim, n_heads, n_kv_heads) for _ in range(n_layers))
        self.norm = RMSNorm(dim)
        self.output = nn.Linear(dim, VOCAB, bias=False)
        self.register_buffer(
            "freqs_cis", precompute_freqs_cis(dim // n_heads, seq_len), persistent=False)
        self.register_buffer(
            "mask", torch.full((seq_len, seq_len), float("-inf")).triu(1), persistent=False)

    def forward(self, tokens):
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h, self.freqs_cis, self.mask)
        return self.output(self.norm(h))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--flavor", default="debugmodel", choices=sorted(FLAVORS))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--foreach", action="store_true",
                        help="AdamW(foreach=True) instead of the default")
    parser.add_argument("--out", default="")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = Transformer(seq_len=args.seq_len, **FLAVORS[args.flavor])
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=8e-4, betas=(0.9, 0.95), eps=1e-8,
        weight_decay=0.1, foreach=True if args.foreach else None)
    tokens = torch.randint(0, VOCAB, (args.batch, args.seq_len + 1))
    inputs, labels = tokens[:, :-1], tokens[:, 1:]

    def step():
        optimizer.zero_grad(set_to_none=True)
        logits = model(inputs)
        loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        return loss.item()

    for _ in range(args.warmup):
        step()
    times, cpu = [], []
    for _ in range(args.reps):
        start, start_cpu = time.perf_counter(), time.process_time()
        step()
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    result = {
        "flavor": args.flavor,
        "threads": args.threads,
        "batch": args.batch,
        "seq_len": args.seq_len,
        "adamw_foreach": args.foreach,
        "params": sum(p.numel() for p in model.parameters()),
        "step_s": times,
        "median_step_s": statistics.median(times),
        "cpu_s": cpu,
        "torch": torch.__version__,
        "malloc_tunables": os.environ.get("GLIBC_TUNABLES", ""),
    }
    print(json.dumps(result))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
