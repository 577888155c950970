"""Checks the attention a `zerorun --calibrate --shapes PLAN` file timed
against the plan itself: both directions of each distinct flash
causal_attention of the plan, its geometry read here from the op's query
[batch, seq, heads x head_dim] and attributes (checked against the plan's
own `flops`: 4 x scores x head_dim + 5 x scores, scores the full square
batch x heads x seq^2 without a window), and nothing else.

    check_attention_shapes.py CLUSTER.json PLAN.json...
"""
import json
import sys

cluster = json.load(open(sys.argv[1]))
wanted = set()
for path in sys.argv[2:]:
    plan = json.load(open(path))
    for phase in plan["phases"]:
        shapes = {v["id"]: (v["shape"], v["dtype"]) for v in phase["values"]}
        for op in phase["ops"]:
            attrs = op.get("attrs", {})
            if (op["kind"] != "causal_attention"
                    or attrs.get("kernel", "flash") != "flash"):
                continue
            (batch, seq, width), dtype = shapes[op["inputs"][0]]
            heads = attrs["num_heads"]
            kv = attrs.get("num_kv_heads") or heads
            window = attrs.get("window", 0)
            head_dim = width // heads
            if not window:
                scores = batch * heads * seq * seq
                assert op["flops"] == 4 * scores * head_dim + 5 * scores, op
            for direction in ("forward", "backward"):
                wanted.add((direction, dtype, batch, seq, heads, kv, head_dim,
                            window if 0 < window < seq else 0))

shapes = cluster["calibration"]["attention_shapes"]
got = set()
for k in shapes["kernels"]:
    assert k["tflops"] > 0, k
    got.add((k["direction"], k["dtype"], k["batch"], k["seq"], k["heads"],
             k["kv_heads"], k["head_dim"], k["window"]))
assert len(got) == len(shapes["kernels"]), "an entry twice"
assert got == wanted, (sorted(wanted - got), sorted(got - wanted))
source = shapes["source"]
assert source.startswith("measured on ") and all(p in source
                                                 for p in sys.argv[2:]), source
print(f"attention shapes ok: {len(got)} kernels of "
      f"{len({k[1:] for k in got})} geometries")
