"""Run the workers on a GPU box against a fake ddptop and summarize what came back.

    python3 workers/scripts/gpu_check.py OUT_DIR [scenario ...]

Scenarios (default: all, in this order): train1 train2 bare2 loader2 probe2 probe1 allreduce2
deadman2 control2. Each is a torchrun launch; every message is validated against the protocol and saved
to OUT_DIR/messages.jsonl, and a digest per scenario goes to OUT_DIR/summary.json (and stdout).
The numbers are meant to be compared with shared/reference/h200-baseline.md.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
WORKERS = os.path.dirname(HERE)
sys.path.insert(0, WORKERS)
sys.path.insert(0, os.path.join(WORKERS, "tests"))

from fakeserver import FakeDdptop  # noqa: E402

TRAIN = ["train", "--model", "resnet18", "--batch", "256", "--epochs", "2", "--backend", "nccl"]
SCENARIOS: dict[str, tuple[int, list[str]]] = {
    "train1": (1, TRAIN),
    "train2": (2, TRAIN),
    "bare2": (2, TRAIN + ["--no-instrument"]),
    "loader2": (2, TRAIN + ["--data-path", "loader"]),
    "probe2": (2, ["probe", "--model", "resnet18", "--batch", "256", "--backend", "nccl"]),
    "probe1": (1, ["probe", "--model", "resnet18", "--batch", "256", "--backend", "nccl"]),
    "allreduce2": (2, ["allreduce", "--backend", "nccl"]),
    "deadman2": (2, TRAIN),
    "control2": (2, ["train", "--model", "resnet18", "--batch", "256", "--samples", "60000",
                     "--epochs", "3", "--backend", "nccl"]),
}


def dry(args: list[str]) -> list[str]:
    a = ["gloo" if x == "nccl" else "tiny" if x == "resnet18" else x for x in args]
    if a[0] == "train":
        a += ["--samples", "2048" if "--epochs" in a and a[a.index("--epochs") + 1] == "3" else "256",
              "--batch", "16"]
    elif a[0] == "probe":
        a += ["--blocks", "2", "--block-steps", "2", "--batch", "16"]
    else:
        a += ["--max-bytes", "1048576", "--iters", "3"]
    return a


def med(xs: list[float]) -> float | None:
    return round(statistics.median(xs), 4) if xs else None


def digest(name: str, srv: FakeDdptop) -> dict[str, Any]:
    msgs = srv.messages()
    d: dict[str, Any] = {"counts": defaultdict(int), "bad": srv.bad[:5]}
    for m in msgs:
        d["counts"][f"{m['type']}/{m['rank']}"] += 1
    d["counts"] = dict(d["counts"])
    res = [m for m in msgs if m["type"] == "result"]
    d["result"] = [{k: m[k] for k in ("rank", "samples_per_s", "timed_epochs", "params", "bucket_bytes")} for m in res]
    rates = [m["samples_per_s"] for m in res if m["samples_per_s"] is not None]
    if rates:
        d["aggregate_samples_per_s"] = round(sum(rates), 1)
    ep = [m for m in msgs if m["type"] == "epoch"]
    d["epochs"] = [(m["rank"], m["epoch"], round(m["samples_per_s"], 1), round(m["seconds"], 3),
                    round(m["data_wait_ms"], 1)) for m in ep]
    st = [m for m in msgs if m["type"] == "step" and not m["warmup"]]
    if st:
        d["step_median_ms"] = {k: med([m[k] for m in st]) for k in ("fwd_ms", "bwd_ms", "opt_ms", "data_ms", "step_ms")}
        d["timing"] = sorted({m["timing"] for m in st})
    bk = [m for m in msgs if m["type"] == "buckets" and m["rank"] == 0]
    if bk:
        per: dict[int, list[float]] = defaultdict(list)
        kern: dict[int, list[float]] = defaultdict(list)
        queue: dict[int, list[float]] = defaultdict(list)
        nbytes: dict[int, int] = {}
        for m in bk[-20:]:
            for b in m["buckets"]:
                per[b["index"]].append((b["done_ms"] - b["start_ms"]) * 1000.0)
                if "kernel_ms" in b:  # NCCL's own kernel duration (TORCH_NCCL_ENABLE_TIMING)
                    kern[b["index"]].append(b["kernel_ms"] * 1000.0)
                queue[b["index"]].append((b["start_ms"] - b["ready_ms"]) * 1000.0)
                nbytes[b["index"]] = b["bytes"]
        d["bucket_us_median_last20"] = {i: (nbytes[i], med(v)) for i, v in sorted(per.items())}
        d["bucket_kernel_us_median_last20"] = {i: med(v) for i, v in sorted(kern.items())}
        d["bucket_queue_us_median_last20"] = {i: med(v) for i, v in sorted(queue.items())}
        d["start_inferred"] = sorted({m.get("start_inferred") for m in bk}, key=str)
        d["bucket_order"] = [b["index"] for b in bk[-1]["buckets"]]
        d["bwd_compute_ms"] = med([m["bwd_compute_ms"] for m in bk[-20:]])
        d["exposed_ms"] = med([m["exposed_ms"] for m in bk[-20:]])
        d["buckets_msgs_rank0"] = len(bk)
    pr = [m for m in msgs if m["type"] == "probe" and m["rank"] == 0]
    if pr:
        for mode in ("synced", "no_sync"):
            xs = [m["median_ms"] for m in pr if m["mode"] == mode]
            d[f"probe_{mode}_ms"] = (med(xs), round(min(xs), 3), round(max(xs), 3), len(xs))
        d["probe_live"] = sorted({m.get("live") for m in pr}, key=str)
    be = [m for m in msgs if m["type"] == "bench" and m["rank"] == 0]
    if be:
        d["bench"] = [(m["bytes"], round(m["time_us"], 1), round(m["algbw_gbs"], 2), round(m["busbw_gbs"], 2)) for m in be]
    mem = [m for m in msgs if m["type"] == "memory" and m["rank"] == 0]
    if mem:
        d["memory_last"] = {k: mem[-1][k] for k in ("allocated_bytes", "reserved_bytes", "peak_bytes")}
    d["logs"] = [f"{m['rank']}:{m['level']}:{m['msg'][:200]}" for m in msgs if m["type"] == "log"][:14]
    d["plans"] = [(m["rank"], m["total_steps"], m.get("phase")) for m in msgs if m["type"] == "plan"][:6]
    d["hello"] = [{k: h[k] for k in ("rank", "pid", "device", "torch", "nccl", "cuda")} for h in srv.hellos()]
    d["bye"] = [(m["rank"], m["reason"]) for m in msgs if m["type"] == "bye"]
    return d


def nccl_transports(nccl_dir: str, name: str) -> list[str]:
    """Distinct 'via X/Y' transports and the NCCL version line from this scenario's INFO logs."""
    import re

    seen: set[str] = set()
    for fn in os.listdir(nccl_dir):
        if not fn.startswith(f"nccl.{name}."):
            continue
        with open(os.path.join(nccl_dir, fn), errors="replace") as f:
            for line in f:
                m = re.search(r"via (P2P|SHM|NET|COLLNET)/(\S+)", line)
                if m:
                    seen.add(m.group(0))
                elif "NCCL version" in line:
                    seen.add(line.split("NCCL INFO", 1)[-1].strip()[:80])
    return sorted(seen)


