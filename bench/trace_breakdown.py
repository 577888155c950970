#!/usr/bin/env python3
"""Where a fidelity run's measured time went, from the traces it left.

For the work folder of a `bench/fidelity_bench.py` run (its JSON's "work"),
prints per configuration:

  * idle: the time of a phase run that no op covers (any stream), median
    over the runs of the steps after the first: thread start-up and late
    wake-ups (bench/RESULTS.md, run 6, item 1);
  * at 2+ ranks, per collective kind, split by whether its stream is the
    compute stream:
    the predicted busy time (`zeroc inspect --compare --json`), the measured
    span, the part of it spent waiting for the other ranks to arrive
    (`arrival_wait_s`, issue #21), and predicted / (span - wait) (run 6,
    item 2). Rank 0's trace events, per step.

Then the same sums over all configurations. Reads traces and runs zeroc
only; it measures nothing.

    python3 bench/trace_breakdown.py WORK [--build build]
"""
import argparse
import collections
import glob
import json
import os
import re
import statistics
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def events(path):
    t = json.load(open(path))
    ev = t["traceEvents"] if isinstance(t, dict) else t
    return [e for e in ev if e.get("ph") == "X" and e["args"]["step"] > 0]


def idle_per_run(ev):
    """Median ms of each phase run not covered by an op."""
    ops = collections.defaultdict(list)
    for e in ev:
        if e["cat"] == "op":
            a = e["args"]
            ops[(a["rank"], a["step"], a["phase"], a["run"])].append(e)
    idle = []
    for r in ev:
        if r["cat"] != "phase_run":
            continue
        a = r["args"]
        spans = sorted((e["ts"], e["ts"] + e["dur"])
                       for e in ops[(a["rank"], a["step"], a["phase"],
                                     a["run"])])
        covered, cur = 0.0, None
        for s, e in spans:
            if cur is None or s > cur[1]:
                covered += cur[1] - cur[0] if cur else 0
                cur = [s, e]
            else:
                cur[1] = max(cur[1], e)
        covered += cur[1] - cur[0] if cur else 0
        idle.append((r["dur"] - covered) / 1e3)
    return statistics.median(idle) if idle else 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("work")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    args = ap.parse_args()
    zeroc = os.path.join(args.build, "bin", "zeroc")
    total = collections.defaultdict(lambda: [0.0, 0.0, 0.0])
    for trace in sorted(glob.glob(os.path.join(args.work, "*.trace.json"))):
        name = os.path.basename(trace)[: -len(".trace.json")]
        # NAME.trace.json (one round), NAME.rR.trace.json or
        # NAME.rR.lL.trace.json (rounds, launches): round R's calibration.
        parts = name.split(".")
        rnd = next((p[1:] for p in parts[1:] if re.fullmatch(r"r\d+", p)),
                   None)
        config = parts[0]
        plan = os.path.join(args.work, config + ".plan.json")
        ranks = json.load(open(plan))["world_size"]
        cal = os.path.join(args.work, f"cal{ranks}.json" if rnd is None
                           else f"cal{ranks}.r{rnd}.json")
        out = subprocess.run([zeroc, "inspect", plan, "--cluster", cal,
                              "--compare", trace, "--json"],
                             capture_output=True, text=True)
        if out.returncode != 0:
            print(f"{name}: {out.stderr.strip()[:200]}")
            continue
        predicted = {r["name"]: r["predicted_s"]
                     for r in json.loads(out.stdout)["op_kinds"]}
        ev = events(trace)
        steps = len({e["args"]["step"] for e in ev}) or 1
        streams = {}
        for phase in json.load(open(plan))["phases"]:
            for op in phase["ops"]:
                streams[(phase["name"], op["index"])] = op.get("stream", 0)
        span = collections.Counter()
        wait = collections.Counter()
        kinds = {}
        for e in ev:
            a = e["args"]
            if e["cat"] != "op" or a["rank"] != 0 or \
                    a.get("arrival_wait_s") is None:
                continue
            kind = e["name"].split()[0]
            where = ("compute stream" if streams.get((a["phase"], a["op"]), 0)
                     == 0 else "own stream")
            span[(kind, where)] += e["dur"] / 1e6 / steps
            wait[(kind, where)] += a["arrival_wait_s"] / steps
            kinds.setdefault(kind, set()).add(where)
        print(f"{name}: idle {idle_per_run(ev):.3f} ms per phase run")
        if ranks == 1:
            continue  # Its collectives are local copies.
        for (kind, where), s in sorted(span.items()):
            # The prediction is per kind: split it as the spans split.
            share = s / sum(span[(kind, w)] for w in kinds[kind])
            p = predicted.get(kind, 0.0) * share
            w = wait[(kind, where)]
            net = s - w
            total[(kind, where)][0] += p
            total[(kind, where)][1] += s
            total[(kind, where)][2] += w
            print(f"  {kind:<26} {where:<14} predicted {p * 1e3:8.3f} ms  "
                  f"span {s * 1e3:8.3f} ms  arrival wait {w * 1e3:8.3f} ms"
                  f"  predicted/net {p / net if net > 0 else 0:5.2f}")
    print("\nall configurations of 2+ ranks, per step summed")
    for (kind, where), (p, s, w) in sorted(total.items()):
        print(f"  {kind:<26} {where:<14} predicted {p * 1e3:9.2f} ms  "
              f"span {s * 1e3:9.2f} ms  arrival wait {w * 1e3:8.2f} ms "
              f"({w / s * 100 if s else 0:3.0f}%)  predicted/span "
              f"{p / s if s else 0:5.2f}  predicted/net "
              f"{p / (s - w) if s > w else 0:5.2f}")


if __name__ == "__main__":
    main()
