"""min/median/max per arm and rank count of scale-h200*.jsonl files: python3 h200sum.py FILE..."""
import json, statistics, sys
from collections import defaultdict
rows = defaultdict(list)
for path in sys.argv[1:]:
    for l in open(path):
        d = json.loads(l); r = d["row"]; s = r["sent"]
        sent = s["steps"] + s["buckets"] + s["heartbeats"]
        rows[(d["arm"], r["ranks"])].append((r["cpu_pct"], r["cpu_pct"] * r["wall_s"] / 100 / sent * 1e6,
                                             r["rss_bytes"] / 2**20, r["frame_p99_ms"], sent - r["received"]))
for (arm, n), v in sorted(rows.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    f = lambda i: "/".join("%.1f" % x for x in (min(x[i] for x in v), statistics.median(x[i] for x in v), max(x[i] for x in v)))
    print(f"{arm:7} {n:5} runs {len(v)}  CPU % {f(0):16}  us/line {f(1):14}  RSS {f(2):16}  p99 ms {f(3):12}  lost {max(x[4] for x in v)}")
