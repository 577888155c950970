"""Reads `zeroc inspect --what-if --json` of a stage-2 and a stage-3 plan
and prints, per scenario, which stage's step is shorter
(docs/reading-reports.md, "The decision frame")."""
import json
import sys

s2 = json.load(open(sys.argv[1]))["scenarios"]
s3 = json.load(open(sys.argv[2]))["scenarios"]
for a, b in zip(s2, s3):
    assert a["scenario"] == b["scenario"]
    t2, t3 = a["predicted_step_time_s"], b["predicted_step_time_s"]
    print("%s: stage %d" % (a["scenario"], 2 if t2 < t3 else 3))
