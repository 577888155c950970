"""Compiles the DeepSpeed config `zeroc advise -o` wrote, with the launcher
arguments it printed (recommended_launch.zeroc_args of its --json output),
and prints the plan's peak beside the recommendation's: what advise
recommends is what the config and the arguments compile to.

    advise_roundtrip.py ZEROC MODEL ADVICE.json CONFIG.json WORLD PLAN.json
"""
import json
import subprocess
import sys

zeroc, model, advice, config, world, plan = sys.argv[1:7]
with open(advice) as f:
    a = json.load(f)
args = a["recommended_launch"]["zeroc_args"].split()
subprocess.run([zeroc, model, "--config", config, "--world-size", world,
                "--quiet", "-o", plan] + args, check=True)
inspect = subprocess.run([zeroc, "inspect", plan, "--json"], check=True,
                         capture_output=True, text=True)
print("zeroc args:", " ".join(args))
print("recommended peak", a["recommended_candidate"]["peak_device_bytes"],
      "compiled peak", json.loads(inspect.stdout)["peak_device_bytes"])
