#!/usr/bin/env python3
"""Compile-time benchmark of the zeroc pipeline.

Plans Llama-3-70B-class and Llama-3.1-405B-class graphs at world size 1024
(ZeRO stage 3, bf16, overlap_comm) and reports the median wall time of the
whole `zeroc` run and of each pass (from --mlir-timing), then the time
against the number of layers of a 405B-wide model, to show it grows
linearly. A benchmark, not a test: run it by hand, compare figures taken in
one run, quote medians and ratios.

    python3 bench/compile_bench.py [--zeroc build/bin/zeroc] [--runs 5]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

LLAMA_405B = {"model_type": "llama", "vocab_size": 128256, "hidden_size": 16384,
              "intermediate_size": 53248, "num_attention_heads": 128,
              "num_key_value_heads": 8, "max_position_embeddings": 131072,
              "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
              "torch_dtype": "bfloat16"}

CONFIG = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
          "bf16": {"enabled": True},
          "zero_optimization": {"stage": 3, "overlap_comm": True}}


def run(cmd):
    start = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if out.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{out.stderr}")
    return elapsed, out.stderr


def pass_times(report):
    """Pass name -> seconds, from an --mlir-timing report."""
    times = {}
    for line in report.splitlines():
        m = re.match(r"\s+([0-9.]+) \(\s*[0-9.]+%\)\s+(\w+)$", line)
        if m and m.group(2) not in ("Total",):
            times[m.group(2)] = float(m.group(1))
    return times


def bench_model(zeroc, model, config, runs, world_size):
    walls, per_pass = [], {}
    for _ in range(runs):
        wall, err = run([zeroc, model, "--config", config, "--world-size",
                         str(world_size), "-o", os.devnull, "--mlir-timing",
                         "--quiet"])
        walls.append(wall)
        for name, t in pass_times(err).items():
            per_pass.setdefault(name, []).append(t)
    return statistics.median(walls), {k: statistics.median(v)
                                      for k, v in per_pass.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--zeroc", default=os.path.join(ROOT, "build", "bin", "zeroc"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--world-size", type=int, default=1024)
    ap.add_argument("--seq-len", type=int, default=4096)
    args = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="zeroc-bench-")
    config = os.path.join(tmp, "ds.json")
    with open(config, "w") as f:
        json.dump(CONFIG, f)

    def generate(name, hf):
        cfg = os.path.join(tmp, name + ".json")
        with open(cfg, "w") as f:
            json.dump(hf, f)
        mlir = os.path.join(tmp, name + ".mlir")
        run([args.zeroc, "gen", cfg, "--seq-len", str(args.seq_len),
             "--quiet", "-o", mlir])
        return mlir

    print(f"# zeroc compile time, world size {args.world_size}, stage 3, "
          f"bf16, seq {args.seq_len}, median of {args.runs} runs\n")
    models = [("llama-3-70b", "llama-3-70b", None),
              ("llama-3.1-405b", None, LLAMA_405B | {"num_hidden_layers": 126})]
    rows = []
    for label, preset, hf in models:
        if preset:
            mlir = os.path.join(tmp, label + ".mlir")
            run([args.zeroc, "gen", "--preset", preset, "--seq-len",
                 str(args.seq_len), "--quiet", "-o", mlir])
        else:
            mlir = generate(label, hf)
        wall, passes = bench_model(args.zeroc, mlir, config, args.runs,
                                   args.world_size)
        rows.append((label, wall, passes))

    names = [n for n in rows[0][2] if n != "Rest"] + ["Rest"]
    print("| pass | " + " | ".join(r[0] for r in rows) + " |")
    print("|---|" + "---:|" * len(rows))
    for n in names:
        print(f"| {n} | " + " | ".join(f"{r[2].get(n, 0) * 1e3:.1f} ms"
                                       for r in rows) + " |")
    print("| **zeroc wall (parse, passes, plan written)** | " +
          " | ".join(f"**{r[1] * 1e3:.0f} ms**" for r in rows) + " |\n")

    print("## time against layers (405B-wide layers)\n")
    print("| layers | wall | per layer |")
    print("|---:|---:|---:|")
    for layers in (16, 32, 64, 126, 252):
        mlir = generate(f"wide-{layers}", LLAMA_405B | {"num_hidden_layers": layers})
        wall, _ = bench_model(args.zeroc, mlir, config, args.runs,
                              args.world_size)
        print(f"| {layers} | {wall * 1e3:.0f} ms | {wall / layers * 1e3:.2f} ms |")


if __name__ == "__main__":
    main()
