"""Reads `zeroc advise --json` and ranks its candidates again from the
figures it printed: by the healthy tokens per second and by those at the
worst of the three step times (docs/advise.md, "Sensitivity")."""
import json
import sys

r = json.load(open(sys.argv[1]))
ok = [c for c in r["candidates"] if "error" not in c and c["fits"]]
per_step = lambda c: c["tokens_per_s"] * c["predicted_step_time_s"]


def worst(c):
    times = [c["predicted_step_time_s"], c["slow_network_step_time_s"]]
    if c["straggler_step_time_s"] is not None:
        times.append(c["straggler_step_time_s"])
    return max(times)


print("ranked_by", r["ranked_by"])
healthy = max(ok, key=lambda c: c["tokens_per_s"])
robust = max(ok, key=lambda c: per_step(c) / worst(c))


def same(a, b, key):
    """The same candidate, or a tie (docs/advise.md: within 0.1%)."""
    return a["setup"] == b["setup"] or abs(a[key] - b[key]) <= 1e-3 * b[key]


rec = r["recommended_candidate"]
print("recommended is the healthy best", same(rec, healthy, "tokens_per_s"))
print("recommended is the worst-case best",
      same(rec, robust, "worst_tokens_per_s"))
print("every candidate: worst = max(step, straggler, network)",
      all(abs(c["worst_step_time_s"] - worst(c)) <= 1e-12 * worst(c)
          and abs(c["worst_tokens_per_s"] - per_step(c) / worst(c)) <=
          1e-9 * c["worst_tokens_per_s"] for c in ok))
