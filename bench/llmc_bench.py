#!/usr/bin/env python3
"""zerorun against llm.c's CPU reference (train_gpt2.c) on GPT-2 124M:
the same weights, the same tokens, the same shapes, runs interleaved.

    python3 bench/llmc_bench.py --llmc LLM_C_CHECKOUT [--build build]
        [--seq 256] [--micro 4] [--threads 2] [--steps 4] [--runs 2]

LLM_C_CHECKOUT is a clone of https://github.com/karpathy/llm.c (the script
does not download it). The script
- writes random GPT-2 124M weights (numpy, seed 0, std 0.02; the
  projections scaled by 1/sqrt(2 L) as llm.c's and GPT-2's init) twice:
  as llm.c's `gpt2_124M.bin` (version 3: vocabulary padded to 50304,
  matrices [out, in]) and as a Hugging Face GPT-2 safetensors file
  (Conv1D [in, out]) for `zerorun --init-from`;
- writes random tokens as an llm.c token file (header 20240520), which
  zerorun reads too (docs/data-format.md);
- copies train_gpt2.c and llmc/ into a work directory and patches its
  main(): T and B from the flags, no validation passes or sampling, no
  shuffling, --steps steps; builds it as llm.c's Makefile does
  (cc -Ofast -march=native -fopenmp);
- compiles the same model for zerorun (AdamW lr 1e-4, betas 0.9/0.999,
  eps 1e-8, no weight decay, no clipping: train_gpt2.c's update; f32,
  stage 0, one rank) and runs both, interleaved, --runs times, with
  OMP_NUM_THREADS / --threads set to --threads.

Prints each side's step time (median of the steps after the first, then of
the runs), the ratio zerorun / llm.c, and both sides' losses per step. A
benchmark, not a test.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import struct
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
V, VP, MAXT, L, NH, C = 50257, 50304, 1024, 12, 12, 768


def sh(cmd, env=None, cwd=None):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, env=env, cwd=cwd)
    if r.returncode != 0:
        sys.exit("failed (%d): %s\n%s" % (r.returncode, " ".join(cmd),
                                          r.stdout[-3000:]))
    return r.stdout


def weights(np):
    """GPT-2 124M in Hugging Face's layout (Conv1D: [in, out])."""
    rng = np.random.default_rng(0)
    normal = lambda *s, std=0.02: rng.normal(0, std, s).astype(np.float32)
    proj = 0.02 / (2 * L) ** 0.5
    w = {"wte.weight": normal(V, C), "wpe.weight": normal(MAXT, C, std=0.01),
         "ln_f.weight": np.ones(C, np.float32),
         "ln_f.bias": np.zeros(C, np.float32)}
    for i in range(L):
        p = "h.%d." % i
        w[p + "ln_1.weight"] = np.ones(C, np.float32)
        w[p + "ln_1.bias"] = np.zeros(C, np.float32)
        w[p + "attn.c_attn.weight"] = normal(C, 3 * C)
        w[p + "attn.c_attn.bias"] = np.zeros(3 * C, np.float32)
        w[p + "attn.c_proj.weight"] = normal(C, C, std=proj)
        w[p + "attn.c_proj.bias"] = np.zeros(C, np.float32)
        w[p + "ln_2.weight"] = np.ones(C, np.float32)
        w[p + "ln_2.bias"] = np.zeros(C, np.float32)
        w[p + "mlp.c_fc.weight"] = normal(C, 4 * C)
        w[p + "mlp.c_fc.bias"] = np.zeros(4 * C, np.float32)
        w[p + "mlp.c_proj.weight"] = normal(4 * C, C, std=proj)
        w[p + "mlp.c_proj.bias"] = np.zeros(C, np.float32)
    return w


def write_safetensors(path, tensors):
    header, offset, blobs = {}, 0, []
    for name, t in tensors.items():
        b = t.tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(b)]}
        offset += len(b)
        blobs.append(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)


def write_llmc_model(np, path, w):
    """llm.c's checkpoint (train_gpt2.py's write_model, version 3)."""
    header = np.zeros(256, np.int32)
    header[:8] = [20240326, 3, MAXT, V, L, NH, C, VP]
    wte = np.zeros((VP, C), np.float32)
    wte[:V] = w["wte.weight"]
    layer = lambda name, t=False: np.stack(
        [w["h.%d.%s" % (i, name)].T if t else w["h.%d.%s" % (i, name)]
         for i in range(L)])
    params = [wte, w["wpe.weight"], layer("ln_1.weight"), layer("ln_1.bias"),
              layer("attn.c_attn.weight", True), layer("attn.c_attn.bias"),
              layer("attn.c_proj.weight", True), layer("attn.c_proj.bias"),
              layer("ln_2.weight"), layer("ln_2.bias"),
              layer("mlp.c_fc.weight", True), layer("mlp.c_fc.bias"),
              layer("mlp.c_proj.weight", True), layer("mlp.c_proj.bias"),
              w["ln_f.weight"], w["ln_f.bias"]]
    with open(path, "wb") as f:
        f.write(header.tobytes())
        for p in params:
            f.write(np.ascontiguousarray(p, np.float32).tobytes())


def write_tokens(np, path, n):
    header = np.zeros(256, np.int32)
    header[:3] = [20240520, 1, n]
    toks = np.random.default_rng(1).integers(0, V, n).astype(np.uint16)
    with open(path, "wb") as f:
        f.write(header.tobytes() + toks.tobytes())


