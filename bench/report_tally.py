#!/usr/bin/env python3
"""The Python floor `wt report` is compared with (bench/report_scale.sh): the plainest tally
of a runs directory — every trace and its score read and parsed, verdicts counted per
scenario, turn latencies kept for a median — printed as one line per scenario."""
import json, os, sys, statistics
from collections import defaultdict

counts = defaultdict(lambda: [0, 0, 0, 0])  # runs, pass, fail, error
latencies = defaultdict(list)
for d in sys.argv[1:]:
    for name in os.listdir(d):
        if not name.endswith(".json") or "." in name[:-5]:
            continue
        with open(os.path.join(d, name), "rb") as f:
            trace = json.load(f)
        try:
            with open(os.path.join(d, name[:-5] + ".score.json"), "rb") as f:
                verdict = json.load(f)["verdict"]
        except OSError:
            verdict = "ERROR"
        c = counts[trace["scenario_id"]]
        c[0] += 1
        c[{"PASS": 1, "FAIL": 2}.get(verdict, 3)] += 1
        latencies[trace["scenario_id"]] += [t["latency_ms"] for t in trace.get("turns", [])]
for s, (n, p, f, e) in sorted(counts.items()):
    print(s, f"{p}/{n}", f, e, statistics.median(latencies[s] or [0]))
