#!/usr/bin/env python3
"""Predicted against measured step time on this machine.

Calibrates the machine (`zerorun --calibrate`, once for 1 rank and once
under mpirun for 2), then, for tiny and small GPT-2 and Llama shapes at 1
and 2 ranks, ZeRO stages 0-3, with and without CPU optimizer offload, it
compiles a plan, runs it with `zerorun --profile`, and compares the step
time `zeroc inspect --cluster CALIBRATION --compare` predicts with the
measured median (steps after the first, slowest rank). It prints one row
per configuration with the ratio predicted / measured and the load average
when the run started, and writes them as JSON (--json).

A benchmark, not a test: timings depend on the machine and on what else
runs on it. Run it on an otherwise idle machine and quote the table with
the load averages.

    python3 bench/fidelity_bench.py [--build build] [--steps 6]
        [--models tiny-gpt2,tiny-llama,small-gpt2,small-llama]
        [--ranks 1,2] [--rounds 1] [--calibrations 1] [--json out.json]

`--rounds N` repeats the whole measurement N times: each round calibrates,
then runs every configuration of that rank count straight after, in sweeps
of one launch each (every sweep the other way round from the one before,
so that a drift in the machine's speed does not favour the configurations
run first, and no configuration always follows the same one). Around each run and
calibration it reads the machine's CPU counters (/proc/stat) and reports
the share other processes used ("others": the most in any round). A configuration's
ratio is the median over the rounds of predicted (from that round's
calibration) / measured (in that round). On a shared machine whose speed
moves between minutes, this pairs each measurement with a calibration
taken under the same load; one calibration for the whole bench does not.

Each round's calibration line also says how steady the machine was while
it calibrated (`zeroc inspect`'s calibration_steadiness: how many of its
probes ran 1.15 times their usual time or more; "calibration_steadiness"
in the JSON, per rank count and round).

`--calibrations N` calibrates N times per rank count and uses each
figure's median: on a shared machine one calibration's figures move with
whatever else ran while it measured.

After the table it prints, per model, rank count and offload, the order of
the ZeRO stages by predicted step time (what `zeroc advise` ranks them by:
the same simulation) against their order by measured time, and whether
they agree ("stage_orders" in the JSON). Two stages' measured order is
taken from their launches paired sweep by sweep (the two ran seconds
apart), two sweeps of opposite direction averaged into a unit: the median
over the units and a 95% bootstrap interval (paired_ratio); a pair whose
interval excludes 1, and which every round orders alike, is "resolved",
and a stage order is as measured where the prediction orders every
resolved pair alike. Stages within a few percent of one another need many
launches to resolve: `--launches N` runs every configuration exactly N
times a round (an even N pairs every sweep).

Each calibration also times the GEMMs of the round's plans on their own
shapes (`zerorun --calibrate --shapes PLAN`: the cost model prices those
ops at their measured rates rather than between the square size classes);
`--no-shapes` calibrates by the size classes alone.

`--measure-seconds S` launches each configuration again (up to
`--max-launches`, the later launches of a round after the first launch of
every configuration) until its launches' steps after the first add up to S
seconds; the configuration's measured step in that round is the median over
its launches. On a shared VM a launch's steps agree with one another but
not with the next launch's: tiny models' 3-8 ms steps at 2 ranks moved by
up to 1.8x between launches a second apart, with the same losses (the
memory-bound ops slowed most: the cache the ranks share with the host's
other tenants). One launch is one draw from that spread.

`--threads N` passes `--threads N` to every calibration and run (zerorun's
kernel threads per rank; by default the cores / the ranks). On a 2-core VM
whose hypervisor moves the two vCPUs between cores that share a cache and
cores that do not (bench/RESULTS.md, runs 37-38), a one-rank run of two
threads lands on either level, unseen; with one thread it does not cross.

`--recompare WORK` runs nothing: it compares the plans and traces an
earlier run left in WORK (its "work" folder) again with this build's
zeroc, against that run's calibration files: what a change to the model
makes of measurements already taken.
"""
import argparse
import json
import math
import os
import random
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SMALL = {
    "small-gpt2": {"activation_function": "gelu_new", "model_type": "gpt2",
                   "n_embd": 256, "n_head": 4, "n_layer": 4,
                   "n_positions": 128, "vocab_size": 4096},
    "small-llama": {"hidden_act": "silu", "hidden_size": 256,
                    "intermediate_size": 688, "max_position_embeddings": 128,
                    "model_type": "llama", "num_attention_heads": 4,
                    "num_hidden_layers": 4, "num_key_value_heads": 2,
                    "rms_norm_eps": 1e-5, "vocab_size": 4096},
}
SEQ = {"tiny-gpt2": 32, "tiny-llama": 32, "small-gpt2": 128,
       "small-llama": 128}


