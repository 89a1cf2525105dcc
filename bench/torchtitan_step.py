#!/usr/bin/env python3
"""torchtitan's own Llama 3 training step, the peer of train_step_bench.

Builds torchtitan's Llama3Model (the `torchtitan` package, the version
scripts/versions.env pins) in the shape of Baton's flavor, loads Baton's
initial weights and first batch (written by peer_fixture, from the same
config train_step_bench times), and trains as torchtitan's trainer does on
one device: forward, torchtitan's cross-entropy (a sum over tokens divided
by the valid tokens), backward, torchtitan's clip_grad_norm_, its
OptimizersContainer (AdamW, its default `fused` implementation) and its
warmup-stable-decay LR schedule. `--compile` applies torchtitan's
apply_compile (each TransformerBlock compiled, fullgraph) and compiles the
loss, as its `compile.enable` with components model and loss does.

Where this departs from torchtitan's trainer, and why:
- Attention is torchtitan's ScaledDotProductAttention (causal), not its
  default FlexAttention with the per-document mask: Baton's model attends
  causally over the whole sequence, and FlexAttention has no CPU backward
  in eager mode.
- RoPE is torchtitan's ComplexRoPE without the Llama 3.1 frequency scaling
  its flavors set: Baton's Llama 3 has none.
- bfloat16: torchtitan 0.3.0 applies mixed_precision_param only through
  FSDP; on one device its docs name torch.autocast, which is used here
  (float32 master weights and optimizer state, as Baton's bfloat16).

The first two steps' losses are checked against Baton's (the second
follows the first update): to 1e-5 in float32; in bfloat16 the two round differently (autocast keeps elementwise
operations in float32), so there to 1e-2.

Usage: torchtitan_step.py --fixture DIR --threads N [--compile]
                          [--device cpu|cuda] [--warmup 3] [--reps 5]
                          [--profile] [--out FILE.json]
(--device cuda: for a GPU machine whose PyTorch runs torchtitan 0.3.0; the
lent machines' 2.11 does not, and bench/torchtitan_gpu.py serves them.)
Prints and writes the step times (median of --reps after --warmup steps,
the first two of them the checked ones); exits 1 when a loss differs.
"""

import argparse
import json
import os
import statistics
import sys
import time

import torch
from safetensors.torch import load_file as read_safetensors

from torchtitan.components.loss import IGNORE_INDEX, cross_entropy_loss
from torchtitan.components.optimizer.lr_scheduler import LRSchedulersContainer
from torchtitan.components.optimizer.optimizer import default_adamw
from torchtitan.config.configs import CompileConfig
from torchtitan.distributed.compile import apply_compile
from torchtitan.distributed.parallel_dims import ParallelDims
from torchtitan.distributed.utils import clip_grad_norm_
from torchtitan.models import llama3
from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm
from torchtitan.models.common.attention import ScaledDotProductAttention

TOLERANCE = {"float32": 1e-5, "bfloat16": 1e-2}


def model_config(shape):
    """torchtitan's Llama3Model.Config in Baton's flavor shape, built as
    torchtitan's own flavors are (llama3._build_llama3_layers)."""
    dim, heads, vocab = shape["dim"], shape["n_heads"], shape["vocab_size"]
    layers = llama3._build_llama3_layers(
        fuse_qkv=True,
        n_layers=shape["n_layers"],
        dim=dim,
        n_heads=heads,
        n_kv_heads=shape["n_kv_heads"],
        hidden_dim=shape["ffn_hidden_dim"],
        rope=ComplexRoPE.Config(
            dim=dim // heads, max_seq_len=131072, theta=shape["rope_theta"],
            scaling="none"),
        attn_backend="flex",
    )
    for layer in layers:
        layer.attention.inner_attention = ScaledDotProductAttention.Config()
        layer.attention_norm.eps = shape["norm_eps"]
        layer.ffn_norm.eps = shape["norm_eps"]
    return llama3.Llama3Model.Config(
        dim=dim,
        vocab_size=vocab,
        tok_embeddings=Embedding.Config(num_embeddings=vocab, embedding_dim=dim),
        norm=RMSNorm.Config(normalized_shape=dim, eps=shape["norm_eps"]),
        lm_head=Linear.Config(in_features=dim, out_features=vocab),
        layers=layers,
    )


