"""Writes CLUSTER_OUT: CLUSTER_IN with a calibration.attention_shapes entry
(both directions, at RATE TFLOP/s) for each flash causal_attention of PLAN.

    add_attention_shapes.py CLUSTER_IN PLAN RATE CLUSTER_OUT
"""
import json
import sys

cluster = json.load(open(sys.argv[1]))
plan = json.load(open(sys.argv[2]))
kernels = {}
for phase in plan["phases"]:
    shapes = {v["id"]: (v["shape"], v["dtype"]) for v in phase["values"]}
    for op in phase["ops"]:
        if op["kind"] != "causal_attention":
            continue
        attrs = op["attrs"]
        (batch, seq, width), dtype = shapes[op["inputs"][0]]
        heads = attrs["num_heads"]
        for direction in ("forward", "backward"):
            k = {"direction": direction, "dtype": dtype, "batch": batch,
                 "seq": seq, "heads": heads,
                 "kv_heads": attrs.get("num_kv_heads") or heads,
                 "head_dim": width // heads, "window": attrs.get("window", 0),
                 "tflops": float(sys.argv[3])}
            kernels[tuple(sorted(k.items()))] = k
cluster.setdefault("calibration", {})["attention_shapes"] = {
    "source": "test", "kernels": list(kernels.values())}
json.dump(cluster, open(sys.argv[4], "w"), indent=2)