def loadavg():
    return os.getloadavg()[0]


def cpu_times():
    """The machine's busy and stolen CPU seconds so far (/proc/stat's cpu
    line, as zerorun's MachineLoad reads it); None where unreadable."""
    try:
        with open("/proc/stat") as f:
            v = [float(x) for x in f.readline().split()[1:9]]
    except (OSError, ValueError, IndexError):
        return None
    hz = os.sysconf("SC_CLK_TCK")
    return (v[0] + v[1] + v[2] + v[5] + v[6]) / hz, v[7] / hz


def children_cpu():
    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    return u.ru_utime + u.ru_stime


def measured_run(cmd):
    """run(cmd), and the share of the machine's CPU time (0-1) that other
    processes used meanwhile and the hypervisor took: (others, steal)."""
    before, own, t0 = cpu_times(), children_cpu(), time.time()
    run(cmd)
    after, own, wall = cpu_times(), children_cpu() - own, time.time() - t0
    if before is None or after is None or wall <= 0:
        return -1, -1
    capacity = wall * (os.cpu_count() or 1)
    others = (after[0] - before[0] - own) / capacity
    return (min(max(others, 0.0), 1.0),
            min(max((after[1] - before[1]) / capacity, 0.0), 1.0))


def run(cmd, **kw):
    out = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if out.returncode != 0:
        raise RuntimeError(f"failed: {' '.join(cmd)}\n{out.stderr[-2000:]}")
    return out.stdout


THREADS = []  # ["--threads", N] where --threads was given


def mpi(ranks, cmd):
    """`cmd` (a zerorun command) for `ranks` ranks, with --threads."""
    cmd = cmd + THREADS
    if ranks == 1:
        return cmd
    return ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np",
            str(ranks)] + cmd


def ds_config(stage, offload):
    z = {"stage": stage}
    if offload:
        z["offload_optimizer"] = {"device": "cpu"}
    return {"train_micro_batch_size_per_gpu": 2,
            "gradient_accumulation_steps": 2, "zero_optimization": z}


