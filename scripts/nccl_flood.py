#!/usr/bin/env python3
"""Issue 45's flood, measured: a process holding a run's token speaks the NCCL profiler plugin's
protocol and sends LINES `nccl` batches of KEYS made-up function names each (every name in the
batch's `last_done` and `funcs`). Prints ddptop's RSS before and after (VmRSS, VmHWM from
/proc), what the run kept and counted (`collectives.over_cap`, as `show --json` reads it back), the bytes stored for it, and how
long `ddptop show RUN` and `ddptop show RUN --json` take (3 runs each). Stdlib only.

    python3 scripts/nccl_flood.py [--bin target/debug/ddptop] [--lines 100] [--keys 5000]

docs/protocol.md "Bounds on NCCL evidence" has the figures and the command they came from.
"""

import argparse
import json
import os
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time


def status_kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def run_env(data: str) -> dict:
    env = dict(os.environ)
    env.update(
        DDPTOP_DATA_DIR=data,
        DDPTOP_CONFIG=os.path.join(data, "config.toml"),
        XDG_RUNTIME_DIR=data,
    )
    env.pop("DDPTOP_PYTHON", None)
    return env


def rank_environ(data: str, deadline: float) -> dict:
    """A rank process's DDPTOP_* variables (the run's socket, token and id)."""
    db = os.path.join(data, "runs.db")
    while time.time() < deadline:
        try:
            con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
            row = con.execute("SELECT pids_json FROM runs LIMIT 1").fetchone()
            con.close()
            for pid in json.loads(row[0]) if row else []:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    env = dict(
                        v.decode(errors="replace").split("=", 1)
                        for v in f.read().split(b"\0")
                        if b"=" in v
                    )
                if {"DDPTOP_SOCKET", "DDPTOP_TOKEN", "DDPTOP_RUN_ID"} <= env.keys():
                    return env
        except (sqlite3.Error, OSError, ValueError):
            pass
        time.sleep(0.1)
    sys.exit("the run did not start")


def batch(rank: int, names: list) -> bytes:
    msg = {
        "v": 1,
        "type": "nccl",
        "rank": rank,
        "t": 1.0,
        "comm": "00000000000000aa",
        "comm_rank": rank,
        "nranks": 2,
        "nnodes": 1,
        "last_done": {n: 1 for n in names},
        "inflight": [],
        "colls": [],
        "more": 0,
        "funcs": {n: {"count": 1, "bytes": 4, "kernel_us": 1.0} for n in names},
        "dropped": 0,
        "lost": 0,
        "bad": 0,
        "final": False,
    }
    return (json.dumps(msg, separators=(",", ":")) + "\n").encode()


def timed(cmd: list, env: dict, n: int = 3) -> list:
    out = []
    for _ in range(n):
        t0 = time.monotonic()
        subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, check=True)
        out.append(time.monotonic() - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/debug/ddptop")
    ap.add_argument("--lines", type=int, default=100)
    ap.add_argument("--keys", type=int, default=5000)
    a = ap.parse_args()
    data = tempfile.mkdtemp(prefix="ddptop-flood-")
    env = run_env(data)
    # A simulated k=2 run far longer than the flood, stopped with ^C once the flood has landed
    # (the run's end must not race it): stopping stores what the run kept, as an end does.
    cmd = [a.bin, "run", "weak", "--k", "2", "--backend", "sim", "--sim-speed", "1"]
    cmd += ["--samples", "1000000", "--json"]
    child = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    renv = rank_environ(data, time.time() + 60)
    rss0 = status_kib(child.pid, "VmRSS")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(renv["DDPTOP_SOCKET"])
    hello = {
        "v": 1, "type": "nccl_hello", "token": renv["DDPTOP_TOKEN"],
        "run_id": renv["DDPTOP_RUN_ID"], "rank": 0, "world_size": 2, "pid": os.getpid(),
        "host": "flood", "plugin": "0.1.0", "abi": "v5", "t": 0.0,
    }
    s.sendall((json.dumps(hello) + "\n").encode())
    rd = s.makefile("rb")
    print("welcome:", rd.readline().decode().strip()[:80])
    t0 = time.monotonic()
    for line in range(a.lines):
        try:
            s.sendall(batch(0, [f"x{line}_{i}" for i in range(a.keys)]))
        except BrokenPipeError:
            sys.exit(f"ddptop closed the connection at line {line}: {rd.read().decode()[:300]}")
    # A line for another rank is answered once every line before it has been handed on.
    s.sendall(batch(1, []))
    print("sync:", rd.readline().decode().strip()[:80])
    flood_s = time.monotonic() - t0
    rss1, hwm1 = status_kib(child.pid, "VmRSS"), status_kib(child.pid, "VmHWM")
    child.send_signal(signal.SIGINT)
    child.communicate()
    s.close()
    rid = renv["DDPTOP_RUN_ID"]
    shown = subprocess.run(
        [a.bin, "show", rid, "--json"], env=env, capture_output=True, check=True
    )
    run = json.loads(shown.stdout)["run"]
    con = sqlite3.connect(os.path.join(data, "runs.db"))
    stored = con.execute(
        "SELECT length(collectives_json) FROM runs WHERE id = ?", (rid,)
    ).fetchone()[0]
    con.close()
    show = timed([a.bin, "show", rid], env)
    show_json = timed([a.bin, "show", rid, "--json"], env)
    c = run.get("collectives") or {}
    kept = len(((c.get("ranks") or {}).get("0") or {}).get("funcs") or {})
    print(f"binary: {a.bin}")
    print(f"flood: {a.lines} lines x {a.keys} distinct names, sent in {flood_s:.2f} s")
    print(f"run: {rid} {run['status']}")
    print(f"ddptop RSS: before {rss0 / 1024:.1f} MiB, after {rss1 / 1024:.1f} MiB "
          f"(peak {hwm1 / 1024:.1f} MiB), growth {(rss1 - rss0) / 1024:.1f} MiB")
    print(f"kept function names (rank 0): {kept}")
    print(f"over_cap: {json.dumps(c.get('over_cap'))}")
    print(f"stored collectives_json: {stored} bytes")
    print("show: " + ", ".join(f"{x:.2f}" for x in show)
          + f" s (median {statistics.median(show):.2f})")
    print("show --json: " + ", ".join(f"{x:.2f}" for x in show_json)
          + f" s (median {statistics.median(show_json):.2f})")
    print(f"data dir: {data}")


if __name__ == "__main__":
    main()
