import os, sys, time, atexit, resource
_t0 = time.time()
_log = os.environ.get("PYACCT_LOG", "/tmp/pyacct.log")
def _w(s):
    try:
        with open(_log, "a") as f:
            f.write(s + "\n")
    except Exception:
        pass
_w(f"start {os.getpid()} {os.getppid()} {_t0:.3f} {' '.join(sys.argv)[:160]}")
def _end():
    r = resource.getrusage(resource.RUSAGE_SELF)
    _w(f"end {os.getpid()} cpu {r.ru_utime + r.ru_stime:.2f} wall {time.time() - _t0:.2f} torch {'torch' in sys.modules} {' '.join(sys.argv)[:100]}")
atexit.register(_end)
