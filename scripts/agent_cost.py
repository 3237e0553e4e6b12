#!/usr/bin/env python3
"""The GPU agent's own cost (docs/multinode.md, "What an agent costs"): `ddptop agent` with
made-up GPUs (--fake-gpus, no NVML here) against a stand-in for ddptop's listener, watching a
set of real processes as it would a node's ranks, at each sample period. Prints one table row
per (period, GPUs): the agent's CPU % (utime+stime from /proc/PID/stat over the measured
window, after a warm-up), its RSS, and what it sent.

    scripts/agent_cost.py target/release/ddptop [--seconds 30] [--periods 1000,250] [--gpus 8]
    scripts/agent_cost.py target/release/ddptop --gpus nvml --samples-out s.jsonl   # GPU node

The fake source skips NVML's own calls, so this is the agent's part (its loop, /proc reads of
the watched ranks, JSON, the socket); scripts/device/agent_nvml.sh measures it against real
NVML on a GPU node. Writes nothing; every process it starts is ended before it returns.
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time

TICK = os.sysconf("SC_CLK_TCK")


def cpu_ticks(pid):
    # Fields 14 and 15 of /proc/PID/stat (utime, stime), after the parenthesized command.
    with open(f"/proc/{pid}/stat") as f:
        rest = f.read().rsplit(")", 1)[1].split()
    return int(rest[11]) + int(rest[12])


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


class Listener:
    """ddptop's side of one agent connection: welcome the hello, tell it which pids to watch,
    count what it sends."""

    def __init__(self, watch):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(1)
        self.port = self.sock.getsockname()[1]
        self.watch = watch
        self.lines = 0
        self.bytes = 0
        self.last = None
        self.conn = None
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        conn, _ = self.sock.accept()
        self.conn = conn
        f = conn.makefile("rb")
        hello = json.loads(f.readline())
        assert hello["type"] == "agent_hello", hello
        for msg in (
            {"v": 1, "type": "agent_welcome", "run_id": hello["run_id"], "node": hello["node"]},
            {"v": 1, "type": "watch", "pids": self.watch},
        ):
            conn.sendall((json.dumps(msg) + "\n").encode())
        for line in f:
            self.lines += 1
            self.bytes += len(line)
            self.last = line

    def close(self):
        if self.conn:
            self.conn.shutdown(socket.SHUT_RDWR)
            self.conn.close()
        self.sock.close()


def measure(binary, period_ms, gpus, watched, seconds, warmup, samples_out=None):
    lst = Listener(watched)
    # "nvml": the node's real GPUs through NVML, as on a cluster node.
    source = [] if gpus == "nvml" else [f"--fake-gpus={gpus}"]
    agent = subprocess.Popen(
        [binary, "agent", f"--connect=tcp://127.0.0.1:{lst.port}", "--run-id=bench",
         "--node=bench", f"--period-ms={period_ms}"] + source,
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        agent.stdin.write(b"0" * 64 + b"\n")
        agent.stdin.close()
        time.sleep(warmup)
        t0, c0, l0, b0 = time.monotonic(), cpu_ticks(agent.pid), lst.lines, lst.bytes
        time.sleep(seconds)
        t1, c1, l1, b1 = time.monotonic(), cpu_ticks(agent.pid), lst.lines, lst.bytes
        rss = rss_mib(agent.pid)
        if samples_out and lst.last:
            with open(samples_out, "ab") as f:
                f.write(lst.last)
    finally:
        lst.close()
        try:
            rc = agent.wait(timeout=10)
        except subprocess.TimeoutExpired:
            agent.kill()
            agent.wait()
            rc = "killed"
    err = agent.stderr.read().decode().strip()
    if rc not in (0, "killed") or l1 == l0:
        sys.exit(f"agent failed (exit {rc}, {l1 - l0} samples): {err}")
    wall = t1 - t0
    return {
        "period_ms": period_ms, "gpus": gpus, "watched": len(watched), "seconds": wall,
        "cpu_pct": 100.0 * (c1 - c0) / TICK / wall, "rss_mib": rss,
        "samples_per_s": (l1 - l0) / wall, "bytes_per_sample": (b1 - b0) / max(l1 - l0, 1),
        "exited_on_close": rc == 0,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("binary")
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--warmup", type=float, default=3.0)
    ap.add_argument("--periods", default="1000,250")
    ap.add_argument("--gpus", default="8", help="made-up GPUs per run, or nvml (real ones)")
    ap.add_argument("--samples-out", help="append each run's last node_sample line here")
    ap.add_argument("--watch", type=int, default=8, help="processes watched (a node's ranks)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    # Stand-ins for a node's ranks: real processes whose /proc the agent reads every tick.
    ranks = [subprocess.Popen(["sleep", "3600"]) for _ in range(a.watch)]
    rows = []
    try:
        for g in (x if x == "nvml" else int(x) for x in a.gpus.split(",")):
            for p in (int(x) for x in a.periods.split(",")):
                rows.append(measure(a.binary, p, g, [r.pid for r in ranks], a.seconds,
                                    a.warmup, a.samples_out))
    finally:
        for r in ranks:
            r.kill()
            r.wait()
    if a.json:
        for r in rows:
            print(json.dumps(r))
        return
    what = "NVML" if a.gpus == "nvml" else "made-up GPUs (--fake-gpus)"
    print(f"ddptop agent, {what}, {a.watch} watched processes, "
          f"{a.seconds:.0f} s after {a.warmup:.0f} s warm-up, {os.cpu_count()} cores, "
          f"load average {' '.join(open('/proc/loadavg').read().split()[:3])}")
    print("%9s %5s %8s %8s %10s %13s %7s" % ("period_ms", "GPUs", "CPU%", "RSS_MiB",
                                            "samples/s", "bytes/sample", "exit"))
    for r in rows:
        print("%9d %5s %8.2f %8.1f %10.2f %13.0f %7s" % (
            r["period_ms"], r["gpus"], r["cpu_pct"], r["rss_mib"], r["samples_per_s"],
            r["bytes_per_sample"], "clean" if r["exited_on_close"] else "KILLED"))


if __name__ == "__main__":
    main()
