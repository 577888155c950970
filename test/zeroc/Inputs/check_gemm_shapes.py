"""Checks the GEMMs a `zerorun --calibrate --shapes PLAN` file timed against
the plan itself: one entry for each distinct linear-class op of the plan,
its geometry read here from the op's operand shapes (checked against the
plan's own `flops`: 2 x rows x in x out, plus the bias), and nothing else.

    check_gemm_shapes.py CLUSTER.json PLAN.json...
"""
import json
import math
import sys

cluster = json.load(open(sys.argv[1]))
wanted = set()
for path in sys.argv[2:]:
    plan = json.load(open(path))
    for phase in plan["phases"]:
        shapes = {v["id"]: (v["shape"], v["dtype"]) for v in phase["values"]}
        for op in phase["ops"]:
            kind = op["kind"]
            if kind not in ("linear", "linear_grad_input",
                            "linear_grad_weight"):
                continue
            (a, _), (y, dtype) = shapes[op["inputs"][0]], shapes[op["outputs"][0]]
            if kind == "linear":          # x [..., in] -> y [..., out]
                inner, out = a[-1], y[-1]
            elif kind == "linear_grad_input":  # dy [..., out] -> dx [..., in]
                inner, out = y[-1], a[-1]
            else:                         # dy [..., out] -> dw [out, in]
                inner, out = y[1], a[-1]
            rows = math.prod(a) // a[-1]
            # The plan's FLOPs agree with the geometry (a linear's bias adds
            # one per output element).
            bias = rows * out if len(op["inputs"]) > 2 else 0
            assert op["flops"] == 2 * rows * inner * out + bias, \
                (op, rows, inner, out)
            wanted.add((kind, dtype, rows, inner, out))

shapes = cluster["calibration"]["matmul_shapes"]
got = set()
for g in shapes["gemms"]:
    assert g["tflops"] > 0, g
    # On a CPU each GEMM also from memory (its operands rotated through a
    # pool of twice the last-level cache).
    assert g.get("cold_tflops", 0) > 0, g
    got.add((g["kind"], g["dtype"], g["rows"], g["in"], g["out"]))
assert len(got) == len(shapes["gemms"]), "an entry twice"
assert got == wanted, (sorted(wanted - got), sorted(got - wanted))
source = shapes["source"]
assert source.startswith("measured on ") and all(p in source
                                                 for p in sys.argv[2:]), source
assert "cold_tflops on the next set of a pool of twice the" in source, source
print(f"gemm shapes ok: {len(got)} GEMMs of "
      f"{len({k[2:] for k in got})} geometries")
