"""Checks a zerorun --profile trace (not its timings): every op of every
phase of PLAN appears once per run, named and placed as `zeroc inspect
--trace` names and places it, with the plan's fingerprint."""
import json
import sys

plan = json.load(open(sys.argv[1]))
trace = json.load(open(sys.argv[2]))
predicted = json.load(open(sys.argv[3]))
steps = int(sys.argv[4])
assert trace["otherData"]["generator"] == "zerorun --profile"
assert trace["otherData"]["plan_fingerprint"] == \
    predicted["otherData"]["plan_fingerprint"]
events = trace["traceEvents"]
ops = [e for e in events if e.get("cat") == "op"]
runs = [e for e in events if e.get("cat") == "phase_run"]
expected_runs = sum(p["runs_per_step"] for p in plan["phases"]) * steps
assert len(runs) == expected_runs, (len(runs), expected_runs)
expected_ops = sum(len(p["ops"]) * p["runs_per_step"]
                   for p in plan["phases"]) * steps
assert len(ops) == expected_ops, (len(ops), expected_ops)
# Names: those of the predicted trace for the same (phase, op).
names = {}
for e in predicted["traceEvents"]:
    if e["ph"] == "X" and e.get("cat") != "blocked":
        names[(e["pid"], e["args"]["op"])] = e["name"]
for e in ops:
    key = (e["pid"] % 1000, e["args"]["op"])
    if key in names:
        assert names[key] == e["name"], (key, names[key], e["name"])
    assert e["dur"] >= 0
# Thread names match the predicted trace's.
threads = lambda t: {(e["pid"] % 1000, e["tid"]): e["args"]["name"]
                     for e in t["traceEvents"]
                     if e["ph"] == "M" and e["name"] == "thread_name"
                     and e["tid"] >= 0}
assert threads(trace) == threads(predicted), (threads(trace), threads(predicted))
with_module = [e for e in ops if "." in e["name"]]
print("profile ok: %d op events, %d phase runs, %s" %
      (len(ops), len(runs), with_module[0]["name"]))
