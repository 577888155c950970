#!/usr/bin/env python3
"""GPU training benchmark: zerorun --device cuda against PyTorch (eager and
torch.compile) on GPT-2 124M and 350M, sequence 1024, bf16, AdamW, ZeRO
stages 0-3 at world size 1, side by side in one run on one GPU.

The GPU machine has CUDA and PyTorch but no MLIR, so it runs in two halves:

  # here (zeroc built): compile the plans into bench/gpu_plans/
  python3 bench/gpu_bench.py prepare [--zeroc build/bin/zeroc]
  # on the GPU machine (zerorun built with -DZEROC_BUILD_COMPILER=OFF):
  python3 bench/gpu_bench.py run --zerorun build-rt/bin/zerorun \\
      [--steps 20] [--out bench/RESULTS.md] [--models gpt2-124m]
      [--configs s0,s1,s2,s3,s2off,s3off] [--kernels default,per-tensor] [--no-torch]

--kernels runs each zerorun configuration with each kernel choice right
after the other (KERNELS below: `per-tensor` is the per-tensor Adam and
clipping and pageable offload staging that preceded today's defaults,
`f32-attention` the f32 tiled flash kernels that preceded the tensor-core
ones, `wmma-attention` the WMMA tensor-core kernels that preceded the
register (mma.sync) ones; `staged-gemm` the opt-in staging of GEMM rows
that are not a multiple of 16 bytes, GPT-2's logits; `host-passes` the
opt-in clipping and zeroing of an offloaded gradient partition on the
host's cores; docs/gpu-kernels.md; `unpadded-vocab` the plans of the
model with GPT-2's vocabulary of 50,257 as it is, whose logits' rows are
not 16-byte aligned: the default plans pad it to 50,304, `zeroc gen
--pad-vocab-to-multiple-of 64`, the same training, docs/model-dialect.md).
PyTorch trains the unpadded model (Hugging Face's), and the MFU of every
row counts the unpadded model's FLOPs.

Reports per configuration the median step time (steps after the warm-up),
tokens/s, MFU (model FLOPs per token from the plan: forward and backward,
against the GPU's dense bf16 peak) and peak device memory (zerorun: its
measured peak and the plan's prediction; PyTorch:
torch.cuda.max_memory_allocated). A benchmark, not a test.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLANS = os.path.join(ROOT, "bench", "gpu_plans")
SEQ, MICRO, LR = 1024, 8, 1e-4
MODELS = {  # Hugging Face GPT-2 shapes.
    "gpt2-124m": {"n_embd": 768, "n_layer": 12, "n_head": 12},
    "gpt2-350m": {"n_embd": 1024, "n_layer": 24, "n_head": 16},
}
VOCAB = 50257
# zerorun's plans pad the vocabulary to a multiple of this (50,304), as
# llm.c does; the `unpadded-vocab` kernel choice runs the unpadded plans.
PAD_VOCAB = 64
# Dense bf16 tensor-core peaks (NVIDIA datasheets, SXM).
PEAK_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0}
# ZeRO configurations: name -> (stage, optimizer offloaded to the host,
# parameters offloaded to the host: stage 3, DeepSpeed's default
# persistence threshold keeping parameters under 100k elements on the GPU).
CONFIGS = {"s0": (0, False, False), "s1": (1, False, False),
           "s2": (2, False, False), "s3": (3, False, False),
           "s2off": (2, True, False), "s3off": (3, True, True)}
# zerorun's kernel choices (--kernels; docs/gpu-kernels.md): name -> the
# environment it runs with, beside the defaults: the kernels they replaced.
KERNELS = {"default": {},
           "per-tensor": {"ZEROC_CUDA_ADAM": "tensor",
                          "ZEROC_CUDA_CLIP": "tensor",
                          "ZEROC_CUDA_HOST_STAGING": "pageable"},
           "f32-attention": {"ZEROC_CUDA_FLASH": "tiled"},
           "staged-gemm": {"ZEROC_CUDA_GEMM_ROWS": "staged"},
           "wmma-attention": {"ZEROC_CUDA_FLASH": "wmma"},
           "host-passes": {"ZEROC_CUDA_HOST_PASSES": "cpu"},
           "unpadded-vocab": {}}
# Kernel choices that run other plans: the plan file's infix.
PLAN_VARIANT = {"unpadded-vocab": ".unpadded"}


def sh(cmd, **kw):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, **kw)
    if r.returncode != 0:
        sys.exit("failed (%d): %s\n%s" % (r.returncode, " ".join(cmd),
                                          r.stdout[-4000:]))
    return r.stdout


def prepare(args):
    os.makedirs(PLANS, exist_ok=True)
    for name, shape in MODELS.items():
        hf = dict(shape, model_type="gpt2", vocab_size=VOCAB,
                  n_positions=SEQ, torch_dtype="bfloat16")
        cfg = os.path.join(PLANS, name + ".config.json")
        with open(cfg, "w") as f:
            json.dump(hf, f)
        mlirs = {"": os.path.join(PLANS, name + ".mlir"),
                 ".unpadded": os.path.join(PLANS, name + ".unpadded.mlir")}
        for variant, mlir in mlirs.items():
            pad = [] if variant else ["--pad-vocab-to-multiple-of",
                                      str(PAD_VOCAB)]
            sh([args.zeroc, "gen", cfg, "--seq-len", str(SEQ),
                "--micro-batch", str(MICRO), "--dtype", "bf16", "--quiet",
                "-o", mlir] + pad)
        for conf, (stage, offload, params) in CONFIGS.items():
            zero = {"stage": stage, "overlap_comm": True}
            if offload:
                zero["offload_optimizer"] = {"device": "cpu",
                                             "pin_memory": True}
            if params:
                zero["offload_param"] = {"device": "cpu", "pin_memory": True}
            ds = {"train_micro_batch_size_per_gpu": MICRO,
                  "gradient_accumulation_steps": 1,
                  "bf16": {"enabled": True},
                  "gradient_clipping": 1.0,
                  "optimizer": {"type": "AdamW",
                                "params": {"lr": LR, "weight_decay": 0.1}},
                  "zero_optimization": zero}
            ds_path = os.path.join(PLANS, "%s.%s.ds.json" % (name, conf))
            with open(ds_path, "w") as f:
                json.dump(ds, f)
            for variant, mlir in mlirs.items():
                plan = os.path.join(PLANS, "%s.%s%s.plan.json" %
                                    (name, conf, variant))
                sh([args.zeroc, mlir, "--config", ds_path, "--world-size",
                    "1", "--quiet", "-o", plan])
                print("wrote", plan)
    # Llama-3-8B's layer shapes, for the calibration's --shapes only (not
    # run): two layers at sequence 8192, one sequence, bf16. Its GEMMs
    # (4096 x 14336, grouped-query keys and values, the 128,256 vocabulary)
    # and its attention (32 heads of 128, 8 for keys and values) are the
    # shapes the GPU presets would otherwise price from GPT-2's classes.
    with open(os.path.join(ROOT, "examples", "configs", "llama-3-8b",
                           "config.json")) as f:
        llama = json.load(f)
    llama["num_hidden_layers"] = 2
    cfg = os.path.join(PLANS, "llama-8b-shapes.config.json")
    with open(cfg, "w") as f:
        json.dump(llama, f)
    mlir = os.path.join(PLANS, "llama-8b-shapes.mlir")
    sh([args.zeroc, "gen", cfg, "--seq-len", "8192", "--micro-batch", "1",
        "--dtype", "bf16", "--quiet", "-o", mlir])
    ds = os.path.join(PLANS, "llama-8b-shapes.ds.json")
    with open(ds, "w") as f:
        json.dump({"train_micro_batch_size_per_gpu": 1,
                   "gradient_accumulation_steps": 1,
                   "bf16": {"enabled": True},
                   "zero_optimization": {"stage": 0}}, f)
    plan = os.path.join(PLANS, "llama-8b-shapes.plan.json")
    sh([args.zeroc, mlir, "--config", ds, "--world-size", "1", "--quiet",
        "-o", plan])
    print("wrote", plan)


def flops_per_token(plan):
    """Forward + backward FLOPs per token: 3 x the forward FLOPs of the
    plan's micro-step compute ops (backward = 2 x forward), per token."""
    micro = [p for p in plan["phases"] if p["name"] == "micro_step"][0]
    fwd = sum(op.get("flops", 0) for op in micro["ops"]
              if not op["kind"].endswith("_backward")
              and "grad" not in op["kind"])
    return 3.0 * fwd / (MICRO * SEQ)


