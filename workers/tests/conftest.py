from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
WORKERS = os.path.dirname(HERE)
REPO = os.path.dirname(WORKERS)
# One OpenMP thread for torch here and in every process the tests start (ddptop's own gloo
# launches and torchrun with more than one rank do the same). The suite runs many torch
# processes beside each other on few cores, where OpenMP's spinning threads cost more than
# they compute: two one-rank attach tests next to two busy cores took 86 s and 78 CPU-s with
# torch's default thread count, 33 s and 25 CPU-s with one (docs/performance.md). A value
# from the environment wins.
os.environ.setdefault("OMP_NUM_THREADS", "1")
for p in (WORKERS, HERE):
    if p not in sys.path:
        sys.path.insert(0, p)
