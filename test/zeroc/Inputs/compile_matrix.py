#!/usr/bin/env python3
"""Compiles every bundled model (examples/configs/*/config.json, given to
zeroc directly) with every bundled DeepSpeed config (examples/ds_configs/*)
at world size 8: one model file per architecture serves every config; the
config decides micro-batch and precision. Checks that each plan has the
config's micro-batch and dtype.

  compile_matrix.py ZEROC EXAMPLES_DIR WORK_DIR
"""
import glob
import json
import os
import subprocess
import sys

zeroc, examples, work = sys.argv[1:4]
os.makedirs(work, exist_ok=True)
failures = 0
configs = sorted(glob.glob(os.path.join(examples, "ds_configs", "*.json")))
models = sorted(glob.glob(os.path.join(examples, "configs", "*",
                                       "config.json")))
for model in models:
    name = os.path.basename(os.path.dirname(model))
    for config in configs:
        out = os.path.join(work, "%s-%s" % (name, os.path.basename(config)))
        with open(config) as f:
            ds = json.load(f)
        # The launcher's arguments, for the keys a config leaves "auto" (a
        # number in the config must agree with them, as the Trainer checks).
        launcher = []
        if ds.get("train_micro_batch_size_per_gpu") == "auto":
            launcher += ["--micro-batch", "2"]
        if ds.get("gradient_accumulation_steps") == "auto":
            launcher += ["--grad-accum", "2"]
        r = subprocess.run([zeroc, model, "--seq-len", "64", "--config",
                            config, "--world-size", "8", "-o", out] + launcher,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
        if r.returncode != 0:
            print("FAILED: %s with %s:\n%s" % (name, config, r.stdout))
            failures += 1
            continue
        with open(out) as f:
            plan = json.load(f)
        micro = ds.get("train_micro_batch_size_per_gpu", "auto")
        want_micro = 2 if micro == "auto" else micro
        if "train_micro_batch_size_per_gpu" not in ds:
            # DeepSpeed's derivation: train / (accumulation x world size).
            want_micro = ds["train_batch_size"] // (
                ds.get("gradient_accumulation_steps", 1) * 8)
        bf16 = ds.get("bf16", {}).get("enabled") is True
        fp16 = ds.get("fp16", {}).get("enabled") is True
        want_dtype = "bf16" if bf16 else "f16" if fp16 else None
        got = plan["model"]
        triple = plan["config"]
        ok = (got["micro_batch"] == want_micro and
              (want_dtype is None or got["dtype"] == want_dtype) and
              triple["train_batch_size"] == got["micro_batch"] *
              triple["gradient_accumulation_steps"] * 8)
        print("%-12s %-24s micro %d dtype %s accumulation %d %s" % (
            name, os.path.basename(config), got["micro_batch"], got["dtype"],
            triple["gradient_accumulation_steps"], "ok" if ok else "WRONG"))
        failures += not ok
print("%d of %d compiled as their config says" % (
    len(models) * len(configs) - failures, len(models) * len(configs)))
sys.exit(1 if failures else 0)