def run_zerorun(args, name, conf, kernels="default"):
    plan_path = os.path.join(PLANS, "%s.%s%s.plan.json" % (
        name, conf, PLAN_VARIANT.get(kernels, "")))
    # Model FLOPs: the unpadded model's, whichever plan runs.
    model_plan = os.path.join(PLANS, "%s.%s.unpadded.plan.json" % (name, conf))
    log = os.path.join(PLANS, "%s.%s.log.jsonl" % (name, conf))
    if os.path.exists(log):
        os.remove(log)
    t0 = time.perf_counter()
    r = subprocess.run([args.zerorun, plan_path, "--device", "cuda",
                        "--synthetic", "--steps", str(args.steps),
                        "--log-json", log], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True,
                       env=dict(os.environ, **KERNELS[kernels]))
    wall = time.perf_counter() - t0
    if r.returncode != 0 or not os.path.exists(log):
        print(r.stdout[-3000:], flush=True)
        return {"error": "exit %d: %s" % (r.returncode,
                                          r.stdout.strip()[-300:])}
    rows = [json.loads(l) for l in open(log)]
    steps = [r for r in rows if not r.get("final")][args.warmup:]
    final = [r for r in rows if r.get("final")][0]
    with open(model_plan if os.path.exists(model_plan) else plan_path) as f:
        plan = json.load(f)
    return {"step_s": statistics.median(r["seconds"] for r in steps),
            "peak": final["measured_peak_bytes"],
            "predicted": final["predicted_peak_bytes"],
            "flops_per_token": flops_per_token(plan),
            "loss": steps[-1]["loss"], "wall_s": wall,
            "first_step_s": rows[0]["seconds"],
            "final": final}