def control(srv: FakeDdptop, log: list[str]) -> None:
    """probe_on / probe_off / dump_fr / stop while control2 trains."""
    def n(t: str) -> int:
        return len(srv.messages(t))
    srv.wait_for(lambda: n("step") >= 300, timeout=120)  # into epoch 1 (timed) on both ranks
    log.append(f"probe_on sent to {srv.command('probe_on')}")
    srv.wait_for(lambda: n("probe") >= 4, timeout=60)
    log.append(f"probe_off sent to {srv.command('probe_off')}")
    k = n("step")
    srv.wait_for(lambda: n("step") >= k + 20, timeout=60)
    log.append(f"dump_fr sent to {srv.command('dump_fr')}")
    time.sleep(2)
    log.append(f"stop sent to {srv.command('stop')}")


def main() -> int:
    out = sys.argv[1]
    names = sys.argv[2:] or list(SCENARIOS)
    os.makedirs(out, exist_ok=True)
    fr_dir = os.path.join(out, "fr")
    nccl_dir = os.environ.get("GPU_CHECK_NCCL_DIR", "/tmp/ddptop-nccl-logs")
    os.makedirs(nccl_dir, exist_ok=True)
    summary: dict[str, Any] = {}
    t_all = time.monotonic()
    with open(os.path.join(out, "messages.jsonl"), "w") as mf:
        for name in names:
            if time.monotonic() - t_all > float(os.environ.get("GPU_CHECK_BUDGET_S", "470")):
                summary[name] = "skipped: time budget"
                continue
            nproc, args = SCENARIOS[name]
            if os.environ.get("GPU_CHECK_DRY") == "1":  # CPU dry run of this script itself
                args = dry(args)
            srv = FakeDdptop()
            env = srv.env(
                PYTHONPATH=WORKERS,
                NCCL_DEBUG="INFO",
                NCCL_DEBUG_FILE=os.path.join(nccl_dir, f"nccl.{name}.%h.%p.log"),
                TORCH_NCCL_ASYNC_ERROR_HANDLING="3",
                TORCH_FR_BUFFER_SIZE="2000",
                TORCH_NCCL_DUMP_ON_TIMEOUT="1",
                DDPTOP_FR_DIR=fr_dir,
                NCCL_NVLS_ENABLE="0",
            )
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                   f"--nproc-per-node={nproc}", "-m", "ddptop_worker", *args]
            t0 = time.monotonic()
            p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            ctl_log: list[str] = []
            if name == "control2":
                control(srv, ctl_log)
            elif name == "deadman2":  # ddptop "dies" mid-training: every rank must exit promptly
                srv.wait_for(lambda: len(srv.messages("step")) >= 40, timeout=120)
                t_close = time.monotonic()
                srv.close_all()
                try:
                    p.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    pass
                ctl_log.append(f"closed the sockets; torchrun exited {time.monotonic() - t_close:.2f} s later, rc {p.poll()}")
            try:
                so, se = p.communicate(timeout=240)
            except subprocess.TimeoutExpired:
                p.kill()
                so, se = p.communicate()
            srv.wait_for(lambda: all(c.closed for c in srv.conns), timeout=5)
            d = digest(name, srv)
            d["rc"] = p.returncode
            d["wall_s"] = round(time.monotonic() - t0, 1)
            d["stdout"] = so[-800:]
            d["stderr_tail"] = [ln for ln in se.splitlines() if "Warning" not in ln and "*****" not in ln][-8:]
            d["nccl_transports"] = nccl_transports(nccl_dir, name)
            if ctl_log:
                d["control"] = ctl_log
                d["fr_files"] = sorted(os.listdir(fr_dir)) if os.path.isdir(fr_dir) else []
            summary[name] = d
            for m in srv.messages():
                mf.write(json.dumps({"scenario": name, **m}) + "\n")
            srv.stop()
            print(f"== {name}: " + json.dumps(d, default=str), flush=True)
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
