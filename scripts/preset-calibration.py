#!/usr/bin/env python3
"""Writes (or checks) the `calibration` section of the GPU cluster presets
in examples/clusters from zerorun's own measurement on an H100
(bench/gpu-cluster-h100.json, `zerorun --calibrate --device cuda`).

Without it a preset priced every matrix product at 0.7 of the datasheet
peak and every other kernel at the datasheet's memory bandwidth: GPT-2 124M
at micro-batch 8 on one H100 came out at 15.2 ms a step where zerorun
measured 49.2-54.7 ms (and PyTorch eager 45.4 ms, torch.compile 28.1 ms):
attention at 692 TFLOP/s where zerorun's kernels reach 107 forward and 78
backward, small products as if the host issued them for free. A preset
now carries what zerorun measured, moved to the preset's GPU where the
measurement was bound by the GPU:

- device-bound figures scale by the datasheet ratio of the preset's GPU
  to the measured one: the 4096^3 GEMM class and the misaligned rows'
  class by the dtype's peak, the large attention class by the bf16 peak,
  the streaming kernels, Adam and the clip pass by the memory bandwidth;
- figures bound by the host's issue of each call on the measured machine
  carry over as measured (19-22 us a call at the GEMM classes of side 64,
  256 and 1024 and the small attention class, about the op overhead): the
  per-op and per-phase overheads, Adam's and the clip's per-call times.

The measured GPU is the H100 SXM5 of examples/clusters/h100-sxm-8.json
(the lease's "NVIDIA H100 80GB HBM3"), whose datasheet figures are the
ratios' denominators: for that preset every figure is the measurement.

  scripts/preset-calibration.py           rewrite the presets
  scripts/preset-calibration.py --check   exit 1 where a preset differs
"""
import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MEASURED = "bench/gpu-cluster-h100.json"
MEASURED_GPU_PRESET = "h100-sxm-8"
PRESETS = ["h100-sxm-8", "h100-pcie-1", "a100-80gb-8", "a100-100gbe"]
# The GEMM classes whose calls the host's issue bounded on the measured
# machine (include/zeroc/Config/Cluster.h, kMatmulClassFlops: sides 64,
# 256 and 1024 took 19-22 us a call); the others are the GPU's.
HOST_BOUND_CLASSES = {"small", "medium", "large"}
DEVICE_BOUND_CLASSES = {"xlarge", "misaligned"}
HOST_FIGURES = ["op_overhead_us", "phase_overhead_us", "adam_call_us",
                "clip_per_tensor_us"]
MEMORY_FIGURES = ["adam_gb_per_s", "clip_gb_per_s"]
ATTENTION = {"attention_tflops": "device", "attention_backward_tflops":
             "device", "attention_small_tflops": "host",
             "attention_backward_small_tflops": "host"}


def load(rel):
    with open(os.path.join(ROOT, rel)) as f:
        return json.load(f)


def preset_path(name):
    return os.path.join(ROOT, "examples", "clusters", name + ".json")


def figure(value, source):
    return {"value": round(value, 6), "source": source}


def derive(measured, reference, preset):
    """The preset's calibration section."""
    cal = measured["calibration"]
    origin = ("zerorun on an NVIDIA H100 SXM5 80GB (" + MEASURED + ", " +
              measured["description"].split(" by zerorun")[0] + ")")
    ref_gpu, gpu = reference["gpu"], preset["gpu"]
    same = preset["gpu"]["model"] == reference["gpu"]["model"]

    def scaled(value, what, ratio_of):
        if same:
            return figure(value, "measured by " + origin + ": " + what)
        if ratio_of == "hbm":
            num, den = gpu["hbm_gb_per_s"]["value"], ref_gpu[
                "hbm_gb_per_s"]["value"]
            unit = "memory bandwidth %g / %g GB/s" % (num, den)
        else:
            num = gpu["peak_tflops"][ratio_of]["value"]
            den = ref_gpu["peak_tflops"][ratio_of]["value"]
            unit = "%s peak %g / %g TFLOP/s" % (ratio_of, num, den)
        return figure(value * num / den,
                      "%.6g measured by %s: %s; times this GPU's datasheet "
                      "%s (a device-bound figure)" % (value, origin, what,
                                                        unit))

    def kept(value, what):
        if same:
            return figure(value, "measured by " + origin + ": " + what)
        return figure(value, "measured by %s: %s; as measured (bound by the "
                      "host's issue of each call, not the GPU)" % (origin,
                                                                   what))

    def what(fig):
        # The measurement's own description, less its "measured on ..."
        # preamble (the origin says where).
        s = fig["source"]
        return s.split("): ", 1)[1] if "): " in s else s

    out = {"device": "cuda"}
    for name in HOST_FIGURES:
        out[name] = kept(cal[name]["value"], what(cal[name]))
    for name in MEMORY_FIGURES:
        out[name] = scaled(cal[name]["value"], what(cal[name]), "hbm")
    for name, bound in ATTENTION.items():
        f = cal[name]
        out[name] = (scaled(f["value"], what(f), "bf16") if bound == "device"
                     else kept(f["value"], what(f)))
    out["kernel_gb_per_s"] = {
        k: scaled(f["value"], what(f), "hbm")
        for k, f in sorted(cal["kernel_gb_per_s"].items())}

    def matmuls(table):
        result = {}
        for dtype, classes in sorted(table.items()):
            peak = "bf16" if dtype == "bf16" else dtype
            result[dtype] = {}
            for cls, f in sorted(classes.items()):
                if cls in HOST_BOUND_CLASSES:
                    result[dtype][cls] = kept(f["value"], what(f))
                elif cls in DEVICE_BOUND_CLASSES:
                    result[dtype][cls] = scaled(f["value"], what(f), peak)
                else:
                    sys.exit("preset-calibration: %s: class %r is neither "
                             "host- nor device-bound here" % (MEASURED, cls))
        return result

    out["matmul_tflops"] = matmuls(cal["matmul_tflops"])
    out["matmul_kind_tflops"] = {
        dtype: {kind: matmuls({dtype: classes})[dtype]
                for kind, classes in sorted(kinds.items())}
        for dtype, kinds in sorted(cal["matmul_kind_tflops"].items())}
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 where a preset differs from the "
                        "derivation, writing nothing")
    args = parser.parse_args()
    measured = load(MEASURED)
    if measured["calibration"].get("device") != "cuda":
        sys.exit("preset-calibration: %s is not a GPU calibration" % MEASURED)
    reference = load(os.path.join("examples", "clusters",
                                  MEASURED_GPU_PRESET + ".json"))
    stale = []
    for name in PRESETS:
        path = preset_path(name)
        with open(path) as f:
            text = f.read()
        preset = json.loads(text)
        preset["calibration"] = derive(measured, reference, preset)
        new = json.dumps(preset, indent=2, ensure_ascii=False) + "\n"
        if new == text:
            continue
        if args.check:
            stale.append(path)
        else:
            with open(path, "w") as f:
                f.write(new)
            print("preset-calibration: wrote " + path)
    if stale:
        print("preset-calibration: not derived from %s as it is now: %s "
              "(run scripts/preset-calibration.py)" % (MEASURED,
                                                       " ".join(stale)))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
