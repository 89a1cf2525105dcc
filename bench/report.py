#!/usr/bin/env python3
"""Regenerates docs/PERFORMANCE.md and its plots from bench/results/*.json.

Everything in the generated page comes from the JSON files `make bench`
wrote in the same run (scripts/bench.sh), except bench/notes.md, which is
appended as it is: earlier measurements made by hand, labelled as such.
Standard library only; the plots are SVG written directly.
Usage: report.py RESULTS_DIR DOCS_DIR
       report.py --gpu GPU_JSON DOCS_DIR   (bench/gpu.sh's figures from a GPU
       machine into the existing page: its GPU section and targets row)
       report.py --plan PLAN_RUNS_JSON DOCS_DIR   (one bench/plan_runs.py run
       into the existing page: its section, targets rows and limits bullet)
       report.py --plan-cluster PLAN_RUNS_JSON DOCS_DIR   (one
       `bench/plan_runs.py --flavors none` run: the 405B plan's subsection
       and its targets rows)
       report.py --plan-path PLAN_PATH_JSON DOCS_DIR   (one bench/plan_path.py
       run: its section and targets row)
       report.py --scaling SCALING_RUNS_JSON DOCS_DIR   (one
       bench/scaling_runs.py run: its section and targets rows)
       report.py --experts EXPERT_PARALLEL_JSON DOCS_DIR   (one
       expert_parallel_bench run: its section and targets rows)
       report.py --context CONTEXT_PARALLEL_JSON CP_RUNS_JSON DOCS_DIR   (one
       context_parallel_bench and bench/context_parallel_runs.py run: their
       section and targets rows)
"""

import json
import os
import re
import statistics
import sys

FORMULA_NOTE = ("formula: (p - 1) / (v m + p - 1) for GPipe, 1F1B and "
                "Interleaved1F1B (p ranks, v stages per rank, m microbatches, "
                "F = B); the zero-bubble schedules have none in closed form")


def load(results, name):
    path = os.path.join(results, name)
    return json.load(open(path)) if os.path.exists(path) else None


def gbench_medians(doc):
    """{run_name: entry} of a Google Benchmark file: the median aggregate
    when there were repetitions, else the single run."""
    out = {}
    if not doc:
        return out
    for b in doc["benchmarks"]:
        name = b.get("run_name", b["name"])
        if b.get("run_type") == "aggregate":
            if b.get("aggregate_name") == "median":
                out[name] = b
        else:
            out.setdefault(name, b)
    return out


def gbench_rounds(results, prefix):
    """{run_name: entry} over every `<prefix>*.json` (one per round): each
    number field is the median over the rounds; `rounds` counts them."""
    runs = {}
    for f in sorted(os.listdir(results)):
        if f.startswith(prefix) and f.endswith(".json"):
            for name, e in gbench_medians(load(results, f)).items():
                runs.setdefault(name, []).append(e)
    out = {}
    for name, entries in runs.items():
        merged = dict(entries[0])
        for key, value in entries[0].items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                merged[key] = statistics.median(e[key] for e in entries)
        merged["rounds"] = len(entries)
        out[name] = merged
    return out


def ms(entry):
    scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[entry["time_unit"]]
    return entry["real_time"] * scale


def fmt(x, digits=0, unit=""):
    if x is None:
        return "n/a"
    return f"{x:,.{digits}f}{unit}"


# --- SVG ---------------------------------------------------------------------

COLORS = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948"]


def bar_chart(path, title, categories, series, unit):
    """Grouped vertical bars: series = [(label, [value per category])]."""
    width, height, left, bottom, top = 760, 360, 70, 70, 40
    plot_w, plot_h = width - left - 20, height - top - bottom
    vmax = max([v for _, vals in series for v in vals if v is not None] + [1e-9])
    group_w = plot_w / max(1, len(categories))
    bar_w = group_w * 0.8 / max(1, len(series))
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" '
             f'height="{height}" font-family="sans-serif" font-size="11">',
             f'<rect width="{width}" height="{height}" fill="white"/>',
             f'<text x="{width / 2}" y="20" text-anchor="middle" '
             f'font-size="14">{title}</text>']
    for i in range(5):
        v = vmax * i / 4
        y = top + plot_h - plot_h * i / 4
        parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" '
                     f'y2="{y:.1f}" stroke="#ddd"/>')
        parts.append(f'<text x="{left - 5}" y="{y + 4:.1f}" '
                     f'text-anchor="end">{v:.3g}</text>')
    parts.append(f'<text x="15" y="{top + plot_h / 2}" text-anchor="middle" '
                 f'transform="rotate(-90 15 {top + plot_h / 2})">{unit}</text>')
    for c, cat in enumerate(categories):
        x0 = left + c * group_w + group_w * 0.1
        for s, (_, vals) in enumerate(series):
            v = vals[c]
            if v is None:
                continue
            h = plot_h * v / vmax
            parts.append(
                f'<rect x="{x0 + s * bar_w:.1f}" y="{top + plot_h - h:.1f}" '
                f'width="{bar_w * 0.95:.1f}" height="{h:.1f}" '
                f'fill="{COLORS[s % len(COLORS)]}"><title>{v:.4g}</title></rect>')
        parts.append(f'<text x="{left + (c + 0.5) * group_w:.1f}" '
                     f'y="{top + plot_h + 15}" text-anchor="middle">{cat}</text>')
    for s, (label, _) in enumerate(series):
        x = left + s * 230
        parts.append(f'<rect x="{x}" y="{height - 25}" width="12" height="12" '
                     f'fill="{COLORS[s % len(COLORS)]}"/>')
        parts.append(f'<text x="{x + 16}" y="{height - 15}">{label}</text>')
    parts.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(parts))


# --- sections ------------------------------------------------------------------

def conditions_line(results):
    """What else ran on the machine during the run (scripts/bench.sh samples
    the load and the compiler processes every 10 s)."""
    path = os.path.join(results, "conditions.txt")
    if not os.path.exists(path):
        return []
    rows = [l.split() for l in open(path) if len(l.split()) == 3]
    if not rows:
        return []
    import datetime
    fmt_t = lambda t: datetime.datetime.utcfromtimestamp(int(t)).strftime("%H:%M")
    busy = sum(1 for r in rows if int(r[2]) > 0)
    return [f"- Other work on the machine, sampled every 10 s from {fmt_t(rows[0][0])} "
            f"to {fmt_t(rows[-1][0])} UTC: compilers running in {busy} of {len(rows)} "
            f"samples; 1-minute load average median "
            f"{statistics.median(float(r[1]) for r in rows):.1f}, max "
            f"{max(float(r[1]) for r in rows):.1f} (2 cores). Figures taken while "
            "other work ran are slower than the machine alone; Baton and "
            "torchtitan alternate config by config so both meet it."]


def machine_section(machine, results):
    m = machine or {}
    return [
        "## Machine",
        "",
        f"- CPU: {m.get('cpu', 'n/a')} (family {m.get('cpu_family', 'n/a')}), "
        f"{m.get('cores', 'n/a')} cores, "
        f"{m.get('memory_gib', 'n/a')} GiB; {m.get('os', 'n/a')}; SIMD: "
        f"{', '.join(m.get('simd', [])) or 'n/a'}, {m.get('cpu_mhz', 0):.0f} MHz",
        f"- libtorch: the PyTorch {m.get('torch', 'n/a')} wheel "
        "(`scripts/versions.env`), Baton built on it and torchtitan "
        f"{m.get('torchtitan', 'n/a')} running on it; BLAS: {m.get('blas', 'n/a')}; "
        f"ATen's CPU kernels: {m.get('aten_cpu_capability', 'n/a')}; oneDNN "
        f"{'available' if m.get('mkldnn') else 'absent'} (bfloat16 products)",
        f"- Threads: {m.get('threads_note', 'n/a')}",
        f"- Date: {m.get('date', 'n/a')}; GPU: none",
    ] + conditions_line(results) + [""]


def peak_tflops(meds):
    """{(threads, bf16): TFLOP/s} of BM_MatmulPeak, median of the rounds."""
    peak = {}
    for name, e in meds.items():
        if name.startswith("BM_MatmulPeak"):
            threads = int(name.split("threads:")[1].split("/")[0])
            bf16 = name.split("bf16:")[1].split("/")[0] == "1"
            peak[(threads, bf16)] = e["flops"] / 1e12
    return peak


def profile_lines(profiles):
    """torchtitan's eager step by kind of op, one row per config profiled."""
    lines = ["Where torchtitan's eager step goes (`--profile`: one step after the "
             "timed ones under `torch.profiler`, self time of its ops by kind; "
             "round 1). Baton calls the same MKL / oneDNN products for the same "
             "shapes, so the matmul column bounds what any step on this libtorch "
             "can take:", "",
             "| flavor | precision | ATen threads | step (profiled) | matmul | "
             "attention | AdamW | everything else | largest ops |",
             "|---|---|---|---|---|---|---|---|---|"]
    for (flavor, precision, threads), prof in sorted(profiles.items()):
        k = prof["kinds_ms"]
        wall = prof["wall_ms"]
        cell = lambda name: (f"{k.get(name, 0):.0f} ms "  # noqa: E731
                             f"({100 * k.get(name, 0) / wall:.0f} %)")
        top = ", ".join(f"`{n}` {t:.0f}" for n, t in prof["top_ms"][:4])
        lines.append(f"| {flavor} | {precision} | {threads} | {wall:.0f} ms | "
                     f"{cell('matmul')} | {cell('attention')} | {cell('optimizer')} | "
                     f"{cell('other')} | {top} |")
    return lines + [""]


