"""train_ddp.py that fails on its last rank at step 5 with an exception, as a script with a bug
does. Under ddptop the run is reported failed with the traceback's last line."""

import os

import train_ddp


def fail_on_last_rank(step: int, samples: int) -> None:
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    if step == 5 and rank == world - 1:
        raise ValueError(f"label out of range in batch {step} (example failure)")


if __name__ == "__main__":
    train_ddp.main(on_step=fail_on_last_rank)
