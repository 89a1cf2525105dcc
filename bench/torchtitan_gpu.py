#!/usr/bin/env python3
"""torchtitan beside Baton on the GPU machine (run by bench/gpu.sh).

The lent GPU machines carry PyTorch 2.11 and reach no network; torchtitan
0.3.0 (the CPU bench's peer, bench/torchtitan_step.py) needs a newer torch,
so this peer is written for the release that runs on 2.11,
BATON_TORCHTITAN_FLOOR_VERSION in scripts/versions.env, whose model is the
classic `Transformer(TransformerModelArgs)`. Its wheels travel with the
working tree (scripts/gpu_deps.sh).

Two measurements, each eager or under torch.compile (`--compile`: each
TransformerBlock compiled whole, fullgraph, as torchtitan's apply_compile;
the loss too for `train`, as its compile.components model and loss):

- `--what layers`: forward + backward of `--layers` TransformerBlocks of
  the preset's shape with bfloat16 weights, on a random (batch, seq, dim)
  input and output gradient: what gpu_bench's layer stack times on Baton's
  blocks, with the same FLOP count (6 x the blocks' parameters + 12 x
  heads x head_dim x seq per token and layer).
- `--what train`: torchtitan's training step on one device: float32
  weights under torch.autocast(bfloat16) (its maybe_enable_amp on a single
  device), its cross_entropy_loss summed over the valid tokens,
  clip_grad_norm_ to 1, its build_optimizers (AdamW, `fused`) and LR
  schedule, on random tokens; what `baton train` runs for the same preset
  with training.mixed_precision_param=bfloat16.

The presets are Baton's llama3 flavors of the same names
(models/llama3/llama3.cpp): 8B and 1B (Llama 3.2 1B: RoPE scaled by 32,
the output tied to the embedding) and debugmodel (for a rehearsal on the
CPU). Prints and writes one JSON object: the median step over --reps after
--warmup steps, tokens/s, TFLOP/s by the formula above, parameters.

Usage: torchtitan_gpu.py --what layers|train --preset 8B|1B|debugmodel
         [--layers N] [--batch B] [--seq-len T] [--vocab V] [--compile]
         [--device cuda|cpu] [--warmup 3] [--reps 5] [--out FILE]
"""

import argparse
import json
import statistics
import time

import torch

from torchtitan.components.loss import IGNORE_INDEX, cross_entropy_loss
from torchtitan.components.lr_scheduler import build_lr_schedulers
from torchtitan.components.optimizer import build_optimizers
from torchtitan.config.job_config import Compile, LRScheduler, Optimizer
from torchtitan.distributed.parallel_dims import ParallelDims
from torchtitan.distributed.utils import clip_grad_norm_, maybe_enable_amp
from torchtitan.models.llama3.infra.parallelize import apply_compile
from torchtitan.models.llama3.model.args import (
    RoPEScalingArgs, TransformerModelArgs)
from torchtitan.models.llama3.model.model import Transformer, TransformerBlock

# Baton's flavors (models/llama3/llama3.cpp, models/model_args.h defaults:
# rope_theta 500000, norm_eps 1e-5, multiple_of 256).
PRESETS = {
    "8B": dict(dim=4096, n_layers=32, n_heads=32, n_kv_heads=8,
               ffn_dim_multiplier=1.3, multiple_of=1024, scaling=8.0,
               tied=False),
    "1B": dict(dim=2048, n_layers=16, n_heads=32, n_kv_heads=8,
               ffn_dim_multiplier=1.5, multiple_of=256, scaling=32.0,
               tied=True),
    "debugmodel": dict(dim=256, n_layers=6, n_heads=16, n_kv_heads=None,
                       ffn_dim_multiplier=None, multiple_of=256, scaling=None,
                       tied=False),
}


def model_args(preset, layers, vocab, seq_len):
    p = PRESETS[preset]
    scaling = (RoPEScalingArgs(scaling_factor=p["scaling"])
               if p["scaling"] else RoPEScalingArgs(scaling_factor=1.0))
    return TransformerModelArgs(
        dim=p["dim"], n_layers=layers, n_heads=p["n_heads"],
        n_kv_heads=p["n_kv_heads"], vocab_size=vocab,
        multiple_of=p["multiple_of"],
        ffn_dim_multiplier=p["ffn_dim_multiplier"], norm_eps=1e-5,
        rope_theta=500000, rope_scaling_args=scaling,
        max_seq_len=max(seq_len, 8192), attn_type="sdpa",
        attn_mask_type="causal")


def flops_per_token(args, block_params, seq_len):
    """Training FLOPs per token of the blocks, as gpu_bench and Baton's
    metrics count them."""
    head_dim = args.dim // args.n_heads
    return args.n_layers * (6.0 * block_params +
                            12.0 * args.n_heads * head_dim * seq_len)


def build(args, device):
    """torchtitan's model made and initialised on the device."""
    with torch.device(device):
        model = Transformer(args)
    with torch.no_grad():
        model.init_weights(buffer_device=device)
    return model


