"""train_ddp.py in explicit mode: the script says which module to watch and when a step ends.
Without ddptop both calls do nothing."""

import ddptop_worker as dt

import train_ddp

if __name__ == "__main__":
    train_ddp.main(setup=dt.watch, on_step=lambda step, samples: dt.step(samples=samples))
