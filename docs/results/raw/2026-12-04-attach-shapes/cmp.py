import json,sys,re
d=sys.argv[1]
doc=json.load(open(d+'/out.json')); r=doc['runs'][0]
log=open(r['output_log']).read()
m=re.search(r'script samples/s: ([0-9.]+)', log)
g=re.search(r"rank 0's clock\): ([0-9.]+)", log)
s=float(m.group(1)) if m else None
gg=float(g.group(1)) if g else None
dd=r['samples_per_s']
pct=lambda a,b: a and b and round(100*(a/b-1),2)
print(r['status'], r['instrument'], r['steps'], 'ddptop', dd and round(dd,1), 'script', s, 'diff%', pct(dd,s), 'global', gg, 'diff%', pct(dd,gg), r.get('compile'), d)
