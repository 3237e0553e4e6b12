"""train_ddp.py with its own DDP communication hook (DDP's reference all-reduce hook from
torch.distributed.algorithms.ddp_comm_hooks), as scripts that compress or log gradients do.
ddptop keeps the script's hook and times optimizer steps only."""

from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

import train_ddp

if __name__ == "__main__":
    train_ddp.main(setup=lambda ddp: ddp.register_comm_hook(None, default_hooks.allreduce_hook))
