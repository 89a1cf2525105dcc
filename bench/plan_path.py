#!/usr/bin/env python3
"""The plan on the user's path: `baton plan` run as a new user runs it, its
overlay trained the way it says, against the other layouts bound and not.

1. `baton plan --config configs/debug_model.yaml --nproc 2 --global-batch 8
   --out DIR`, nothing else: the config's own threads and precision, and no
   --cpu-bind, so the plan profiles its ranks unbound and bound and chooses
   (plan.json's `cpu_bind`, the overlay's launch line). The other binding's
   predictions: `baton plan --costs` on the other cost file it wrote, for
   the same layout line (none where that plan ranks no such candidate).
2. The field: the best-predicted candidate of each layout family the plan
   ranks (dp_replicate 2; dp_shard 2 with each resharding; pp 2, its best
   schedule; tp 2), each run unbound and bound: `baton train --config
   configs/debug_model.yaml --config OVERLAY --nproc 2 [--cpu-bind cores]`,
   cut to --steps steps (8) with a metrics row per step and no checkpoint.
   The chosen plan is the run of its family and binding.
3. R rounds (5), the runs interleaved in each, each round starting one run
   further on. Measured: the median step of steps 3.. of a run, then the
   median over the rounds.

It reports every run's prediction and measurement, the best measured, and
the chosen plan's measured time over the best's (the issue's target: within
1.05).

Usage: plan_path.py BUILD_DIR OUT.json [--rounds R] [--steps N]
"""

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import process_runs

BASE = ["--config", "configs/debug_model.yaml"]
RUN_ONLY = ["--metrics.log_freq=1", "--checkpoint.enable=false"]
GLOBAL_BATCH = 8


def family(c):
    """What a layout family is: its degrees and resharding; pipelines
    together whatever their schedule."""
    return (c["pp"], c["dp_replicate"], c["dp_shard"], c.get("tp", 1),
            c["fsdp_reshard"])


def plan(build, out_dir, costs=None):
    """`baton plan` as the user runs it (or from `costs`); plan.json and
    the wall time."""
    cmd = [os.path.join(build, "baton"), "plan", *BASE, "--nproc", "2",
           "--global-batch", str(GLOBAL_BATCH), "--out", out_dir]
    if costs:
        cmd += ["--costs", costs]
    start = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit("baton plan failed:\n" + done.stdout[-3000:] + done.stderr[-3000:])
    print(done.stdout, flush=True)
    with open(os.path.join(out_dir, "plan.json")) as f:
        return json.load(f), time.monotonic() - start, done.stdout


def field(ranked):
    """The best-ranked candidate of each family, in plan order."""
    seen, out = set(), []
    for c in ranked:
        if family(c) not in seen:
            seen.add(family(c))
            out.append(c)
    return out


def first_by_layout(ranked):
    """Each layout line's first (best-ranked) candidate."""
    out = {}
    for c in ranked:
        out.setdefault(c["layout"], c)
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("build")
    parser.add_argument("out")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args()
    conditions = process_runs.Conditions()
    with tempfile.TemporaryDirectory() as tmp:
        user_dir = os.path.join(tmp, "plan")
        result, wall, printed = plan(args.build, user_dir)
        bind = result.get("cpu_bind") or "none"
        other = "cores" if bind == "none" else "none"
        other_costs = os.path.join(
            user_dir, "costs-cpu-bind-cores.json" if other == "cores" else "costs.json")
        # Per binding, each layout's prediction (the first of its line:
        # a synthesised schedule may be made for each plan's costs).
        predictions = {bind: first_by_layout(result["ranked"])}
        if os.path.exists(other_costs):
            other_result, _, _ = plan(args.build, os.path.join(tmp, "other"),
                                      other_costs)
            predictions[other] = first_by_layout(other_result["ranked"])
        chosen = result["ranked"][0]
        layouts = field(result["ranked"])
        runs = [(c, b) for c in layouts for b in ("none", "cores")]
        measured = {(family(c), b): [] for c, b in runs}
        logs = {}
        for r in range(args.rounds):
            shift = r % len(runs)
            for c, b in runs[shift:] + runs[:shift]:
                overlay = os.path.join(tmp, f"overlay_{c['rank']}.yaml")
                with open(overlay, "w") as f:
                    f.write(c["overlay"])
                name = f"rank{c['rank']}_{b}_{r}"
                rows, output = process_runs.launch(
                    args.build, name, 2,
                    [*BASE, "--config", overlay, *RUN_ONLY,
                     f"--training.steps={args.steps}"], tmp, b)
                logs.setdefault("blas", process_runs.blas_line(output))
                step = process_runs.speed(rows)["step_s"]
                measured[(family(c), b)].append(step)
                print(json.dumps({"layout": c["layout"], "cpu_bind": b,
                                  "round": r, "measured_s": step}), flush=True)
    entries = []
    for c, b in runs:
        predicted = predictions.get(b, {}).get(c["layout"])
        entries.append({
            "layout": c["layout"], "cpu_bind": b,
            # Its rank in the plan of its own binding.
            "plan_rank": predicted["rank"] if predicted else None,
            "predicted_s": predicted["step_s"] if predicted else None,
            "measured_s": statistics.median(measured[(family(c), b)]),
            "per_round_s": measured[(family(c), b)],
            "chosen": family(c) == family(chosen) and b == bind})
    best = min(entries, key=lambda e: e["measured_s"])
    pick = next(e for e in entries if e["chosen"])
    samples = conditions.summary()
    out = {
        "date": datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": process_runs.cpu_model(), "blas": logs.get("blas", "not reported"),
        "command": "baton plan --config configs/debug_model.yaml --nproc 2 "
                   f"--global-batch {GLOBAL_BATCH} --out DIR",
        "plan_wall_s": wall, "cpu_bind": bind,
        "binding_line": next((l for l in printed.splitlines()
                              if l.startswith("binding:")), ""),
        "chosen": chosen["layout"], "rounds": args.rounds, "steps": args.steps,
        "runs": entries, "best": best, "chosen_run": pick,
        "chosen_over_best": pick["measured_s"] / best["measured_s"],
        "conditions": samples,
    }
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    print(f"chosen {pick['layout']} ({bind}) measured "
          f"{pick['measured_s']:.3f} s, best {best['layout']} "
          f"({best['cpu_bind']}) {best['measured_s']:.3f} s: "
          f"{out['chosen_over_best']:.3f}x")


if __name__ == "__main__":
    main()
