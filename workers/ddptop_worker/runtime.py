"""Per-process setup shared by the subcommands: orphan guard, backend/device choice, the ddptop
client, `init_process_group`, and a small gloo control group on which ranks agree on
probe/stop commands (so that every rank switches at the same step and no collective is left
unmatched).

Phases reported to ddptop (heartbeat `phase`): `init` from the start (process group, barrier,
data, model), `ddp_init` around DDP's constructor (`wrap_ddp`, entered once the process group is
up: the constructor's parameter broadcast is the first collective on the model and where the
book's NCCL deadlock blocks), then the experiment's own phase set by the caller."""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import sys
from datetime import timedelta
from types import TracebackType
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from . import ddp_knobs, nccl_lib, protocol, rendezvous
from .client import Client, torch_versions
from .faults import Fault
from .fr_env import add_legacy_names

PR_SET_PDEATHSIG = 1


class WorkerError(RuntimeError):
    """A failure with a one-line, user-facing explanation."""


def install_pdeathsig() -> None:
    """Ask Linux to SIGTERM this process when its parent dies (best effort, extra orphan guard)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the parent died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    return int(value) if value else default


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def resolve_backend(backend: str) -> str:
    if backend == "auto":
        return "nccl" if torch.cuda.is_available() else "gloo"
    return backend


class Runtime:
    """`with Runtime(worker, backend, timeout_s) as rt:` sets everything up; on an exception it
    sends the error as a `log` line and `bye` with reason `error`, and tears down."""

    def __init__(
        self,
        worker: str,
        backend: str,
        timeout_s: float = 300.0,
        *,
        quiet: bool = False,
        kernel_timing: bool = False,
    ) -> None:
        self.worker = worker
        self.quiet = quiet  # no log lines (train --no-instrument)
        # Ask ProcessGroupNCCL for per-collective start events (Work._get_duration); NCCL only.
        self.kernel_timing = kernel_timing
        self.backend = resolve_backend(backend)
        self.timeout_s = timeout_s
        self.rank = _env_int("RANK", 0)
        self.world_size = _env_int("WORLD_SIZE", 1)
        self.local_rank = _env_int("LOCAL_RANK", 0)
        if self.backend == "nccl":
            self.device = torch.device("cuda", self.local_rank)
        else:
            self.device = torch.device("cpu")
        self.client: Client = Client.disabled()
        self.ctl_group: dist.ProcessGroup | None = None
        self.stopped = False
        self.fault: Fault | None = None  # DDPTOP_INJECT, parsed once here

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> Runtime:
        self.client = Client.from_env(
            worker=self.worker,
            backend=self.backend,
            device=str(self.device),
            rank=self.rank,
            world_size=self.world_size,
            local_rank=self.local_rank,
            versions=torch_versions(),
            # Which profiler interfaces this rank's NCCL names (ddptop's plugin needs v5/v4).
            hello_extra=protocol.hello_extra(nccl_lib=nccl_lib.hello_field())
            if self.backend == "nccl" and os.environ.get("NCCL_PROFILER_PLUGIN")
            else None,
        )
        try:
            self.fault = Fault.from_env()
            self._init_distributed()
        except BaseException as e:
            self._fail(e)
            raise
        return self

    def _init_distributed(self) -> None:
        if self.backend == "nccl":
            if not torch.cuda.is_available():
                raise WorkerError("--backend nccl needs CUDA: torch sees no GPU; use --backend gloo")
            if self.local_rank >= torch.cuda.device_count():
                raise WorkerError(
                    f"LOCAL_RANK {self.local_rank} but torch sees only "
                    f"{torch.cuda.device_count()} GPU(s)"
                )
            torch.cuda.set_device(self.local_rank)
        elif self.backend != "gloo":
            raise WorkerError(f"unknown backend {self.backend!r} (nccl|gloo)")
        if self.kernel_timing and self.backend == "nccl":
            # Read by ProcessGroupNCCL's constructor (ProcessGroupNCCL.hpp, TORCH_NCCL_ENABLE_TIMING).
            os.environ.setdefault("TORCH_NCCL_ENABLE_TIMING", "1")
        add_legacy_names(torch.__version__)  # read when the process group is made
        if "MASTER_ADDR" not in os.environ and self.world_size == 1:
            os.environ["MASTER_ADDR"] = "127.0.0.1"
            os.environ["MASTER_PORT"] = str(_free_port())
            os.environ.setdefault("RANK", "0")
            os.environ.setdefault("WORLD_SIZE", "1")
        rendezvous.entering(self.client, self.fault, self.rank)
        dist.init_process_group(
            backend=self.backend,
            rank=self.rank,
            world_size=self.world_size,
            timeout=timedelta(seconds=self.timeout_s),
            # nccl: bind the communicator to this rank's GPU (no "guessing device ID" warning;
            # NCCL is then initialized eagerly, here, rather than at the first collective)
            device_id=self.device if self.device.type == "cuda" else None,
        )
        rendezvous.joined(self.client)
        if self.kernel_timing and self.backend == "nccl":
            try:  # the same switch at run time, in case the environment was read before
                dist.group.WORLD._enable_collectives_timing()  # type: ignore[union-attr]
            except (AttributeError, RuntimeError):
                pass
        if self.world_size > 1:
            self.ctl_group = dist.new_group(backend="gloo")
        if self.device.type == "cuda":
            dist.barrier(device_ids=[self.local_rank])
        else:
            dist.barrier()
        if not self.quiet:
            self.client.log(
                "info",
                f"rank {self.rank}/{self.world_size} {self.worker} on {self.device} "
                f"backend {self.backend}, torch {torch.__version__}",
            )

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is not None:
            self._fail(exc)
            return
        self.client.close("stopped" if self.stopped else "done")
        if self.fault is not None:
            self.fault.block_teardown(self.client)
        self._destroy()

    def _fail(self, exc: BaseException) -> None:
        msg = f"{type(exc).__name__}: {exc}" if not isinstance(exc, WorkerError) else str(exc)
        self.client.log("error", msg)
        self.client.close("error")
        self._destroy()

    def _destroy(self) -> None:
        if dist.is_available() and dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception:  # noqa: BLE001 - best effort at exit
                pass

    # ------------------------------------------------------------------ helpers

    def wrap_ddp(self, net: nn.Module, **kwargs: Any) -> DDP:
        """DDP's constructor in its own phase, `ddp_init` (its broadcast can deadlock on NCCL).
        The caller sets the next phase."""
        self.client.phase = "ddp_init"
        # `ddptop tune` candidates and saved presets: the environment's DDP settings win.
        knobs = ddp_knobs.from_env()
        if knobs:
            kwargs.update(knobs)
            if self.rank == 0:
                self.client.log("info", f"DDP settings from the environment: {ddp_knobs.describe(knobs)}")
        return DDP(net, device_ids=[self.local_rank] if self.device.type == "cuda" else None, **kwargs)

    def agree(self) -> tuple[bool, bool]:
        """(probe, stop) agreed by all ranks: on if any rank has it on (MAX over the ctl group)."""
        probe, stop = self.client.probe_requested, self.client.stop_requested
        if self.ctl_group is not None:
            t = torch.tensor([int(probe), int(stop)], dtype=torch.int32)
            dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.ctl_group)
            probe, stop = bool(t[0].item()), bool(t[1].item())
        if stop:
            self.stopped = True
        return probe, stop

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
