"""Summarize the scale bench's JSON lines (`ARM {json}` per line) into ranges per arm and N.

python3 summarize.py final.jsonl step1-3.jsonl step4.jsonl
"""
import json
import sys
from collections import defaultdict

for path in sys.argv[1:]:
    rows = defaultdict(list)
    for line in open(path):
        arm, js = line.split(" ", 1)
        r = json.loads(js)
        s = r["sent"]
        sent = s["steps"] + s["buckets"] + s["heartbeats"]
        cpu_s = r["cpu_pct"] * r["wall_s"] / 100
        rows[(arm, r["ranks"])].append(dict(
            cpu_pct=r["cpu_pct"], us_line=cpu_s / sent * 1e6, cpu_gen=cpu_s / s["seconds"] * 100,
            lost=sent - r["received"], stored=r["stored_steps"], rss=r["rss_bytes"] / 2**20,
            p50=r["frame_p50_ms"], p99=r["frame_p99_ms"], wall=r["wall_s"], gen=s["seconds"]))
    print(f"== {path}")
    print(f"{'arm':5} {'ranks':>5} {'runs':>4} {'CPU % (bench)':>15} {'CPU us/line':>12} {'lost':>5} {'stored':>7} "
          f"{'RSS MiB':>12} {'p50 ms':>11} {'p99 ms':>12} {'wall s':>10} {'gen s':>10}")
    rng = lambda v, f: f.format(min(v)) if min(v) == max(v) or len(v) == 1 else (f.format(min(v)) + "-" + f.format(max(v)))
    for (arm, n), rs in sorted(rows.items(), key=lambda k: (k[0][1], k[0][0])):
        col = lambda k: [x[k] for x in rs]
        print(f"{arm:5} {n:>5} {len(rs):>4} {rng(col('cpu_pct'), '{:.1f}'):>15} {rng(col('us_line'), '{:.1f}'):>12} "
              f"{max(col('lost')):>5} {min(col('stored')):>7} {rng(col('rss'), '{:.0f}'):>12} {rng(col('p50'), '{:.2f}'):>11} "
              f"{rng(col('p99'), '{:.1f}'):>12} {rng(col('wall'), '{:.1f}'):>10} {rng(col('gen'), '{:.1f}'):>10}")