def median_calibration(docs):
    """The first cluster file with every measured figure ({"value": ...,
    "source": ...}) replaced by its median over the `docs` that have it (a
    figure some calibrations did not measure, such as the handoff where
    the threads shared a cache, is the median of those that did), and each
    GEMM of calibration.matmul_shapes by its median over the calibrations
    that timed it; a curve's points (calibration.cache_reuse's by "mib", a
    collective's by_size by "bytes") each by their median at that size
    over the calibrations that measured it. calibration.steadiness's
    probes are the first calibration's (a time series; its source says
    so)."""
    def is_figure(node):
        return isinstance(node, dict) and isinstance(node.get("value"),
                                                     (int, float))

    def is_gemms(node):
        return isinstance(node, list) and all(
            isinstance(g, dict) and "tflops" in g for g in node)

    def is_points(node):
        return isinstance(node, list) and bool(node) and all(
            isinstance(p, dict) and ("bytes" in p or "mib" in p)
            for p in node)

    def merge(nodes):
        first = nodes[0]
        if is_figure(first):
            values = sorted(n["value"] for n in nodes)
            out = dict(first)
            out["value"] = values[len(values) // 2]
            if "source" in out:
                out["source"] += f" (median of {len(values)} calibrations)"
            return out
        if isinstance(first, dict):
            keys = list(first)
            for n in nodes[1:]:
                keys += [k for k in n if k not in keys]
            out = {}
            for k in keys:
                have = [n[k] for n in nodes if isinstance(n, dict) and k in n]
                out[k] = merge(have) if all(
                    type(h) is type(have[0]) for h in have) else have[0]
            probes = out.get("points")
            if (isinstance(probes, list) and probes and
                    all(isinstance(p, dict) and "ms" in p for p in probes)
                    and "source" in out):
                out["source"] += (f" (the first of {len(nodes)} "
                                  f"calibrations)")
            if is_points(out.get("points")) and "source" in out:
                out["source"] += (f" (each point the median of "
                                  f"{len(nodes)} calibrations)")
            return out
        if is_points(first) and all(is_points(n) for n in nodes):
            where = "bytes" if "bytes" in first[0] else "mib"
            values = {}
            for n in nodes:
                for p in n:
                    for k, v in p.items():
                        if k != where:
                            values.setdefault((p[where], k), []).append(v)
            return [{k: (v if k == where else
                         sorted(values[(p[where], k)])[
                             len(values[(p[where], k)]) // 2])
                     for k, v in p.items()} for p in first]
        if is_gemms(first) and all(is_gemms(n) for n in nodes):
            def key(g):
                # A GEMM of matmul_shapes, or an attention kernel of
                # attention_shapes.
                fields = (("direction", "dtype", "batch", "seq", "heads",
                           "kv_heads", "head_dim", "window")
                          if "direction" in g else
                          ("kind", "dtype", "rows", "in", "out"))
                return tuple(g[k] for k in fields)
            rates, order = {}, {}
            for n in nodes:
                for g in n:
                    rates.setdefault(key(g), []).append(g["tflops"])
                    order.setdefault(key(g), g)
            return [dict(g, tflops=sorted(rates[k])[len(rates[k]) // 2])
                    for k, g in order.items()]
        return first
    return merge(docs)


def configurations(models, ranks_list, stages):
    """(model, ranks, stage, offload, name) for every configuration."""
    out = []
    for model in models:
        for ranks in ranks_list:
            for stage in stages:
                for offload in ([False] if stage == 0 else [False, True]):
                    name = (f"{model}-r{ranks}-s{stage}-"
                            f"{'off' if offload else 'dev'}")
                    out.append((model, ranks, stage, offload, name))
    return out


def calibrate(zerorun, work, ranks, rnd, count, plans=()):
    """The cluster file of one round for `ranks` (`count` calibrations, each
    figure's median), and the foreign load while it ran (measured_run).
    `plans`: their GEMMs are timed on their own shapes too (--shapes)."""
    path = os.path.join(work, f"cal{ranks}.r{rnd}.json")
    shapes = [a for p in plans for a in ("--shapes", p)]
    if count <= 1:
        return path, measured_run(mpi(ranks, [zerorun, "--calibrate", "-o",
                                              path] + shapes))
    parts = []
    others = steal = 0
    for i in range(count):
        part = os.path.join(work, f"cal{ranks}.r{rnd}.{i}.json")
        o, st = measured_run(mpi(ranks, [zerorun, "--calibrate", "-o",
                                         part] + shapes))
        others, steal = max(others, o), max(steal, st)
        parts.append(json.load(open(part)))
    json.dump(median_calibration(parts), open(path, "w"), indent=1)
    return path, (others, steal)


def steadiness(zeroc, work, configs, ranks, cal):
    """`zeroc inspect`'s calibration_steadiness for the calibration `cal`
    of `ranks` ranks (read through one of their plans), or None where the
    file has no probes."""
    name = next(c[4] for c in configs if c[1] == ranks)
    try:
        report = json.loads(run([zeroc, "inspect",
                                 os.path.join(work, name + ".plan.json"),
                                 "--cluster", cal, "--json"]))
    except (RuntimeError, ValueError) as e:
        # A report, not a measurement: the bench goes on without it.
        print(f"steadiness of {cal}: {str(e).splitlines()[0][:200]}",
              file=sys.stderr)
        return None
    return report.get("calibration_steadiness")


def describe_steadiness(st):
    if not st:
        return "no steadiness probes"
    return (f"{st['slow_probes']} of {st['probes']} probes slow" +
            (f", {st['slow_factor']:.2f}x (worst {st['worst_factor']:.2f}x)"
             if st["slow_probes"] else ""))


def steps_seconds(trace):
    """Seconds of measured steps in a zerorun trace: rank 0's phase runs of
    the steps after the first (the ones --compare takes its median over)."""
    try:
        events = json.load(open(trace))["traceEvents"]
    except (OSError, ValueError, KeyError):
        return 0.0
    return sum(e["dur"] for e in events
               if e.get("cat") == "phase_run" and e["args"]["rank"] == 0 and
               e["args"]["step"] > 0) / 1e6


def median(values):
    v = sorted(values)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--models",
                    default="tiny-gpt2,tiny-llama,small-gpt2,small-llama")
    ap.add_argument("--ranks", default="1,2")
    ap.add_argument("--stages", default="0,1,2,3")
    ap.add_argument("--rounds", type=int, default=1,
                    help="calibrate and run every configuration this many "
                    "times, each round's runs right after its own "
                    "calibration, in alternating order; each "
                    "configuration's ratio is the median over the rounds")
    ap.add_argument("--calibrations", type=int, default=1,
                    help="calibrate this many times per rank count and "
                    "round, and take each figure's median (this machine's "
                    "figures moved by 15-75%% between two calibrations)")
    ap.add_argument("--measure-seconds", type=float, default=0.0,
                    help="launch each configuration again until its "
                    "launches' measured steps add up to this many seconds "
                    "(at most --max-launches), and take the median over "
                    "the launches")
    ap.add_argument("--max-launches", type=int, default=7)
    ap.add_argument("--launches", type=int, default=0,
                    help="launch every configuration exactly this many "
                    "times per round (overrides --measure-seconds and "
                    "--max-launches): the stage orders' paired comparison "
                    "takes one pair per launch")
    ap.add_argument("--no-shapes", action="store_true",
                    help="calibrate GEMMs by size class only, not also on "
                    "the plans' own shapes (zerorun --calibrate --shapes)")
    ap.add_argument("--threads", type=int, default=0,
                    help="kernel threads per rank for every calibration and "
                    "run (zerorun --threads; default: zerorun's, the cores "
                    "/ the ranks)")
    ap.add_argument("--json", default="")
    ap.add_argument("--recompare", default="",
                    help="a previous run's work folder: compare its plans "
                    "and traces again, running nothing")
    args = ap.parse_args()
    if args.launches > 0:
        args.max_launches = args.launches
        args.measure_seconds = float("inf")
    if args.threads:
        THREADS.extend(["--threads", str(args.threads)])
    zeroc = os.path.join(args.build, "bin", "zeroc")
    zerorun = os.path.join(args.build, "bin", "zerorun")
    again = bool(args.recompare)
    work = args.recompare or tempfile.mkdtemp(prefix="fidelity-")
    ranks_list = [int(r) for r in args.ranks.split(",")]
    models = args.models.split(",")
    configs = configurations(models, ranks_list,
                             [int(s) for s in args.stages.split(",")])

    # The plans, compiled before anything is timed.
    if not again:
        for model in models:
            mlir = os.path.join(work, model + ".mlir")
            if model in SMALL:
                cfg = os.path.join(work, model + ".config.json")
                json.dump(SMALL[model], open(cfg, "w"))
                source = [cfg]
            else:
                source = ["--preset", model]
            run([zeroc, "gen"] + source + ["--seq-len", str(SEQ[model]),
                                           "--micro-batch", "2", "--quiet",
                                           "-o", mlir])
        for model, ranks, stage, offload, name in configs:
            ds = os.path.join(work, name + ".ds.json")
            json.dump(ds_config(stage, offload), open(ds, "w"))
            run([zeroc, os.path.join(work, model + ".mlir"), "--config", ds,
                 "--world-size", str(ranks), "--quiet", "-o",
                 os.path.join(work, name + ".plan.json")])

    # Per round and rank count: a calibration, then every configuration's
    # run. (A work folder from before rounds has one round without the
    # ".r0" in its file names.)
    rounds = args.rounds
    legacy = again and not os.path.exists(
        os.path.join(work, f"cal{ranks_list[0]}.r0.json"))
    if again:
        rounds = 0
        while os.path.exists(os.path.join(work,
                                          f"cal{ranks_list[0]}.r{rounds}.json")):
            rounds += 1
        rounds = max(rounds, 1)

    def cal_path(ranks, rnd):
        return os.path.join(work, f"cal{ranks}.json" if legacy
                            else f"cal{ranks}.r{rnd}.json")

    def trace_path(name, rnd, launch=0):
        if legacy:
            return os.path.join(work, f"{name}.trace.json")
        return os.path.join(work, f"{name}.r{rnd}.trace.json" if launch == 0
                            else f"{name}.r{rnd}.l{launch}.trace.json")

    def launches_of(name, rnd):
        n = 1
        while os.path.exists(trace_path(name, rnd, n)):
            n += 1
        return n

    loads = {}
    foreign = {}  # (name, round) -> (others, steal) during its run
    cal_load = {}  # (ranks, round) -> others during its calibration
    cal_steady = {}  # (ranks, round) -> its calibration_steadiness
    failed = {}
    for rnd in range(0 if again else rounds):
        for ranks in ranks_list:
            load = loadavg()
            t0 = time.time()
            plans = [] if args.no_shapes else [
                os.path.join(work, c[4] + ".plan.json") for c in configs
                if c[1] == ranks]
            cal, (others, steal) = calibrate(zerorun, work, ranks, rnd,
                                             args.calibrations, plans)
            cal_load[(ranks, rnd)] = others
            took = time.time() - t0
            st = steadiness(zeroc, work, configs, ranks, cal)
            cal_steady[(ranks, rnd)] = st
            print(f"round {rnd}: calibrated {ranks} rank(s) in "
                  f"{took:.0f} s (load {load:.2f}; other "
                  f"processes {others:.0%}, steal {steal:.0%}; "
                  f"{describe_steadiness(st)})", flush=True)
            order = [c for c in configs if c[1] == ranks]
            measured_s = {}
            for launch in range(max(args.max_launches, 1)):
                # Each sweep runs the other way round from the one before,
                # so that no configuration always follows the same one.
                sweep = order[::-1] if (rnd + launch) % 2 else order
                for model, _, stage, offload, name in sweep:
                    if name in failed or (launch > 0 and measured_s.get(
                            name, 0) >= args.measure_seconds):
                        continue
                    if launch == 0:
                        loads[(name, rnd)] = loadavg()
                    try:
                        o, st = measured_run(mpi(ranks, [
                            zerorun, os.path.join(work, name + ".plan.json"),
                            "--steps", str(args.steps), "--plain",
                            "--profile", trace_path(name, rnd, launch)]))
                    except RuntimeError as e:
                        failed[name] = str(e).splitlines()[0][:300]
                        continue
                    was = foreign.get((name, rnd), (o, st))
                    foreign[(name, rnd)] = (max(was[0], o), max(was[1], st))
                    measured_s[name] = (measured_s.get(name, 0) +
                                        steps_seconds(trace_path(
                                            name, rnd, launch)))

    if again:  # The calibrations of the earlier run, read back.
        for rnd in range(rounds):
            for ranks in ranks_list:
                if os.path.exists(cal_path(ranks, rnd)):
                    cal_steady[(ranks, rnd)] = steadiness(
                        zeroc, work, configs, ranks, cal_path(ranks, rnd))
    print(f"{'model':<12} {'ranks':>5} {'stage':>5} {'offload':>7} "
          f"{'predicted':>11} {'measured':>11} {'ratio':>6} {'spread':>6} "
          f"{'load':>5} {'others':>6} {'launches':>8}", flush=True)
    rows = []
    # Per op kind over every configuration and round (the round's median
    # launch): |predicted - measured| busy time and the measured, summed.
    # A level that moves every kind alike moves the step's ratio, not this.
    kind_error = {}
    for model, ranks, stage, offload, name in configs:
        row = {"model": model, "ranks": ranks, "stage": stage,
               "offload": offload}
        label = (f"{model:<12} {ranks:>5} {stage:>5} "
                 f"{'cpu' if offload else '-':>7}")
        if name in failed:
            row["error"] = failed[name]
            print(f"{label} error: {row['error']}", flush=True)
            rows.append(row)
            continue
        try:
            per = []
            launch_s = []
            for rnd in range(rounds):
                cmps = [json.loads(run(
                    [zeroc, "inspect", os.path.join(work, name + ".plan.json"),
                     "--cluster", cal_path(ranks, rnd), "--compare",
                     trace_path(name, rnd, k), "--json"]))
                    for k in range(launches_of(name, rnd))]
                # The launch whose measured step is the median speaks for
                # the round (the prediction is the same for every launch).
                by = sorted(cmps, key=lambda c: c["step"]["measured_s"])
                cmp = by[(len(by) - 1) // 2]
                cmp["step"]["measured_s"] = median(
                    c["step"]["measured_s"] for c in cmps)
                cmp["step"]["ratio"] = (cmp["step"]["predicted_s"] /
                                        cmp["step"]["measured_s"])
                launch_s.append([c["step"]["measured_s"] for c in cmps])
                per.append(cmp)
                for k in cmp["op_kinds"]:
                    e = kind_error.setdefault(k["name"], [0.0, 0.0])
                    e[0] += abs(k["predicted_s"] - k["measured_s"])
                    e[1] += k["measured_s"]
            steps = [c["step"] for c in per]
            measured = [s["measured_s"] for s in steps]
            # The round whose ratio is the median speaks for the
            # configuration: its op tables go into the JSON.
            ratios = [s["ratio"] for s in steps]
            mid = sorted(range(rounds), key=lambda i: ratios[i])[rounds // 2]
            row.update(predicted_s=median(s["predicted_s"] for s in steps),
                       measured_s=median(measured),
                       ratio=median(ratios),
                       rounds=[{"predicted_s": s["predicted_s"],
                                "measured_s": s["measured_s"],
                                "ratio": s["ratio"],
                                "load": loads.get((name, i), -1),
                                "others": foreign.get((name, i),
                                                      (-1, -1))[0],
                                "steal": foreign.get((name, i), (-1, -1))[1],
                                "calibration_others":
                                    cal_load.get((ranks, i), -1),
                                "launches_measured_s": launch_s[i]}
                               for i, s in enumerate(steps)],
                       launch_spread=max(max(v) / min(v) for v in launch_s),
                       spread=max(measured) / min(measured),
                       # The most CPU other processes took in any round,
                       # while it ran or while its calibration did.
                       others=max(max(foreign.get((name, i), (-1, -1))[0],
                                      cal_load.get((ranks, i), -1))
                                  for i in range(rounds)),
                       load=median(loads.get((name, i), -1)
                                   for i in range(rounds)),
                       largest_errors=per[mid]["largest_errors"][:3],
                       op_kinds=per[mid]["op_kinds"][:6])
            print(f"{label} {row['predicted_s'] * 1e3:>8.2f} ms "
                  f"{row['measured_s'] * 1e3:>8.2f} ms "
                  f"{row['ratio']:>6.2f} {row['spread']:>6.2f} "
                  f"{row['load']:>5.2f} "
                  f"{format(row['others'], '>6.0%') if row['others'] >= 0 else '     -'} "
                  f"{sum(len(v) for v in launch_s):>8}",
                  flush=True)
        except RuntimeError as e:
            row["error"] = str(e).splitlines()[0][:300]
            print(f"{label} error: {row['error']}", flush=True)
        rows.append(row)
    ok = [r for r in rows if "ratio" in r]
    within = [r for r in ok if abs(r["ratio"] - 1) <= 0.15]
    print(f"\n{len(within)} of {len(ok)} configurations within 15% "
          f"({len(rows) - len(ok)} failed; {rounds} round(s), ratio the "
          f"median over them)")
    quiet = [r for r in ok if 0 <= r["others"] < 0.10]
    if not again:
        print(f"{len(quiet)} measured with other processes under 10% of "
              f"the CPU in every round (its runs and calibrations); "
              f"{sum(abs(r['ratio'] - 1) <= 0.15 for r in quiet)} of them "
              f"within 15%")
    off = sum(e for e, _ in kind_error.values())
    busy = sum(m for _, m in kind_error.values())
    if busy > 0:
        worst = sorted(kind_error.items(), key=lambda kv: -kv[1][0])[:4]
        print(f"per-kind error (|predicted - measured| busy time over the "
              f"measured, every op kind, configuration and round): "
              f"{off / busy:.1%}; most from " +
              ", ".join(f"{k} {e / m:.0%} of {m * 1e3:.0f} ms"
                        for k, (e, m) in worst))
    orders = stage_orders(ok)
    if args.json:
        json.dump({"rows": rows, "rounds": rounds,
                   "kind_error": off / busy if busy > 0 else None,
                   "threads": args.threads or None,
                   "calibration": {r: [cal_path(r, i) for i in range(rounds)]
                                   for r in ranks_list},
                   "calibration_steadiness": {
                       r: [cal_steady.get((r, i)) for i in range(rounds)]
                       for r in ranks_list},
                   "stage_orders": orders, "work": work},
                  open(args.json, "w"), indent=1)


def paired_ratio(a, b, draws=2000):
    """Configuration a's measured step over b's, from their launches paired
    by round and sweep (each sweep runs every configuration once, so the two
    of a pair ran seconds apart, under the same machine): the median ratio
    over the units below, a 95% interval for it, the number of units, and
    whether every round's own median orders the two alike. None where fewer
    than 6 units.

    A unit is two consecutive sweeps of a round, one each way round, their
    log ratios averaged: which of the two ran first alternates from sweep
    to sweep, and a drift of the machine's level within the pair of sweeps
    cancels too, where single sweeps carry both (their ratios alternate
    about the difference, and a bootstrap of them as independent pairs gave
    intervals of the wrong width). The interval is a bootstrap of the
    median over the units, seeded (the same traces give the same
    interval)."""
    rounds = []
    for ra, rb in zip(a.get("rounds", []), b.get("rounds", [])):
        logs = [math.log(x / y) for x, y in zip(
            ra.get("launches_measured_s", []), rb.get("launches_measured_s", []))
            if x > 0 and y > 0]
        rounds.append([(logs[i] + logs[i + 1]) / 2
                       for i in range(0, len(logs) - 1, 2)])
    units = [u for r in rounds for u in r]
    if len(units) < 6:
        return None
    rng = random.Random(16)
    boot = sorted(median(rng.choices(units, k=len(units)))
                  for _ in range(draws))
    lo, hi = boot[int(0.025 * draws)], boot[int(0.975 * draws) - 1]
    signs = {median(r) > 0 for r in rounds if r}
    return {"ratio": math.exp(median(units)), "low": math.exp(lo),
            "high": math.exp(hi), "units": len(units),
            "rounds_agree": len(signs) == 1}


def stage_orders(rows):
    """Per model, rank count and offload: the stages fastest first by
    predicted and by measured step time, whether the orders agree, and how
    many of the pairs of stages the prediction orders as measured.

    A pair is "resolved" when the measurement tells its two stages apart:
    the 95% interval of their paired ratio (paired_ratio: launch against
    launch, seconds apart) excludes 1 and, with several rounds, every
    round's own median orders them alike. Each resolved pair is still a
    test at 5%: over the 72 pairs of the bench's 16 groups a few may be
    resolved by chance. A stage order is "as measured" when
    the prediction orders every resolved pair as measured; the pairs whose
    interval holds 1 measured no order to agree with. (With fewer than 6
    units, a pair is resolved when two or more rounds all measured it in
    the same order, as before --launches; one round resolves none.)"""
    groups = {}
    for r in rows:
        groups.setdefault((r["model"], r["ranks"], r["offload"]), []).append(r)
    out = []
    print("\nstage order, fastest first (predicted: what advise ranks by); "
          "a pair is resolved when the 95% interval of its paired ratio "
          "excludes 1")
    print(f"{'model':<12} {'ranks':>5} {'offload':>7} {'predicted':>10} "
          f"{'measured':>10}  pairs  resolved  measured ms by stage")

    def by_rounds(a, b):
        ra, rb = a.get("rounds", []), b.get("rounds", [])
        if len(ra) < 2 or len(ra) != len(rb):
            return False  # One measurement orders nothing.
        faster = {x["measured_s"] < y["measured_s"] for x, y in zip(ra, rb)}
        return len(faster) == 1

    for (model, ranks, offload), g in groups.items():
        if len(g) < 2:
            continue
        g = sorted(g, key=lambda r: r["stage"])
        by_pred = [r["stage"] for r in sorted(g, key=lambda r: r["predicted_s"])]
        by_meas = [r["stage"] for r in sorted(g, key=lambda r: r["measured_s"])]
        pairs = []
        for i, a in enumerate(g):
            for b in g[i + 1:]:
                p = paired_ratio(a, b)
                measured = p["ratio"] if p else a["measured_s"] / b["measured_s"]
                resolved = ((p["low"] > 1 or p["high"] < 1) and
                            p["rounds_agree"]) if p else by_rounds(a, b)
                predicted = a["predicted_s"] / b["predicted_s"]
                pairs.append({"stages": [a["stage"], b["stage"]],
                              "predicted_ratio": predicted,
                              "measured_ratio": measured,
                              "interval": [p["low"], p["high"]] if p else None,
                              "units": p["units"] if p else 0,
                              "resolved": resolved,
                              "agrees": (predicted < 1) == (measured < 1)})
        agree = sum(p["agrees"] for p in pairs)
        sure = [p for p in pairs if p["resolved"]]
        sure_agree = sum(p["agrees"] for p in sure)
        out.append({"model": model, "ranks": ranks, "offload": offload,
                    "predicted": by_pred, "measured": by_meas,
                    "same": by_pred == by_meas,
                    "as_measured": sure_agree == len(sure),
                    "pairs_agreeing": agree, "pairs": len(pairs),
                    "resolved_pairs": len(sure),
                    "resolved_agreeing": sure_agree, "pair_ratios": pairs})
        times = " ".join(f"s{r['stage']}={r['measured_s'] * 1e3:.2f}"
                         for r in g)
        print(f"{model:<12} {ranks:>5} {'cpu' if offload else '-':>7} "
              f"{'<'.join(map(str, by_pred)):>10} "
              f"{'<'.join(map(str, by_meas)):>10}  {agree}/{len(pairs)}  "
              f"{sure_agree:>4}/{len(sure):<4} {times}")
        for p in sure:
            if not p["agrees"]:
                how = ("[{:.3f}, {:.3f}]".format(*p["interval"])
                       if p["interval"] else "(every round)")
                print(f"{'':>12}   s{p['stages'][0]}/s{p['stages'][1]}: "
                      f"measured {p['measured_ratio']:.3f} {how}, "
                      f"predicted {p['predicted_ratio']:.3f}")
    same = sum(o["same"] for o in out)
    print(f"{same} of {len(out)} stage orders as measured in full; "
          f"{sum(o['as_measured'] for o in out)} of {len(out)} on every "
          f"resolved pair; {sum(o['pairs_agreeing'] for o in out)} of "
          f"{sum(o['pairs'] for o in out)} pairs; "
          f"{sum(o['resolved_agreeing'] for o in out)} of the "
          f"{sum(o['resolved_pairs'] for o in out)} resolved pairs")
    return out

if __name__ == "__main__":
    main()
