"""Checks the schema of a zerorun --calibrate cluster file (not its values):
every figure is {"value", "source"}, the measured ones say where and when,
and the calibration section has the figures the cost model reads."""
import json
import sys

c = json.load(open(sys.argv[1]))
ranks = int(sys.argv[2])


def figures(node, path=""):
    for key, value in node.items():
        where = path + key
        if isinstance(value, dict) and "value" in value:
            yield where, value
        elif isinstance(value, dict):
            yield from figures(value, where + ".")


found = dict(figures(c))
for key, fig in found.items():
    assert set(fig) == {"value", "source"}, key
    assert isinstance(fig["value"], (int, float)) and fig["value"] >= 0, key
    s = fig["source"]
    assert s.startswith("measured on ") and " by zerorun --calibrate" in s \
        or not any(k in key for k in ("calibration.", "peak_tflops",
                                       "hbm_gb_per_s", "memory_gb_per_s")), \
        (key, s)
cal = c["calibration"]
assert cal["ranks"]["value"] == ranks
# The device that measured (the simulator schedules a CPU rank's streams as
# zerorun runs them there).
assert cal["device"] == "cpu", cal.get("device")
# Each rank's kernel threads: how the simulator schedules its streams.
threads = cal["threads_per_rank"]["value"]
assert threads >= 1 and threads == int(threads), threads
for d in ("f32",):
    for k in ("small", "medium", "large", "misaligned"):
        assert cal["matmul_tflops"][d][k]["value"] > 0, (d, k)
    # Each linear kind alone, every class.
    for kind in ("linear", "linear_grad_input", "linear_grad_weight"):
        for k in ("small", "medium", "large"):
            assert cal["matmul_kind_tflops"][d][kind][k]["value"] > 0, (kind, k)
    # Odd rows are measured at the largest class (1024 on a CPU).
    assert "[1023, 1024]" in cal["matmul_tflops"][d]["misaligned"]["source"]
for k in ("gelu", "gelu_backward", "add", "layernorm", "layernorm_backward",
          "linear_grad_bias", "rmsnorm", "rmsnorm_backward", "rotary",
          "rotary_backward", "accumulate", "default"):
    assert cal["kernel_gb_per_s"][k]["value"] > 0, k
# With several threads a rank, the one-thread rates below the kernels'
# parallel threshold.
if "serial_kernel_gb_per_s" in cal:
    assert cal["serial_kernel_elements"]["value"] == 32768
    for k in ("gelu", "add", "cross_entropy", "cross_entropy_backward"):
        assert cal["serial_kernel_gb_per_s"][k]["value"] > 0, k
# On a CPU the operands rotate through pools larger than the cache.
assert "last-level cache" in cal["kernel_gb_per_s"]["add"]["source"]
# ... and again in cache (a pool of four, reused): the residency's rates,
# the same kinds; unmeasured kinds take add's, as from memory.
for k in ("gelu", "gelu_backward", "silu", "silu_backward", "add", "mul",
          "layernorm", "layernorm_backward", "linear_grad_bias", "rmsnorm",
          "rmsnorm_backward", "rotary", "rotary_backward", "default"):
    assert cal["kernel_hot_gb_per_s"][k]["value"] > 0, k
    assert k == "default" or "pool of 4" in \
        cal["kernel_hot_gb_per_s"][k]["source"], k
# Accumulates and zeroing stream gradients from memory: not timed in cache.
assert not {"accumulate", "zero_grads"} & set(cal["kernel_hot_gb_per_s"])
assert cal["kernel_hot_gb_per_s"]["default"]["value"] == \
    cal["kernel_hot_gb_per_s"]["add"]["value"]
# The cache the residency shares among the ranks: the largest the kernel
# lists for cpu0 (read here from sysfs independently), in MiB.
sizes = []
for i in range(8):
    try:
        text = open(f"/sys/devices/system/cpu/cpu0/cache/index{i}/size").read()
    except OSError:
        continue
    text = text.strip()
    scale = {"K": 1 << 10, "M": 1 << 20}.get(text[-1], 1)
    sizes.append(int(text.rstrip("KM")) * scale)
if sizes:
    assert cal["cache_mib"]["value"] * (1 << 20) == max(sizes), \
        (cal["cache_mib"], sizes)
