#!/usr/bin/env python3
"""Wall time of `zeroc advise` over the whole lever space.

Runs `zeroc advise --json` for Llama-3.1-405B at 1,024 ranks (h100-sxm-8
sized to 128 nodes) and Llama-2-70B on one h100-sxm-8 node, both bf16 at
sequence 4096 with no base config (DeepSpeed's defaults; the global batch is
not fixed, so the micro-batch is searched up to 16), and reports the median
wall time of a few runs, what the search compiled, estimated and ruled out,
and what it recommends. A benchmark, not a test: run it by hand on an
otherwise idle machine, quote medians. The issue's bound: the 405B search
finishes in under 60 s on a 2-core machine.

    python3 bench/advise_bench.py [--zeroc build/bin/zeroc] [--runs 3]
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CASES = [
    # label, zeroc gen source, cluster arguments
    ("Llama-3.1-405B, 1,024 ranks", ["--preset", "llama-3.1-405b"],
     ["--cluster", "h100-sxm-8", "--nodes", "128"]),
    ("Llama-2-70B, 8 ranks",
     [os.path.join(ROOT, "examples", "configs", "llama-2-70b", "config.json")],
     ["--cluster", "h100-sxm-8"]),
]


def cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run(cmd):
    """Wall and CPU seconds (all threads) of `cmd`, and its stdout."""
    start, cpu = time.perf_counter(), cpu_seconds()
    out = subprocess.run(cmd, capture_output=True, text=True)
    elapsed, cpu = time.perf_counter() - start, cpu_seconds() - cpu
    if out.returncode not in (0, 1):  # 1: nothing fits, still an answer.
        sys.exit(f"failed: {' '.join(cmd)}\n{out.stderr}")
    return elapsed, cpu, out.stdout


def gib(n):
    return f"{n / 2**30:.2f} GiB"


def main():
    ap = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--zeroc",
                    default=os.path.join(ROOT, "build", "bin", "zeroc"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seq-len", type=int, default=4096)
    args = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="zeroc-advise-bench-")
    print(f"# zeroc advise, whole lever space, bf16, seq {args.seq_len}, "
          f"median of {args.runs} runs, {os.cpu_count()} cores, load "
          f"average {os.getloadavg()[0]:.1f} at the start\n")
    print("| model | wall (median) | runs | CPU (median) | setups | compiles "
          "| estimated | ruled out | recommended | peak/GPU | tokens/s |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---|---:|---:|")
    for label, source, cluster in CASES:
        mlir = os.path.join(tmp, "model.mlir")
        run([args.zeroc, "gen", *source, "--seq-len", str(args.seq_len),
             "--dtype", "bf16", "--quiet", "-o", mlir])
        walls, cpus, advice = [], [], None
        for _ in range(args.runs):
            wall, cpu, out = run(
                [args.zeroc, "advise", mlir, *cluster, "--json"])
            walls.append(wall)
            cpus.append(cpu)
            advice = json.loads(out)
        s = advice["search"]
        best = advice.get("recommended_candidate")
        peak = gib(best["peak_device_bytes"]) if best else "-"
        tokens = f"{round(best['tokens_per_s']):,}" if best else "-"
        print(f"| {label} | **{statistics.median(walls):.1f} s** | "
              f"{', '.join(f'{w:.1f}' for w in walls)} | "
              f"{statistics.median(cpus):.1f} s | {s['setups']} | "
              f"{s['compiles']} | {s['estimated']} | "
              f"{s['ruled_out_without_compiling']} | "
              f"{advice.get('recommended', 'nothing fits')} | {peak} | "
              f"{tokens} |")

if __name__ == "__main__":
    main()
