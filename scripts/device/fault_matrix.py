#!/usr/bin/env python3
"""The fault matrix of docs/reliability.md on the GPU machine (NCCL, k=2, the book's ResNet-18).

    OUT=/tmp/out python3 scripts/device/fault_matrix.py   # from the repo root, binary at .carry/ddptop

Per cell: start `ddptop run weak --k 2 --backend nccl`, wait until both ranks step, inject the
fault, wait for ddptop, then check: no process of the run alive (by pid, /proc), no compute
process on the GPUs (nvidia-smi), the run's status in the store (`ddptop runs --json`), and no
throughput for a run that did not complete. Prints one row per cell.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time

BIN = os.path.abspath(".carry/ddptop")
BASE = ["run", "weak", "--k", "2", "--backend", "nccl", "--samples", "30000", "--epochs", "20", "--json"]


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def children(ppid: int) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == ppid:
                        out.append(int(d))
            except (OSError, IndexError, ValueError):
                pass
    return out


def row(data: str) -> tuple[str, list[int], str] | None:
    try:
        c = sqlite3.connect(f"file:{data}/runs.db?mode=ro", uri=True, timeout=2)
        r = c.execute("SELECT id, pids_json, status FROM runs ORDER BY started_unix DESC LIMIT 1").fetchone()
        c.close()
        return (r[0], json.loads(r[1]), r[2]) if r else None
    except sqlite3.Error:
        return None


def gpu_procs() -> int:
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"], capture_output=True, text=True)
    return len([l for l in out.stdout.splitlines() if l.strip()])


def cell(name: str, extra: list[str], act) -> str:
    data = tempfile.mkdtemp(prefix="fm-")
    env = dict(os.environ, DDPTOP_DATA_DIR=data, NCCL_NVLS_ENABLE="0")
    t0 = time.time()
    p = subprocess.Popen([BIN, *BASE, *extra], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    pids: list[int] = []
    while time.time() - t0 < 120:
        r = row(data)
        if r and len(r[1]) == 2 and r[2] == "running":
            pids = r[1]
            break
        time.sleep(0.2)
    time.sleep(6)  # let both ranks step
    launcher = children(p.pid)
    act(p, pids, launcher)
    try:
        code = p.wait(timeout=120)
    except subprocess.TimeoutExpired:
        code = "timeout"
    t_left = time.time()
    everyone = pids + launcher
    while any(alive(x) for x in everyone) and time.time() - t_left < 20:
        time.sleep(0.2)
    left = [x for x in everyone if alive(x)]
    time.sleep(1)
    gpus = gpu_procs()
    runs = json.loads(subprocess.run([BIN, "runs", "--json"], env=env, capture_output=True, text=True).stdout or "[]")
    st = runs[0] if runs else {}
    stale = st.get("status") != "completed" and st.get("samples_per_s") is not None
    return (f"{name:16} exit={code!s:7} status={st.get('status')!s:9} survivors={left or 'none'} "
            f"gpu_procs={gpus} stale_numbers={stale} wall={time.time() - t0:.0f}s reason={(st.get('reason') or '')[:110]}")


def sig(s: int):
    return lambda p, pids, launcher: os.kill(p.pid, s)


CELLS = [
    ("SIGINT (^C)", [], sig(signal.SIGINT)),
    ("SIGTERM", [], sig(signal.SIGTERM)),
    ("SIGHUP", [], sig(signal.SIGHUP)),
    ("SIGKILL ddptop", [], sig(signal.SIGKILL)),
    ("worker SIGKILL", [], lambda p, pids, l: os.kill(pids[1], signal.SIGKILL)),
    ("torchrun SIGKILL", [], lambda p, pids, l: [os.kill(x, signal.SIGKILL) for x in l]),
    ("worker raises", ["--inject", "raise:150"], lambda p, pids, l: None),
    ("worker stuck", ["--inject", "hang:150"], lambda p, pids, l: None),
]

if __name__ == "__main__":
    only = sys.argv[1:]
    out = os.environ.get("OUT", "/tmp")
    with open(os.path.join(out, "fault_matrix.txt"), "w") as f:
        for name, extra, act in CELLS:
            if only and not any(o in name for o in only):
                continue
            line = cell(name, extra, act)
            print(line, flush=True)
            f.write(line + "\n")