assert "last-level cache" in cal["cache_mib"]["source"]
# The cache's hold by reuse distance: pools doubling from the hot table's
# (2 MiB) to the first at least twice this rank's share of the cache, each
# a positive rate.
reuse = cal["cache_reuse"]
mibs = [p["mib"] for p in reuse["points"]]
assert mibs[0] == 2 and len(mibs) >= 2, mibs
assert all(b == 2 * a for a, b in zip(mibs, mibs[1:])), mibs
assert all(p["gb_per_s"] > 0 for p in reuse["points"]), reuse
share = cal["cache_mib"]["value"] / cal["ranks"]["value"]
assert mibs[-1] >= 2 * share > mibs[-2], (mibs, share)
assert "accumulate" in reuse["source"] and "pool" in reuse["source"]
for k in ("adam_gb_per_s", "clip_gb_per_s", "op_overhead_us",
          "phase_overhead_us", "attention_tflops", "adam_call_us",
          "clip_per_tensor_us"):
    assert k in cal, k
assert "32 adam_update calls" in cal["adam_call_us"]["source"]
assert "32 gradients" in cal["clip_per_tensor_us"]["source"]
# Attention's two directions timed apart, at both classes.
for k in ("attention_tflops", "attention_small_tflops"):
    assert "forward alone" in cal[k]["source"], k
for k in ("attention_backward_tflops", "attention_backward_small_tflops"):
    assert cal[k]["value"] > 0 and "backward alone" in cal[k]["source"], k
assert "xlarge" not in cal["matmul_tflops"]["f32"], "4096^3 is for GPUs"
collectives = [k for k in ("all_gather", "reduce_scatter", "all_reduce",
                          "all_to_all") if k in cal]
assert len(collectives) == (4 if ranks > 1 else 0), collectives
# The ranks' meeting waits: measured at 2+ ranks only.
meeting = cal.get("meeting_wait", {})
assert sorted(meeting) == (["compute", "memory"] if ranks > 1 else []), meeting
for kind, figure in meeting.items():
    assert figure["value"] >= 0, (kind, figure)
for k in collectives:  # Alone and beside compute (a CPU rank's cores).
    for f in ("latency_us", "bus_gb_per_s", "contended_latency_us",
              "contended_bus_gb_per_s", "per_tensor_us"):
        assert f in cal[k], (k, f)
    assert "32 collectives" in cal[k]["per_tensor_us"]["source"], k
    # Each size's time kept, 4 KiB to 32 MiB of f32 split evenly over the
    # ranks (nccl-tests' size: every rank's elements), ascending.
    sizes = cal[k]["by_size"]
    assert sizes["source"].startswith("measured on "), (k, sizes["source"])
    want = [(1 << e) // ranks * ranks * 4
            for e in (10, 12, 14, 16, 18, 19, 20, 21, 22, 23)]
    assert [p["bytes"] for p in sizes["points"]] == want, (k, sizes)
    for p in sizes["points"]:
        assert set(p) == {"bytes", "us"} and p["us"] > 0, (k, p)
# The machine's steadiness: the probe timed again and again through the
# calibration, at most one every 0.5 s (the last always), ascending in
# time; a calibration of this length has sites for many more.
probes = cal["steadiness"]["points"]
assert len(probes) >= 5, len(probes)
for a, b in zip(probes[:-1], probes[1:-1]):
    assert b["s"] - a["s"] >= 0.5, (a, b)
assert probes[-1]["s"] > probes[-2]["s"], probes[-2:]
assert all(set(p) == {"s", "ms"} and p["ms"] > 0 for p in probes), probes
assert "slowest rank" in cal["steadiness"]["source"], cal["steadiness"]
# A packed stage-3 bucket's further gradient: measured at 2+ ranks only.
assert ("packed_gradient_us" in cal) == (ranks > 1)
if ranks > 1:
    assert cal["packed_gradient_us"]["value"] >= 0
    assert "32 gradients" in cal["packed_gradient_us"]["source"]
# The cross-core handoff: only with several threads a rank, and absent
# where the threads shared a cache throughout (no extra time to measure).
if threads < 2:
    assert "handoff_gb_per_s" not in cal, cal["handoff_gb_per_s"]
elif "handoff_gb_per_s" in cal:
    assert cal["handoff_gb_per_s"]["value"] > 0
    assert "samples of 0.15 s" in cal["handoff_gb_per_s"]["source"]
assert c["gpus_per_node"]["value"] == ranks
print("calibration ok: %d figures, %d collective fits" %
      (len(found), len(collectives)))
