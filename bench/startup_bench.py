#!/usr/bin/env python3
"""Start-up benchmark of zerorun: from process start to the first step.

For each preset (default: GPT-2 124M and GPT-2 large, 774M, the 1B class
that fits this machine), seq 256 and micro-batch 4, f32, stage 0 on one
rank: compiles the plan, then times

  * `--steps 0`: process start to ready (zerorun's own figures, from its
    --log-json final record: plan load, allocation, random init), and the
    wall time and max RSS of the whole process (/usr/bin/time);
  * `--steps 1`: the first step (a warm-up: its memory is touched for the
    first time), only for the presets in --first-step (it touches all the
    plan's memory: 2 GB for GPT-2 124M, 12 GB for GPT-2 large);
  * `--init-from`: the start-up with weights from a safetensors file (made
    by a --steps 0 --checkpoint-dir run and `zeroc consolidate`), for the
    presets in --init-from;

each --runs times, interleaved with the same runs of a baseline zerorun
(--baseline, e.g. the main branch's build) when given, and prints the
medians as a Markdown table, with the load average before and after.

A benchmark, not a test: run it by hand. This machine is shared (2 cores,
up to 7 sessions): quote the ratios of interleaved runs, with the loads.

    python3 bench/startup_bench.py [--build build] [--baseline OTHER/zerorun]
        [--baseline-presets gpt2] [--presets gpt2,gpt2-large] [--first-step gpt2] [--init-from gpt2]
        [--runs 3] [--seq 256] [--micro 4] [--work DIR]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(cmd, timed=False):
    """Runs cmd; returns (stdout, wall seconds, max RSS in MB or None)."""
    full = (["/usr/bin/time", "-f", "MAXRSS %M"] + cmd) if timed else cmd
    t0 = time.monotonic()
    r = subprocess.run(full, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
    wall = time.monotonic() - t0
    if r.returncode != 0:
        sys.exit("failed (%d): %s\n%s%s" % (r.returncode, " ".join(cmd),
                                            r.stdout, r.stderr))
    rss = None
    for line in r.stderr.splitlines():
        if line.startswith("MAXRSS "):
            rss = int(line.split()[1]) / 1024.0
    return r.stdout, wall, rss


def final_record(log):
    with open(log) as f:
        rows = [json.loads(l) for l in f]
    final = [r for r in rows if r.get("final")][0]
    steps = [r for r in rows if not r.get("final")]
    return final, steps


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(v, digits=2):
    return "-" if v is None else ("%.*f" % (digits, v))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--baseline", help="another zerorun to interleave")
    ap.add_argument("--baseline-presets", default="gpt2",
                    help="presets the baseline runs too (a zerorun that "
                    "zero-fills its memory at start touches all of it)")
    ap.add_argument("--presets", default="gpt2,gpt2-large")
    ap.add_argument("--first-step", default="gpt2",
                    help="presets also timed with --steps 1")
    ap.add_argument("--init-from", default="gpt2",
                    help="presets also timed with --init-from")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--micro", type=int, default=4)
    ap.add_argument("--work")
    args = ap.parse_args()
    zeroc = os.path.join(args.build, "bin", "zeroc")
    zerorun = os.path.join(args.build, "bin", "zerorun")
    work = args.work or tempfile.mkdtemp(prefix="startup-bench-")
    os.makedirs(work, exist_ok=True)
    first = set(filter(None, args.first_step.split(",")))
    init_from = set(filter(None, args.init_from.split(",")))
    runners = [("this", zerorun)]
    if args.baseline:
        runners.append(("baseline", args.baseline))

    # --help: the executable alone (libraries it loads at start).
    help_rows = []
    for name, exe in runners:
        walls, rsss = [], []
        for _ in range(max(args.runs, 3)):
            _, wall, rss = run([exe, "--help"], timed=True)
            walls.append(wall)
            rsss.append(rss)
        help_rows.append((name, median(walls), median(rsss)))

    load_before = loadavg()
    rows = []
    for preset in filter(None, args.presets.split(",")):
        mlir = os.path.join(work, preset + ".mlir")
        plan = os.path.join(work, preset + ".plan.json")
        if not os.path.exists(plan):
            run([zeroc, "gen", "--preset", preset, "--seq-len", str(args.seq),
                 "--micro-batch", str(args.micro), "--dtype", "f32",
                 "--quiet", "-o", mlir])
            run([zeroc, mlir, "--world-size", "1", "--quiet", "-o", plan])
        weights = None
        if preset in init_from:
            weights = os.path.join(work, preset + ".safetensors")
            if not os.path.exists(weights):
                ckpt = os.path.join(work, preset + "-ckpt")
                run([zerorun, plan, "--steps", "0", "--checkpoint-dir", ckpt])
                run([zeroc, "consolidate", ckpt, "-o", weights])
        modes = [("steps 0", ["--steps", "0"])]
        if preset in first:
            modes.append(("steps 1", ["--steps", "1"]))
        if weights:
            modes.append(("init-from, steps 0",
                          ["--steps", "0", "--init-from", weights]))
        base = set(filter(None, args.baseline_presets.split(",")))
        here = [r for r in runners if r[0] == "this" or preset in base]
        for mode, extra in modes:
            got = {name: {"wall": [], "rss": [], "ready": [], "plan": [],
                          "alloc": [], "init": [], "weights": [],
                          "first": []} for name, _ in here}
            for i in range(args.runs):
                # Interleaved: this, baseline, this, baseline, ...
                for name, exe in here:
                    log = os.path.join(work, "%s-%s-%d.jsonl" % (
                        preset, name, i))
                    _, wall, rss = run([exe, plan, "--synthetic",
                                        "--log-json", log] + extra,
                                       timed=True)
                    g = got[name]
                    g["wall"].append(wall)
                    g["rss"].append(rss)
                    final, steps = final_record(log)
                    s = final.get("startup_seconds")
                    if s:
                        g["ready"].append(s["process_to_ready"])
                        g["plan"].append(s["plan_load"])
                        g["alloc"].append(s["allocate"])
                        g["init"].append(s["random_init"])
                        g["weights"].append(s["weights_load"])
                    if steps:
                        g["first"].append(steps[0]["seconds"])
            for name, _ in here:
                g = got[name]
                rows.append((preset, mode, name) + tuple(
                    median(g[k]) for k in ("wall", "rss", "ready", "plan",
                                           "alloc", "init", "weights",
                                           "first")))
            print("done: %s %s (load %s)" % (preset, mode, loadavg()),
                  file=sys.stderr)
    load_after = loadavg()

    print("`zerorun --help` (median of %d):\n" % max(args.runs, 3))
    print("| zerorun | wall s | max RSS MB |")
    print("|---|---|---|")
    for name, wall, rss in help_rows:
        print("| %s | %s | %s |" % (name, fmt(wall), fmt(rss, 0)))
    print("\nStart-up, seq %d, micro-batch %d, f32, stage 0, 1 rank; medians "
          "of %d interleaved runs; load average %s before, %s after:\n"
          % (args.seq, args.micro, args.runs, load_before, load_after))
    print("| preset | run | zerorun | process wall s | max RSS MB | ready s "
          "| plan load s | allocate s | random init s | weights load s "
          "| first step s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r[0], r[1], r[2], fmt(r[3]), fmt(r[4], 0), fmt(r[5]), fmt(r[6]),
            fmt(r[7]), fmt(r[8]), fmt(r[9]), fmt(r[10])))


if __name__ == "__main__":
    main()
