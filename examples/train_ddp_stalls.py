"""train_ddp.py whose last rank stalls for a while in step 4 (a slow file system, a lock held
by another thread): no collective is pending, the process is idle, and after the stall the
job goes on and finishes. Under `ddptop attach` the stall is reported with its evidence and the
job is left running (`--stop-on-hang` would stop it).

    ddptop attach --k 2 -- examples/train_ddp_stalls.py --stall-s 30
"""

import os
import sys
import time

import train_ddp


def stall_s() -> float:
    if "--stall-s" in sys.argv:
        i = sys.argv.index("--stall-s")
        value = sys.argv[i + 1]
        del sys.argv[i : i + 2]  # the rest are train_ddp's own options
        return float(value)
    return 30.0


STALL_S = stall_s()


def stall_on_last_rank(step: int, samples: int) -> None:
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    if step == 4 and rank == world - 1:
        time.sleep(STALL_S)


if __name__ == "__main__":
    train_ddp.main(on_step=stall_on_last_rank)
