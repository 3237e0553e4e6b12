"""`python -m ddptop_worker {train,probe,allreduce} ...` (started by torchrun, one per rank)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence


def _parser() -> argparse.ArgumentParser:
    from . import allreduce, fsdp, jax_worker, probe, train, zero1

    p = argparse.ArgumentParser(
        prog="python -m ddptop_worker",
        description="ddptop's PyTorch DDP workers; run one per rank under torchrun.",
    )
    commands: list[tuple[str, str, Callable[[argparse.ArgumentParser], None], object]] = [
        ("train", "DDP weak/strong scaling training with per-step reports", train.add_args, train.run),
        ("probe", "the interleaved no_sync() probe (fwd+bwd only)", probe.add_args, probe.run),
        ("allreduce", "bare fp32 all-reduce size sweep", allreduce.add_args, allreduce.run),
        ("fsdp", "FSDP2 or DDP: memory per rank and per-block collectives", fsdp.add_args, fsdp.run),
        ("jax", "one process, k devices: jit + Mesh, HLO receipt", jax_worker.add_args, jax_worker.run),
        ("zero1", "DDP + ZeroRedundancyOptimizer: per-rank state vs 8P + 8P_r", zero1.add_args, zero1.run),
    ]
    metavar = "{" + ",".join(c[0] for c in commands) + "}"
    sub = p.add_subparsers(dest="command", required=True, metavar=metavar)
    for name, help_, add_args, run in commands:
        sp = sub.add_parser(
            name,
            help=help_,
            description=help_,
            formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        )
        add_args(sp)
        sp.set_defaults(func=run)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    from .client import HandshakeError, write_line
    from .data import DataError
    from .runtime import WorkerError, install_pdeathsig

    install_pdeathsig()
    args = _parser().parse_args(argv)
    rank = os.environ.get("RANK", "0")
    try:
        func: Callable[[argparse.Namespace], int] = args.func
        return func(args)
    except (WorkerError, DataError, HandshakeError) as e:
        write_line(f"ddptop_worker {args.command} (rank {rank}): error: {e}", sys.stderr)
        return 1
    except KeyboardInterrupt:
        write_line(f"ddptop_worker {args.command} (rank {rank}): interrupted", sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - unexpected: the traceback, then one clear line
        import traceback

        # One write for the whole report, so that two ranks' tracebacks do not interleave.
        write_line(
            traceback.format_exc().rstrip("\n")
            + f"\nddptop_worker {args.command} (rank {rank}): error: {type(e).__name__}: {e}",
            sys.stderr,
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