def torch_gpt2(shape):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Block(nn.Module):
        def __init__(self, h, heads):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(h), nn.LayerNorm(h)
            self.qkv, self.proj = nn.Linear(h, 3 * h), nn.Linear(h, h)
            self.fc, self.out = nn.Linear(h, 4 * h), nn.Linear(4 * h, h)
            self.heads = heads

        def forward(self, x):
            b, s, h = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(h, dim=2)
            q, k, v = (t.view(b, s, self.heads, h // self.heads).transpose(1, 2)
                       for t in (q, k, v))
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(b, s, h))
            return x + self.out(F.gelu(self.fc(self.ln2(x)),
                                       approximate="tanh"))

    class GPT2(nn.Module):
        def __init__(self, h, layers, heads):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(VOCAB, h), nn.Embedding(SEQ, h)
            self.blocks = nn.ModuleList(Block(h, heads)
                                        for _ in range(layers))
            self.ln = nn.LayerNorm(h)
            self.head = nn.Linear(h, VOCAB, bias=False)

        def forward(self, idx, targets):
            pos = torch.arange(idx.shape[1], device=idx.device)
            x = self.wte(idx) + self.wpe(pos)
            for blk in self.blocks:
                x = blk(x)
            logits = self.head(self.ln(x))
            return F.cross_entropy(logits.float().view(-1, VOCAB),
                                   targets.view(-1))

    return GPT2(shape["n_embd"], shape["n_layer"], shape["n_head"])


