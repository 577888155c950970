#!/usr/bin/env python3
"""Step-time benchmark of zerorun's CPU backend: a worker thread per plan
stream against every op on one thread (--single-thread), side by side.

For each ZeRO stage, one plan (a small GPT-2, f32) runs under mpirun with
both executors, alternating runs so that machine noise hits both alike;
reports per configuration the median step time (steps after the first),
the compute stream's time and its time waiting on other streams, the ratio
single-thread / threaded, and the measured vs predicted peak memory.

A benchmark, not a test: run it by hand, compare figures taken in one run,
quote medians and ratios (absolute times only from a quiet machine).

    python3 bench/zerorun_bench.py [--build build] [--np 4] [--steps 12]
        [--runs 3] [--layers 4] [--hidden 256] [--seq 128] [--micro 4]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    if r.returncode != 0:
        sys.exit("failed (%d): %s\n%s" % (r.returncode, " ".join(cmd),
                                          r.stdout))
    return r.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--np", type=int, default=4)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--micro", type=int, default=4)
    ap.add_argument("--mpirun", default="mpirun --oversubscribe "
                    "--allow-run-as-root")
    args = ap.parse_args()
    zeroc = os.path.join(args.build, "bin", "zeroc")
    zerorun = os.path.join(args.build, "bin", "zerorun")
    work = tempfile.mkdtemp(prefix="zerorun-bench-")
    hf = {"model_type": "gpt2", "vocab_size": 4096, "n_positions": args.seq,
          "n_embd": args.hidden, "n_layer": args.layers,
          "n_head": max(1, args.hidden // 64), "torch_dtype": "float32"}
    with open(os.path.join(work, "config.json"), "w") as f:
        json.dump(hf, f)
    model = os.path.join(work, "model.mlir")
    run([zeroc, "gen", os.path.join(work, "config.json"), "--seq-len",
         str(args.seq), "--micro-batch", str(args.micro), "--dtype", "f32",
         "--quiet", "-o", model])
    print("model: GPT-2 %d layers, hidden %d, seq %d, micro-batch %d, f32; "
          "%d ranks (mpirun), %d steps x %d runs per executor" % (
              args.layers, args.hidden, args.seq, args.micro, args.np,
              args.steps, args.runs))
    print("%-7s %-9s %9s %9s %9s %8s %12s" % (
        "stage", "executor", "step ms", "compute", "wait", "ratio",
        "mem meas/pred"))
    for stage in (0, 1, 2, 3):
        cfg = {"train_micro_batch_size_per_gpu": args.micro,
               "zero_optimization": {"stage": stage, "overlap_comm": True,
                                     "reduce_bucket_size": 200000,
                                     "stage3_param_persistence_threshold": 0}}
        cfg_path = os.path.join(work, "ds%d.json" % stage)
        with open(cfg_path, "w") as f:
            json.dump(cfg, f)
        plan = os.path.join(work, "plan%d.json" % stage)
        run([zeroc, model, "--config", cfg_path, "--world-size", str(args.np),
             "--quiet", "-o", plan])
        rows = {"threads": [], "single": []}
        final = {}
        for _ in range(args.runs):
            for mode in ("threads", "single"):
                log = os.path.join(work, "log-%d-%s.jsonl" % (stage, mode))
                cmd = args.mpirun.split() + ["-np", str(args.np), zerorun, plan,
                                             "--synthetic", "--steps",
                                             str(args.steps), "--log-json", log]
                if mode == "single":
                    cmd.append("--single-thread")
                run(cmd)
                recs = [json.loads(l) for l in open(log)]
                rows[mode] += [r for r in recs if not r.get("final")
                               and r["step"] > 1]
                final[mode] = [r for r in recs if r.get("final")][0]
        med = {m: statistics.median(r["seconds"] for r in rows[m])
               for m in rows}
        for mode in ("threads", "single"):
            rs = rows[mode]
            f = final[mode]
            print("%-7d %-9s %9.2f %9.2f %9.2f %8s %6.2f/%.2f MiB" % (
                stage, mode, 1e3 * med[mode],
                1e3 * statistics.median(r["compute_seconds"] for r in rs),
                1e3 * statistics.median(r["wait_seconds"] for r in rs),
                "%.2fx" % (med["single"] / med["threads"])
                if mode == "threads" else "",
                f["measured_peak_bytes_max_rank"] / 2**20,
                f["predicted_peak_bytes"] / 2**20))
    print("ratio: single-thread step time / threaded step time (>1: the "
          "stream workers overlap communication with compute)")


if __name__ == "__main__":
    main()