def patch_llmc(src, dst, batch, seq, steps):
    text = open(os.path.join(src, "train_gpt2.c")).read()
    subs = [(r"int B = 4;", "int B = %d;" % batch),
            (r"int T = 64;", "int T = %d;" % seq),
            (r"dataloader_init\(&train_loader, train_tokens, B, T, 0, 1, 1\)",
             "dataloader_init(&train_loader, train_tokens, B, T, 0, 1, 0)"),
            (r"for \(int step = 0; step <= 40; step\+\+\)",
             "for (int step = 0; step < %d; step++)" % steps),
            (r"if \(step % 10 == 0\)", "if (0)"),
            (r"if \(step > 0 && step % 20 == 0\)", "if (0)")]
    for pat, rep in subs:
        text, n = re.subn(pat, rep, text)
        if n != 1:
            sys.exit("train_gpt2.c: cannot patch '%s' (another llm.c "
                     "version?)" % pat)
    os.makedirs(dst, exist_ok=True)
    with open(os.path.join(dst, "train_gpt2.c"), "w") as f:
        f.write(text)
    if os.path.exists(os.path.join(dst, "llmc")):
        shutil.rmtree(os.path.join(dst, "llmc"))
    shutil.copytree(os.path.join(src, "llmc"), os.path.join(dst, "llmc"))
    sh(["cc", "-Ofast", "-Wno-unused-result", "-march=native", "-fopenmp",
        "-DOMP", "train_gpt2.c", "-lm", "-lgomp", "-o", "train_gpt2"],
       cwd=dst)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--llmc", required=True, help="an llm.c checkout")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--micro", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--work", default="/tmp/llmc-bench")
    args = ap.parse_args()
    import numpy as np

    work = args.work
    os.makedirs(os.path.join(work, "dev/data/tinyshakespeare"),
                exist_ok=True)
    w = weights(np)
    write_llmc_model(np, os.path.join(work, "gpt2_124M.bin"), w)
    write_safetensors(os.path.join(work, "model.safetensors"), w)
    tokens = os.path.join(work, "dev/data/tinyshakespeare",
                          "tiny_shakespeare_train.bin")
    write_tokens(np, tokens, (args.steps + 2) * args.micro * args.seq + 1)
    shutil.copy(tokens, tokens.replace("_train", "_val"))
    patch_llmc(args.llmc, work, args.micro, args.seq, args.steps)

    zeroc, zerorun = (os.path.join(args.build, "bin", b)
                      for b in ("zeroc", "zerorun"))
    mlir, plan = os.path.join(work, "gpt2.mlir"), os.path.join(work,
                                                                "plan.json")
    sh([zeroc, "gen", "--preset", "gpt2", "--seq-len", str(args.seq),
        "--micro-batch", str(args.micro), "--dtype", "f32", "--quiet", "-o",
        mlir])
    ds = {"train_micro_batch_size_per_gpu": args.micro,
          "gradient_accumulation_steps": 1,
          "optimizer": {"type": "AdamW",
                        "params": {"lr": 1e-4, "betas": [0.9, 0.999],
                                   "eps": 1e-8, "weight_decay": 0.0}},
          "zero_optimization": {"stage": 0}}
    with open(os.path.join(work, "ds.json"), "w") as f:
        json.dump(ds, f)
    sh([zeroc, mlir, "--config", os.path.join(work, "ds.json"),
        "--world-size", "1", "--quiet", "-o", plan])

    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    times = {"llm.c": [], "zerorun": []}
    losses = {}
    for run in range(args.runs):
        out = sh(["./train_gpt2"], env=env, cwd=work)
        rows = re.findall(r"step (\d+): train loss ([0-9.]+) \(took ([0-9.]+)"
                          r" ms\)", out)
        losses["llm.c"] = [float(r[1]) for r in rows]
        times["llm.c"].append(statistics.median(
            float(r[2]) / 1e3 for r in rows[1:]))
        log = os.path.join(work, "zerorun.jsonl")
        sh([zerorun, plan, "--data", tokens, "--init-from",
            os.path.join(work, "model.safetensors"), "--steps",
            str(args.steps), "--threads", str(args.threads), "--plain",
            "--log-json", log], env=env)
        steps = [json.loads(l) for l in open(log)]
        steps = [s for s in steps if not s.get("final")]
        losses["zerorun"] = [s["loss"] for s in steps]
        times["zerorun"].append(statistics.median(
            s["seconds"] for s in steps[1:]))
        print("run %d: llm.c %.3f s/step, zerorun %.3f s/step" % (
            run + 1, times["llm.c"][-1], times["zerorun"][-1]), flush=True)
    l, z = statistics.median(times["llm.c"]), statistics.median(
        times["zerorun"])
    print("\nGPT-2 124M, B=%d, T=%d, f32, %d thread(s), %d steps, %d "
          "interleaved runs (median of steps 2-%d, then of runs)\n" % (
              args.micro, args.seq, args.threads, args.steps, args.runs,
              args.steps))
    print("| runner | step s | runs (s) |\n|---|---|---|")
    for name in ("llm.c", "zerorun"):
        print("| %s | %.3f | %s |" % (name, statistics.median(times[name]),
                                       ", ".join("%.3f" % t
                                                 for t in times[name])))
    print("\nzerorun / llm.c step time: %.2f" % (z / l))
    print("losses, llm.c:   %s" % ", ".join("%.6f" % x
                                             for x in losses["llm.c"]))
    print("losses, zerorun: %s" % ", ".join("%.6f" % x
                                             for x in losses["zerorun"]))


if __name__ == "__main__":
    main()
