import os, time, resource
buf = (b'{"v":1,"type":"step","rank":57,"step":1234,"fwd_ms":8.849111157882726}\n' * 100000)[:7_000_000]
def run(path, n, drop):
    try: os.unlink(path)
    except FileNotFoundError: pass
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    for i in range(n):
        fd = os.open(path, os.O_WRONLY|os.O_APPEND|os.O_CREAT, 0o600)
        os.write(fd, buf)
        if drop: os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
        time.sleep(0.05)
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    print(f"drop={drop}: {n*len(buf)/1e6:.0f} MB sys {r1.ru_stime-r0.ru_stime:.3f} s", flush=True)
for k in range(3):
    run(f"wt-a{k}", 60, False)
    run(f"wt-b{k}", 60, True)