def run_torch(args, name, compiled):
    import torch
    torch.manual_seed(0)
    model = torch_gpt2(MODELS[name]).cuda().to(torch.bfloat16)
    # Mixed precision as DeepSpeed's bf16 does it: f32 master weights in
    # the optimizer (fused AdamW over f32 copies).
    master = [p.detach().float().requires_grad_() for p in model.parameters()]
    opt = torch.optim.AdamW(master, lr=LR, weight_decay=0.1, fused=True)
    step_fn = torch.compile(model) if compiled else model
    idx = torch.randint(0, VOCAB, (MICRO, SEQ), device="cuda")
    torch.cuda.reset_peak_memory_stats()
    times = []
    for i in range(args.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = step_fn(idx, idx.roll(-1, 1))
        loss.backward()
        grads = [p.grad for p in model.parameters()]
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        for m, g in zip(master, grads):
            m.grad = g.float()
        opt.step()
        with torch.no_grad():
            for p, m in zip(model.parameters(), master):
                p.copy_(m)
        model.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return {"step_s": statistics.median(times[args.warmup:]),
            "peak": torch.cuda.max_memory_allocated()}


def run(args):
    import torch
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    peak = next((v for k, v in PEAK_TFLOPS.items() if k in gpu), None)
    lines = ["# GPU benchmark", "",
             "GPU: %s; PyTorch %s; %d steps, median of steps after %d "
             "warm-up; GPT-2, sequence %d, micro-batch %d, bf16 with f32 "
             "AdamW master weights, world size 1." % (
                 gpu, torch.__version__, args.steps, args.warmup, SEQ, MICRO),
             "", "| model | runner | step ms | tokens/s | MFU | peak memory "
             "(predicted) |", "| --- | --- | --- | --- | --- | --- |"]
    results = {"gpu": gpu, "torch": torch.__version__, "steps": args.steps,
               "warmup": args.warmup, "runs": []}
    for name in args.models.split(","):
        # Model FLOPs: the unpadded model's (PyTorch's), where prepared.
        unpadded = os.path.join(PLANS, "%s.s0.unpadded.plan.json" % name)
        if not os.path.exists(unpadded):
            unpadded = os.path.join(PLANS, "%s.s0.plan.json" % name)
        with open(unpadded) as f:
            fpt = flops_per_token(json.load(f))
        for conf in args.configs.split(","):
            for kernels in args.kernels.split(","):
                runner = "zerorun " + conf + (
                    "" if kernels == "default" else " (%s kernels)" % kernels)
                r = run_zerorun(args, name, conf, kernels)
                results["runs"].append(dict(r, model=name, runner=runner,
                                            kernels=kernels))
                if "error" in r:
                    lines.append("| %s | %s | failed: %s | | | |" % (
                        name, runner, r["error"].replace("\n", " ")[-160:]))
                    continue
                tps = MICRO * SEQ / r["step_s"]
                mfu = "%.1f%%" % (100 * tps * fpt / (peak * 1e12)) if peak else "-"
                lines.append("| %s | %s | %.1f | %.0f | %s | %.2f GiB "
                             "(%.2f GiB) |" % (name, runner, 1e3 * r["step_s"],
                                              tps, mfu, r["peak"] / 2**30,
                                              r["predicted"] / 2**30))
                print(lines[-1], flush=True)
        for compiled in (False, True) if args.torch else ():
            try:
                r = run_torch(args, name, compiled)
            except Exception as e:  # a benchmark row, not the whole run
                lines.append("| %s | PyTorch %s | failed: %s | | | |" % (
                    name, "torch.compile" if compiled else "eager",
                    str(e)[-160:]))
                continue
            results["runs"].append(dict(r, model=name, runner="torch" + (
                ".compile" if compiled else " eager")))
            tps = MICRO * SEQ / r["step_s"]
            mfu = ("%.1f%%" % (100 * tps * fpt / (peak * 1e12))
                   if peak else "-")
            lines.append("| %s | PyTorch %s | %.1f | %.0f | %s | %.2f GiB |" % (
                name, "torch.compile" if compiled else "eager",
                1e3 * r["step_s"], tps, mfu, r["peak"] / 2**30))
            print(lines[-1], flush=True)
    # Offloaded optimizers: the bytes the CUDA device counted crossing PCIe
    # per step against the plan's figure (docs/zerorun.md, "Offload
    # traffic"); the default device-kernel passes over host gradients cross
    # too, ZEROC_CUDA_HOST_PASSES=cpu (the host-passes kernels) does not.
    pcie = [r for r in results["runs"]
            if r.get("final", {}).get("plan_offload_bytes_per_step",
                                      {}).get("pcie_to_host", 0) > 0]
    if pcie:
        lines += ["", "| model | runner | PCIe to the GPU MB/step (plan) | "
                  "to the host (plan) |", "| --- | --- | --- | --- |"]
        for r in pcie:
            got = r["final"]["measured_offload_bytes_per_step"]
            want = r["final"]["plan_offload_bytes_per_step"]
            lines.append("| %s | %s | %.1f (%.1f) | %.1f (%.1f) |" % (
                r["model"], r["runner"], got["pcie_to_device"] / 1e6,
                want["pcie_to_device"] / 1e6, got["pcie_to_host"] / 1e6,
                want["pcie_to_host"] / 1e6))
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    print("\n".join(lines))
    print("wrote", args.out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--zeroc", default=os.path.join(ROOT, "build", "bin",
                                                   "zeroc"))
    r = sub.add_parser("run")
    r.add_argument("--zerorun", required=True)
    r.add_argument("--steps", type=int, default=20)
    r.add_argument("--warmup", type=int, default=5)
    r.add_argument("--out", default=os.path.join(ROOT, "bench", "RESULTS.md"))
    r.add_argument("--models", default=",".join(MODELS),
                   help="comma-separated, of: " + ", ".join(MODELS))
    r.add_argument("--json", help="also write every figure here")
    r.add_argument("--kernels", default="default",
                   help="comma-separated zerorun kernel choices, each run "
                   "right after the other per configuration, of: " +
                   ", ".join(KERNELS))
    r.add_argument("--configs", default=",".join(CONFIGS),
                   help="comma-separated, of: " + ", ".join(CONFIGS))
    r.add_argument("--no-torch", dest="torch", action="store_false",
                   help="zerorun only (PyTorch's rows from an earlier run)")
    args = ap.parse_args()
    if args.cmd == "run":
        for k in args.kernels.split(","):
            if k not in KERNELS:
                ap.error("--kernels: %r is not one of %s" % (k, ", ".join(KERNELS)))
        for c in args.configs.split(","):
            if c not in CONFIGS:
                ap.error("--configs: %r is not one of %s" % (c, ", ".join(CONFIGS)))
    prepare(args) if args.cmd == "prepare" else run(args)


if __name__ == "__main__":
    main()
