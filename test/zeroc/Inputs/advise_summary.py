"""Prints what `zeroc advise --json` decided, one fact a line: the budget,
the stages' reasons, the base, the ways out and the recommendation, for
FileCheck.

    advise_summary.py ADVICE.json
"""
import json
import sys


def gib(n):
    return f"{n / 2**30:.2f} GiB" if n < 2**40 else f"{n / 2**40:.2f} TiB"


with open(sys.argv[1]) as f:
    r = json.load(f)
print(f"fits in {gib(r['fit_bytes'])} (margin {r['margin']})")
for reason in r["reasons"]:
    print(reason)
if "base" in r:
    b = r["base"]
    print(f"base: {b['setup']}: {gib(b['peak_device_bytes'])}, fits {b['fits']}")
for w in r["ways_out"]:
    c = w["candidate"]
    print(f"way out: {' + '.join(w['changes'])}: {gib(c['peak_device_bytes'])}, "
          f"{c['figures']}")
if "recommended" in r:
    c = r["recommended_candidate"]
    print("recommended:", r["recommended"])
    print(f"peak {gib(c['peak_device_bytes'])} within {gib(r['fit_bytes'])}: "
          f"{c['peak_device_bytes'] <= r['fit_bytes']}, {c['figures']}, "
          f"{round(c['tokens_per_s']):,} tokens/s, global batch {c['global_batch']}")
    print("zeroc args:", r["recommended_launch"]["zeroc_args"])
