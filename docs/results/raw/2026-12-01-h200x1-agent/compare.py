import csv, json, sys
out = sys.argv[1]
lines = [json.loads(l) for l in open(f"{out}/agent_samples.jsonl")]
smi = {int(r[0]): [x.strip() for x in r] for r in csv.reader(open(f"{out}/smi.csv"))}
screen = open(f"{out}/screen.txt").read()
ok = True
for s in lines:
    gpus = {g["index"]: g for g in s["gpus"]}
    if sorted(gpus) != sorted(smi):
        print(f"GPU indexes differ: agent {sorted(gpus)}, nvidia-smi {sorted(smi)}"); ok = False
    for i, g in sorted(gpus.items()):
        r = smi.get(i)
        if r is None:
            continue
        total_mib = (g.get("mem_total") or 0) / 2**20
        used_mib = (g.get("mem_used") or 0) / 2**20
        rows = [
            ("name", g.get("name"), r[1], g.get("name") == r[1]),
            ("mem_total MiB", round(total_mib), r[2], abs(total_mib - float(r[2])) <= 1),
            ("mem_used MiB", round(used_mib), r[3], abs(used_mib - float(r[3])) <= max(64, 0.05 * float(r[3]))),
            ("power W", g.get("power_w"), r[4], g.get("power_w") is not None and abs(g["power_w"] - float(r[4])) <= max(10, 0.1 * float(r[4]))),
            ("util %", g.get("util_pct"), r[5], True),  # a moving window: shown, not checked
        ]
        for name, a, b, good in rows:
            print(f"GPU {i} {name:14} agent {a!s:>24}  nvidia-smi {b:>24}  {'ok' if good else 'DIFFERS'}")
            ok &= good
        short = (g.get("name") or "").replace("NVIDIA ", "")
        if short and short not in screen:
            print(f"GPU {i}: {short} not on ddptop's own GPU pane"); ok = False
print("AGREE" if ok else "DISAGREE")
