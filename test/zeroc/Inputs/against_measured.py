"""Compares `zeroc inspect --json` step times with measured ones: the
arguments are pairs MEASURED_SECONDS INSPECT_JSON. Prints how many
predictions are within 10% of their measurement, and how many pairs of
configurations, among those measured more than 2% apart, the predictions
put in the same order."""
import itertools
import json
import sys

args = sys.argv[1:]
rows = []
for measured, path in zip(args[0::2], args[1::2]):
    with open(path) as f:
        predicted = json.load(f)["predicted_step_time_s"]
    rows.append((float(measured), predicted))
    print("measured %.2f ms, predicted %.2f ms, ratio %.3f"
          % (float(measured) * 1e3, predicted * 1e3, predicted / float(measured)))
within = sum(abs(p / m - 1) <= 0.10 for m, p in rows)
print("within 10%%: %d of %d" % (within, len(rows)))
apart = agree = close = 0
for (m1, p1), (m2, p2) in itertools.combinations(rows, 2):
    if abs(m1 / m2 - 1) <= 0.02:
        close += 1
        continue
    apart += 1
    agree += (m1 < m2) == (p1 < p2)
print("order: %d of %d pairs apart by more than 2%% agree (%d pair%s within 2%%)"
      % (agree, apart, close, "" if close == 1 else "s"))
