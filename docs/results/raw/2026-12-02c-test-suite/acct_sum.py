import sys, re, collections
for path in sys.argv[1:]:
    starts = {}
    cat = collections.Counter(); cnt = collections.Counter()
    unended = 0
    for l in open(path):
        p = l.split()
        if p[0] == "start":
            starts[p[1]] = " ".join(p[4:])
        elif p[0] == "end":
            argv = " ".join(p[8:])
            a = starts.pop(p[1], argv)
            if a.startswith("-c"): k = "python -c (probe/check)"
            elif "torchrun" in a: k = "torchrun agent"
            elif a.startswith("-m "): k = "worker " + a.split()[1]
            else: k = "other " + a[:40]
            cat[k] += float(p[3]); cnt[k] += 1
    unended = len(starts)
    print(f"== {path}: total {sum(cat.values()):.0f} cpu-s, {sum(cnt.values())} processes, {unended} without an end record")
    for k, v in cat.most_common():
        print(f"  {k:40s} n={cnt[k]:3d} cpu={v:7.1f}")
