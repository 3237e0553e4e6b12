"""The watchdog's evidence from a rank: pending collectives from torch's flight recorder, read
in the process, and the heartbeat that carries them with the process's CPU time."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import needs
import pytest

from ddptop_worker import inflight


def entry(seq: int, *, retired: bool, state: str = "scheduled", created_ns: int = 0) -> dict:
    return {
        "collective_seq_id": seq,
        "profiling_name": "nccl:all_reduce",
        "state": state,
        "retired": retired,
        "time_created_ns": created_ns,
        "is_p2p": False,
    }


def test_the_oldest_unretired_collective_is_pending_with_its_age() -> None:
    now = 50 * 10**9
    out = inflight.summarize(
        [
            entry(7, retired=True),
            entry(8, retired=False, created_ns=now - 3 * 10**9),
            entry(9, retired=False, created_ns=now - 10**9),
        ],
        now,
    )
    assert out == {"pending": 2, "last_done": 7, "op": "nccl:all_reduce", "seq": 8, "age_s": 3.0}


def test_completed_or_retired_entries_are_not_pending() -> None:
    out = inflight.summarize([entry(3, retired=False, state="completed"), entry(4, retired=True)], 0)
    assert out == {"pending": 0, "last_done": 4}


def test_without_a_process_group_there_is_no_evidence() -> None:
    assert inflight.coll_state() is None


@pytest.mark.timing
def test_a_gloo_all_reduce_waiting_for_its_peer_is_pending() -> None:
    """Two ranks in threads of one process would share the recorder; use a real 2-process
    group: rank 1 enters its all-reduce 3 s late, rank 0 reads its own recorder meanwhile."""
    needs.module("torch", "the workers' tests need torch (scripts/test installs it)")
    code = r"""
import os, sys, time, threading, json
import torch, torch.distributed as dist
from ddptop_worker import inflight
rank = int(os.environ["RANK"])
dist.init_process_group("gloo", rank=rank, world_size=2)
x = torch.ones(4)
dist.all_reduce(x)
if rank == 1:
    time.sleep(3)
seen = {}
def peek():
    time.sleep(1.5)
    seen.update(inflight.coll_state() or {"none": True})
t = threading.Thread(target=peek); t.start()
dist.all_reduce(x)
t.join()
if rank == 0:
    print(json.dumps(seen))
dist.destroy_process_group()
"""
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(29600 + os.getpid() % 300),
               TORCH_FR_BUFFER_SIZE="2000", PYTHONPATH=os.path.join(os.path.dirname(__file__), ".."))
    procs = [
        subprocess.Popen([sys.executable, "-c", code], env=dict(env, RANK=str(r)),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for r in (0, 1)
    ]
    outs = [p.communicate(timeout=60) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    seen = json.loads(outs[0][0].strip().splitlines()[-1])
    assert seen["pending"] == 1, seen
    assert seen["op"] == "gloo:all_reduce" and seen["seq"] == 2 and seen["last_done"] == 1, seen
    assert 1.0 <= seen["age_s"] < 3.0, seen


def test_heartbeat_evidence_reads_the_recorder_only_when_steps_stand_still(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ddptop_worker.client import Client

    calls: list[int] = []
    monkeypatch.setattr(inflight, "coll_state", lambda: calls.append(1) or {"pending": 0})
    c = Client(None)
    c.phase = "train"
    flowing = c.evidence(0)
    assert set(flowing) == {"cpu_s"} and flowing["cpu_s"] >= 0 and calls == []
    still = c.evidence(2)
    assert still["coll"] == {"pending": 0} and calls == [1]


def test_a_guarded_destroy_waits_for_a_recorder_read_in_progress() -> None:
    """Issue 51: an attached script's destroy_process_group must not run while the heartbeat
    thread reads the flight recorder (whose entries point at the group's work objects)."""
    import threading

    calls: list[str] = []
    reading, release = threading.Event(), threading.Event()

    def reader() -> None:
        with inflight._LOCK:  # what coll_state holds while it reads
            calls.append("read begins")
            reading.set()
            release.wait(5)
            calls.append("read ends")

    def destroy() -> str:
        calls.append("destroy")
        return "destroyed"

    guarded = inflight.guard_destroy(destroy)
    assert getattr(guarded, "__ddptop_guarded__", False)
    t = threading.Thread(target=reader)
    t.start()
    assert reading.wait(5)
    result: list[str] = []
    d = threading.Thread(target=lambda: result.append(guarded()))
    d.start()
    d.join(0.2)
    assert calls == ["read begins"], "destroy ran during the read"
    release.set()
    t.join(5)
    d.join(5)
    assert calls == ["read begins", "read ends", "destroy"]
    assert result == ["destroyed"]


def test_the_pending_collectives_size_is_its_inputs_bytes() -> None:
    e = entry(5, retired=False) | {"input_sizes": [[1]], "input_dtypes": ["Float"]}
    assert inflight.summarize([e], 0)["bytes"] == 4
    e = entry(5, retired=False) | {"input_sizes": [[2, 3], [4]], "input_dtypes": ["Half", "Long"]}
    assert inflight.summarize([e], 0)["bytes"] == 2 * 3 * 2 + 4 * 8
    # A dtype it does not know: no size rather than a wrong one.
    e = entry(5, retired=False) | {"input_sizes": [[8]], "input_dtypes": ["ComplexFloat"]}
    assert "bytes" not in inflight.summarize([e], 0)
