#!/usr/bin/env python3
"""Issue 25's agreement check (2 GPUs): per-bucket all-reduce kernel time from ddptop's NCCL
profiler plugin against c10d's own collective timing, median over the timed steps.

The parent plays ddptop's part for the plugin alone: a Unix socket, a token, `welcome` to the
plugin's `nccl_hello`, every `nccl` line kept (docs/protocol.md). It starts `torchrun
--nproc-per-node 2` on this file with `--worker`: a DDP MLP (about 4 buckets) trained STEPS steps
with TORCH_NCCL_ENABLE_TIMING=1, then each rank's flight recorder (`duration_ms` per collective,
from c10d's start/end CUDA events) written out. All-reduces are matched in order on both sides
(the same sizes, checked); the first WARMUP steps are left out. Stdlib + torch only.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

WARMUP = 5


def serve(path: str, token: str, out: str) -> None:
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(8)

    def conn(c: socket.socket) -> None:
        f = c.makefile("rb")
        hello = json.loads(f.readline())
        if hello.get("type") != "nccl_hello" or hello.get("token") != token:
            c.sendall(b'{"v":1,"type":"error","code":"bad_token","msg":"refused"}\n')
            c.close()
            return
        rank = hello["rank"]
        welcome = {"v": 1, "type": "welcome", "run_id": hello["run_id"], "rank": rank, "heartbeat_s": 1.0}
        c.sendall((json.dumps(welcome) + "\n").encode())
        with open(os.path.join(out, f"plugin_rank{rank}.jsonl"), "ab") as w:
            w.write(json.dumps(hello | {"token": "-"}).encode() + b"\n")
            for line in f:
                w.write(line)
                w.flush()

    while True:
        c, _ = srv.accept()
        threading.Thread(target=conn, args=(c,), daemon=True).start()


def worker(steps: int, out: str) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    dev = torch.device("cuda", local)
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", device_id=dev)
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for _ in range(6):
        layers += [torch.nn.Linear(2048, 2048), torch.nn.ReLU()]
    model = DDP(torch.nn.Sequential(*layers).to(dev), device_ids=[local], bucket_cap_mb=25)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(256, 2048, device=dev)
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        model(x).square().mean().backward()
        opt.step()
    torch.cuda.synchronize()
    dump = pickle.loads(torch._C._distributed_c10d._dump_nccl_trace())
    entries = [
        {
            "seq": e.get("collective_seq_id"),
            "name": e.get("profiling_name"),
            "sizes": e.get("input_sizes"),
            "duration_ms": e.get("duration_ms"),
            "state": e.get("state"),
        }
        for e in dump.get("entries", [])
    ]
    with open(os.path.join(out, f"fr_rank{rank}.json"), "w") as f:
        json.dump(entries, f)
    dist.barrier()
    dist.destroy_process_group()
    time.sleep(1.0)  # the plugin's sender writes its final batch every 200 ms


def plugin_all_reduces(path: str) -> list[dict[str, Any]]:
    by_comm: dict[str, list[dict[str, Any]]] = {}
    for line in open(path):
        m = json.loads(line)
        if m.get("type") == "nccl" and m.get("nranks") == 2:
            by_comm.setdefault(m["comm"], []).extend(c for c in m["colls"] if c["func"] == "all_reduce")
    colls = max(by_comm.values(), key=len, default=[])
    return sorted(colls, key=lambda c: c["seq"])


def compare(out: str, steps: int) -> bool:
    ok = True
    for rank in (0, 1):
        nccl = plugin_all_reduces(os.path.join(out, f"plugin_rank{rank}.jsonl"))
        fr = [e for e in json.load(open(os.path.join(out, f"fr_rank{rank}.json"))) if "all_reduce" in str(e["name"])]
        fr.sort(key=lambda e: e["seq"])
        n = min(len(nccl), len(fr))
        per_step = n // steps if steps else 0
        print(f"rank {rank}: {len(nccl)} all-reduces from the plugin, {len(fr)} in the flight recorder, {per_step} per step")
        if per_step == 0:
            print("FAIL nothing to compare")
            return False
        # Align the tails (the flight recorder may have dropped the oldest entries).
        nccl, fr = nccl[-per_step * steps:], fr[-per_step * steps:]
        sizes_ok = all(c["count"] == (e["sizes"] or [[0]])[0][0] for c, e in zip(nccl, fr))
        print(f"  sizes equal in order: {sizes_ok}")
        ok &= sizes_ok
        for b in range(per_step):
            p = [c["kernel_us"] / 1e3 for i, c in enumerate(nccl) if i % per_step == b and i // per_step >= WARMUP and c["kernel_us"] is not None]
            d = [e["duration_ms"] for i, e in enumerate(fr) if i % per_step == b and i // per_step >= WARMUP and e["duration_ms"] is not None]
            if len(p) < 20 or len(d) < 20:
                print(f"  bucket {b}: too few timed steps (plugin {len(p)}, c10d {len(d)})")
                ok = False
                continue
            mp, md = statistics.median(p), statistics.median(d)
            diff = abs(mp - md) / md * 100
            verdict = "PASS" if diff <= 10 else "FAIL"
            ok &= diff <= 10
            print(f"  bucket {b}: {nccl[b]['bytes']} B  plugin {mp:.4f} ms  c10d {md:.4f} ms  differ {diff:.1f}%  "
                  f"over {len(p)}/{len(d)} steps  {verdict}")
    return ok


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--plugin")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--out", default="/tmp/agree")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    if a.worker:
        worker(a.steps, a.out)
        return
    d = tempfile.mkdtemp()
    path, token = os.path.join(d, "s.sock"), secrets.token_hex(32)
    threading.Thread(target=serve, args=(path, token, a.out), daemon=True).start()
    env = dict(os.environ, DDPTOP_SOCKET=path, DDPTOP_TOKEN=token, DDPTOP_RUN_ID="agree",
               NCCL_PROFILER_PLUGIN=os.path.abspath(a.plugin), TORCH_NCCL_ENABLE_TIMING="1",
               TORCH_FR_BUFFER_SIZE="20000", NCCL_NVLS_ENABLE="0")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           __file__, "--worker", "--steps", str(a.steps), "--out", a.out]
    rc = subprocess.run(cmd, env=env).returncode
    time.sleep(0.5)
    print(f"torchrun rc={rc}")
    ok = rc == 0 and compare(a.out, a.steps)
    print("PASS agreement within 10%" if ok else "FAIL agreement")


if __name__ == "__main__":
    main()
