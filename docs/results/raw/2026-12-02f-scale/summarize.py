"""Summarize interleaved scale-bench runs: a file of `== ARM ROUND TIME` headers, each followed by
the bench's JSON lines (`--json`), into min / median / max per arm and rank count.

python3 summarize.py rounds.txt
"""
import json
import statistics
import sys
from collections import defaultdict

rows = defaultdict(list)
for path in sys.argv[1:]:
    arm = None
    for line in open(path):
        if line.startswith("== "):
            arm = line.split()[1]
        elif line.startswith("{"):
            r = json.loads(line)
            s = r["sent"]
            sent = s["steps"] + s["buckets"] + s["heartbeats"]
            cpu_s = r["cpu_pct"] * r["wall_s"] / 100
            rows[(arm, r["ranks"])].append(dict(
                cpu=r["cpu_pct"], us=cpu_s / sent * 1e6, lost=sent - r["received"],
                stored=r["stored_steps"], rss=r["rss_bytes"] / 2**20, p99=r["frame_p99_ms"],
                apply=r["apply_ms"], tick=r["tick_ms"], draw=r["draw_ms"], wall=r["wall_s"]))


def mmm(v, f="{:.1f}"):
    return "/".join(f.format(x) for x in (min(v), statistics.median(v), max(v)))


print(f"{'arm':6} {'ranks':>5} {'runs':>4} {'CPU % min/med/max':>20} {'us/line min/med/max':>20} {'lost':>4} "
      f"{'stored':>7} {'RSS MiB':>8} {'p99 ms med':>10} {'apply/tick/draw ms (med)':>25}")
for (arm, n), rs in sorted(rows.items(), key=lambda k: (k[0][1], k[0][0])):
    col = lambda k: [x[k] for x in rs]
    med = lambda k: statistics.median(col(k))
    print(f"{arm:6} {n:>5} {len(rs):>4} {mmm(col('cpu')):>20} {mmm(col('us')):>20} {max(col('lost')):>4} "
          f"{min(col('stored')):>7} {med('rss'):>8.0f} {med('p99'):>10.1f} "
          f"{med('apply'):>9.0f}/{med('tick'):.0f}/{med('draw'):.0f}")

# Paired: each arm against the base of the same round (runs a minute apart on the same machine).
by_round = defaultdict(dict)
for path in sys.argv[1:]:
    arm = rnd = None
    for line in open(path):
        if line.startswith("== "):
            _, arm, rnd, *_ = line.split()
        elif line.startswith("{"):
            r = json.loads(line)
            s = r["sent"]
            sent = s["steps"] + s["buckets"] + s["heartbeats"]
            by_round[(path, rnd, r["ranks"])][arm] = r["cpu_pct"] * r["wall_s"] / 100 / sent * 1e6
print("\nper-round ratio of CPU us/line to the same round's base (min / median / max)")
arms = sorted({a for d in by_round.values() for a in d} - {"base"})
for n in sorted({k[2] for k in by_round}):
    for arm in arms:
        ratios = [d[arm] / d["base"] for k, d in by_round.items() if k[2] == n and arm in d and "base" in d]
        if ratios:
            print(f"{arm:6} {n:>5} {len(ratios):>2} rounds  {mmm(ratios, '{:.2f}')}")
