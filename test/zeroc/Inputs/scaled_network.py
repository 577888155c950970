"""Writes a copy of a cluster file with another inter-node bus bandwidth:
scaled_network.py CLUSTER.json GB_PER_S OUT.json."""
import json
import sys

c = json.load(open(sys.argv[1]))
c["name"] = "%s-%sgbs" % (c["name"], sys.argv[2])
c["inter_node"]["bus_gb_per_s"] = {
    "value": float(sys.argv[2]),
    "source": "the test's: %s with another network" % c["name"]}
json.dump(c, open(sys.argv[3], "w"), indent=1)
