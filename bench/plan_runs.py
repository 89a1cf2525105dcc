#!/usr/bin/env python3
"""`baton plan` on this machine: predicted against measured step time.

For the debug and small flavors on 2 ranks, `baton plan --nproc 2 --out DIR`
profiles this machine (its ranks time every piece together, the cost file
goes to DIR/costs.json) and ranks the layouts (DIR/plan.json). This script
then runs the plan's top 5 and 5 others spread evenly over the rest of its
range of predicted step times (the slowest included; see picks) as real
processes: `baton train --nproc 2` with the base config and the candidate's
overlay as a second --config, each rank with one ATen and one MKL
thread, the candidates interleaved in each of R rounds. The profile's ranks
and the runs' are launched alike: by default each bound to its own core
(--cpu-bind cores; --cpu-bind none leaves them to the scheduler). Each
round after the first profiles and plans again and predicts the same
candidates from its own profile, so that a prediction and the runs it
predicts meet the machine in the same minutes.
Predicted and measured (the median step time of steps 3.. of a run) are
each the median over the rounds. It reports each candidate's error, the
Spearman rank correlation of predicted and measured, and the chosen plan
(the first plan's rank 1: `baton plan` ranks predictions within its
tolerance of the fastest simplest first) against the best measured.

Usage: plan_runs.py BUILD_DIR OUT.json [--rounds R] [--steps N]
                    [--flavors debugmodel,small] [--cpu-bind cores|none]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import process_runs

# Both flavors: float32, one ATen thread per rank, no start-up probe. The
# global batch is the plan's (--global-batch); each candidate's overlay sets
# its local batch, so the runs take no local_batch_size override.
COMMON = [
    "--config", "configs/debug_model.yaml",
    "--training.num_threads=1", "--training.seq_len=256",
    "--training.mixed_precision_param=float32",
]
RUN_ONLY = ["--metrics.log_freq=1", "--metrics.peak_tflops=1",
            "--lr_scheduler.warmup_steps=2", "--checkpoint.enable=false"]
FLAVORS = [
    ("debugmodel", [], 16),
    ("small", ["--model.flavor=small"], 8),
]
TOP = 5
OTHERS = 5


def machine(build, tmp):
    """The CPU model and the BLAS kernel set `baton` runs with here (its
    start-up line "blas: ..., kernels X, ...")."""
    done = subprocess.run(
        [os.path.join(build, "baton"), "train", *COMMON, *RUN_ONLY,
         "--training.steps=1", f"--job.dump_folder={tmp}/machine"],
        capture_output=True, text=True)
    return {"cpu": process_runs.cpu_model(),
            "blas": process_runs.blas_line(done.stderr)}


def plan(build, flavor_args, global_batch, out_dir, cpu_bind):
    cmd = [os.path.join(build, "baton"), "plan", *COMMON, *flavor_args,
           "--nproc", "2", "--global-batch", str(global_batch),
           "--top", "10", "--out", out_dir, "--cpu-bind", cpu_bind]
    start = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit("baton plan failed:\n" + done.stdout[-3000:] + done.stderr[-3000:])
    wall = time.monotonic() - start
    with open(os.path.join(out_dir, "plan.json")) as f:
        result = json.load(f)
    with open(os.path.join(out_dir, "costs.json")) as f:
        costs = json.load(f)
    print(done.stdout, flush=True)
    return result, costs, wall


def train(build, name, args, tmp, cpu_bind):
    """`baton train --nproc 2 --cpu-bind CPU_BIND ARGS`, as the profile's
    ranks were launched: the metrics rows of steps 3..; exits naming the
    run if it fails."""
    return process_runs.launch(build, name, 2, args, tmp, cpu_bind)[0]


def picks(ranked):
    """The top TOP ranks (0-based) and OTHERS spread evenly over the rest of
    the plan's range of predicted step times, the slowest included: other k
    is the rest's candidate predicted nearest the top's last plus k / OTHERS
    of the way to the slowest. Spread by time, not by rank: a plan's ranks
    crowd where many layouts tie (in one small plan ranks 1-40 lie within
    14 % of the fastest, ranks 41-65 between 17 and 91 % slower), and a
    rank correlation over candidates closer than the runs' noise measures
    the noise; candidates a fifth of the range apart test whether the
    predictions order what differs."""
    n = len(ranked)
    chosen = list(range(min(TOP, n)))
    rest = list(range(TOP, n))
    if len(rest) <= OTHERS:
        return chosen + rest
    low = ranked[TOP - 1]["step_s"]
    high = ranked[-1]["step_s"]
    others = set()
    for k in range(1, OTHERS + 1):
        target = low + k * (high - low) / OTHERS
        free = [i for i in rest if i not in others]
        # Nearest the target; among equals the later rank, so that the
        # last one (the slowest, the last target) is always included.
        others.add(min(free, key=lambda i: (abs(ranked[i]["step_s"] - target), -i)))
    return chosen + sorted(others)


def ranks_of(values):
    """Ranks 1..n, ties sharing their mean rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(xs, ys):
    rx, ry = ranks_of(xs), ranks_of(ys)
    mx, my = statistics.mean(rx), statistics.mean(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    vx = sum((a - mx) ** 2 for a in rx)
    vy = sum((b - my) ** 2 for b in ry)
    return cov / (vx * vy) ** 0.5 if vx and vy else 0.0


def cluster(build, tmp):
    """Llama 3 405B on 512 H100-class ranks from the FLOP-derived cost file:
    the planning time (median of 3 runs of `baton plan`, wall) and the
    Interleaved1F1B / 1F1B throughput at torchtitan's layout (FSDP 8 x TP 8
    x PP 8, microbatches of one sequence, full checkpointing, v 2, even
    split)."""
    out_dir = os.path.join(tmp, "405b")
    cmd = [os.path.join(build, "baton"), "plan",
           "--config", "configs/llama3_405b.yaml", "--nproc", "512",
           "--costs", "bench/costs/llama3_405b_h100.json", "--out", out_dir]
    walls = []
    for _ in range(3):
        start = time.monotonic()
        done = subprocess.run(cmd, capture_output=True, text=True)
        walls.append(time.monotonic() - start)
        if done.returncode != 0:
            sys.exit("baton plan (405B) failed:\n" + done.stderr[-3000:])
    with open(os.path.join(out_dir, "plan.json")) as f:
        result = json.load(f)
    with open("bench/costs/llama3_405b_h100.json") as f:
        obtained = json.load(f)["obtained"]

    def at_torchtitans(schedule, v):
        for c in result["ranked"]:
            if (c["pp"], c["tp"], c["dp_shard"], c["dp_replicate"]) == (8, 8, 8, 1) \
                    and c["schedule"] == schedule and c["stages_per_rank"] == v \
                    and c["microbatch_size"] == 1 and not c["balanced"] \
                    and c["activation_checkpoint"] == "full":
                return c
        return None

    inter, one = at_torchtitans("Interleaved1F1B", 2), at_torchtitans("1F1B", 1)
    best = result["ranked"][0]
    return {"wall_s": statistics.median(walls), "walls_s": walls,
            "considered": result["considered"], "pruned": result["pruned"],
            "ranked": len(result["ranked"]), "obtained": obtained,
            "interleaved": inter, "one_f_one_b": one,
            "ratio": inter["tokens_per_s"] / one["tokens_per_s"],
            "best": {k: best[k] for k in ("layout", "tokens_per_s_per_rank",
                                          "bubble", "peak_bytes")}}


def key_of(c):
    """What names a candidate across plans: its layout line (degrees,
    schedule, v, m, checkpointing, resharding) and its layer split."""
    return (c["layout"], tuple(c["layers_per_stage"]), c["balanced"])


def flavor_runs(args, flavor, flavor_args, global_batch, tmp):
    """Round 0 profiles, plans and picks the candidates; each later round
    profiles and plans again. Every round predicts the picked candidates
    from its own plan and runs them, interleaved. A
    candidate's prediction and measurement are each the median over the
    rounds: on a machine whose speed drifts by 10-17 % between minutes, the
    profile and the runs it predicts then meet the same spells."""
    out_dir = os.path.join(tmp, flavor)
    result, costs, wall = plan(args.build, flavor_args, global_batch, out_dir,
                               args.cpu_bind)
    first_result = result
    ranked = result["ranked"]
    chosen = picks(ranked)
    keys = [key_of(ranked[k]) for k in chosen]
    first_plan = {key_of(ranked[k]): ranked[k] for k in chosen}
    predicted = {k: [] for k in keys}
    runs = {k: [] for k in keys}
    all_costs = [costs]
    for r in range(args.rounds):
        if r > 0:
            result, costs, _ = plan(args.build, flavor_args, global_batch,
                                    os.path.join(tmp, f"{flavor}_{r}"),
                                    args.cpu_bind)
            all_costs.append(costs)
        by_key = {key_of(c): c for c in result["ranked"]}
        # Each round starts one candidate further on, so that no candidate
        # always runs first after the profile.
        for k in keys[r % len(keys):] + keys[:r % len(keys)]:
            # A synthesised schedule is made for each plan's costs and
            # ranked only where it beats the built-in ones: a round whose
            # plan has none for this layout runs the first plan's and
            # predicts nothing for it.
            c = by_key.get(k, first_plan[k])
            if k in by_key:
                predicted[k].append(c["step_s"])
            overlay = os.path.join(out_dir, f"candidate_{r}_{c['rank']}.yaml")
            with open(overlay, "w") as f:
                f.write(c["overlay"])
            rows = train(
                args.build, f"{flavor}_{c['rank']}_{r}",
                [*COMMON, *flavor_args, "--config", overlay, *RUN_ONLY,
                 f"--training.steps={args.steps}"], tmp, args.cpu_bind)
            step = process_runs.speed(rows)["step_s"]
            runs[k].append(step)
            print(json.dumps({"flavor": flavor, "rank": c["rank"],
                              "layout": c["layout"], "round": r,
                              "predicted_s": c["step_s"],
                              "measured_s": step}), flush=True)
    candidates = []
    for k, first in zip(keys, chosen):
        c = ranked[first]
        pred = statistics.median(predicted[k])
        measured = statistics.median(runs[k])
        candidates.append({
            "rank": first + 1, "layout": c["layout"],
            "layers_per_stage": c["layers_per_stage"],
            "balanced": c["balanced"],
            "schedule": c["schedule"],
            "predicted_s": pred, "predicted_per_round_s": predicted[k],
            "compute_s": c["compute_s"],
            "dp_sync_s": c["dp_sync_s"], "optimizer_s": c["optimizer_s"],
            "bubble": c["bubble"], "peak_bytes": c["peak_bytes"],
            "measured_s": measured, "per_round_s": runs[k],
            "error": measured / pred - 1.0})
    # The plan's choice: the first plan's rank 1 (plan.yaml), the simplest
    # of those it predicts within its tolerance of the fastest.
    choice = next(c for c in candidates if c["rank"] == 1)
    tied = first_result.get("tied", 1)
    how = (f"the first plan's rank 1, the simplest of the {tied} predicted "
           f"within {100 * first_result.get('tolerance', 0):.3g} % of the fastest"
           if tied > 1 else "the first plan's rank 1, its lowest prediction")
    pred = [c["predicted_s"] for c in candidates]
    meas = [c["measured_s"] for c in candidates]
    return {
        "flavor": flavor, "global_batch": global_batch,
        "considered": result["considered"], "pruned": result["pruned"],
        "dominated": result["dominated"], "ranked": len(ranked),
        "synthesis_layouts": first_result["synthesis_layouts"],
        "synthesis_wins": first_result["synthesis_wins"],
        "plan_wall_s": wall, "costs": all_costs[0], "costs_per_round": all_costs,
        "candidates": candidates,
        "chosen": {"rank": choice["rank"], "layout": choice["layout"],
                   "how": how},
        "tied": tied,
        "spearman": spearman(pred, meas),
        "worst_error": max(abs(c["error"]) for c in candidates),
        "chosen_over_best": choice["measured_s"] / min(meas)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("build")
    parser.add_argument("out")
    parser.add_argument("--rounds", type=int, default=5)
    # 10: a run's median over 8 steps (3..10). With 6 (4 steps) the same
    # candidate's runs differed by up to 53 % between rounds on a Zen 4
    # (bench/notes.md).
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--flavors", default="debugmodel,small")
    # Bound, a run's spread was 0.15-5 % against 3-12 % left to the
    # scheduler, on a 2-core Zen 5 (bench/notes.md).
    parser.add_argument("--cpu-bind", default="cores", choices=["cores", "none"])
    args = parser.parse_args()
    report = {"rounds": args.rounds, "steps": args.steps, "flavors": [],
              "cpu_bind": args.cpu_bind,
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              }
    conditions = process_runs.Conditions()
    with tempfile.TemporaryDirectory(prefix="baton_plan_runs_") as tmp:
        report.update(machine(args.build, tmp))
        report["cluster"] = cluster(args.build, tmp)
        print(json.dumps({k: report["cluster"][k]
                          for k in ("wall_s", "ratio", "considered", "ranked")}),
              flush=True)
        for flavor, flavor_args, global_batch in FLAVORS:
            if flavor not in args.flavors.split(","):
                continue
            report["flavors"].append(
                flavor_runs(args, flavor, flavor_args, global_batch, tmp))
    report["conditions"] = conditions.summary()
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