def step_section(meds, peers, docs, targets, results):
    """Baton's step against torchtitan's (eager and compiled): `peers` maps
    (flavor, precision, threads, mode) to the torchtitan runs, one per
    round."""
    lines = ["## One training step, single process: Baton against torchtitan", ""]
    tt = next((r for runs in peers.values() for r in runs), {})
    lines += [
        "`train_step_bench` (Baton) and `bench/torchtitan_step.py` (torchtitan "
        f"{tt.get('torchtitan', 'n/a')}'s own `Llama3Model`, "
        "`OptimizersContainer` (AdamW, its default `fused` implementation), "
        "learning-rate schedule, `clip_grad_norm_` and cross-entropy, on torch "
        f"{tt.get('torch', 'n/a')}, the libtorch Baton is built on) run the same "
        "step on the same shapes: forward, cross-entropy, backward, gradient "
        "clipping to norm 1, AdamW; 8 sequences of 256 tokens, vocabulary 258. "
        "torchtitan starts from Baton's initial weights and trains on Baton's "
        "batches (`peer_fixture` writes both), and its first two losses are "
        "checked against Baton's (to 1e-5 in float32, 1e-2 in bfloat16; the run "
        "stops otherwise). torchtitan runs eager and under `torch.compile` "
        "(its `apply_compile`: each TransformerBlock compiled whole, and the "
        "loss), with its SDPA attention (causal) in place of FlexAttention "
        "(no CPU backward) and no Llama 3.1 RoPE scaling (Baton's Llama 3 has "
        "none). bfloat16 is float32 master weights and optimizer state with "
        "bfloat16 compute on both sides (Baton's `mixed_precision_param`; "
        "torchtitan on one device under `torch.autocast`, as its docs name). "
        "Both warm up 3 steps; they run config by config, Baton then torchtitan "
        "eager then compiled, in 3 rounds; a figure is the median over the "
        "rounds of Baton's mean step (4 timed steps for debugmodel, 2 for small) "
        "and of torchtitan's median of 3 timed steps; a ratio is the median "
        "over the rounds of the ratio within each round (the machine's speed "
        "drifts between rounds: see the matmul peak per round below). Same "
        "ATen thread count; "
        "both keep freed memory in the process and run OpenMP with "
        "`OMP_WAIT_POLICY=PASSIVE` (Baton's binaries set both, "
        "`common/allocator.h`, `common/threads.h`; torchtitan gets them from "
        "`GLIBC_TUNABLES` and the environment). MFU is against the matmul peak "
        "of the step's precision measured in the same run at the same ATen "
        "thread count.",
        "",
        "| flavor | precision | ATen threads | Baton step | tokens/s | MFU | "
        "torchtitan eager | Baton / eager | per round | torchtitan compiled | "
        "Baton / compiled | per round | first compiled step | "
        "first losses, largest difference |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    peak = peak_tflops(meds)
    chart_cats, chart = [], {"Baton": [], "torchtitan eager": [],
                             "torchtitan compiled": []}
    for flavor in ["debugmodel", "small"]:
        for precision in ["float32", "bfloat16"]:
            bf16 = precision == "bfloat16"
            for threads in [1, 2]:
                prefix = (f"BM_TrainStep/{flavor}/seq_len:256/threads:{threads}/"
                          f"bf16:{int(bf16)}/")
                e = next((v for k, v in meds.items() if k.startswith(prefix)), None)
                if not e:
                    continue
                step = ms(e)

                def peer(mode):
                    runs = peers.get((flavor, precision, threads, mode))
                    return runs or []

                def median_ms(mode):
                    runs = peer(mode)
                    if not runs:
                        return None
                    return statistics.median(p["median_step_s"] for p in runs) * 1e3

                eager, compiled = median_ms("eager"), median_ms("compiled")
                config = f"{flavor}_{precision}_t{threads}"

                def rounds(mode):
                    # Baton's step over torchtitan's within each round, where
                    # both met the same machine (its speed drifts between
                    # rounds: see the matmul peak per round).
                    out = []
                    for r in range(1, 10):
                        cpp = load(results, f"train_step_{config}_r{r}.json")
                        ttr = load(results, f"torchtitan_{config}_{mode}_r{r}.json")
                        runs = gbench_medians(cpp)
                        if runs and ttr:
                            out.append(ms(next(iter(runs.values()))) /
                                       (ttr["median_step_s"] * 1e3))
                    return out

                per_round, per_round_c = rounds("eager"), rounds("compiled")
                r_eager = (statistics.median(per_round) if per_round
                           else step / eager if eager else None)
                r_compiled = (statistics.median(per_round_c) if per_round_c
                              else step / compiled if compiled else None)
                p = peak.get((threads, bf16))
                mfu = 100 * e["tflops"] / p if p else None
                diffs = [c["loss_diff"] for mode in ("eager", "compiled")
                         for run in peer(mode) for c in run["checks"]]
                agree = all(run["loss_agrees"] for mode in ("eager", "compiled")
                            for run in peer(mode))
                first = [run["first_step_s"] for run in peer("compiled")]
                lines.append(
                    f"| {flavor} | {precision} | {threads} | {fmt(step, unit=' ms')} | "
                    f"{fmt(e['tokens_per_sec'])} | {fmt(mfu, unit=' %')} | "
                    f"{fmt(eager, unit=' ms')} | {fmt(r_eager, 2)} | "
                    f"{' / '.join(f'{x:.2f}' for x in per_round) or 'n/a'} | "
                    f"{fmt(compiled, unit=' ms')} | {fmt(r_compiled, 2)} | "
                    f"{' / '.join(f'{x:.2f}' for x in per_round_c) or 'n/a'} | "
                    f"{fmt(statistics.median(first) if first else None, 1, ' s')} | "
                    + (f"{max(diffs):.1e}" if diffs else "n/a")
                    + ("" if agree else " (differ)") + " |")
                key = (flavor, precision, threads)
                targets.setdefault("eager", []).append(key + (r_eager,))
                targets.setdefault("compiled", []).append(key + (r_compiled,))
                targets.setdefault("mfu_all", []).append(key + (mfu,))
                if diffs:
                    targets.setdefault("losses", []).append(key + (max(diffs), agree))
                chart_cats.append(f"{flavor[:5]} {'bf16' if bf16 else 'f32'} {threads}t")
                chart["Baton"].append(step)
                chart["torchtitan eager"].append(eager)
                chart["torchtitan compiled"].append(compiled)
    lines += ["", "Matmul peak (1024 x 1024, `BM_MatmulPeak`, median of the rounds): " +
              ", ".join(f"{peak[k] * 1e3:,.0f} GFLOP/s in "
                        f"{'bfloat16' if k[1] else 'float32'} with {k[0]} ATen thread(s)"
                        for k in sorted(peak)) + "."]
    per_round_peaks = []
    for r in range(1, 10):
        k = peak_tflops(gbench_medians(load(results, f"kernels_r{r}.json")))
        if (2, False) in k:
            per_round_peaks.append(f"{k[(2, False)] * 1e3:.0f}")
    if len(per_round_peaks) > 1:
        lines[-1] += (" The float32 peak with 2 threads, round by round: "
                      + " / ".join(per_round_peaks) + " GFLOP/s.")
    machine = targets.get("machine")
    if machine and (2, False) in peak:
        limit, per_cycle, why = fma_limit_gflops(machine)
        lines[-1] += (
            f" The float32 FMA limit of the {machine['cores']} cores: "
            f"{machine['cores']} x {machine.get('cpu_mhz', 0):.0f} MHz x {per_cycle} "
            f"FLOP per cycle ({why}) = {limit:.0f} GFLOP/s, with the clock "
            "/proc/cpuinfo reports (under a hypervisor the nominal one), so the "
            f"2-thread peak is {100 * peak[(2, False)] * 1e3 / limit:.0f} % of it.")
        targets["fma_fraction"] = peak[(2, False)] * 1e3 / limit
    lines.append("")
    profiles = {key[:3]: r["profile"] for key, runs in peers.items()
                for r in runs if r.get("profile")}
    if profiles:
        lines += profile_lines(profiles)
        targets["profiles"] = profiles
    attention = [(n, e) for n, e in meds.items()
                 if n.startswith(("BM_CausalAttention", "BM_AttentionKernel"))]
    if attention:
        lines += ["Where the step's attention time goes (forward + backward of one layer's "
                  "causal attention, 8 x 256 tokens): `BM_AttentionKernel`, what the model runs "
                  "on the CPU in float32 (`models/common/attention_kernel.h`, the widest "
                  "instruction set the CPU runs, the heads split among ATen's threads); "
                  "`BM_CausalAttention`, the blocked path in ATen's batched products by block "
                  "size (block = T: one block) and, as block 0, libtorch's "
                  "`at::scaled_dot_product_attention` (what torchtitan's SDPA runs: "
                  "its CPU flash kernel in float32):",
                  "", "| heads x head_dim | path | ATen threads | time |", "|---|---|---|---|"]
        for n, e in attention:
            h = n.split("heads:")[1].split("/")[0]
            d = n.split("head_dim:")[1].split("/")[0]
            if n.startswith("BM_AttentionKernel"):
                b = "kernel"
                path = "kernel" + (f" ({e['label']})" if e.get("label") else "")
            else:
                b = n.split("block:")[1].split("/")[0]
                path = "libtorch" if b == "0" else f"blocked {b}"
            th = n.split("threads:")[1].split("/")[0] if "threads:" in n else "1"
            lines.append(f"| {h} x {d} | {path} | {th} | {ms(e):.1f} ms |")
            targets.setdefault("attention", {})[(h, d, b, th)] = ms(e)
        lines.append("")
    swiglu = [(n, e) for n, e in meds.items() if n.startswith("BM_Swiglu")]
    if swiglu:
        lines += ["SwiGLU's elementwise part, silu(w1 x) * w3 x, forward + backward, 8 x 256 "
                  "tokens (`BM_Swiglu`): fused, what the model runs on the CPU in float32 "
                  "(`models/common/swiglu_kernel.h`), against ATen's silu and product:",
                  "", "| hidden | ATen threads | ATen | fused | ratio |", "|---|---|---|---|---|"]
        cells = {}
        for n, e in swiglu:
            h = n.split("hidden:")[1].split("/")[0]
            th = n.split("threads:")[1].split("/")[0]
            cells.setdefault((int(h), int(th)), {})[n.split("fused:")[1].split("/")[0]] = e
        for (h, th), c in sorted(cells.items()):
            if "0" in c and "1" in c:
                label = f" ({c['1']['label']})" if c["1"].get("label") else ""
                lines.append(f"| {h} | {th} | {ms(c['0']):.2f} ms | {ms(c['1']):.2f} ms{label} | "
                             f"{ms(c['0']) / ms(c['1']):.1f}x |")
        lines.append("")
    bar_chart(os.path.join(docs, "perf_step_time.svg"),
              "Step time: Baton vs torchtitan (same settings)",
              chart_cats, list(chart.items()), "ms")
    lines += ["![step time](perf_step_time.svg)", ""]
    return lines


def fma_limit_gflops(machine):
    """cores x clock x FLOP per cycle of two FMA units of the widest vector
    the CPU has (AVX-512: 2 x 16 x 2; AVX2: 2 x 8 x 2): the FMA limit, its
    FLOP per cycle and where that comes from. AMD's Zen 4 (family 25) runs
    AVX-512 but issues each 512-bit FMA as two halves on its two 256-bit
    pipes, so it counts as AVX2's 32."""
    simd = machine.get("simd", [])
    zen4 = machine.get("cpu", "").startswith("AMD") and machine.get("cpu_family") == "25"
    if "avx512f" in simd and not zen4:
        per_cycle, why = 64, "two FMA units of 512 bits"
    elif "avx2" in simd:
        per_cycle, why = 32, ("two FMA pipes of 256 bits: Zen 4 splits each 512-bit FMA in two"
                              if zen4 else "two FMA units of 256 bits")
    else:
        per_cycle, why = 8, "SSE: two units of 128 bits"
    return machine["cores"] * machine.get("cpu_mhz", 0) / 1e3 * per_cycle, per_cycle, why


def pipeline_section(pipe, runs, docs, targets):
    lines = ["## Pipeline parallel: measured bubble against the simulator", ""]
    lines += [
        "`pipeline_bench`: the debug model at pp 2, ranks as threads over "
        "Gloo, one ATen thread per rank (MKL's follow), 8 x 256 tokens "
        "per step in m microbatches; one optimizer step per iteration, "
        "median of 4 timed steps after a warm-up. Measured bubble: each "
        "rank's idle share of the pipeline's span (from the first rank "
        "starting its `PipelineExecutor` run to the last one finishing, as "
        "the simulator's makespan is), its compute timed by the executor "
        "less the time an action waited for a receive. Two predictions by "
        "`simulate()` of the same lowered schedule with costs measured in "
        "those steps: *replayed*, each action's own cost (the median over "
        "the steps; for a SEND or RECV the time posting it took), and "
        "*mean costs*, each stage's mean F, B, I and W cost and mean "
        "posting time per kind of SEND and RECV. P2P latency 0 in both. "
        "comm: the share of the span in SEND and RECV actions; receive "
        "wait: in compute actions waiting for their input. "
        + FORMULA_NOTE + ".",
        "",
        "| schedule | m | step | tokens/s | measured bubble r0 / r1 | replayed r0 / r1 | gap | mean costs r0 / r1 | gap | formula | comm r0 / r1 | receive wait r0 / r1 |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    meds = gbench_medians(pipe)
    cats, measured, predicted, replayed = [], [], [], []
    worst = worst_mean = None
    for name, e in meds.items():
        if not name.startswith("BM_PipelineStep"):
            continue
        label = name.split("/")[1]
        m = int(name.split("m:")[1].split("/")[0])
        v = int(e.get("stages_per_rank", 1))

        def pair(key):
            # Results from before a counter existed lack it: shown as n/a.
            return [e.get(f"{key}_r0"), e.get(f"{key}_r1")]

        def worst_gap(a, b):
            if None in a or None in b:
                return None
            return max(abs(x - y) for x, y in zip(a, b))

        def pct(values):
            return " / ".join(fmt(x, 1) for x in values) + " %"
        meas = pair("bubble_pct")
        pred = pair("predicted_bubble_pct")
        rep = pair("replayed_bubble_pct")
        gap = worst_gap(meas, rep)
        gap_mean = worst_gap(meas, pred)
        if gap is not None:
            worst = gap if worst is None else max(worst, gap)
        if gap_mean is not None:
            worst_mean = gap_mean if worst_mean is None else max(worst_mean, gap_mean)
        formula = (f"{100 * (2 - 1) / (v * m + 2 - 1):.0f} %"
                   if label in ("GPipe", "OneFOneB", "Interleaved1F1B") else "—")
        comm, wait = pair("comm_pct"), pair("recv_wait_pct")
        lines.append(
            f"| {label} | {m} | {fmt(ms(e))} ms | {fmt(e['tokens_per_sec'])} | "
            f"{pct(meas)} | {pct(rep)} | {fmt(gap, 1, ' pp')} | {pct(pred)} | "
            f"{fmt(gap_mean, 1, ' pp')} | {formula} | {pct(comm)} | {pct(wait)} |")
        cats.append(f"{label[:11]} m{m}")

        def mean(values):
            return None if None in values else statistics.mean(values)
        measured.append(mean(meas))
        replayed.append(mean(rep))
        predicted.append(mean(pred))
    targets["bubble_gap_mean"] = worst_mean
    targets["bubble_gap"] = worst
    bar_chart(os.path.join(docs, "perf_bubble.svg"),
              "Pipeline bubble, pp 2: measured vs simulated (mean of ranks)",
              cats, [("measured", measured), ("simulator, each action's cost", replayed),
                     ("simulator, mean costs", predicted)],
              "% of step")
    lines += ["", "![bubble](perf_bubble.svg)", ""]

    if runs:
        lines += [
            "### pp 2 as processes: speed-up and memory per rank",
            "",
            "`bench/pipeline_runs.py`: `baton train` on the debug model, each rank "
            "its own process (torchrun variables), " + str(runs["steps"]) +
            " steps, medians of steps 3.. from `metrics.jsonl`; peak RSS of "
            "each rank from `wait4`. One process: two ATen threads; pp 2: one "
            "ATen thread per rank (MKL's follow ATen's), "
            f"{runs['microbatches']} microbatches: two threads in all either way.",
            "",
            "| run | step | tokens/s | speed-up over one process | peak RSS per rank | bubble per rank |",
            "|---|---|---|---|---|---|",
        ]
        single = next(r for r in runs["runs"] if r["name"] == "single")
        mem_cats, mem_r0, mem_r1 = [], [], []
        for r in runs["runs"]:
            speed = r["tokens_per_sec"] / single["tokens_per_sec"]
            rss = " / ".join(f"{x:.0f}" for x in r["peak_rss_mib_per_rank"])
            bub = " / ".join(f"{x:.0f} %" for x in r.get("bubble_pct_per_rank", []))
            lines.append(f"| {r['name']} | {r['step_s'] * 1e3:.0f} ms | "
                         f"{r['tokens_per_sec']:.0f} | {speed:.2f}x | {rss} MiB | {bub} |")
            if r["ranks"] > 1:
                mem_cats.append(r["name"].replace("pp2_", ""))
                mem_r0.append(r["peak_rss_mib_per_rank"][0])
                mem_r1.append(r["peak_rss_mib_per_rank"][1])
                targets.setdefault("speedup", []).append((r["name"], speed))
        bar_chart(os.path.join(docs, "perf_memory.svg"),
                  f"Peak RSS per rank, pp 2, m = {runs['microbatches']}",
                  mem_cats, [("rank 0", mem_r0), ("rank 1", mem_r1)], "MiB")
        lines += ["", "![memory](perf_memory.svg)", ""]
    return lines


def p2p_section(pipe):
    meds = gbench_medians(pipe)
    lines = ["## P2P over Gloo (loopback, two rank threads)", "",
             "`pipeline_bench` `BM_P2P`: median one-way time (half a "
             "send/recv round trip) of 20 round trips.", "",
             "| bytes | one-way time | bandwidth |", "|---|---|---|"]
    for name, e in meds.items():
        if name.startswith("BM_P2P"):
            b = int(name.split("bytes:")[1].split("/")[0])
            lines.append(f"| {b:,} | {e['latency_us']:.0f} us | "
                         f"{e['bandwidth_GBps']:.2f} GB/s |")
    return lines + [""]


def collectives_section(pipe):
    meds = gbench_medians(pipe)
    rows = [(name, e) for name, e in meds.items() if name.startswith("BM_Collective")]
    if not rows:
        return []
    lines = ["## Collectives of data parallel over Gloo (loopback, two rank threads)", "",
             "`pipeline_bench` `BM_Collective`: median of 10 of one buffer "
             "(the all-reduced buffer; the all-gather's output; the "
             "reduce-scatter's input). Bus bandwidth as nccl-tests count it: "
             "the bytes each rank sends, 2 (n-1)/n of the buffer for the "
             "all-reduce, (n-1)/n for the others. Baton's reduce-scatter "
             "exchanges the chunks all-to-all and sums locally (c10d's Gloo one "
             "all-reduces the whole buffer, about twice the bytes).", "",
             "| collective | bytes | time | bus bandwidth |", "|---|---|---|---|"]
    for name, e in rows:
        op = name.split("/")[1]
        b = int(name.split("bytes:")[1].split("/")[0])
        lines.append(f"| {op} | {b / 2**20:.1f} MiB | {e['time_ms']:.2f} ms | "
                     f"{e['bus_GBps']:.2f} GB/s |")
    return lines + [""]


def fsdp_section(fsdp, targets):
    """Fully sharded against replicated data parallel, process runs."""
    if not fsdp:
        return []
    names = [r["name"] for r in fsdp["rounds"][0]]
    med = {}
    for name in names:
        runs = [r for rnd in fsdp["rounds"] for r in rnd if r["name"] == name]
        m = {k: statistics.median(r[k] for r in runs)
             for k in ("step_s", "tokens_per_sec", "param_mib", "grad_mib",
                       "optimizer_mib")}
        ranks = len(runs[0]["peak_rss_mib_per_rank"])
        m["rss"] = [statistics.median(r["peak_rss_mib_per_rank"][i] for r in runs)
                    for i in range(ranks)]
        if "gather_wait_s" in runs[0]:
            m["waited"] = statistics.median(
                (r["gather_wait_s"] + r["reduce_wait_s"]) / fsdp["steps"] for r in runs)
        med[name] = m
    base = med["dp_replicate2"]
    lines = ["## Sharded data parallel and tensor parallel (process runs)", "",
             "`bench/fsdp_runs.py`: the small flavor (about 25M parameters) on two "
             "ranks, one ATen thread each (MKL's follow), 4 x 256 tokens per rank "
             "and step (tp2: per step, both ranks together train on one global "
             "batch of 4 x 256 tokens; its tokens/s counts those), "
             f"{fsdp['steps']} steps, medians of steps 3.. and of "
             f"{len(fsdp['rounds'])} rounds (the runs interleaved). State: "
             "each rank's parameter + gradient + AdamW bytes (its log after the "
             "first step). Waited: the seconds per step rank 0 spent blocked on "
             "gathers and reduce-scatters, the communication that computation "
             "did not hide, as the mean over all the run's steps (the first two "
             "included). Peak RSS is not where sharding shows at this size: it "
             "counts libtorch's libraries and the activations, which sharding "
             "leaves alone, and glibc keeps freed memory in the process "
             "(`common/allocator.h`; bench/notes.md has the heap's peaks).", "",
             "| run | tokens/s | vs dp_replicate 2 | state per rank | vs dp_replicate 2 "
             "| peak RSS per rank | waited per step (mean) |", "|---|---|---|---|---|---|---|"]
    for name in names:
        m = med[name]
        state = m["param_mib"] + m["grad_mib"] + m["optimizer_mib"]
        base_state = base["param_mib"] + base["grad_mib"] + base["optimizer_mib"]
        waited = f"{m['waited'] * 1e3:.0f} ms" if "waited" in m else "-"
        lines.append(
            f"| {name} | {m['tokens_per_sec']:,.0f} | "
            f"{m['tokens_per_sec'] / base['tokens_per_sec']:.2f}x | {state:.0f} MiB | "
            f"{state / base_state:.2f}x | {' / '.join(f'{x:.0f}' for x in m['rss'])} MiB | "
            f"{waited} |")
    shard = med["dp_shard2"]
    targets["fsdp_speed"] = shard["tokens_per_sec"] / base["tokens_per_sec"]
    if "tp2" in med:
        targets["tp_speed"] = med["tp2"]["tokens_per_sec"] / base["tokens_per_sec"]
    targets["fsdp_state"] = ((shard["param_mib"] + shard["grad_mib"] + shard["optimizer_mib"]) /
                             (base["param_mib"] + base["grad_mib"] + base["optimizer_mib"]))
    return lines + [""]


def scaling_section(doc, targets):
    """Data and pipeline parallel's scaling efficiency, process runs."""
    if not doc:
        return []
    names = [r["name"] for r in doc["rounds"][0]]
    runs = {n: [r for rnd in doc["rounds"] for r in rnd if r["name"] == n]
            for n in names}
    med = {n: {k: statistics.median(r[k] for r in rs)
               for k in ("step_s", "tokens_per_sec")} for n, rs in runs.items()}
    one = med["one"]["tokens_per_sec"]
    per_round = "efficiency" in doc["rounds"][0][0]
    where = {
        "cores": " Every run is `baton train --nproc W --cpu-bind cores` started "
                 "on the first W whole cores, so the one-process run has one core "
                 "and each rank of the others a core of its own.",
        "none": " Every run is `baton train --nproc W` with its ranks left to the "
                "scheduler (`--cpu-bind none`), each free to move between all "
                "the cores.",
    }.get(doc.get("cpu_bind"), " Each rank started with torchrun's variables, "
          "left to the scheduler.")
    machine = ""
    if doc.get("date"):
        cond = doc.get("conditions", {})
        machine = (f" Run {doc['date']} on {doc['cpu']} (BLAS: "
                   f"{doc['blas'].split(';')[0]})"
                   + (f"; other work meanwhile, sampled every 10 s: compilers "
                      f"running in {cond['with_compilers']} of {cond['samples']} "
                      f"samples, 1-minute load average median "
                      f"{cond['load_median']:.1f}, max {cond['load_max']:.1f} "
                      f"({os.cpu_count()} cores)" if cond.get("samples") else "")
                   + ".")
    how = ("the efficiency of each round (its runs one after the other, each "
           "round starting one run further on), and their median" if per_round
           else "from the medians of the rounds")
    lines = ["## Scaling efficiency (process runs)", "",
             "`bench/scaling_runs.py`: the small flavor, one ATen and one MKL "
             "thread per rank, 4 x 256 tokens per local batch in float32, "
             f"{doc['steps']} steps, medians of steps 3.. and of "
             f"{len(doc['rounds'])} rounds." + where +
             " Efficiency: tokens/s of the two ranks over twice one process's "
             f"on one core, {how}." + machine, ""]
    if per_round:
        lines += ["| run | ranks | step | tokens/s | efficiency | per round |",
                  "|---|---|---|---|---|---|"]
    else:
        lines += ["| run | ranks | step | tokens/s | efficiency |",
                  "|---|---|---|---|---|"]
    for name, m in med.items():
        ranks = runs[name][0]["ranks"]
        if per_round:
            effs = [r["efficiency"] for r in runs[name]]
            eff = statistics.median(effs)
            tail = f" {eff:.2f} | {' / '.join(f'{e:.2f}' for e in effs)} |"
        else:
            eff = m["tokens_per_sec"] / (ranks * one)
            tail = f" {eff:.2f} |"
        lines.append(f"| {name} | {ranks} | {m['step_s'] * 1e3:.0f} ms | "
                     f"{m['tokens_per_sec']:,.0f} |" + tail)
        if ranks == 2:
            targets.setdefault("scaling", []).append((name, eff))
    return lines + [""]


def plan_path_section(doc, targets):
    """The plan on the user's path (bench/plan_path.py): `baton plan` as a
    new user runs it, its overlay trained as it says, against every layout
    family the plan ranks, bound and unbound."""
    if not doc:
        return []
    targets["plan_path"] = doc["chosen_over_best"]
    cond = doc.get("conditions", {})
    lines = ["## `baton plan` on the user's path (process runs)", "",
             f"`bench/plan_path.py`, {doc['date']}, on {doc['cpu']} (BLAS: "
             f"{doc['blas'].split(';')[0]}): `{doc['command']}` as a new user "
             "runs it (the config's own threads and precision, no --cpu-bind: "
             "the plan profiled its ranks unbound and bound and chose "
             f"`{doc['cpu_bind']}`; {doc['binding_line'] or 'one binding'}; "
             f"{doc['plan_wall_s']:.0f} s). Then the best-predicted candidate "
             "of each layout family it ranks, each trained unbound and bound "
             "with its overlay as a second --config, "
             f"{doc['steps']} steps; measured: the median step of steps 3.., "
             f"the median over {doc['rounds']} rounds (the runs interleaved, "
             "each round starting one run further on). Predicted: the plan "
             "of that binding's cost file. Other work on the machine: "
             f"compilers in {cond.get('with_compilers', 0)} of "
             f"{cond.get('samples', 0)} samples, 1-minute load median "
             f"{cond.get('load_median', 0):.1f}.", "",
             "| layout | binding | rank in its binding's plan | predicted | measured | per round | |",
             "|---|---|---|---|---|---|---|"]
    for e in doc["runs"]:
        pred = f"{1000 * e['predicted_s']:.0f} ms" if e["predicted_s"] else "-"
        mark = ("**chosen**" if e["chosen"] else "") + \
            (" best" if e is doc["best"] or e == doc["best"] else "")
        lines.append(
            f"| {e['layout']} | {e['cpu_bind']} | {e['plan_rank'] or '-'} | {pred} | "
            f"{1000 * e['measured_s']:.0f} ms | "
            + " / ".join(f"{1000 * x:.0f}" for x in e["per_round_s"])
            + f" | {mark.strip()} |")
    lines += ["", f"The chosen plan ({doc['chosen_run']['layout']}, "
              f"{doc['cpu_bind']}) measured {doc['chosen_over_best']:.3f}x the "
              f"best measured ({doc['best']['layout']}, "
              f"{doc['best']['cpu_bind']}).", ""]
    return lines


def plan_section(doc, targets):
    """`baton plan`'s predictions against real runs, and the cluster plan."""
    if not doc:
        return []
    lines = ["## `baton plan`: predicted against measured (process runs)", "",
             f"`bench/plan_runs.py`, {doc['date']}"
             + (f", on {doc['cpu']} (BLAS: {doc['blas'].split(';')[0]})" if doc.get("cpu") else "")
             + ": for each flavor, `baton plan "
             "--nproc 2` profiles this machine (two ranks timing each piece at "
             "once, one ATen thread each (MKL's follow)"
             + ({"cores": ", each bound to its own core (`--cpu-bind cores`)",
                 "none": ", where the scheduler puts them"}.get(doc.get("cpu_bind"), "")
                + (" as the runs below" if doc.get("cpu_bind") else ""))
             + "; the cost file it "
             "wrote is in bench/results/plan_runs.json) and ranks the layouts; "
             "the plan's top 5 and 5 others spread evenly over the rest of its "
             "range of predicted step times (the slowest included) then "
             "run as real processes, `baton train --nproc 2"
             + (f" --cpu-bind {doc['cpu_bind']}" if doc.get("cpu_bind") else "")
             + "` with the candidate's overlay "
             "as a second --config, float32, one ATen thread (MKL's follow) per "
             f"rank, {doc['steps']} steps; measured: the median step of steps "
             f"3.. of a run, the median over {doc['rounds']} rounds (the "
             "candidates interleaved in each)"
             + ("; every round after the first profiles and plans again and "
                "predicts the same candidates from its own profile, so that a "
                "prediction and its runs meet the machine in the same minutes; "
                "predicted: the median of the rounds' predictions"
                if any("predicted_per_round_s" in c for f in doc["flavors"]
                       for c in f["candidates"]) else "")
             + ". Error: measured / predicted - 1."
             + (" Other work on the machine meanwhile, sampled every 10 s: compilers "
                f"running in {doc['conditions']['with_compilers']} of "
                f"{doc['conditions']['samples']} samples; 1-minute load average "
                f"median {doc['conditions']['load_median']:.1f}, max "
                f"{doc['conditions']['load_max']:.1f} (2 cores)."
                if doc.get("conditions") else ""),
             ""]
    for f in doc["flavors"]:
        lines += [f"### {f['flavor']}: global batch {f['global_batch']} x 256 tokens",
                  "",
                  f"{f['considered']} considered, {f['pruned']} over the cap, "
                  f"{f['dominated']} not scored (more checkpointing than a choice that fits), "
                  f"**{f['ranked']} ranked**; profile and plan took "
                  f"{f['plan_wall_s']:.0f} s. Costs: {f['costs']['obtained']}."
                  + (f" Schedules synthesised for the costs of the "
                     f"{f['synthesis_layouts']} fastest pipelined layouts (the "
                     f"first plan): {f['synthesis_wins']} beat the layout's best "
                     "built-in schedule and are ranked as Synthesized."
                     if "synthesis_layouts" in f else ""), "",
                  "| plan rank | layout | layers per stage | predicted | per round | "
                  "measured | per round | error |", "|---|---|---|---|---|---|---|---|"]
        for c in f["candidates"]:
            split = ("balanced " if c["balanced"] else "even ") + \
                "/".join(str(n) for n in c["layers_per_stage"]) \
                if len(c["layers_per_stage"]) > 1 else "-"
            rounds = " / ".join(f"{t * 1e3:.0f}" for t in c["per_round_s"])
            predicted = " / ".join(f"{t * 1e3:.0f}"
                                   for t in c.get("predicted_per_round_s", []))
            lines.append(f"| {c['rank']} | {c['layout']} | {split} | "
                         f"{c['predicted_s'] * 1e3:.0f} ms | {predicted} | "
                         f"{c['measured_s'] * 1e3:.0f} ms | {rounds} | "
                         f"{100 * c['error']:+.1f} % |")
        chosen = f.get("chosen", {"rank": 1})
        lines += ["", f"Spearman rank correlation {f['spearman']:.2f}; worst error "
                  f"{100 * f['worst_error']:.1f} %; the chosen plan "
                  f"({chosen.get('how', 'the lowest prediction: rank %d of the first plan' % chosen['rank'])}) "
                  f"measured {f['chosen_over_best']:.3f}x the best measured.", ""]
        targets.setdefault("plan", []).append(f)
    c = doc.get("cluster")
    if c:
        lines += cluster_lines(c)
        targets["plan_cluster"] = c
    return lines


def cluster_lines(c, when=""):
    """The 405B plan on 512 ranks from the FLOP-derived cost file; `when`
    says the run's date and machine where the section around it does not."""
    i, o = c["interleaved"], c["one_f_one_b"]
    return ["### Llama 3 405B on 512 H100-class GPUs, from FLOPs", "",
            when + "`baton plan --config configs/llama3_405b.yaml --nproc 512 --costs "
            "bench/costs/llama3_405b_h100.json` (" + c["obtained"] + "): "
            f"{c['considered']} considered, {c['pruned']} over the cap, "
            f"{c['ranked']} ranked in {c['wall_s']:.1f} s of wall time (median "
            "of 3). At torchtitan's layout (FSDP 8 x TP 8 x PP 8, microbatches "
            "of one sequence, full checkpointing):", "",
            "| schedule | predicted tokens/s/GPU | bubble | torchtitan (H100, "
            "published) |", "|---|---|---|---|",
            f"| Interleaved1F1B, 2 stages per rank | {i['tokens_per_s_per_rank']:.1f} "
            f"| {100 * i['bubble']:.1f} % | 128 |",
            f"| 1F1B | {o['tokens_per_s_per_rank']:.1f} | "
            f"{100 * o['bubble']:.1f} % | 100 |",
            f"| ratio | {c['ratio']:.2f} | | 1.28 |", "",
            "What the model leaves out (docs/plan.md): the overlap of the "
            "data-parallel sync and of P2P with compute (the sync is added after "
            "the pipeline), kernel efficiency varying with the shapes (one "
            "efficiency for every pass), the optimizer step (the FLOP-derived file "
            "has none), the embedding's and the loss's tensor-parallel "
            "collectives, and the allocator. The best plan it finds: "
            f"{c['best']['layout']}, {c['best']['tokens_per_s_per_rank']:.1f} "
            "tokens/s/GPU.", ""]


def tp_traffic_section(doc, targets):
    """Tensor parallel's bytes per layer against the formula."""
    runs = gbench_medians(doc)
    if not runs:
        return []
    lines = ["## Tensor parallel traffic", "",
             "`tensor_parallel_bench`: tp 2 as rank threads over Gloo, 2 x 256 "
             "tokens per step in float32; what each rank hands to the "
             "sequence-parallel collectives per step, counted by the regions "
             "(`parallel/tensor_parallel/regions.h`), against Megatron's formula "
             "from the shape alone: per block 8 x (n - 1) / n x b T d x 4 bytes "
             "(the attention's and feed-forward's all-gather and reduce-scatter, "
             "forward and backward) + 2 norm-gradient all-reduces of "
             "2 (n - 1) / n x d x 4; the root (embedding, output, final norm) half "
             "a block's activations plus one norm. The step time is for the "
             "record: on two CPU cores the communication is not hidden and the "
             "per-rank matmuls are half as wide.", "",
             "| model | per block | formula | root | formula | collectives per step "
             "| step | tokens/s |", "|---|---|---|---|---|---|---|---|"]
    worst = 0.0
    for name, e in sorted(runs.items()):
        flavor = name.split("/")[1]
        lines.append(
            f"| {flavor} (dim {e['dim']:.0f}, {e['layers']:.0f} layers) | "
            f"{e['block_mib']:.3f} MiB | {e['block_formula_mib']:.3f} MiB | "
            f"{e['root_mib']:.3f} MiB | {e['root_formula_mib']:.3f} MiB | "
            f"{e['collectives_per_step']:.0f} | {e['step_s'] * 1e3:.0f} ms | "
            f"{e['tokens_per_sec']:,.0f} |")
        for got, want in (("block_mib", "block_formula_mib"),
                          ("root_mib", "root_formula_mib")):
            worst = max(worst, abs(e[got] / e[want] - 1.0))
    targets["tp_traffic"] = worst
    return lines + [""]


def experts_section(doc, machine, targets):
    """Expert parallel against plain FSDP, its all-to-all bytes against the
    formula, and the experts' products against a dense one of the same
    FLOPs (expert_parallel_bench)."""
    runs = gbench_medians(doc)
    if not runs:
        return []
    m = machine or {}
    steps = {int(n.split("ep:")[1].split("/")[0]): e
             for n, e in runs.items() if n.startswith("BM_MoeStep")}
    products = {n.split("/")[1]: e for n, e in runs.items()
                if n.startswith("BM_ExpertProducts")}
    lines = ["## Mixture of experts: expert parallel and the experts' products",
             "",
             f"`expert_parallel_bench` ({doc.get('context', {}).get('date', 'n/a')}; "
             f"{m.get('cpu', 'the machine above')}, {m.get('blas', 'its BLAS')}, "
             "float32, one ATen thread per rank, medians of 3 repetitions): "
             "the debug Qwen3-MoE (dim 256, 6 "
             "layers, 8 experts of hidden 256, top 2) on 2 ranks as threads over "
             "Gloo, dp_shard 2, 2 x 256 tokens per rank and step. At ep 1 every "
             "rank holds every expert (fully_shard gathers them); at ep 2 each "
             "holds 4 and the tokens travel by all-to-all. The bytes are what "
             "each rank hands to the all-to-alls per step "
             "(`parallel/expert_parallel/expert_parallel.h`), against the "
             "formula from the step's own routing: the rows a rank's routers "
             "sent to the other rank's experts x dim x 4 bytes, four times "
             "(dispatch and combine, forward and backward), plus the counts' "
             "exchange ((n - 1) / n x E x 8 bytes per layer); \"balanced\" is "
             "that formula at perfect balance ((n - 1) / n of k rows per token).",
             "", "| layout | step | tokens/s | all-to-all per rank and step "
             "| formula | at balance | exchanges per step |",
             "|---|---|---|---|---|---|---|"]
    worst = 0.0
    for degree, e in sorted(steps.items()):
        name = "dp_shard 2 (every rank all experts)" if degree == 1 else \
            f"dp_shard 2, ep {degree}"
        if degree > 1:
            traffic = (f"{e['a2a_mib']:.2f} MiB | {e['a2a_formula_mib']:.2f} MiB | "
                       f"{e['a2a_balanced_mib']:.2f} MiB | {e['a2a_per_step']:.0f}")
            worst = max(worst, abs(e["a2a_mib"] / e["a2a_formula_mib"] - 1.0))
        else:
            traffic = "- | - | - | -"
        lines.append(f"| {name} | {e['step_s'] * 1e3:.0f} ms | "
                     f"{e['tokens_per_sec']:,.0f} | {traffic} |")
    if 1 in steps and 2 in steps:
        targets["ep_speed"] = steps[2]["tokens_per_sec"] / steps[1]["tokens_per_sec"]
        targets["ep_traffic"] = worst
    if all(k in products for k in ("loop", "grouped_mm", "dense")):
        lines += ["", "One MoE layer's forward and backward on 2048 tokens, one "
                  "thread: the router, the rows sorted by expert and the experts' "
                  "products, as one product per expert (rows padded to 64) or as "
                  "ATen's grouped matmul (`moe.expert_products`), against a dense "
                  "SwiGLU of hidden top_k x 256 = 512, the same multiply-adds per "
                  "token (GFLOP/s counts the expert products' only).", "",
                  "| layer | dtype | time | tokens/s | GFLOP/s |",
                  "|---|---|---|---|---|"]
        for suffix, dtype in (("", "float32"), ("_bf16", "bfloat16")):
            for label, key in (("MoE, 8 experts, top 2: a product per expert", "loop"),
                               ("MoE, 8 experts, top 2: grouped matmul", "grouped_mm"),
                               ("dense SwiGLU, hidden 512", "dense")):
                e = products.get(key + suffix)
                if e is None:
                    continue
                lines.append(f"| {label} | {dtype} | {ms(e):.1f} ms | "
                             f"{e['tokens_per_sec']:,.0f} | {e['gflops']:.1f} |")
        rate = {k: e["tokens_per_sec"] for k, e in products.items()}
        targets["grouped_vs_loop"] = rate["grouped_mm"] / rate["loop"]
        if "grouped_mm_bf16" in rate and "loop_bf16" in rate:
            targets["grouped_vs_loop_bf16"] = rate["grouped_mm_bf16"] / rate["loop_bf16"]
        best = max(rate["grouped_mm"], rate["loop"])
        targets["grouped_vs_dense"] = best / rate["dense"]
        lines.append("")
        bf16 = (f", {targets['grouped_vs_loop_bf16']:.2f}x in bfloat16"
                if "grouped_vs_loop_bf16" in targets else "")
        lines.append(f"The grouped matmul runs at {targets['grouped_vs_loop']:.2f}x "
                     f"the loop's tokens/s in float32{bf16} (moe.expert_products "
                     "auto takes it wherever it takes the tensors); the faster "
                     f"experts run at {targets['grouped_vs_dense']:.2f}x the dense "
                     "layer's tokens/s.")
    return lines + [""]


def experts_target_rows(t, verdict):
    rows = []
    if t.get("ep_traffic") is not None:
        rows.append("| experts (#48): all-to-all bytes per step equal the formula "
                    f"| worst difference {100 * t['ep_traffic']:.2f} % | "
                    f"{'yes' if t['ep_traffic'] <= 0.01 else 'no'} |")
    if t.get("ep_speed") is not None:
        rows.append("| experts (#48): tokens/s of ep 2 against dp_shard 2 alone, "
                    f"debug MoE, two CPU cores | {t['ep_speed']:.2f}x | measured |")
    if t.get("grouped_vs_loop") is not None:
        rows.append("| experts (#48): ATen's grouped matmul against a product per "
                    "expert, float32 | "
                    f"{t['grouped_vs_loop']:.2f}x | measured |")
    if t.get("grouped_vs_dense") is not None:
        rows.append("| experts (#48): the experts' products against a dense "
                    "product of the same FLOPs | "
                    f"{t['grouped_vs_dense']:.2f}x | measured |")
    return rows


def this_machine():
    """This machine's CPU and BLAS, for a section measured here just now
    (not on the machine of the page's last full run)."""
    machine = {"cpu": "unknown", "blas": "no MKL"}
    for line in open("/proc/cpuinfo"):
        if line.split(":")[0].strip() == "model name":
            machine["cpu"] = line.split(":", 1)[1].strip()
            break
    try:
        import torch
        found = re.search(r"Math Kernel Library Version [^\n]*",
                          torch.__config__.show())
        machine["blas"] = found.group(0) if found else "no MKL"
    except ImportError:
        pass
    return machine


def splice_experts(path, docs):
    """One run of expert_parallel_bench into the page: its section and its
    rows of the targets."""
    targets = {}
    section = experts_section(json.load(open(path)), this_machine(), targets)
    splice_new(docs, section, "| tensor parallel (#18)", "| experts (#48)",
               experts_target_rows(targets, lambda ok: "yes" if ok else "no"))


def splice_new(docs, section, rows_after, prefix, rows):
    """splice() for a section that may not be on the page yet: the first
    time it goes before activation checkpointing's section, and its target
    rows (starting with `prefix`) after the last row starting with
    `rows_after`."""
    heading = section[0]
    page = open(os.path.join(docs, "PERFORMANCE.md")).read()
    if heading not in page:
        anchor = "## Activation checkpointing (process runs)"
        page = page.replace(anchor, heading + "\n\n" + anchor, 1)
        lines = page.split("\n")
        last = max(i for i, line in enumerate(lines)
                   if line.startswith(rows_after))
        lines.insert(last + 1, prefix)
        with open(os.path.join(docs, "PERFORMANCE.md"), "w") as f:
            f.write("\n".join(lines))
    splice(docs, heading, section, prefix, rows)


def context_section(bench, runs, machine, targets):
    """Context parallel against one process: the whole model as real
    processes (context_parallel_runs.py) and one attention layer's traffic
    and overlap (context_parallel_bench)."""
    if not bench and not runs:
        return []
    m = machine or {}
    lines = ["## Context parallel (process runs and the attention alone)", ""]
    if runs:
        by = {r["name"]: r for r in runs["runs"]}
        lines += [f"`bench/context_parallel_runs.py` ({runs['cpu']}, "
                  f"{runs['runs'][0]['blas']}): the debug model in float32, one "
                  "ATen thread per rank, one sequence per data-parallel rank and "
                  f"step, medians of steps 3..{runs['steps']}; the ranks share "
                  "the machine's cores. The activation peak is rank 0's "
                  "(`activation_peak_mib`: the most CPU tensor memory a step "
                  "held beyond what it began with); at seq 16384 every layout "
                  "checkpoints every block (one process does not fit otherwise: "
                  "its attention's probabilities alone would be 48 GiB). "
                  "The document-mask rows (`training.document_mask`, the KJV "
                  "corpus's books as documents) run attention in the block "
                  "engine's tiles, which keep a log-sum-exp per row instead of "
                  "the probabilities and skip the pairs of documents that never "
                  "meet; they compare with one process without the mask. "
                  f"Runs of {', '.join(sorted({r.get('date', 'an earlier day') for r in runs['runs']}))}.", "",
                  "| seq | layout | ranks | step | tokens/s | activation peak per rank "
                  "| against one process | peak RSS per rank |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in runs["runs"]:
            # Against one process of the same sequence and checkpointing,
            # without document masking.
            one = by.get(f"one_{r['seq_len']}" +
                         ("_ac" if r["activation_checkpoint"] == "full" else ""))
            ratio = (r["activation_peak_mib"] / one["activation_peak_mib"]
                     if one else None)
            layout = ("one process" if r["cp"] == 1 else f"cp {r['cp']}" +
                      (f" x dp_shard {r['dp_shard']}" if r["dp_shard"] > 1 else ""))
            if r["activation_checkpoint"] == "full":
                layout += ", full AC"
            if r.get("documents"):
                layout += ", document mask"
            lines.append(
                f"| {r['seq_len']} | {layout} | {r['ranks']} | {r['step_s']:.1f} s | "
                f"{r['tokens_per_sec']:,.0f} | {r['activation_peak_mib']:,.0f} MiB | "
                f"{fmt(ratio, 3, 'x')} | {max(r['peak_rss_mib']):,.0f} MiB |")
            if (r["cp"] > 1 and r["dp_shard"] == 1 and ratio is not None
                    and not r.get("documents")):
                key = f"cp_peak_{r['seq_len']}"
                targets[key] = ratio
        lines.append("")
    runs_b = gbench_medians(bench)
    layers = {int(n.split("/")[1]): e for n, e in runs_b.items()
              if n.startswith("BM_GatheredKvAttention")}
    whole = {int(n.split("/")[1]): e for n, e in runs_b.items()
             if n.startswith("BM_OneProcessAttention")}
    if layers:
        date = bench.get("context", {}).get("date", "n/a")
        lines += [f"`context_parallel_bench` ({date}; "
                  f"{m.get('cpu', 'the machine above')}, {m.get('blas', 'its BLAS')}, "
                  "float32, one ATen thread per rank): one attention layer of the "
                  "debug model's shape (16 heads of 16), forward and backward, one "
                  "sequence split over cp 2 as rank threads over Gloo. The bytes "
                  "are what each rank's attention sent (its counters), against "
                  "the formula (cp - 1) x 2 x seq / cp x kv width x 4 bytes each "
                  "way (the keys and values all-gathered forward, their gradients "
                  "reduce-scattered backward). \"Waited\" is the time a rank still "
                  "waited for the two exchanges after computing its own chunks' "
                  "diagonal blocks meanwhile; \"alone\" the same two collectives "
                  "with nothing to compute; hidden = 1 - waited / alone. Each "
                  "block runs whole in ATen's CPU flash-attention kernel with its "
                  "log-sum-exp (models/common/block_attention.h; 128 x 128 tiles "
                  "before, 2,603 ms a layer at 8192). The one process row is the "
                  "whole sequence's causal attention in Baton's CPU kernel "
                  "(models/common). Medians of 3 runs.", "",
                  "| seq | cp 2 layer | one process layer | bytes per rank | formula "
                  "| waited | alone | hidden |",
                  "|---|---|---|---|---|---|---|---|"]
        worst = 0.0
        for seq, e in sorted(layers.items()):
            one = whole.get(seq)
            worst = max(worst, abs(e["bytes_per_rank"] / e["formula_bytes"] - 1.0))
            lines.append(
                f"| {seq} | {e['layer_ms']:,.0f} ms | "
                f"{fmt(ms(one) if one else None, 0, ' ms')} | "
                f"{e['bytes_per_rank'] / 2**20:.2f} MiB | "
                f"{e['formula_bytes'] / 2**20:.2f} MiB | {e['wait_ms']:.1f} ms | "
                f"{e['alone_ms']:.1f} ms | {100 * e['hidden_fraction']:.0f} % |")
        targets["cp_traffic"] = worst
        lines.append("")
    return lines


def context_target_rows(t, verdict):
    rows = []
    for seq in (8192, 16384):
        if t.get(f"cp_peak_{seq}") is not None:
            ac = " (full AC both)" if seq == 16384 else ""
            rows.append(f"| context parallel (#49): activation peak per rank at "
                        f"cp 2 <= 0.55x of one process's, seq {seq}{ac} | "
                        f"{t[f'cp_peak_{seq}']:.3f}x | "
                        f"{verdict(t[f'cp_peak_{seq}'] <= 0.55)} |")
    if t.get("cp_traffic") is not None:
        rows.append("| context parallel (#49): attention bytes per rank equal the "
                    f"formula | worst difference {100 * t['cp_traffic']:.2f} % | "
                    f"{verdict(t['cp_traffic'] <= 0.01)} |")
    return rows


def splice_context(bench_path, runs_path, docs):
    """One run of context_parallel_bench and context_parallel_runs.py into
    the page: its section and its rows of the targets."""
    targets = {}
    section = context_section(json.load(open(bench_path)),
                              json.load(open(runs_path)), this_machine(), targets)
    splice_new(docs, section, "| experts (#48)", "| context parallel (#49)",
               context_target_rows(targets, lambda ok: "yes" if ok else "no"))


def memory_section(mem, targets):
    """Activation checkpointing against none, process runs."""
    if not mem:
        return []
    names = [r["name"] for r in mem["rounds"][0]]
    med = {}
    for name in names:
        runs = [r for rnd in mem["rounds"] for r in rnd if r["name"] == name]
        med[name] = {k: statistics.median(r[k] for r in runs)
                     for k in ("step_s", "tokens_per_sec", "activation_peak_mib",
                               "tensor_peak_mib", "peak_rss_mib")}
        med[name]["same_losses"] = all(r["losses"] == runs[0]["losses"] for r in runs)
    base = med["none"]
    same = all(m["same_losses"] for m in med.values()) and all(
        r["losses"] == mem["rounds"][0][0]["losses"]
        for rnd in mem["rounds"] for r in rnd)
    lines = ["## Activation checkpointing (process runs)", "",
             "`bench/memory_runs.py`: the small flavor (about 25M parameters) in one "
             f"process, {mem['threads']} ATen threads, 2 x "
             f"{mem['seq_len']} tokens per step in float32, {mem['steps']} steps, medians of "
             f"steps 3.. and of {len(mem['rounds'])} rounds (the modes interleaved). "
             "Activation peak: the most CPU tensor memory the step held at once "
             "beyond what it began with (activations, and the gradients and "
             "buffers the step makes; `activation_peak_mib`); tensor peak: with "
             "the parameters and optimizer state. Peak RSS adds libtorch's "
             "libraries and what glibc keeps of freed memory "
             "(`common/allocator.h`). The table's figures are medians over the "
             "rounds; the targets take the median of each round's ratio to none, "
             "measured side by side. "
             + ("Every run's losses are bitwise those of none." if same else
                "Losses differ between runs: see the JSON."), "",
             "| mode | step | vs none | activation peak | vs none | tensor peak "
             "| peak RSS | vs none |", "|---|---|---|---|---|---|---|---|"]
    for name in names:
        m = med[name]
        lines.append(
            f"| {name} | {m['step_s']:.2f} s | {m['step_s'] / base['step_s']:.2f}x | "
            f"{m['activation_peak_mib']:.0f} MiB | "
            f"{m['activation_peak_mib'] / base['activation_peak_mib']:.2f}x | "
            f"{m['tensor_peak_mib']:.0f} MiB | {m['peak_rss_mib']:.0f} MiB | "
            f"{m['peak_rss_mib'] / base['peak_rss_mib']:.2f}x |")
    # The targets' ratios: the median over the rounds of each round's ratio
    # to none (the modes ran side by side within a round; the machine's
    # speed drifts between rounds).
    def round_ratio(name, key):
        return statistics.median(
            next(r[key] for r in rnd if r["name"] == name) /
            next(r[key] for r in rnd if r["name"] == "none")
            for rnd in mem["rounds"])
    ratio = {name: (round_ratio(name, "activation_peak_mib"),
                    round_ratio(name, "step_s")) for name in names}
    targets["ac"] = ratio
    return lines + [""]


def precision_section(prec, machine, targets):
    """bf16 mixed precision against fp32, process runs."""
    if not prec:
        return []
    runs = {r["name"]: r for r in prec["runs"]}
    base = runs["float32"]
    cpu = machine.get("cpu", "this CPU") if machine else "this CPU"
    lines = ["## Mixed precision (process runs)", "",
             f"`bench/precision_runs.py`: the debug model for {prec['steps']} steps in "
             f"one process, {prec['threads']} threads, on {cpu}, with "
             "`training.mixed_precision_param` float32 and bfloat16 (fp32 master "
             "weights, optimizer state and loss). Step: median of steps 3..; final "
             "loss: the mean of the last 10 steps' losses (the last step's in "
             "brackets).", "",
             "| param dtype | step | vs float32 | tokens/s | final loss | vs float32 "
             "| start-up log |", "|---|---|---|---|---|---|---|"]
    for name, r in runs.items():
        lines.append(
            f"| {name} | {r['step_s'] * 1e3:.0f} ms | {r['step_s'] / base['step_s']:.2f}x | "
            f"{r['tokens_per_sec']:,.0f} | {r['final_loss']:.4f} ({r['losses'][-1]:.4f}) | "
            f"{(r['final_loss'] / base['final_loss'] - 1) * 100:+.2f} % | {r['log']} |")
    if "bfloat16" in runs:
        targets["bf16_loss"] = abs(runs["bfloat16"]["final_loss"] / base["final_loss"] - 1)
        targets["bf16_speed"] = runs["bfloat16"]["step_s"] / base["step_s"]
    return lines + [""]


def schedule_section(sched):
    lines = ["## Pipeline schedules as data", "",
             "`schedule_bench`: generate + lower + validate + simulate, p = 64, "
             "m = 256, median of 3.", "",
             "| schedule | stages per rank | actions (lowered) | time |", "|---|---|---|---|"]
    for name, e in gbench_medians(sched).items():
        parts = name.split("/")
        lines.append(f"| {parts[1]} | {parts[3]} | {e['actions']:,.0f} | {ms(e):.1f} ms |")
    return lines + [""]


def loader_section(loader):
    lines = ["## Data loading", "",
             "`dataloader_bench`: median of 3.", "", "| benchmark | time |", "|---|---|"]
    for name, e in gbench_medians(loader).items():
        lines.append(f"| `{name}` | {ms(e):.2f} ms |")
    return lines + [""]


def gpu_section(gpu):
    where = gpu.get("device_name", f"{gpu.get('devices', '?')} device(s)")
    when = f", {gpu['date']}" if "date" in gpu else ""
    failed = ([f"Failed in this run (bench/gpu.sh went on past them): "
               f"{'; '.join(gpu['failed'])}.", ""] if gpu.get("failed") else [])
    if "layer_stack" not in gpu:
        return (["## GPU (`bench/gpu.sh`)", "",
                 f"{where}{when}: gpu_bench brought no figures.", ""] + failed +
                gpu_peer_lines(gpu))
    c, stack = gpu["correctness"], gpu["layer_stack"]
    lines = [
        "## GPU (`bench/gpu.sh`)", ""] + failed + [
        f"{where}, libtorch {gpu['torch_version']}{when}: measured by `bench/gpu.sh` on that "
        "machine, apart from the CPU run above (`report.py --gpu` puts its JSON here). "
        "Correctness, debug model in fp32, four AdamW steps on the GPU against "
        f"the CPU: logits max relative difference {c['logits_max_rel_diff']:.2e}, "
        f"gradients {c['grad_max_rel_diff']:.2e}, losses {c['loss_max_rel_diff']:.2e} "
        f"({'ok' if c['ok'] else 'FAILED'}).", "",
        "| what | figure |", "|---|---|",
        f"| bf16 matmul peak (8192 x 8192) | {gpu['matmul_peak_tflops_bf16']:.0f} TFLOP/s |",
        f"| Llama 3 8B-shaped layers, bf16, forward + backward | {stack['layers']} layers, "
        f"{stack['batch']} x {stack['seq_len']} tokens |",
        f"| step | {stack['step_s'] * 1e3:.1f} ms |",
        f"| tokens/s | {stack['tokens_per_sec']:,.0f} |",
        f"| TFLOP/s, MFU against the measured peak | {stack['tflops']:.0f}, "
        f"{stack['mfu_pct']:.0f} % |"]
    t = gpu.get("debug_train")
    if t:
        lines.append(
            f"| `baton train` debug model (make run's config), step {t['step']} | loss "
            f"{t['loss_first']:.2f} -> {t['loss']:.2f}, {t['tokens_per_sec']:,.0f} tokens/s, "
            f"MFU {t['mfu_pct']:.1f} % |")
    t = gpu.get("train_1b")
    if t:
        lines.append(
            f"| `baton train` Llama 3.2 1B flavor, bf16, 2 x 4096 tokens, {t['steps']} "
            f"steps | loss {t['loss_first']:.2f} -> {t['loss']:.2f}, "
            f"{t['tokens_per_sec']:,.0f} tokens/s, {t['tflops']:.0f} TFLOP/s |")
    return lines + [""] + gpu_peer_lines(gpu)


def gpu_peer_lines(gpu):
    """Baton beside torchtitan on the same GPU (bench/torchtitan_gpu.py),
    where the run had torchtitan."""
    peer, train = gpu.get("torchtitan", {}), gpu.get("train_1b")
    if not peer:
        return []
    some = next(iter(next(iter(peer.values())).values()))
    lines = [
        f"Beside torchtitan {some['torchtitan']} (the release that runs on "
        f"this machine's PyTorch {some['torch']}; `bench/torchtitan_gpu.py`) "
        "on the same GPU, eager and with each block under `torch.compile`: "
        "the layer stack above against the same blocks of torchtitan's "
        "model, and `baton train` of the Llama 3.2 1B flavor (973M "
        "parameters in its blocks, the byte tokenizer's 258 tokens, bf16 "
        "compute on float32 weights, 2 x 4096 tokens a step, the median of "
        "steps 6 to 20) against torchtitan's training step of the same "
        "model on one device (torch.autocast, fused AdamW, its loss and "
        "clipping). Tokens/s, higher is better:", "",
        "| work | Baton | torchtitan eager | torchtitan compiled | Baton / compiled |",
        "|---|---|---|---|---|"]
    for what, name, ours in (
            ("layers", "8 Llama 3 8B-shaped layers, forward + backward",
             gpu.get("layer_stack", {}).get("tokens_per_sec")),
            ("train", "training step, Llama 3.2 1B flavor",
             train["tokens_per_sec"] if train else None)):
        runs = peer.get(what, {})
        eager, compiled = runs.get("eager"), runs.get("compiled")
        cell = lambda r: f"{r['tokens_per_sec']:,.0f}" if r else "failed"
        ratio = (f"{ours / compiled['tokens_per_sec']:.2f}x"
                 if ours and compiled else "-")
        lines.append(f"| {name} | {f'{ours:,.0f}' if ours else 'failed'} | "
                     f"{cell(eager)} | {cell(compiled)} | {ratio} |")
    return lines + [""]


def gpu_target_rows(gpu):
    """The GPU's rows of the targets: the layer stack as measured, and #44's
    two GPU targets."""
    stack_name = "| GPU: `bench/gpu.sh` (Llama 3 8B-shaped layers, bf16) | "
    peak_name = ("| GPU (#44): the layer stack at least 50 % of the GPU's "
                 "published dense bf16 peak | ")
    train_name = ("| GPU (#44): `baton train` of a 1B-class model at least "
                  "torchtitan compiled's tokens/s | ")
    if not gpu:
        return [stack_name + "not run: no GPU on this machine | not measured |",
                peak_name + "not run | not measured |",
                train_name + "not run | not measured |"]
    stack = gpu.get("layer_stack")
    # Baton's table of data sheets (trainer/metrics.cpp), as gpu_bench
    # recorded it.
    peak = gpu.get("published_peak_tflops_bf16")
    if not stack:
        rows = [stack_name + "gpu_bench failed | not measured |",
                peak_name + "gpu_bench failed | not measured |"]
    else:
        rows = [stack_name + f"{stack['tokens_per_sec']:,.0f} tokens/s, MFU "
                f"{stack['mfu_pct']:.0f} % of the measured matmul peak | measured |"]
        if peak:
            share = stack["tflops"] / peak
            rows.append(peak_name + f"{stack['tflops']:.0f} of {peak:.0f} TFLOP/s, "
                        f"{100 * share:.0f} % | {'yes' if share >= 0.5 else 'no'} |")
        else:
            rows.append(peak_name + f"{stack['tflops']:.0f} TFLOP/s; the "
                        "published peak not recorded by this run (gpu_bench "
                        "records it from 2026-12-07 on, for a GPU in Baton's "
                        "table) | not measured |")
    compiled = gpu.get("torchtitan", {}).get("train", {}).get("compiled")
    train = gpu.get("train_1b")
    if compiled and train:
        ratio = train["tokens_per_sec"] / compiled["tokens_per_sec"]
        rows.append(train_name + f"{train['tokens_per_sec']:,.0f} against "
                    f"{compiled['tokens_per_sec']:,.0f}, {ratio:.2f}x | "
                    f"{'yes' if ratio >= 1.0 else 'no'} |")
    else:
        rows.append(train_name + "not run: this GPU run had no torchtitan or "
                    "no 1B run (bench/gpu.sh from 2026-12-07 on) | not measured |")
    return rows


# The last GPU machine's figures, kept in the repository: a CPU machine's
# `make bench` has no gpu.json of its own and shows these.
LAST_GPU = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpu_last.json")


def with_current_notes(page):
    """The page with its tail (bench/notes.md, appended as it is) replaced by
    the file's current text."""
    notes = open(os.path.join(os.path.dirname(__file__), "notes.md")).read()
    head = notes.split("\n", 1)[0]
    at = page.find("\n" + head + "\n")
    return page if at < 0 else page[:at + 1] + notes.rstrip() + "\n"


def splice_gpu(gpu_path, docs):
    """Puts a GPU machine's gpu.json into the existing page (its section and
    its row of the targets, the rest of the page as the CPU run left it and
    bench/notes.md's current text at the end, as the other splices) and keeps
    it as bench/gpu_last.json for the page's next regeneration."""
    gpu = json.load(open(gpu_path))
    if os.path.abspath(gpu_path) != LAST_GPU:
        with open(LAST_GPU, "w") as f:
            json.dump(gpu, f, indent=1)
            f.write("\n")
    splice(docs, "## GPU", gpu_section(gpu), "| GPU", gpu_target_rows(gpu))


def scaling_target_rows(t, verdict):
    return [f"| scaling (#16): {name} tokens/s with one core per rank over twice "
            f"one process on one core | {eff:.2f} | {verdict(eff >= 0.9)} |"
            for name, eff in t.get("scaling", [])]


def replace_section(page, heading, section):
    """The page with its section under `heading` (to the next "## ")
    replaced by `section`'s lines."""
    start = page.index("\n" + heading) + 1
    end = page.index("\n## ", start)
    return page[:start] + "\n".join(section) + page[end:]


def replace_rows(lines, prefix, rows):
    """`lines` with the run of rows starting with `prefix` replaced by
    `rows`."""
    out, placed = [], False
    for line in lines:
        if line.startswith(prefix):
            if not placed:
                out += rows
                placed = True
            continue
        out.append(line)
    return out


def splice(docs, heading, section, prefix, rows, edit=None):
    """Puts one run's `section` (under `heading`) and its rows of the
    targets (starting with `prefix`) into the existing page, the rest as the
    last `make bench` left it; `edit`, where given, changes the lines after
    that; bench/notes.md's current text goes at the end."""
    path = os.path.join(docs, "PERFORMANCE.md")
    page = replace_section(open(path).read(), heading, section)
    lines = replace_rows(page.split("\n"), prefix, rows)
    if edit:
        lines = edit(lines)
    with open(path, "w") as f:
        f.write(with_current_notes("\n".join(lines)))


def splice_scaling(scaling_path, docs):
    """One run of bench/scaling_runs.py into the page: its section and its
    rows of the targets (the section states its own date and machine)."""
    targets = {}
    section = scaling_section(json.load(open(scaling_path)), targets)
    splice(docs, "## Scaling efficiency (process runs)", section,
           "| scaling (#16)", scaling_target_rows(targets, lambda ok: "yes" if ok else "no"))


def splice_plan(plan_path, docs):
    """One run of bench/plan_runs.py into the page: its section, its rows of
    the targets and its bullet of the limits (the section states its own
    date and machine)."""
    targets = {}
    section = plan_section(json.load(open(plan_path)), targets)
    limits = plan_limit_lines(targets)
    bullet = "- The plan's predictions against its runs."

    def limits_bullet(lines):
        if any(l.startswith(bullet) for l in lines):
            return replace_rows(lines, bullet, limits)
        if limits:
            # The last page met every target of the plan: no bullet to replace.
            at = lines.index("## What limits the targets not met") + 2
            lines[at:at] = limits
        return lines

    splice(docs, "## `baton plan`: predicted against measured", section,
           "| plan (#21)", plan_target_rows(targets, lambda ok: "yes" if ok else "no"),
           limits_bullet)


def splice_plan_cluster(plan_path, docs):
    """The 405B cluster plan of one `bench/plan_runs.py --flavors none` run
    into the page: its subsection of the plan's section and its two rows of
    the targets; the flavors' runs stay as the last full run left them."""
    doc = json.load(open(plan_path))
    c = doc["cluster"]
    when = (f"`bench/plan_runs.py --flavors none`, {doc['date']}, on "
            f"{doc.get('cpu', 'this machine')} (the search uses no BLAS): ")
    heading = "### Llama 3 405B on 512 H100-class GPUs, from FLOPs"
    path = os.path.join(docs, "PERFORMANCE.md")
    page = open(path).read()
    start = page.index("\n" + heading) + 1
    end = page.index("\n## ", start)
    page = page[:start] + "\n".join(cluster_lines(c, when)) + page[end:]
    rows = plan_target_rows({"plan_cluster": c},
                            lambda ok: "yes" if ok else "no")
    lines = page.split("\n")
    for row in rows:
        prefix = row[:row.index(" | ")]
        lines = replace_rows(lines, prefix, [row])
    with open(path, "w") as f:
        f.write(with_current_notes("\n".join(lines)))


def splice_plan_path(path, docs):
    """One run of bench/plan_path.py into the page: its section and its row
    of the targets."""
    targets = {}
    section = plan_path_section(json.load(open(path)), targets)
    rows = [l for l in targets_section(targets) if l.startswith("| plan (#45)")]
    heading = "## `baton plan` on the user's path"
    page_path = os.path.join(docs, "PERFORMANCE.md")
    page = open(page_path).read()
    if "\n" + heading not in page:
        # The first run: its section after the plan's other one, its row
        # after the plan's other rows.
        at = page.index("\n## ", page.index("\n## `baton plan`: predicted") + 1) + 1
        page = page[:at] + "\n".join(section) + "\n" + page[at:]
        lines = page.split("\n")
        last = max(i for i, l in enumerate(lines) if l.startswith("| plan (#21)"))
        lines[last + 1:last + 1] = rows
        with open(page_path, "w") as f:
            f.write(with_current_notes("\n".join(lines)))
        return
    splice(docs, heading, section, "| plan (#45)", rows)


def busy_fraction(results):
    """Share of the run's samples in which compilers ran beside it."""
    path = os.path.join(results, "conditions.txt")
    if not os.path.exists(path):
        return 0.0
    rows = [l.split() for l in open(path) if len(l.split()) == 3]
    return sum(1 for r in rows if int(r[2]) > 0) / len(rows) if rows else 0.0


def targets_section(t):
    lines = ["## Targets (issues #8, #17, #18, #19, #21, #44 and #48)", ""]
    if t.get("busy", 0.0) > 0.25:
        lines += [
            f"Other builds ran beside this run for {100 * t['busy']:.0f} % of it "
            "(see Machine), so the timing verdicts below are marked "
            "inconclusive: contention slows each side by different amounts "
            "from one config to the next (see the per-round ratios), and the "
            "matmul peak was probed under different load than the steps. "
            "Rerun `make bench` on an otherwise idle machine for a verdict.", ""]
    lines += ["| target | measured | met |", "|---|---|---|"]
    busy = t.get("busy", 0.0) > 0.25

    def verdict(ok):
        mark = "yes" if ok else "no"
        return f"inconclusive ({mark} as measured)" if busy else mark

    for flavor, precision, threads, r in t.get("eager", []):
        if r is not None:
            lines.append(f"| Baton step <= 0.75x torchtitan eager's, {flavor}, {precision}, "
                         f"{threads} thread(s) | {r:.2f}x | {verdict(r <= 0.75)} |")
    for flavor, precision, threads, r in t.get("compiled", []):
        if r is not None:
            lines.append(f"| Baton step <= 1.0x torchtitan compiled's, {flavor}, "
                         f"{precision}, {threads} thread(s) | {r:.2f}x | "
                         f"{verdict(r <= 1.0)} |")
    losses = t.get("losses", [])
    if losses:
        worst = max(d for *_, d, _ in losses)
        lines.append("| torchtitan's first two losses agree with Baton's from the same "
                     "weights and batches (1e-5 float32, 1e-2 bfloat16), every run | "
                     f"largest difference {worst:.1e} | "
                     f"{'yes' if all(ok for *_, ok in losses) else 'no'} |")
    mfus = [m for *_, m in t.get("mfu_all", []) if m is not None]
    if mfus:
        lines.append(f"| MFU never above 100 % | highest {max(mfus):.0f} % | "
                     f"{'yes' if max(mfus) <= 100 else 'no'} |")
    gap = t.get("bubble_gap")
    if gap is not None:
        lines.append("| measured bubble within 5 pp of the simulator replaying each "
                     "action's measured cost (the executor against its schedule), every "
                     f"schedule | worst gap {gap:.1f} pp | {verdict(gap <= 5)} |")
    gap_mean = t.get("bubble_gap_mean")
    if gap_mean is not None:
        lines.append("| measured bubble within 5 pp of the simulator fed each stage's "
                     "mean cost per kind of action (a prediction), every schedule | "
                     f"worst gap {gap_mean:.1f} pp | {verdict(gap_mean <= 5)} |")
    if t.get("fsdp_state") is not None:
        lines.append("| FSDP (#17): state per rank at dp_shard 2 <= 0.55x of dp_replicate 2 | "
                     f"{t['fsdp_state']:.2f}x | {verdict(t['fsdp_state'] <= 0.55)} |")
        lines.append("| FSDP (#17): tokens/s at dp_shard 2 >= 0.9x of dp_replicate 2 | "
                     f"{t['fsdp_speed']:.2f}x | {verdict(t['fsdp_speed'] >= 0.9)} |")
    lines += scaling_target_rows(t, verdict)
    if t.get("tp_traffic") is not None:
        lines.append("| tensor parallel (#18): bytes each TP layer moves per step "
                     "equal the formula | worst difference "
                     f"{100 * t['tp_traffic']:.2f} % | "
                     f"{'yes' if t['tp_traffic'] <= 0.01 else 'no'} |")
    lines += experts_target_rows(t, verdict)
    lines += context_target_rows(t, verdict)
    if t.get("tp_speed") is not None:
        lines.append("| tensor parallel (#18): tokens/s of tp 2 against dp_replicate 2, "
                     f"small flavor, two CPU cores | {t['tp_speed']:.2f}x | measured "
                     "(not expected to win on CPUs) |")
    ac = t.get("ac")
    if ac:
        mem, time = ac["full"]
        lines.append("| activation checkpointing (#19): full at most 0.3x the activation "
                     f"peak of none | {mem:.2f}x | {verdict(mem <= 0.3)} |")
        lines.append("| activation checkpointing (#19): full at most 1.4x the step time "
                     f"of none | {time:.2f}x | {verdict(time <= 1.4)} |")
        for name in ("selective_op", "selective_layer2"):
            if name in ac:
                m, s = ac[name]
                ok = mem <= m <= 1.0 and 1.0 <= s * 1.02 and s <= time * 1.02
                lines.append(f"| activation checkpointing (#19): {name} between none and "
                             f"full on both axes | {m:.2f}x memory, {s:.2f}x time | "
                             f"{verdict(ok)} |")
    if t.get("bf16_loss") is not None:
        lines.append("| mixed precision (#19): bf16's final loss within 2 % of fp32's, "
                     f"debug model | {100 * t['bf16_loss']:.2f} % | "
                     f"{'yes' if t['bf16_loss'] <= 0.02 else 'no'} |")
        lines.append("| mixed precision (#19): bf16's step against fp32's on this CPU | "
                     f"{t['bf16_speed']:.2f}x | measured |")
    lines += plan_target_rows(t, verdict)
    if t.get("plan_path") is not None:
        lines.append("| plan (#45): on the user's path, the chosen plan within 5 % of "
                     f"the best measured layout, bound or not | "
                     f"{t['plan_path']:.3f}x | {verdict(t['plan_path'] <= 1.05)} |")
    lines += gpu_target_rows(t.get("gpu"))
    return lines + [""]


def plan_target_rows(t, verdict):
    """The targets table's rows of #21 (the runs' and the 405B plan's)."""
    lines = []
    for f in t.get("plan", []):
        name = f["flavor"]
        lines.append(f"| plan (#21): `baton plan --nproc 2` ranks at least 20 candidates, "
                     f"{name} | {f['ranked']} | {'yes' if f['ranked'] >= 20 else 'no'} |")
        lines.append(f"| plan (#21): every run's step within 10 % of its prediction, "
                     f"{name} (top 5 + 5 others) | worst {100 * f['worst_error']:.1f} % | "
                     f"{verdict(f['worst_error'] <= 0.10)} |")
        lines.append(f"| plan (#21): Spearman rank correlation of predicted and measured "
                     f">= 0.8, {name} | {f['spearman']:.2f} | "
                     f"{verdict(f['spearman'] >= 0.8)} |")
        lines.append(f"| plan (#21): the chosen plan within 5 % of the best measured, "
                     f"{name} | {f['chosen_over_best']:.3f}x | "
                     f"{verdict(f['chosen_over_best'] <= 1.05)} |")
    c = t.get("plan_cluster")
    if c:
        lines.append("| plan (#21): planning Llama 3 405B for 512 ranks from a cost file "
                     f"under 10 s | {c['wall_s']:.1f} s | {verdict(c['wall_s'] < 10)} |")
        lines.append("| plan (#21): 405B Interleaved1F1B / 1F1B tokens/s at FSDP 8 x TP 8 "
                     f"x PP 8, beside torchtitan's 1.28 | {c['ratio']:.2f} | measured |")
    return lines


def plan_limit_lines(t):
    """The limits section's bullet on the plan's runs, where a target of #21
    was not met (none otherwise)."""
    lines = []
    plans = t.get("plan", [])
    failed = [f for f in plans if f["worst_error"] > 0.10 or f["spearman"] < 0.8
              or f["chosen_over_best"] > 1.05]
    if failed:
        spread = max(max(c["per_round_s"]) / min(c["per_round_s"]) - 1
                     for f in plans for c in f["candidates"])
        worst = max((c for f in plans for c in f["candidates"]),
                    key=lambda c: abs(c["error"]))
        top = [f"{f['flavor']} "
               f"{100 * (max(c['predicted_s'] for c in f['candidates'][:5]) / min(c['predicted_s'] for c in f['candidates'][:5]) - 1):.1f} %"
               for f in plans]
        pred_spread = max((max(c["predicted_per_round_s"]) /
                           min(c["predicted_per_round_s"]) - 1
                           for f in plans for c in f["candidates"]
                           if c.get("predicted_per_round_s")), default=0.0)
        lines.append(
            "- The plan's predictions against its runs. "
            f"(1) This machine's own drift: one candidate's median step differs by up to "
            f"{100 * spread:.0f} % between rounds of the same script (the measured "
            "per-round column)"
            + (f", and its prediction from each round's own profile by up to "
               f"{100 * pred_spread:.0f} % (the predicted per-round column): the "
               "machine's slow and fast spells are shorter than a round, so a profile "
               "and the runs after it can meet different ones" if pred_spread else "")
            + "; an error of 10 % is within reach of the noise alone. (2) The "
            f"largest error: {worst['layout']}, {100 * worst['error']:+.1f} %. "
            "Measured apart on this machine (2026-12-02, by hand, with the executor's "
            "trace): in a pipelined `baton train` run (LoopedBFS, v 3, 8 microbatches "
            "of 2 sequences) the first stage's forward (the embedding and one block) "
            "took 15.2 ms against 13.8 ms from the profile's own pipeline run in the "
            "same hour (backward 27.6 against 25.6 ms), while a "
            "dp_replicate 2 run matched its prediction within 3 %. Ruled out: timing "
            "each pass with many microbatches' activations in flight (no change), the "
            "allocator that counts CPU tensor bytes (no change), flushing denormals "
            "to zero (within the noise). (3) The top five predictions lie within "
            + ", ".join(top) + " of each other (the first plan's top five, slowest "
            "against fastest prediction), inside (1): "
            "which of them runs fastest is decided by noise the model cannot see, "
            "so the rank correlation over ten runs and the chosen plan's place "
            "suffer most from it.")
    return lines


def limits_section(t):
    """Why each target not met is not met, with this run's figures."""
    lines = ["## What limits the targets not met", ""]
    missed = [(f, p, th, r, "eager", 0.75) for f, p, th, r in t.get("eager", [])
              if r is not None and r > 0.75]
    missed += [(f, p, th, r, "compiled", 1.0) for f, p, th, r in t.get("compiled", [])
               if r is not None and r > 1.0]
    if missed:
        profiles = t.get("profiles", {})
        att = t.get("attention", {})
        text = ("- Step time against torchtitan (" + ", ".join(
            f"{f} {p} {th} thread(s) against {mode}: {r:.2f}x"
            for f, p, th, r, mode, _ in missed) + "): both sides call the same "
            "MKL (float32) and oneDNN (bfloat16) products for the same shapes, so "
            "those take the same time in either; Baton's gain is in what surrounds "
            "them")
        shown = []
        for (h, d), name in ((("16", "16"), "debugmodel"), (("8", "64"), "small")):
            kernel, sdpa = att.get((h, d, "kernel", "1")), att.get((h, d, "0", "1"))
            if kernel and sdpa:
                shown.append(f"attention {kernel:.1f} ms per {name} layer, forward and "
                             f"backward, against SDPA's {sdpa:.1f} ms")
        if shown:
            text += " (" + "; ".join(shown) + ", on 1 thread)"
        text += (", SwiGLU, RoPE and RMSNorm in fused kernels, AdamW in one pass; "
                 "under `torch.compile` Inductor fuses torchtitan's element-wise "
                 "operations too, leaving the products and attention.")
        bounds = []
        for f, p, th, r, mode, target in missed:
            prof = profiles.get((f, p, th))
            if mode != "eager" or not prof:
                continue
            share = prof["kinds_ms"].get("matmul", 0) / prof["wall_ms"]
            bounds.append(f"{f} {p} {th} thread(s): {100 * share:.0f} %")
        if bounds:
            text += (" The products' share of torchtitan's profiled eager step "
                     "(the table above), the least Baton's step can be against "
                     "it: " + "; ".join(bounds) + ". 0.75x leaves 25 % of "
                     "torchtitan's step for all the rest. bench/notes.md has "
                     "Baton's side profiled by hand and what was tried.")
        lines.append(text)
    gap, gap_mean = t.get("bubble_gap"), t.get("bubble_gap_mean")
    if gap_mean is not None and gap_mean > 5:
        lines.append(
            "- Bubble against the simulator fed mean costs: one cost per stage "
            "and kind of action cannot describe this machine, where the two "
            "rank threads share two cores and one memory bus with each other "
            "and with Gloo's threads: an action costs more while the other "
            "rank computes (the steady state) than alone (the ramp-up and "
            "drain), so the mean is too high for the ends and too low for the "
            "middle." + (
                " Fed each action's own measured cost, the same simulator "
                f"comes within {gap:.1f} pp of the measured bubble: the "
                "schedule's dependencies and the executor behave as simulated, "
                "and what the mean-cost model misses is how costs vary with "
                "contention." if gap is not None and gap <= 5 else ""))
    if gap is not None and gap > 5:
        lines.append(
            "- Bubble against the simulator fed each action's measured cost: "
            "what remains is time the simulator does not model: data on the "
            "wire (P2P latency 0 in the simulator), the executor's "
            "bookkeeping between actions, and the ranks' start skew.")
    lines += plan_limit_lines(t)
    if len(lines) == 2:
        return []
    return lines + [""]


def main():
    if sys.argv[1] == "--gpu":
        splice_gpu(sys.argv[2], sys.argv[3])
        return
    if sys.argv[1] == "--plan":
        splice_plan(sys.argv[2], sys.argv[3])
        return
    if sys.argv[1] == "--plan-cluster":
        splice_plan_cluster(sys.argv[2], sys.argv[3])
        return
    if sys.argv[1] == "--plan-path":
        splice_plan_path(sys.argv[2], sys.argv[3])
        return
    if sys.argv[1] == "--scaling":
        splice_scaling(sys.argv[2], sys.argv[3])
        return
    if sys.argv[1] == "--experts":
        splice_experts(sys.argv[2], sys.argv[3])
        return
    if sys.argv[1] == "--context":
        splice_context(sys.argv[2], sys.argv[3], sys.argv[4])
        return
    results, docs = sys.argv[1], sys.argv[2]
    machine = load(results, "machine.json")
    step_runs = gbench_rounds(results, "train_step_")
    step_runs.update(gbench_rounds(results, "kernels_"))
    peers = {}
    for f in sorted(os.listdir(results)):
        if f.startswith("torchtitan_") and f.endswith(".json"):
            p = load(results, f)
            peers.setdefault((p["flavor"], p["precision"], p["threads"], p["mode"]),
                             []).append(p)
    pipe = load(results, "pipeline.json")
    runs = load(results, "pipeline_runs.json")
    gpu = load(results, "gpu.json")
    if not gpu and os.path.exists(LAST_GPU):
        gpu = json.load(open(LAST_GPU))
    targets = {"gpu": gpu, "busy": busy_fraction(results), "machine": machine}
    body = []
    body += step_section(step_runs, peers, docs, targets, results)
    body += pipeline_section(pipe, runs, docs, targets)
    body += p2p_section(pipe)
    body += fsdp_section(load(results, "fsdp_runs.json"), targets)
    body += scaling_section(load(results, "scaling_runs.json"), targets)
    body += tp_traffic_section(load(results, "tensor_parallel.json"), targets)
    body += experts_section(load(results, "expert_parallel.json"), machine, targets)
    body += context_section(load(results, "context_parallel.json"),
                            load(results, "context_parallel_runs.json"),
                            machine, targets)
    body += plan_section(load(results, "plan_runs.json"), targets)
    body += plan_path_section(load(results, "plan_path.json"), targets)
    body += memory_section(load(results, "memory_runs.json"), targets)
    body += precision_section(load(results, "precision_runs.json"), machine, targets)
    body += collectives_section(pipe)
    body += schedule_section(load(results, "schedule.json"))
    body += loader_section(load(results, "dataloader.json"))
    gpu_text = ("\n".join(gpu_section(gpu)) if gpu else
                open(os.path.join(os.path.dirname(__file__), "gpu_note.md")).read())
    notes = open(os.path.join(os.path.dirname(__file__), "notes.md")).read()
    page = [
        "# Performance",
        "",
        "Generated by `make bench` (`scripts/bench.sh`, `bench/report.py`) from "
        "`bench/results/*.json` of one run; do not edit by hand. Every comparison "
        "below was measured side by side in that run.",
        "",
    ] + machine_section(machine, results) + targets_section(targets) + limits_section(targets) + body + [gpu_text.rstrip("\n"), "", notes]
    with open(os.path.join(docs, "PERFORMANCE.md"), "w") as f:
        f.write("\n".join(page).rstrip() + "\n")


if __name__ == "__main__":
    main()
