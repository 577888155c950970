#!/usr/bin/env python3
"""Threads benchmark of zerorun's CPU kernels: the step time at
--threads 1 and --threads N (default 2) on one rank, and optionally a
baseline zerorun (e.g. the main branch's build) at the same two counts
(OMP_NUM_THREADS / OPENBLAS_NUM_THREADS set too, for a build without
--threads: --baseline-env-only).

One plan (a GPT-2 preset, default the 124M one at seq 256, micro-batch 4,
f32, stage 0); each configuration runs --steps steps, --runs times,
interleaved (1 thread, N threads, baseline, 1 thread, ...); the step time
of a run is the median of its steps after the first (the warm-up). Prints
the medians over runs, the ratio 1-thread / N-thread time, and the load
average before and after.

A benchmark, not a test: run it by hand. On a shared machine the ratios of
interleaved runs are what to quote, with the loads.

    python3 bench/threads_bench.py [--build build] [--baseline OTHER/zerorun]
        [--preset gpt2] [--seq 256] [--micro 4] [--threads 2] [--steps 4]
        [--runs 3] [--work DIR]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(cmd, env=None):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, env=env)
    if r.returncode != 0:
        sys.exit("failed (%d): %s\n%s" % (r.returncode, " ".join(cmd),
                                          r.stdout))
    return r.stdout


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--baseline")
    ap.add_argument("--baseline-env-only", action="store_true",
                    help="the baseline has no --threads: N threads only, "
                    "set through the environment")
    ap.add_argument("--preset", default="gpt2")
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--micro", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--work")
    args = ap.parse_args()
    zeroc = os.path.join(args.build, "bin", "zeroc")
    zerorun = os.path.join(args.build, "bin", "zerorun")
    work = args.work or tempfile.mkdtemp(prefix="threads-bench-")
    os.makedirs(work, exist_ok=True)
    plan = os.path.join(work, "%s-%d-%d.plan.json" % (args.preset, args.seq,
                                                      args.micro))
    if not os.path.exists(plan):
        mlir = plan.replace(".plan.json", ".mlir")
        run([zeroc, "gen", "--preset", args.preset, "--seq-len",
             str(args.seq), "--micro-batch", str(args.micro), "--dtype",
             "f32", "--quiet", "-o", mlir])
        run([zeroc, mlir, "--world-size", "1", "--quiet", "-o", plan])

    configs = [("this, 1 thread", zerorun, ["--threads", "1"], None),
               ("this, %d threads" % args.threads, zerorun,
                ["--threads", str(args.threads), "--oversubscribe"], None)]
    if args.baseline:
        for n in ([args.threads] if args.baseline_env_only
                  else [1, args.threads]):
            env = dict(os.environ, OMP_NUM_THREADS=str(n),
                       OPENBLAS_NUM_THREADS=str(n))
            extra = [] if args.baseline_env_only else \
                ["--threads", str(n), "--oversubscribe"]
            configs.append(("baseline, %d thread%s" % (n, "s" if n > 1 else ""),
                            args.baseline, extra, env))
    times = {c[0]: [] for c in configs}
    losses = {c[0]: None for c in configs}
    before = loadavg()
    for i in range(args.runs):
        for name, exe, extra, env in configs:
            log = os.path.join(work, "run.jsonl")
            run([exe, plan, "--synthetic", "--steps", str(args.steps),
                 "--log-json", log] + extra, env=env)
            with open(log) as f:
                rows = [json.loads(l) for l in f]
            steps = [r for r in rows if not r.get("final")]
            times[name].append(statistics.median(
                r["seconds"] for r in steps[1:]))
            losses[name] = [r["loss"] for r in steps]
            print("done: %s run %d (load %s)" % (name, i + 1, loadavg()),
                  file=sys.stderr)
    after = loadavg()
    print("%s, seq %d, micro-batch %d, f32, stage 0, 1 rank: step time "
          "(median of steps 2-%d, then of %d interleaved runs); load "
          "average %s before, %s after\n" % (args.preset, args.seq,
                                             args.micro, args.steps,
                                             args.runs, before, after))
    # Each build's ratio against its own 1-thread time.
    print("| zerorun | step s | its 1-thread time / this time | runs (s) |")
    print("|---|---|---|---|")
    for name, _, _, _ in configs:
        m = statistics.median(times[name])
        one = statistics.median(times[name.split(",")[0] + ", 1 thread"]) \
            if name.split(",")[0] + ", 1 thread" in times else float("nan")
        print("| %s | %.3f | %.2f | %s |" % (
            name, m, one / m, ", ".join("%.2f" % t for t in times[name])))
    ref = losses[configs[0][0]]
    for name, _, _, _ in configs[1:]:
        same = losses[name] == ref
        print("\n%s: losses %s the 1-thread run's" % (
            name, "bit-identical to" if same else "differ from"))


if __name__ == "__main__":
    main()