def timed(step, warmup, reps, device):
    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()
    start = time.perf_counter()
    step()
    sync()
    first = time.perf_counter() - start
    for _ in range(warmup - 1):
        step()
    sync()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - start)
    return first, times


def layer_stack(args, opts, device):
    """Forward + backward of the blocks alone, bfloat16 weights."""
    model = build(args, device)
    freqs_cis = model.freqs_cis[:opts.seq_len]
    blocks = torch.nn.ModuleList(model.layers.values()).to(torch.bfloat16)
    del model
    if opts.compile:
        for i, block in enumerate(blocks):
            blocks[i] = torch.compile(block, fullgraph=True)
    gen = torch.Generator(device="cpu").manual_seed(0)
    shape = (opts.batch, opts.seq_len, args.dim)
    x = torch.randn(shape, generator=gen).to(device, torch.bfloat16)
    x.requires_grad_(True)
    gy = torch.randn(shape, generator=gen).to(device, torch.bfloat16)

    def step():
        for p in blocks.parameters():
            p.grad = None
        h = x
        for block in blocks:
            h = block(h, freqs_cis, attention_masks=None)
        h.backward(gy)

    block_params = sum(p.numel() for p in blocks[0].parameters())
    return step, block_params


def train_step(args, opts, device):
    """torchtitan's single-device training step."""
    model = build(args, device)
    if PRESETS[opts.preset]["tied"]:
        model.output.weight = model.tok_embeddings.weight
    parallel_dims = ParallelDims(
        dp_replicate=1, dp_shard=1, cp=1, tp=1, pp=1, ep=1, etp=1,
        world_size=1)
    loss_fn = cross_entropy_loss
    if opts.compile:
        apply_compile(model, Compile(enable=True))
        loss_fn = torch.compile(cross_entropy_loss)
    optimizers = build_optimizers(
        [model], Optimizer(lr=3e-4, eps=1e-8, implementation="fused"
                           if device.type == "cuda" else "foreach"),
        parallel_dims)
    schedulers = build_lr_schedulers(
        optimizers, LRScheduler(warmup_steps=10), training_steps=1000000)
    amp = maybe_enable_amp(parallel_dims, "bfloat16", device.type)
    gen = torch.Generator(device="cpu").manual_seed(0)
    tokens = torch.randint(
        0, args.vocab_size, (opts.batch, opts.seq_len + 1), generator=gen)
    inputs = tokens[:, :-1].contiguous().to(device)
    labels = tokens[:, 1:].contiguous().to(device)
    losses = []

    def step():
        optimizers.zero_grad()
        valid = (labels != IGNORE_INDEX).sum()
        with amp:
            pred = model(inputs)
            loss = loss_fn(pred, labels) / valid
        del pred
        loss.backward()
        clip_grad_norm_(list(model.parameters()), 1.0, foreach=True)
        optimizers.step()
        schedulers.step()
        losses.append(loss.detach())

    block_params = sum(p.numel() for p in model.layers["0"].parameters())
    return step, block_params, losses


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--what", choices=("layers", "train"), required=True)
    parser.add_argument("--preset", choices=sorted(PRESETS), required=True)
    parser.add_argument("--layers", type=int, default=0,
                        help="blocks (default: the preset's)")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq-len", type=int, default=4096)
    parser.add_argument("--vocab", type=int, default=258,
                        help="vocabulary (default: Baton's byte tokenizer)")
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--out", default="")
    opts = parser.parse_args()
    if opts.warmup < 1 or opts.reps < 1:
        parser.error("--warmup and --reps must be at least 1")

    device = torch.device(opts.device)
    if device.type == "cuda":
        torch.cuda.set_device(0)
    layers = opts.layers or PRESETS[opts.preset]["n_layers"]
    args = model_args(opts.preset, layers, opts.vocab, opts.seq_len)
    losses = []
    if opts.what == "layers":
        step, block_params = layer_stack(args, opts, device)
    else:
        step, block_params, losses = train_step(args, opts, device)
    first, times = timed(step, opts.warmup, opts.reps, device)
    median = statistics.median(times)
    tokens = opts.batch * opts.seq_len
    flops = flops_per_token(args, block_params, opts.seq_len)
    from importlib.metadata import version
    result = {
        "peer": "torchtitan",
        "torchtitan": version("torchtitan"),
        "torch": torch.__version__,
        "what": opts.what,
        "preset": opts.preset,
        "mode": "compiled" if opts.compile else "eager",
        "device": (torch.cuda.get_device_name(0) if device.type == "cuda"
                   else "cpu"),
        "layers": layers,
        "batch": opts.batch,
        "seq_len": opts.seq_len,
        "vocab": opts.vocab,
        "block_params": block_params,
        "first_step_s": first,
        "step_s": times,
        "median_step_s": median,
        "tokens_per_sec": tokens / median,
        "tflops": flops * tokens / median / 1e12,
    }
    if losses:
        result["losses"] = [l.item() for l in losses]
    if device.type == "cuda":
        result["peak_memory_gib"] = torch.cuda.max_memory_allocated() / 2**30
    print(json.dumps({k: v for k, v in result.items()
                      if k not in ("step_s", "losses")}), flush=True)
    if opts.out:
        with open(opts.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
