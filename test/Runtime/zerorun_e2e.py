#!/usr/bin/env python3
"""End-to-end tests of zerorun: compile tiny-gpt2 plans with zeroc, run them
(under mpirun for more than one rank) and compare the per-step losses.

  zerorun_e2e.py --zeroc Z --zerorun R --mpirun "mpirun --oversubscribe ..."
                 --work DIR SCENARIO

Scenarios:
  loss-falls           stage 0, one rank: the loss falls over 20 steps
  match:SPEC           SPEC's per-step losses equal those of stage 0 on one
                       rank with the same global batch (relative 1e-5)
  SPEC = stage,world_size,grad_accum[,key=value...] with keys
         offload=cpu (offload_optimizer), param_offload=cpu (stage 3),
         bucket=N (reduce and allgather bucket sizes), persist=N (stage-3
         persistence threshold), clip=X, dtype=f32|bf16|f16
"""

import argparse
import json
import os
import shlex
import struct
import subprocess
import sys

SEQ, MICRO, STEPS = 16, 2, 8


def run(cmd, **kw):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, **kw)
    if r.returncode != 0:
        print(r.stdout)
        print("FAILED (%d): %s" % (r.returncode, " ".join(cmd)))
        sys.exit(1)
    return r.stdout


def data_file(work):
    """A periodic token stream: a small model learns it within a few steps."""
    path = os.path.join(work, "pattern.u16")
    if not os.path.exists(path):
        toks = [(i * 7 + i // 5) % 50 for i in range(8192)]
        with open(path, "wb") as f:
            f.write(struct.pack("<%dH" % len(toks), *toks))
    return path


def model(args, dtype):
    path = os.path.join(args.work, "tiny-gpt2-%s.mlir" % dtype)
    if not os.path.exists(path):
        run([args.zeroc, "gen", "--preset", "tiny-gpt2", "--seq-len", str(SEQ),
             "--micro-batch", str(MICRO), "--dtype", dtype, "--quiet", "-o",
             path])
    return path


def parse_spec(spec):
    parts = spec.split(",")
    stage, ws, ga = int(parts[0]), int(parts[1]), int(parts[2])
    opts = dict(p.split("=", 1) for p in parts[3:])
    return stage, ws, ga, opts


def plan(args, stage, ws, ga, opts):
    dtype = opts.get("dtype", "f32")
    zero = {"stage": stage,
            "stage3_param_persistence_threshold": int(opts.get("persist", 100))}
    if "bucket" in opts:
        zero["reduce_bucket_size"] = int(opts["bucket"])
        zero["allgather_bucket_size"] = int(opts["bucket"])
        zero["stage3_prefetch_bucket_size"] = int(opts["bucket"])
    if "offload" in opts:
        zero["offload_optimizer"] = {"device": opts["offload"]}
    if "param_offload" in opts:
        zero["offload_param"] = {"device": opts["param_offload"]}
    cfg = {"train_micro_batch_size_per_gpu": MICRO,
           "gradient_accumulation_steps": ga,
           "gradient_clipping": float(opts.get("clip", 1.0)),
           "zero_optimization": zero,
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}}
    if dtype == "bf16":
        cfg["bf16"] = {"enabled": True}
    if dtype == "f16":
        cfg["fp16"] = {"enabled": True}
    name = "plan-s%d-n%d-ga%d-%s" % (stage, ws, ga, "-".join(
        "%s%s" % kv for kv in sorted(opts.items())) or "default")
    cfg_path = os.path.join(args.work, name + ".ds.json")
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    out = os.path.join(args.work, name + ".json")
    run([args.zeroc, model(args, dtype), "--config", cfg_path, "--world-size",
         str(ws), "-o", out], env=dict(os.environ))
    return out


def losses(args, plan_path, ws, steps):
    log = plan_path + ".log.jsonl"
    cmd = [args.zerorun, plan_path, "--data", data_file(args.work), "--steps",
           str(steps), "--log-json", log, "--comm-timeout", "60"]
    if ws > 1:
        cmd = shlex.split(args.mpirun) + ["-np", str(ws)] + cmd
    print(run(cmd), end="")
    rows = [json.loads(l) for l in open(log)]
    final = [r for r in rows if r.get("final")]
    assert final and "measured_peak_bytes" in final[0] \
        and "predicted_peak_bytes" in final[0], "no final memory record"
    return [r["loss"] for r in rows if not r.get("final")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--zeroc", required=True)
    ap.add_argument("--zerorun", required=True)
    ap.add_argument("--mpirun", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("scenario")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)

    if args.scenario == "loss-falls":
        ls = losses(args, plan(args, 0, 1, 1, {}), 1, 20)
        print("losses:", ls)
        if not (ls[-1] < ls[0] - 0.5):
            print("FAILED: the loss did not fall: %g -> %g" % (ls[0], ls[-1]))
            return 1
        return 0

    if args.scenario.startswith("match:"):
        stage, ws, ga, opts = parse_spec(args.scenario[len("match:"):])
        ref_opts = {k: v for k, v in opts.items() if k in ("clip", "dtype")}
        ref = losses(args, plan(args, 0, 1, ws * ga, ref_opts), 1, STEPS)
        got = losses(args, plan(args, stage, ws, ga, opts), ws, STEPS)
        tol = 1e-5 if opts.get("dtype", "f32") == "f32" else 2e-2
        worst = max(abs(a - b) / abs(a) for a, b in zip(ref, got))
        print("reference:", ref)
        print("this run: ", got)
        print("largest relative difference: %g (tolerance %g)" % (worst, tol))
        if len(ref) != len(got) or worst > tol:
            print("FAILED: losses differ")
            return 1
        return 0

    print("unknown scenario " + args.scenario)
    return 2


if __name__ == "__main__":
    sys.exit(main())
