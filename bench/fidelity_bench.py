#!/usr/bin/env python3
"""Predicted against measured step time on this machine.

Calibrates the machine (`zerorun --calibrate`, once for 1 rank and once
under mpirun for 2), then, for tiny and small GPT-2 and Llama shapes at 1
and 2 ranks, ZeRO stages 0-3, with and without CPU optimizer offload, it
compiles a plan, runs it with `zerorun --profile`, and compares the step
time `zeroc inspect --cluster CALIBRATION --compare` predicts with the
measured median (steps after the first, slowest rank). It prints one row
per configuration with the ratio predicted / measured and the load average
when the run started, and writes them as JSON (--json).

A benchmark, not a test: timings depend on the machine and on what else
runs on it. Run it on an otherwise idle machine and quote the table with
the load averages.

    python3 bench/fidelity_bench.py [--build build] [--steps 6]
        [--models tiny-gpt2,tiny-llama,small-gpt2,small-llama]
        [--ranks 1,2] [--calibrations 1] [--json out.json]

`--calibrations N` calibrates N times per rank count and uses each
figure's median: on a shared machine one calibration's figures move with
whatever else ran while it measured.

After the table it prints, per model, rank count and offload, the order of
the ZeRO stages by predicted step time (what `zeroc advise` ranks them by:
the same simulation) against their order by measured time, and whether
they agree ("stage_orders" in the JSON).

`--recompare WORK` runs nothing: it compares the plans and traces an
earlier run left in WORK (its "work" folder) again with this build's
zeroc, against that run's calibration files: what a change to the model
makes of measurements already taken.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SMALL = {
    "small-gpt2": {"activation_function": "gelu_new", "model_type": "gpt2",
                   "n_embd": 256, "n_head": 4, "n_layer": 4,
                   "n_positions": 128, "vocab_size": 4096},
    "small-llama": {"hidden_act": "silu", "hidden_size": 256,
                    "intermediate_size": 688, "max_position_embeddings": 128,
                    "model_type": "llama", "num_attention_heads": 4,
                    "num_hidden_layers": 4, "num_key_value_heads": 2,
                    "rms_norm_eps": 1e-5, "vocab_size": 4096},
}
SEQ = {"tiny-gpt2": 32, "tiny-llama": 32, "small-gpt2": 128,
       "small-llama": 128}


def loadavg():
    return os.getloadavg()[0]


def run(cmd, **kw):
    out = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if out.returncode != 0:
        raise RuntimeError(f"failed: {' '.join(cmd)}\n{out.stderr[-2000:]}")
    return out.stdout


def mpi(ranks, cmd):
    if ranks == 1:
        return cmd
    return ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np",
            str(ranks)] + cmd


def ds_config(stage, offload):
    z = {"stage": stage}
    if offload:
        z["offload_optimizer"] = {"device": "cpu"}
    return {"train_micro_batch_size_per_gpu": 2,
            "gradient_accumulation_steps": 2, "zero_optimization": z}


def median_calibration(docs):
    """The first cluster file with every measured figure ({"value": ...,
    "source": ...}) replaced by its median over `docs`."""
    def merge(nodes):
        first = nodes[0]
        if isinstance(first, dict) and isinstance(first.get("value"),
                                                  (int, float)):
            values = sorted(n["value"] for n in nodes)
            out = dict(first)
            out["value"] = values[len(values) // 2]
            if "source" in out:
                out["source"] += f" (median of {len(values)} calibrations)"
            return out
        if isinstance(first, dict):
            return {k: merge([n[k] for n in nodes]) if all(
                isinstance(n, dict) and k in n for n in nodes) else v
                    for k, v in first.items()}
        return first
    return merge(docs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--models",
                    default="tiny-gpt2,tiny-llama,small-gpt2,small-llama")
    ap.add_argument("--ranks", default="1,2")
    ap.add_argument("--stages", default="0,1,2,3")
    ap.add_argument("--calibrations", type=int, default=1,
                    help="calibrate this many times per rank count and "
                    "take each figure's median (this machine's figures "
                    "moved by 15-75%% between two calibrations)")
    ap.add_argument("--json", default="")
    ap.add_argument("--recompare", default="",
                    help="a previous run's work folder: compare its plans "
                    "and traces again, running nothing")
    args = ap.parse_args()
    zeroc = os.path.join(args.build, "bin", "zeroc")
    zerorun = os.path.join(args.build, "bin", "zerorun")
    again = bool(args.recompare)
    work = args.recompare or tempfile.mkdtemp(prefix="fidelity-")
    rows = []
    ranks_list = [int(r) for r in args.ranks.split(",")]

    calibration = {}
    for ranks in ranks_list:
        if again:
            calibration[ranks] = os.path.join(work, f"cal{ranks}.json")
            continue
        path = os.path.join(work, f"cal{ranks}.json")
        load = loadavg()
        t0 = time.time()
        if args.calibrations <= 1:
            run(mpi(ranks, [zerorun, "--calibrate", "-o", path]))
        else:
            parts = []
            for i in range(args.calibrations):
                part = os.path.join(work, f"cal{ranks}.{i}.json")
                run(mpi(ranks, [zerorun, "--calibrate", "-o", part]))
                parts.append(json.load(open(part)))
            json.dump(median_calibration(parts), open(path, "w"), indent=1)
        calibration[ranks] = path
        print(f"calibrated {ranks} rank(s) in {time.time() - t0:.0f} s "
              f"(load {load:.2f}): {path}", flush=True)

    print(f"{'model':<12} {'ranks':>5} {'stage':>5} {'offload':>7} "
          f"{'predicted':>11} {'measured':>11} {'ratio':>6} {'load':>5}",
          flush=True)
    for model in args.models.split(","):
        mlir = os.path.join(work, model + ".mlir")
        if again:
            pass
        elif model in SMALL:
            cfg = os.path.join(work, model + ".config.json")
            json.dump(SMALL[model], open(cfg, "w"))
            source = [cfg]
        else:
            source = ["--preset", model]
        if not again:
            run([zeroc, "gen"] + source + ["--seq-len", str(SEQ[model]),
                                           "--micro-batch", "2", "--quiet",
                                           "-o", mlir])
        for ranks in ranks_list:
            for stage in [int(s) for s in args.stages.split(",")]:
                for offload in ([False] if stage == 0 else [False, True]):
                    name = f"{model}-r{ranks}-s{stage}-{'off' if offload else 'dev'}"
                    ds = os.path.join(work, name + ".ds.json")
                    if not again:
                        json.dump(ds_config(stage, offload), open(ds, "w"))
                    plan = os.path.join(work, name + ".plan.json")
                    trace = os.path.join(work, name + ".trace.json")
                    row = {"model": model, "ranks": ranks, "stage": stage,
                           "offload": offload}
                    try:
                        if again:
                            row["load_before"] = row["load_after"] = -1
                        else:
                            run([zeroc, mlir, "--config", ds, "--world-size",
                                 str(ranks), "--quiet", "-o", plan])
                            row["load_before"] = loadavg()
                            run(mpi(ranks, [zerorun, plan, "--steps",
                                            str(args.steps), "--plain",
                                            "--profile", trace]))
                            row["load_after"] = loadavg()
                        cmp = json.loads(run(
                            [zeroc, "inspect", plan, "--cluster",
                             calibration[ranks], "--compare", trace,
                             "--json"]))
                        row.update(predicted_s=cmp["step"]["predicted_s"],
                                   measured_s=cmp["step"]["measured_s"],
                                   ratio=cmp["step"]["ratio"],
                                   largest_errors=cmp["largest_errors"][:3],
                                   op_kinds=cmp["op_kinds"][:6])
                        print(f"{model:<12} {ranks:>5} {stage:>5} "
                              f"{'cpu' if offload else '-':>7} "
                              f"{row['predicted_s'] * 1e3:>8.2f} ms "
                              f"{row['measured_s'] * 1e3:>8.2f} ms "
                              f"{row['ratio']:>6.2f} "
                              f"{row['load_before']:>5.2f}", flush=True)
                    except RuntimeError as e:
                        row["error"] = str(e).splitlines()[0][:300]
                        print(f"{model:<12} {ranks:>5} {stage:>5} "
                              f"{'cpu' if offload else '-':>7} error: "
                              f"{row['error']}", flush=True)
                    rows.append(row)
    ok = [r for r in rows if "ratio" in r]
    within = [r for r in ok if abs(r["ratio"] - 1) <= 0.15]
    print(f"\n{len(within)} of {len(ok)} configurations within 15% "
          f"({len(rows) - len(ok)} failed)")
    orders = stage_orders(ok)
    if args.json:
        json.dump({"rows": rows, "calibration": calibration,
                   "stage_orders": orders, "work": work},
                  open(args.json, "w"), indent=1)


def stage_orders(rows):
    """Per model, rank count and offload: the stages fastest first by
    predicted and by measured step time, whether the orders agree, and how
    many of the pairs of stages the prediction orders as measured."""
    groups = {}
    for r in rows:
        groups.setdefault((r["model"], r["ranks"], r["offload"]), []).append(r)
    out = []
    print("\nstage order, fastest first (predicted: what advise ranks by)")
    print(f"{'model':<12} {'ranks':>5} {'offload':>7} {'predicted':>10} "
          f"{'measured':>10}  pairs  measured ms by stage")
    for (model, ranks, offload), g in groups.items():
        if len(g) < 2:
            continue
        by_pred = [r["stage"] for r in sorted(g, key=lambda r: r["predicted_s"])]
        by_meas = [r["stage"] for r in sorted(g, key=lambda r: r["measured_s"])]
        pairs = [(a, b) for i, a in enumerate(g) for b in g[i + 1:]]
        agree = sum((a["predicted_s"] < b["predicted_s"]) ==
                    (a["measured_s"] < b["measured_s"]) for a, b in pairs)
        out.append({"model": model, "ranks": ranks, "offload": offload,
                    "predicted": by_pred, "measured": by_meas,
                    "same": by_pred == by_meas, "pairs_agreeing": agree,
                    "pairs": len(pairs)})
        times = " ".join(f"s{r['stage']}={r['measured_s'] * 1e3:.2f}"
                         for r in sorted(g, key=lambda r: r["stage"]))
        print(f"{model:<12} {ranks:>5} {'cpu' if offload else '-':>7} "
              f"{'<'.join(map(str, by_pred)):>10} "
              f"{'<'.join(map(str, by_meas)):>10}  {agree}/{len(pairs)}  "
              f"{times}")
    same = sum(o["same"] for o in out)
    print(f"{same} of {len(out)} stage orders as measured; "
          f"{sum(o['pairs_agreeing'] for o in out)} of "
          f"{sum(o['pairs'] for o in out)} pairs")
    return out


if __name__ == "__main__":
    main()