def torchtitan_state_dict(baton_weights):
    """Baton's FQNs in torchtitan's stock names (its fused wqkv merges wq,
    wk and wv on load)."""
    out = {}
    for name, tensor in baton_weights.items():
        name = name.replace(".attention.w", ".attention.qkv_linear.w", 1)
        name = name.replace(".attention.qkv_linear.wo.", ".attention.wo.")
        if name == "output.weight":
            name = "lm_head.weight"
        out[name] = tensor
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--fixture", required=True)
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--device", default="cpu",
                        help="cpu, or cuda (the fixture's weights and "
                        "batches are moved there)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--profile", action="store_true",
                        help="after the timed steps, one step under "
                        "torch.profiler: its self CPU time by kind of op")
    parser.add_argument("--out", default="")
    args = parser.parse_args()

    fixture = json.load(open(os.path.join(args.fixture, "fixture.json")))
    precision = fixture["precision"]
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    model = model_config(fixture["model"]).build()
    model.init_states()
    model.load_state_dict(
        torchtitan_state_dict(
            read_safetensors(os.path.join(args.fixture, "weights.safetensors"))),
        strict=True)
    model.to(device)
    batch = read_safetensors(os.path.join(args.fixture, "batch.safetensors"))
    batches = [(batch[f"inputs.{i}"].to(device), batch[f"labels.{i}"].to(device))
               for i in (0, 1)]

    opt = fixture["optimizer"]
    optimizers = default_adamw(
        lr=opt["lr"], betas=tuple(opt["betas"]), eps=opt["eps"],
        weight_decay=opt["weight_decay"]).build(model_parts=[model])
    lr_schedulers = LRSchedulersContainer.Config(
        warmup_steps=opt["warmup_steps"]).build(
            optimizers=optimizers, training_steps=1000000)
    loss_fn = cross_entropy_loss
    if args.compile:
        apply_compile(
            model, compile_config=CompileConfig(enable=True),
            parallel_dims=ParallelDims(
                dp_replicate=1, dp_shard=1, cp=1, tp=1, pp=1, ep=1,
                world_size=1))
        loss_fn = torch.compile(cross_entropy_loss)
    autocast = torch.autocast(
        device.type, dtype=torch.bfloat16, enabled=precision == "bfloat16")

    def step(inputs, labels):
        optimizers.zero_grad()
        # As torchtitan's trainer: the loss summed, over the valid tokens.
        valid_tokens = (labels != IGNORE_INDEX).sum()
        with autocast:
            pred = model(inputs)
            loss = loss_fn(pred, labels) / valid_tokens
        del pred
        loss.backward()
        grad_norm = clip_grad_norm_(
            [p for p in model.parameters()], opt["max_norm"], foreach=True)
        lr = optimizers.optimizers[0].param_groups[0]["lr"]
        optimizers.step()
        lr_schedulers.step()
        # .item() waits for the device: a step's time includes its kernels.
        return loss.item(), grad_norm.item(), lr

    # The first two steps, on Baton's first two batches, checked against
    # Baton's (the second follows the first update: AdamW, clipping and the
    # schedule's first rate); then the timed steps, all on the first batch.
    start = time.perf_counter()
    first = step(*batches[0])
    first_s = time.perf_counter() - start
    second = step(*batches[1])
    checks = []
    for name, (loss, grad_norm, lr) in (("first_step", first),
                                        ("second_step", second)):
        baton = fixture[name]
        checks.append({
            "step": name, "loss": loss, "baton_loss": baton["loss"],
            "loss_diff": abs(loss - baton["loss"]),
            "grad_norm": grad_norm, "baton_grad_norm": baton["grad_norm"],
            "lr": lr, "baton_lr": baton["lr"]})
    agrees = all(c["loss_diff"] <= TOLERANCE[precision] for c in checks)
    for _ in range(args.warmup - 2):
        step(*batches[0])
    times, cpu = [], []
    for _ in range(args.reps):
        start, start_cpu = time.perf_counter(), time.process_time()
        step(*batches[0])
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    profile = (profile_step(lambda: step(*batches[0]), device)
               if args.profile else None)
    tokens = batches[0][0].numel()
    median = statistics.median(times)
    result = {
        "peer": "torchtitan",
        "mode": "compiled" if args.compile else "eager",
        "device": args.device,
        "flavor": fixture["flavor"],
        "precision": precision,
        "threads": args.threads,
        "batch": fixture["batch"],
        "seq_len": fixture["seq_len"],
        "params": sum(p.numel() for p in model.parameters()),
        "first_step_s": first_s,
        "step_s": times,
        "median_step_s": median,
        "cpu_s": cpu,
        "tokens_per_sec": tokens / median,
        "tflops": fixture["flops_per_token"] * tokens / median / 1e12,
        "checks": checks,
        "profile": profile,
        "tolerance": TOLERANCE[precision],
        "loss_agrees": agrees,
        "torch": torch.__version__,
        "torchtitan": _torchtitan_version(),
        "malloc_tunables": os.environ.get("GLIBC_TUNABLES", ""),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""),
    }
    print(json.dumps({k: v for k, v in result.items()
                      if k not in ("step_s", "cpu_s")}))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    if not agrees:
        for c in checks:
            print(f"torchtitan_step: {c['step']}: loss {c['loss']:.7f}, "
                  f"Baton's {c['baton_loss']:.7f}: differs by "
                  f"{c['loss_diff']:.2e} (tolerance {TOLERANCE[precision]:g})",
                  file=sys.stderr)
        sys.exit(1)


def op_kind(name):
    """The kind of an ATen op in a step's profile."""
    if name in ("aten::mm", "aten::addmm", "aten::bmm", "aten::matmul",
                "aten::linear") or "mkldnn_matmul" in name:
        return "matmul"
    if "scaled_dot_product" in name or "flash_attention" in name:
        return "attention"
    if "adam" in name.lower():
        return "optimizer"
    return "other"


def profile_step(step, device):
    """One step under torch.profiler: its wall time and the self time of
    its ops by kind (op_kind) and of the 8 largest, in ms (the profiler's
    self CPU time: each op's time on the thread that calls it, which waits
    for its intra-op threads; on a GPU, the ops' kernel time on the
    device)."""
    from torch.profiler import ProfilerActivity, profile
    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        start = time.perf_counter()
        step()
        wall = time.perf_counter() - start
    kinds, ops = {}, []
    for e in prof.key_averages():
        ms = (e.self_device_time_total if device.type == "cuda"
              else e.self_cpu_time_total) / 1e3
        kinds[op_kind(e.key)] = kinds.get(op_kind(e.key), 0.0) + ms
        ops.append((e.key, ms))
    ops.sort(key=lambda x: -x[1])
    return {"wall_ms": wall * 1e3, "kinds_ms": kinds, "top_ms": ops[:8]}


def _torchtitan_version():
    from importlib.metadata import version
    return version("torchtitan")


if __name__ == "__main__":
    main()
