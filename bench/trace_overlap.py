#!/usr/bin/env python3
"""How much of each stream's work ran beside the compute stream's, from a
measured timeline (`zerorun --profile TRACE.json`; on a GPU the spans are the
device's own, CUDA events around each op, so a copy or collective stream
overlapping kernels shows here as it happened).

For each rank and step (every phase run of the step), per stream: its busy
time (the union of its ops' spans) and the part of it during which the
compute stream was busy too; the medians over the steps after the first
(the warm-up), or over all steps when there is only one.

    bench/trace_overlap.py TRACE.json [--rank R] [--json]

Exit status 2 on a file that is not such a trace."""

import argparse
import json
import statistics
import sys


def union(spans):
    """Sorted, disjoint intervals covering `spans` ((start, end) pairs)."""
    out = []
    for s, e in sorted(spans):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def length(intervals):
    return sum(e - s for s, e in intervals)


def intersection(a, b):
    """Total length of the overlap of two sorted disjoint interval lists."""
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            total += hi - lo
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def load(path):
    """The trace and its events; exits with status 2 where it is none."""
    try:
        with open(path) as f:
            trace = json.load(f)
        events = trace["traceEvents"]
        if not isinstance(events, list):
            raise TypeError("traceEvents is not a list")
    except OSError as e:
        print("trace_overlap: %s: %s" % (path, e.strerror), file=sys.stderr)
        sys.exit(2)
    except (ValueError, KeyError, TypeError) as e:
        print("trace_overlap: %s: not a zerorun --profile trace (%s)" %
              (path, e), file=sys.stderr)
        sys.exit(2)
    return trace, events


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    trace, events = load(args.trace)

    names = {}  # tid -> stream name
    spans = {}  # (step) -> tid -> [(start, end)]
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            names.setdefault(e.get("tid"), e.get("args", {}).get("name"))
        if e.get("ph") != "X" or e.get("cat") != "op":
            continue
        a = e.get("args", {})
        if a.get("rank") != args.rank:
            continue
        try:
            start = float(e["ts"]) / 1e6
            end = start + float(e["dur"]) / 1e6
            step, tid = int(a["step"]), int(e["tid"])
        except (KeyError, TypeError, ValueError):
            print("trace_overlap: %s: an op event without ts, dur, tid or "
                  "args.step: %s" % (args.trace, json.dumps(e)[:200]),
                  file=sys.stderr)
            return 2
        spans.setdefault(step, {}).setdefault(tid, []).append((start, end))
    if not spans:
        print("trace_overlap: %s: no op events of rank %d" % (args.trace,
                                                              args.rank),
              file=sys.stderr)
        return 2
    compute = next((t for t, n in names.items() if n == "compute"), 0)
    steps = sorted(spans)
    counted = steps[1:] if len(steps) > 1 else steps
    streams = sorted({t for s in counted for t in spans[s]})
    rows = []
    for tid in streams:
        busy, beside = [], []
        for s in counted:
            mine = union(spans[s].get(tid, []))
            busy.append(length(mine))
            beside.append(intersection(
                mine, union(spans[s].get(compute, []))) if tid != compute
                else None)
        row = {"stream": names.get(tid, "stream %d" % tid), "tid": tid,
               "busy_s": statistics.median(busy)}
        if tid != compute:
            row["beside_compute_s"] = statistics.median(beside)
        rows.append(row)
    clock = trace.get("otherData", {}).get("clock", "")
    if args.json:
        print(json.dumps({"rank": args.rank, "steps": len(counted),
                          "clock": clock, "streams": rows}, indent=1))
        return 0
    print("%s: rank %d, median of %d step(s)%s" % (
        args.trace, args.rank, len(counted),
        " after the first" if len(steps) > 1 else ""))
    if clock:
        print("clock: " + clock)
    print("%-12s %12s %22s" % ("stream", "busy", "beside compute"))
    for r in rows:
        if "beside_compute_s" in r:
            share = r["beside_compute_s"] / r["busy_s"] if r["busy_s"] else 0
            beside = "%9.3f ms (%3.0f%%)" % (1e3 * r["beside_compute_s"],
                                             100 * share)
        else:
            beside = "-"
        print("%-12s %9.3f ms %22s" % (r["stream"], 1e3 * r["busy_s"], beside))
    return 0


if __name__ == "__main__":
    sys.exit(main())
