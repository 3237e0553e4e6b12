"""Attach mode: watch a user's own DDP script under ddptop with no code changes (docs/attach.md).

`ddptop attach -- script.py` starts the script under torchrun with `workers/ddptop_bootstrap` on
its PYTHONPATH; that `sitecustomize` calls `start_zero_code()` once the script imports torch.
Explicit mode (`ddptop_worker.watch(ddp)`, `ddptop_worker.step(samples=...)`) calls `watch_ddp`
and `explicit_step` here. Without `DDPTOP_SOCKET` nothing connects and nothing is installed.

One `Session` per rank process: the ddptop client (heartbeats, dead-man switch, flight-recorder
dumps), the step being measured, and the epoch tallies. Every hook body runs under `guard`: an
error in ddptop's code turns instrumentation off with a `log` (warn) and the script goes on.
"""

from __future__ import annotations

import atexit
import gc
import os
import sys
import time
import traceback
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from . import attach_fsdp
from . import attach_hooks as hooks
from . import attach_plugin, attach_sync
from . import book, ddp_knobs, diagnose, nccl_lib, protocol
from .attach_compile import CompileClock
from .attach_steps import (
    WARMUP_STEPS,
    Account,
    StepInfo,
    is_timed,
    time_every_from_env,
    timeline_every_from_env,
)
from .cadence import Cadence, timeline_every
from .cadence import describe as cadence_describe
from .client import Client
from .faults import Fault, SlowRank
from .fr_env import add_legacy_names
from .timing import (
    BucketRecord,
    BucketTimer,
    Clock,
    Mark,
    Pending,
    StepMarks,
    bucket_timeline,
    exposed_from_ready,
    rebuilt_bucket_sizes,
    start_inferred,
)

ATTACHED_PID_ENV = "DDPTOP_ATTACHED_PID"  # the same name as in ddptop_bootstrap/sitecustomize.py
REBUILD_MIN_STEPS = 2  # DDP's iteration 0 runs on one bucket; the rebuild happens before step 2
REBUILD_GIVE_UP_STEPS = 8  # then time whatever layout there is, marked rebuilt:false
MEMORY_EVERY = 50


class DeviceClock(Clock):
    """CUDA events recorded on `device`'s current stream, whatever the current device is (scripts
    that never call torch.cuda.set_device would otherwise time, and touch, cuda:0)."""

    def __init__(self, device: torch.device) -> None:
        super().__init__(device)
        self.device = device

    def mark(self) -> Mark:
        ev = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        ev.record(torch.cuda.current_stream(self.device))
        return ev


def clock_for(device: torch.device) -> Clock:
    return DeviceClock(device) if device.type == "cuda" else Clock(device)


@dataclass
class DdpRecord:
    """ddptop's view of one DistributedDataParallel module."""

    watched: bool = False  # the one DDP whose forwards and buckets are measured
    hook_state: hooks.HookState | None = None
    registered: bool = False  # ddptop's comm hook is in the reducer
    user_hook: str | None = None  # name of the script's own comm hook
    timer: BucketTimer | None = None
    layout: list[int] | None = None


def _hello_backend(local_rank: int) -> tuple[str, str]:
    """(backend, device) for hello: what ddptop asked for (DDPTOP_BACKEND), else a guess that
    touches no GPU API; checked against the real process group once DDP is built."""
    backend = os.environ.get("DDPTOP_BACKEND", "")
    if backend not in ("nccl", "gloo"):
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        has_gpu = torch.version.cuda is not None and visible not in ("", "-1")
        backend = "nccl" if has_gpu and os.path.exists("/dev/nvidia0") else "gloo"
    return backend, (f"cuda:{local_rank}" if backend == "nccl" else "cpu")


def _versions() -> dict[str, str | None]:
    """torch_versions without torch.cuda.is_available() (which initializes the CUDA driver)."""
    out: dict[str, str | None] = {"torch": torch.__version__, "cuda": torch.version.cuda, "nccl": None}
    if torch.version.cuda is not None:
        try:
            v = torch.cuda.nccl.version()  # type: ignore[no-untyped-call]
            out["nccl"] = ".".join(str(p) for p in v) if isinstance(v, tuple) else str(v)
        except Exception:  # noqa: BLE001 - versions are best effort
            pass
    return out


def _nccl_lib(backend: str) -> dict[str, Any] | None:
    """hello.nccl_lib on NCCL launches: which ncclProfiler_vN names the mapped NCCL holds, so
    ddptop can say when ddptop's plugin (v5/v4) cannot load (nccl_lib.py; ~15 ms)."""
    if backend != "nccl" or not os.environ.get(attach_plugin.PLUGIN_PATH_ENV):
        return None
    return nccl_lib.hello_field()


def connect(instrument: str) -> Client:
    """Connect as this torchrun rank with worker "attach" (raises HandshakeError or OSError)."""
    rank = int(os.environ.get("RANK", "0") or 0)
    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    local_rank = int(os.environ.get("LOCAL_RANK", "0") or 0)
    backend, device = _hello_backend(local_rank)
    return Client.from_env(
        worker="attach",
        backend=backend,
        device=device,
        rank=rank,
        world_size=world,
        local_rank=local_rank,
        versions=_versions(),
        hello_extra=protocol.hello_extra(instrument=instrument, nccl_lib=_nccl_lib(backend)),
    )


class Session:
    """One attached rank."""

    def __init__(self, mode: str) -> None:
        self.mode = mode  # "zero_code" (bootstrap) or "explicit" (watch())
        self.client: Client = Client.disabled()
        self.rank = int(os.environ.get("RANK", "0") or 0)
        self.world_size = int(os.environ.get("WORLD_SIZE", "1") or 1)
        self.pid = os.getpid()
        self.hooks_on = False  # the torch hooks do something (else they pass through)
        self.instrument = "full"
        # What times the buckets, switched live (attach_plugin): ddptop's comm hook until its NCCL
        # profiler plugin is confirmed reporting, and again whenever it stops.
        self.source = attach_plugin.CommSource(False, None, lambda: None)
        self.layout_sent = False  # plan.bucket_bytes, when the plugin may time the buckets
        self.cur_t_bwd: float | None = None  # host time backward began (the plugin's step cut)
        self.handles: list[Any] = []
        self.records: weakref.WeakKeyDictionary[DDP, DdpRecord] = weakref.WeakKeyDictionary()
        self.watched: weakref.ref[DDP] | None = None
        # FSDP2: the root of the script's fully_shard calls, measured when there is no DDP.
        self.fsdp: weakref.ref[torch.nn.Module] | None = None
        self.fsdp_handles: list[Any] = []
        # optimizer.step(closure) (Lightning's automatic optimization): the forward and backward
        # run inside the primary optimizer's step.
        self.in_opt = False
        self.cur_closure = False
        self.clock: Clock = Clock(torch.device("cpu"))
        self.pending = Pending(lag=2)
        self.account = Account()
        self.epoch = 0
        self.step_no = 0
        self.cur = StepMarks()
        self.cur_samples = 0
        self.cur_samples_known = True
        # Sampled timing (attach_steps): which steps carry events, and the epoch's span.
        self.cadence = Cadence.of(time_every_from_env())
        self.timeline_n = timeline_every_from_env()  # 0: ddptop's default (`timeline_every`)
        self.cur_end: list[Mark] | None = None  # the step's backward-end marks (hook path)
        self.cur_timed = True
        self.cur_forwarded = False
        self.cur_t0 = 0.0  # host time at the step's start (data wait of untimed steps)
        self.cur_data_ms = 0.0
        self.unreported_samples = 0
        self.span_start: Any = None
        self.span_end: Any = None
        # torch.compile: compile time, and the spans of counted-epoch steps that compiled (cut
        # out of the epoch's span under sampled timing).
        self.compile = CompileClock()
        # Host syncs (`.item()`, `torch.cuda.synchronize()`...) timed per step (attach_sync); the
        # clock counts the thread that makes the session, the one that runs the script.
        self.sync = attach_sync.SyncClock()
        self.sync_uninstall: Any = None
        self.span_cuts: list[tuple[Any, Any]] = []
        self.primary_opt: weakref.ref[torch.optim.Optimizer] | None = None
        self.explicit_steps = False
        self.fault: Fault | None = None
        self.fault_error: str | None = None
        self.slow: SlowRank | None = None  # DDPTOP_INJECT=slow:RANK:FACTOR on this rank
        self.once: set[str] = set()
        self.finished = False
        self.model_size: tuple[int | None, int | None] = (None, None)
        self.layout: list[int] = []
        self.optimizer_name = ""
        # What the script showed of itself, for the result: ddptop claims no setting it did not see.
        self.epochs_seen: set[int] = set()  # DistributedSampler.set_epoch values
        self.pg_seen = False  # a process group was initialized at some step (or at the end)
        self.ddp_seen = False  # a DistributedDataParallel module was built
        self.ddp_args: set[str] = set()  # tuned DDP arguments the script passed itself

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Install the hooks, connect, say how it went. Raises only when the connection fails
        (the caller prints one line and the script runs bare)."""
        off_reason: str | None = None
        try:
            self.fault = Fault.from_env()
        except ValueError as e:
            self.fault_error = str(e)
        if self.fault is not None:
            self.slow = self.fault.slowdown(self.rank)
            if self.slow is not None and self.slow.phase == "compute":
                # ddptop refuses it before the launch (src/run/fault.rs attach_refusal).
                self.fault_error = "slow:...:compute cannot apply to an attached script"
                self.slow = None
            if self.slow is not None:
                self.slow.sync = cuda_sync_if_used
                self.slow.on_start = lambda text: self.client.log("warn", text)
        try:
            self.handles = hooks.install(self)
            if attach_sync.wanted():
                self.sync_uninstall = attach_sync.install(self.sync)
            self.compile.register_if_imported()
            attach_fsdp.install(_on_fully_shard, _fsdp_patch_failed)
            self.hooks_on = True
        except Exception as e:  # noqa: BLE001
            off_reason = f"cannot install torch hooks: {type(e).__name__}: {e}"
        os.environ[ATTACHED_PID_ENV] = str(self.pid)
        add_legacy_names(torch.__version__)  # before the script makes its process group
        try:
            self.client = connect("off" if off_reason else "full")
        except BaseException:
            self.stop_hooks()
            raise
        self.instrument = "off" if off_reason else "full"
        os.register_at_fork(after_in_child=self._forked)
        atexit.register(self.at_exit)
        self.start_step()
        script = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "?"
        if off_reason:
            self.client.log("warn", f"instrumentation off: {off_reason}; the script runs unmeasured")
            return
        self.client.log(
            "info",
            f"attached to {script} (rank {self.rank}/{self.world_size}, pid {self.pid}, "
            f"{self.mode.replace('_', '-')} mode): steps from optimizer.step(), batch size and "
            f"buckets from each DistributedDataParallel, epochs from DistributedSampler.set_epoch",
        )
        if self.fault_error:
            self.disable(f"bad DDPTOP_INJECT: {self.fault_error}")

    def _forked(self) -> None:
        # A forked child (a DataLoader worker) shares the socket: it must never write to it.
        self.hooks_on = False
        self.client = Client.disabled()
        self.sync.on = False

    def stop_sync_timing(self) -> bool:
        """Put torch's host-sync calls back (attach_sync); True when they were wrapped."""
        if self.sync_uninstall is None:
            return False
        self.sync_uninstall()
        self.sync_uninstall = None
        return True

    def stop_hooks(self) -> None:
        self.hooks_on = False
        for h in self.handles:
            try:
                h.remove()
            except Exception:  # noqa: BLE001
                pass
        self.handles = []
        self.stop_sync_timing()
        for h in self.fsdp_handles:
            try:
                h.remove()
            except Exception:  # noqa: BLE001
                pass
        self.fsdp_handles = []
        for rec in list(self.records.values()):
            if rec.timer is not None:
                rec.timer.recording = False

    def disable(self, why: str) -> None:
        """Instrumentation off for the rest of the run; heartbeats (liveness) go on."""
        if self.instrument == "off":
            return
        self.instrument = "off"
        self.stop_hooks()
        self.client.log("warn", f"instrumentation off: {why}; the script runs on unmeasured")

    def guard(self, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as e:  # noqa: BLE001 - ddptop's bug must never become the script's
            where = getattr(fn, "__name__", "hook")
            self.disable(f"{where}: {type(e).__name__}: {e}")
            return None

    def log_once(self, key: str, level: str, msg: str) -> None:
        if key not in self.once:
            self.once.add(key)
            self.client.log(level, msg)

    # ------------------------------------------------------------------ DDP modules

    def record(self, ddp: DDP) -> DdpRecord | None:
        return self.records.get(ddp)

    def before_ddp(self, ddp: DDP) -> None:
        self.records[ddp] = DdpRecord()
        self.ddp_seen = True
        self.client.phase = "ddp_init"

    def apply_ddp_knobs(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """The environment's DDP settings (DDPTOP_DDP_*) into the script's DDP constructor call,
        by keyword; said once, and refused in words where the script passes them by position.
        Which of them the script passes itself is kept for the result (`ddptop tune --attach`
        then leaves DDP's constructor alone)."""
        self.ddp_args.update(ddp_knobs.passed(args, kwargs))
        try:
            knobs = ddp_knobs.from_env()
        except ddp_knobs.KnobError as e:
            self.log_once("ddp_knobs", "warn", f"DDP settings ignored: {e}")
            return
        if not knobs:
            return
        why = ddp_knobs.override(args, kwargs, knobs)
        if why is not None:
            self.log_once("ddp_knobs", "warn", f"DDP settings not applied: {why}")
        else:
            self.log_once("ddp_knobs", "info", f"DDP settings from the environment: {ddp_knobs.describe(knobs)}")

    def on_compile_call(self) -> None:
        """The script calls torch.compile: measure compiles from now on."""
        fsdp = self.fsdp_module()
        hooks.run_eagerly(list(self.records.keys()) + ([fsdp] if fsdp is not None else []))
        if self.stop_sync_timing():
            # Dynamo would inline the wraps and break its graph at the original call: an extra
            # graph break the script does not have. So host syncs are not timed from now on.
            self.log_once("sync_compile", "info", "torch.compile: host syncs (.item(), "
                          "torch.cuda.synchronize()...) are not timed from now on (no host-sync "
                          "phase): ddptop's wraps would add graph breaks")
        if self.compile.register() and "compile_on" not in self.once:
            self.log_once("compile_on", "info", "torch.compile: steps that compile are left out "
                          "of samples/s; compile time is reported on its own")

    def ddp_init_done(self) -> None:
        self.client.phase = "train"

    def watch_ddp(self, ddp: DDP) -> None:
        """Measure this DDP module (the first one built; later ones are left alone)."""
        rec = self.records.setdefault(ddp, DdpRecord())
        if rec.watched:
            return
        if self.watched is not None and self.watched() is not None:
            self.log_once("second_ddp", "info", "another DistributedDataParallel module: ddptop "
                          "measures the first one only")
            return
        rec.watched = True
        self.ddp_seen = True
        self.watched = weakref.ref(ddp)
        if rec.user_hook is None:
            rec.user_hook = hooks.existing_comm_hook(ddp)  # explicit mode: set before watch()
        ddp.register_forward_pre_hook(hooks.hook(hooks.forward_pre), with_kwargs=True)
        ddp.register_forward_hook(hooks.hook(hooks.forward_post))
        device = ddp.device if isinstance(getattr(ddp, "device", None), torch.device) else None
        if device is None:
            device = next((p.device for p in ddp.parameters()), torch.device("cpu"))
        self.clock = clock_for(device)
        self.restart_step()
        backend = hooks.backend_of(ddp)
        self.source = attach_plugin.from_env(backend, os.environ)
        self.source.own_hook = rec.user_hook if self.source.expected else None
        self.source.single_rank = self.source.expected and self.world_size == 1
        self.source.poll(self.step_no)  # DDP's broadcast may already have made NCCL report
        if rec.user_hook is not None and not self.source.expected:
            self.steps_only(rec.user_hook)
        elif rec.user_hook is None and self.instrument == "full":
            # The fallback: registered at the first forward unless the plugin reports by then,
            # and later (at the next forward) whenever it stops reporting.
            rec.timer = BucketTimer(
                self.clock, ddp.process_group, kernel_timing=hooks.enable_kernel_timing(ddp)
            )
            rec.hook_state = hooks.HookState(rec.timer)
        params = sum(int(p.numel()) for p in ddp.parameters())
        grad_bytes = sum(
            int(p.numel() * p.element_size()) for p in ddp.parameters() if p.requires_grad
        )
        self.model_size = (params, grad_bytes)  # for the result: the module is gone by exit
        if self.source.expected:
            self.client.log("info", f"communication: {self.source_words()}; ddptop's comm hook "
                            "times the buckets until its NCCL profiler plugin reports, and again "
                            "whenever it stops")
        self.client.log(
            "info",
            f"DDP module watched: {params} params, {grad_bytes} gradient bytes on {device}, "
            f"backend {backend}, timing {self.clock.method}"
            f"{cadence_describe(self.cadence.setting)}",
        )
        if backend is not None and self.client.enabled:
            hello_backend, _ = _hello_backend(int(os.environ.get("LOCAL_RANK", "0") or 0))
            if backend != hello_backend:
                self.client.log("warn", f"the script runs backend {backend}, ddptop expected "
                                f"{hello_backend} (hello says {hello_backend})")
        self.send_source()

    def source_words(self) -> str:
        s = self.source
        if s.source == attach_plugin.PLUGIN:
            return "NCCL profiler plugin"
        name = "Python comm hook" if s.source == attach_plugin.HOOK else "not timed"
        return f"{name} ({s.why})"

    def send_source(self, bucket_bytes: list[int] | None = None) -> None:
        """`plan` with what times the buckets now and, when not the plugin, why."""
        s = self.source
        self.client.send("plan", **protocol.plan_fields(
            None, comm_timing=s.source, comm_why=s.why or None, bucket_bytes=bucket_bytes))

    def poll_source(self, wr: tuple[DDP, DdpRecord] | None) -> None:
        """At a step's end: has the plugin started or stopped reporting? Switch the hook's
        marks (the hook itself stays in DDP's reducer: DDP takes one hook per module, once)."""
        before = self.source.source
        if not self.source.poll(self.step_no):
            return
        now = self.source.source
        if now == before:
            self.send_source()  # same source, a new reason
            return
        rec = wr[1] if wr is not None else None
        if rec is not None and rec.timer is not None:
            rec.timer.recording = False  # back on after this step when the hook is the source
        self.send_source(self.layout or None if now == attach_plugin.PLUGIN else None)
        level = "info" if now == attach_plugin.PLUGIN else "warn"
        self.client.log(level, f"communication from step {self.step_no + 1}: {self.source_words()}")

    def own_comm_hook(self, ddp: DDP, name: str) -> None:
        rec = self.records.get(ddp)
        if rec is None:
            return
        rec.user_hook = name
        if rec.watched and self.source.expected:
            # Nothing of ddptop's times the buckets: the script's hook runs as written, and its
            # NCCL collectives still reach the plugin (the only source left).
            self.source.own_hook = name
            if rec.timer is not None:
                rec.timer.recording = False
            self.log_once("own_hook_plugin", "info", f"the script's own DDP comm hook ({name}) "
                          "runs untouched; buckets timed by the NCCL profiler plugin while it reports")
            if self.source.poll(self.step_no):
                self.send_source()
        elif rec.watched:
            self.steps_only(name)

    def steps_only(self, name: str) -> None:
        if self.instrument != "full":
            return
        self.instrument = "steps_only"
        for rec in self.records.values():
            if rec.timer is not None:
                rec.timer.recording = False
        self.client.log(
            "warn",
            f"instrument: steps_only - the script registers its own DDP comm hook ({name}); "
            "ddptop keeps it and times optimizer steps only (no bucket timeline)",
        )

    def watched_record(self) -> tuple[DDP, DdpRecord] | None:
        ddp = self.watched() if self.watched is not None else None
        if ddp is None:
            return None
        rec = self.records.get(ddp)
        return (ddp, rec) if rec is not None else None

    def fsdp_module(self) -> torch.nn.Module | None:
        return self.fsdp() if self.fsdp is not None else None

    def watch_fsdp(self, module: Any) -> None:
        """The script called fully_shard(module): measure the root of its FSDP2 modules (the
        first one sharded, then any later one that contains it), unless a DDP module is watched."""
        if not isinstance(module, torch.nn.Module):
            return
        if self.watched is not None and self.watched() is not None:
            self.log_once("fsdp_and_ddp", "info", "an FSDP2 module beside a DistributedDataParallel"
                          " module: ddptop measures the DDP module")
            return
        cur = self.fsdp_module()
        if cur is module or not attach_fsdp.takes_over(module, cur):
            return
        for h in self.fsdp_handles:
            h.remove()
        self.fsdp_handles = [
            module.register_forward_pre_hook(hooks.hook(hooks.forward_pre), with_kwargs=True),
            module.register_forward_hook(hooks.hook(hooks.forward_post)),
        ]
        self.fsdp = weakref.ref(module)
        if cur is None:
            device = next((p.device for p in module.parameters()), torch.device("cpu"))
            self.clock = clock_for(device)
            self.restart_step()

    def on_fsdp_first_forward(self, module: torch.nn.Module) -> None:
        """Said once, at the root's first training forward (the root is known by then)."""
        params = sum(int(p.numel()) for p in module.parameters())
        grad_bytes = sum(int(p.numel() * p.element_size()) for p in module.parameters()
                         if p.requires_grad)
        self.model_size = (params, grad_bytes)
        device = next((p.device for p in module.parameters()), torch.device("cpu"))
        self.client.log(
            "info",
            f"FSDP2 module watched (fully_shard root {type(module).__name__}: {params} params, "
            f"{grad_bytes} gradient bytes unsharded, on {device}, timing {self.clock.method}): "
            "steps from optimizer.step(), samples and forward times from the root's forwards; "
            "FSDP's all-gathers and reduce-scatters are not timed (no bucket timeline, no "
            "exposed communication)",
        )

    # ------------------------------------------------------------------ one step

    def start_step(self) -> None:
        self.cur = StepMarks()
        self.cur_t_bwd = None
        self.cur_end = None
        self.cur_closure = False
        n = self.step_no + 1
        self.cur_t0 = time.perf_counter()
        self.cur_timed = is_timed(n, self.cadence, self.cur_t0)
        self.cur_forwarded = False
        self.cur_data_ms = 0.0
        if self.cur_timed:
            self.cur.marks["start"] = self.clock.mark()
        if n > WARMUP_STEPS and self.span_start is None:
            self.span_start = self.cur.marks.get("start") or self.clock.mark()
        self.cur_samples = 0
        self.cur_samples_known = True

    def restart_step(self) -> None:
        """Start the open step over (new clock, new epoch) unless its forward already ran."""
        if not self.cur_forwarded:
            self.span_start = None
            self.start_step()

    def on_forward_pre(self, module: DDP, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if not (torch.is_grad_enabled() and module.training):
            return  # evaluation: not part of a training step
        wr = self.watched_record()
        rec: DdpRecord | None = None
        if wr is None:
            if self.fsdp is None or self.fsdp() is not module:
                return
            if "fsdp_forward" not in self.once:
                self.once.add("fsdp_forward")
                self.on_fsdp_first_forward(module)
        elif wr[0] is not module:
            return
        else:
            ddp, rec = wr
            if (not rec.registered and rec.user_hook is None and rec.hook_state is not None
                    and self.source.hook_times()):
                hooks.register_ddp_hook(ddp, rec.hook_state)
                rec.registered = True
        m = self.cur.marks
        if self.in_opt and not self.cur_closure:
            # optimizer.step(closure): the optimizer's start mark came before the forward.
            self.cur_closure = True
            m.pop("opt0", None)
            self.log_once(
                "closure", "info",
                "optimizer.step() runs the forward and backward itself (a closure, as "
                "Lightning's automatic optimization does): ddptop times each step, its samples "
                "and its forward; the backward and the optimizer's update are measured as one "
                "span (bwd_ms), opt_ms is not measured (0)")
        if not self.cur_forwarded:
            self.cur_forwarded = True
            self.cur_data_ms = (time.perf_counter() - self.cur_t0) * 1000.0
            if self.cur_timed:
                m["fwd0"] = self.clock.mark()
                if (rec is not None and rec.timer is not None and rec.timer.recording
                        and self.instrument == "full"):
                    self.begin_buckets(rec.timer)
        n = hooks.leading_dim(args, kwargs)
        if n is None:
            self.cur_samples_known = False
            self.log_once("no_batch", "info", "the DDP module's first input is not a tensor: "
                          "batch size unknown, no samples/s (ddptop_worker.step(samples=...) "
                          "can say it)")
        else:
            self.cur_samples += n

    @property
    def timeline_every(self) -> int:
        """1 timed step in N takes its whole bucket timeline (`cadence.timeline_every`, from
        `DDPTOP_TIMELINE_EVERY`); 1 once backward-end marks fail (the other timed steps' exposed
        comm needs them)."""
        timer = self.watched_record()
        if timer is not None and timer[1].timer is not None and timer[1].timer.end_error:
            return 1
        return timeline_every(self.timeline_n, self.clock.cuda)

    def begin_buckets(self, timer: BucketTimer) -> None:
        """Time this step's buckets: the whole timeline on 1 timed step in `timeline_every`,
        else ready marks only; the backward's end on both (its exposed comm, as ddptop's own
        runs reckon it: the backward's end minus the last bucket's ready mark)."""
        n = self.step_no + 1
        timeline = self.cadence.takes_timeline(n, n <= WARMUP_STEPS, self.timeline_every)
        self.cur.buckets = timer.begin_step(timeline, end_mark=True)
        self.cur_end = timer.step_end

    def on_forward_post(self, module: DDP) -> None:
        if torch.is_grad_enabled() and module.training and "fwd0" in self.cur.marks:
            self.cur.marks["fwd1"] = self.clock.mark()
            if self.source.expected:
                # The plugin's clock (CLOCK_MONOTONIC, as `t`): cuts NCCL's all-reduces into steps.
                self.cur_t_bwd = time.monotonic()

    def _is_primary(self, opt: torch.optim.Optimizer) -> bool:
        if self.primary_opt is None or self.primary_opt() is None:
            self.primary_opt = weakref.ref(opt)
            self.optimizer_name = type(opt).__name__.lower()
            return True
        if self.primary_opt() is opt:
            return True
        self.log_once("second_opt", "info", f"a second optimizer ({type(opt).__name__}) steps: "
                      "ddptop counts the first one's steps only")
        return False

    def check_unused(self) -> None:
        """Parameters without a gradient after the first step's backward (diagnose.py)."""
        if self.step_no == 0 and "unused" not in self.once:
            self.once.add("unused")  # the first step only: then DDP has already failed
            wr = self.watched_record()
            if wr is not None:
                diagnose.report_unused(self.client, wr[0], 1)

    def on_opt_pre(self, opt: torch.optim.Optimizer) -> None:
        if not self._is_primary(opt):
            return
        self.in_opt = True
        if self.cur_forwarded:
            # Else the step runs a closure (forward and backward inside optimizer.step()): no
            # gradient exists yet, and the check waits for the step's end.
            self.check_unused()
        if self.cur_timed:
            self.cur.marks["opt0"] = self.clock.mark()

    def on_opt_post(self, opt: torch.optim.Optimizer) -> None:
        if not self._is_primary(opt):
            return
        self.in_opt = False
        if self.cur_closure:
            self.check_unused()
        if self.cur_timed:
            self.cur.marks["opt1"] = self.clock.mark()
        if not self.explicit_steps:
            self.finish_step(None)

    def explicit_step(self, samples: int | None) -> None:
        self.explicit_steps = True
        if self.cur_timed and "opt1" not in self.cur.marks:
            self.cur.marks["opt1"] = self.clock.mark()
        self.finish_step(samples)

    def finish_step(self, samples: int | None) -> None:
        self.step_no += 1
        # The script's host syncs since the last step's end; none where the wraps are off.
        sync_ms = self.sync.take() if self.sync_uninstall is not None else None
        if not self.pg_seen:
            self.pg_seen = process_group_initialized()
        self.client.step = self.step_no
        wr = self.watched_record()
        if wr is not None and wr[1].timer is not None:
            timer = wr[1].timer
            timer.end_step()
            if self.cur_end is not None and self.cur.buckets and not self.cur_end:
                # The backward returned without its end mark: the next steps take the whole
                # timeline at once, not when this step resolves (on CUDA up to 2 steps later).
                timer.end_error = timer.end_error or (
                    "a backward's buckets were all-reduced but its end was not marked")
        known = samples is not None or (self.cur_samples_known and self.cur_forwarded)
        n = samples if samples is not None else (self.cur_samples if known else 0)
        compiled = self.compile.take() > 0.0
        info = StepInfo(self.step_no, self.epoch, int(n), bool(known), compiled)
        if compiled:
            self.compile.steps += 1
        said = self.compile.finding_due(compiled)
        if said is not None:
            # Graph breaks and recompiles so far (src/app/diagnose/compile.rs judges them).
            self.client.log("info", f"compile counters: {said['compiles']} compiles, "
                            f"{said['recompiles']} recompiles, {said['count']} graph breaks",
                            finding=said)
        if not info.warmup:
            prev_end = self.span_end if self.span_end is not None else self.span_start
            self.span_end = self.clock.mark()
            if compiled and prev_end is not None:
                self.span_cuts.append((prev_end, self.span_end))
        self.unreported_samples += int(n)
        if self.cur_timed:
            end = self.cur.marks.pop("opt1")
            self.cur.marks["opt1"] = end  # last, so Pending waits on it
            self.cur.info = {
                "info": info,
                "timing": self.clock.method,
                "samples": self.unreported_samples,  # every step since the last message
                "covered": self.cadence.covered(),
                "t_bwd": self.cur_t_bwd,
                "sync_ms": sync_ms,
                "end": self.cur_end,
            }
            self.unreported_samples = 0
            self.pending.push(self.cur)
            self.flush()
        else:
            # An untimed step costs no event: counted now, its time is in the epoch's span.
            self.account.add(info, None, self.cur_data_ms)
        self.after_step(wr)
        self.start_step()

    def flush(self, force: bool = False) -> None:
        for sm in self.pending.pop_ready(force_all=force):
            self.emit(sm)

    def emit(self, sm: StepMarks) -> None:
        m = sm.marks
        info: StepInfo = sm.info["info"]

        def span(a: str, b: str) -> float:
            return max(0.0, Clock.ms(m[a], m[b])) if a in m and b in m else 0.0

        bwd_end = "opt0" if "opt0" in m else "opt1"
        step_ms, data_ms = span("start", "opt1"), span("start", "fwd0")
        covered = int(sm.info.get("covered", 1))  # steps its samples cover
        extra: dict[str, Any] = {"every": covered} if covered > 1 else {}
        if sm.info.get("t_bwd") is not None:
            extra["t_bwd"] = sm.info["t_bwd"]
        if sm.info.get("sync_ms") is not None:
            extra["sync_ms"] = sm.info["sync_ms"]
        if info.compiled:
            extra["compiled"] = True
        records = sm.buckets or []
        end_mark = self.backward_end(sm)
        timeline = any(r.timeline for r in records)
        if records and not timeline and "fwd1" in m and end_mark is not None:
            got = exposed_from_ready(records, m["fwd1"], end_mark)
            if got is not None:
                extra["exposed_ms"] = got[1]
        self.client.send(
            "step",
            step=info.step,
            epoch=info.epoch,
            warmup=not info.counted,  # a step that compiled is left out like a warm-up step
            sync=True,
            samples=sm.info.get("samples", info.samples),
            fwd_ms=span("fwd0", "fwd1"),
            bwd_ms=span("fwd1", bwd_end),
            opt_ms=span("opt0", "opt1"),
            data_ms=data_ms,
            step_ms=step_ms,
            timing=sm.info["timing"],
            **extra,
        )
        self.account.add(info, step_ms, data_ms)
        done = [r for r in records if r.done is not None]
        if timeline and done and "fwd1" in m:
            self.emit_buckets(info.step, done, m["fwd1"], end_mark)

    def backward_end(self, sm: StepMarks) -> Mark | None:
        """The step's last backward-end mark, complete; None when it took none. A step whose
        buckets were marked but whose backward left no end mark, or one before its last bucket
        was ready, turns the marks off: the engine callback did not run where it should, so every
        timed step takes its whole timeline again (the steps already marked send neither)."""
        ends = sm.info.get("end")
        wr = self.watched_record()
        timer = wr[1].timer if wr is not None else None
        if ends:
            Clock.wait(ends[-1])  # queued before the optimizer's marks: done or nearly
            if not sm.buckets or Clock.ms(sm.buckets[-1].ready, ends[-1]) >= 0.0:
                return ends[-1]
            if timer is not None and timer.end_error is None:
                timer.end_error = "a backward's end was marked before its last bucket was ready"
        # (A backward that left no end mark set end_error in finish_step, before this.)
        if timer is not None and timer.end_error:
            self.log_once("end_mark", "warn", f"backward-end marks unavailable ({timer.end_error})"
                          ": every timed step takes its whole bucket timeline from now on")
        return None

    def emit_buckets(
        self, step: int, records: list[BucketRecord], bwd_start: Mark, bwd_end: Mark | None
    ) -> None:
        wr = self.watched_record()
        timer = wr[1].timer if wr is not None else None
        if timer is not None:
            timer.resolve_kernels(records)
            if timer.kernel_error is not None:
                self.client.log("warn", f"kernel timing unavailable ({timer.kernel_error}); "
                                "bucket starts are inferred from now on")
                timer.kernel_error = None
        last_done = records[-1].done
        assert last_done is not None
        # The backward's end (its comm waits included) where it was marked, as for the steps
        # with ready marks only; else the last bucket's completion.
        end = bwd_end if bwd_end is not None else last_done
        spans, bwd_compute, exposed = bucket_timeline(records, bwd_start, end)
        if not spans:
            return
        buckets = []
        for sp in spans:
            b: dict[str, Any] = {"index": sp.index, "bytes": sp.nbytes, "ready_ms": sp.ready_ms,
                                 "start_ms": sp.start_ms, "done_ms": sp.done_ms}
            if sp.kernel_ms is not None:
                b["kernel_ms"] = sp.kernel_ms
            buckets.append(b)
        self.client.send(
            "buckets",
            step=step,
            rebuilt=wr is not None and wr[1].layout is not None,
            bwd_compute_ms=bwd_compute,
            exposed_ms=exposed,
            start_inferred=start_inferred(spans),
            buckets=buckets,
        )

    def after_step(self, wr: tuple[DDP, DdpRecord] | None) -> None:
        """Start bucket timing once DDP reports its rebuilt layout; memory now and then."""
        if wr is None:
            if self.fsdp_module() is not None:
                self.send_memory("fsdp")
            elif self.step_no == 1:
                self.log_once("no_ddp", "info", "no DistributedDataParallel or FSDP2 module yet: "
                              "timing optimizer steps only")
            return
        ddp, rec = wr
        self.poll_source(wr)
        if self.source.expected and not self.layout_sent:
            self.send_layout(ddp)
        bt = rec.timer
        if (bt is not None and self.instrument == "full" and rec.registered and not bt.recording
                and self.source.hook_times() and rec.user_hook is None):
            if rec.layout is not None:
                bt.recording = True  # the hook is the source again (the plugin stopped)
            elif self.step_no >= REBUILD_MIN_STEPS:
                rec.layout = rebuilt_bucket_sizes(ddp)
                if rec.layout is not None:
                    self.layout = rec.layout
                    bt.recording = True
                    self.client.log(
                        "info",
                        f"buckets rebuilt: {len(rec.layout)} buckets, {sum(rec.layout)} bytes "
                        f"({', '.join(str(b) for b in rec.layout)}); timing buckets from step "
                        f"{self.step_no + 1}",
                    )
                elif self.step_no >= REBUILD_GIVE_UP_STEPS:
                    bt.recording = True
                    self.client.log("warn", "DDP reported no rebuilt bucket layout; timing the "
                                    "buckets as they are")
        self.send_memory("ddp")

    def send_memory(self, strategy: str) -> None:
        if self.clock.cuda and self.step_no % MEMORY_EVERY == 1:
            dev = getattr(self.clock, "device", None)
            self.client.send(
                "memory",
                allocated_bytes=int(torch.cuda.memory_allocated(dev)),
                reserved_bytes=int(torch.cuda.memory_reserved(dev)),
                peak_bytes=int(torch.cuda.max_memory_allocated(dev)),
                strategy=strategy,
            )

    def send_layout(self, ddp: DDP) -> None:
        """The plugin's buckets are matched against DDP's layout (bucket index order, which is
        DDP's all-reduce order): sent once DDP reports it rebuilt, or as it is after a while."""
        if self.step_no < REBUILD_MIN_STEPS:
            return
        layout = rebuilt_bucket_sizes(ddp)
        if layout is None and self.step_no < REBUILD_GIVE_UP_STEPS:
            return
        self.layout_sent = True
        if not layout:
            self.client.log("warn", "DDP reported no bucket layout: the Timeline cannot match "
                            "NCCL's all-reduces to buckets")
            return
        self.layout = layout
        self.send_source(layout)

    def maybe_fault(self) -> None:
        f = self.fault
        if f is not None and f.due(self.step_no, self.rank, self.world_size):
            self.fault = None
            f.fire(self.client)
        if self.slow is not None:
            # After the optimizer step: the sleep lands in the next step's data wait, as in
            # ddptop's own workers, and the other ranks wait for it at the collectives.
            self.slow.wait(self.step_no + 1)

    # ------------------------------------------------------------------ epochs and the end

    def on_set_epoch(self, epoch: int) -> None:
        self.epochs_seen.add(int(epoch))
        if epoch == self.epoch:
            return
        self.flush(force=True)
        self.close_epoch(epoch)
        self.epoch = epoch
        self.restart_step()

    def close_epoch(self, next_epoch: int | None) -> None:
        span_ms = None
        if self.span_start is not None and self.span_end is not None:
            Clock.wait(self.span_end)
            span_ms = Clock.ms(self.span_start, self.span_end)
            span_ms -= sum(Clock.ms(a, b) for a, b in self.span_cuts)  # steps that compiled
        self.span_start = self.span_end = None
        self.span_cuts = []
        self.unreported_samples = 0  # an epoch's leftover is in its epoch message
        self.cadence.new_epoch(step_open=True)  # the open step is the next epoch's
        done = self.account.close_epoch(next_epoch, span_ms)
        if done is None:
            return
        t, warmup = done
        if t.steps == 0:
            return
        if not t.samples_known:
            self.log_once("epoch_no_samples", "info", "batch size unknown: no per-epoch samples/s")
            return
        self.client.send(
            "epoch",
            epoch=t.epoch,
            warmup=warmup,
            samples=t.samples,
            seconds=t.seconds,
            samples_per_s=t.samples_per_s,
            data_wait_ms=t.data_wait_ms,
        )

    def at_exit(self) -> None:
        if self.finished or os.getpid() != self.pid or not self.client.enabled:
            return
        self.finished = True
        exc = getattr(sys, "last_value", None)  # set when the script died of an exception
        if exc is not None:
            self.client.log("error", error_line(exc))
        if self.hooks_on:
            self.guard(self.flush, True)
        if self.hooks_on and exc is None:
            self.guard(self.close_epoch, None)
            self.guard(self.send_result)
        self.client.close("error" if exc is not None else "done")
        if self.fault is not None:
            self.fault.block_teardown(self.client)  # DDPTOP_INJECT=teardown:0: never exit
        self.release_torch()

    def release_torch(self) -> None:
        """Drop ddptop's references to the script's DDP modules, timers and process groups, then
        collect: what the script left behind (reference cycles included) is destroyed now, while
        the interpreter is whole, instead of during its finalization. There, destroying a process
        group whose C++ worker threads still run aborted a rank after its last step ("terminate
        called without an active exception", docs/reliability.md, issue 51): ddptop's bucket
        timer held the group from a module global, so the group outlived the script's `main`."""
        try:
            self.stop_hooks()
            for rec in list(self.records.values()):
                rec.timer = None
                if rec.hook_state is not None:
                    rec.hook_state.timer = None  # the reducer keeps the state, not the group
            self.records = weakref.WeakKeyDictionary()
            self.watched = None
            self.fsdp = None
            self.primary_opt = None
            gc.collect()
        except Exception:  # noqa: BLE001 - at exit: nothing may turn into the script's failure
            pass

    def send_result(self) -> None:
        params, grad_bytes = self.model_size
        layout = self.layout
        wr = self.watched_record()
        if not layout and wr is not None:
            layout = rebuilt_bucket_sizes(wr[0]) or []
        fields: dict[str, Any] = {
            "experiment": "attach",
            "samples_per_s": self.account.mean_rate(),
            "timed_epochs": len(self.account.timed_rates),
            "params": params,
            "grad_bytes": grad_bytes,
            "bucket_bytes": layout,
        }
        if self.optimizer_name in protocol.OPTIMIZERS:
            fields["optimizer"] = self.optimizer_name
        fields.update(book.observed())  # what the script set; attach changes neither
        fields["process_group"] = self.pg_seen or process_group_initialized()
        fields["ddp_module"] = self.ddp_seen
        fields["ddp_args"] = sorted(self.ddp_args)
        if self.epochs_seen:
            fields["epochs_seen"] = len(self.epochs_seen)
        compiled = self.compile.result_fields()
        if compiled:
            fields.update(compiled)
            if self.rank == 0:
                self.client.log("info", self.compile.describe())
        self.client.send("result", **fields)


def cuda_sync_if_used() -> None:
    """The slow fault's wait starts when the GPU is done: on CUDA the host runs ahead, and a
    sleep would hide in the launch queue. A CPU script never touches CUDA here."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        attach_sync.original_synchronize()  # not the script's host sync: not counted


def process_group_initialized() -> bool:
    """The default process group exists (a script may destroy it before exit: asked per step)."""
    dist = torch.distributed
    return bool(dist.is_available() and dist.is_initialized())


def error_line(exc: BaseException) -> str:
    """`Type: message` as the traceback's last line shows it (first line of a multi-line one)."""
    text = traceback.format_exception_only(type(exc), exc)[-1].strip()
    return text.splitlines()[0] if text else type(exc).__name__


_SESSION: Session | None = None


def current() -> Session | None:
    return _SESSION


def _begin(mode: str) -> Session | None:
    """Start this process's session once; None (and one stderr line) if ddptop is unreachable."""
    global _SESSION
    if _SESSION is not None:
        return _SESSION
    s = Session(mode)
    _SESSION = s
    try:
        s.start()
    except Exception as e:  # noqa: BLE001 - the script runs bare
        _SESSION = None
        hooks.set_session(None)
        rank = os.environ.get("RANK", "?")
        try:  # one write call: ranks share the stream
            sys.stderr.write(f"ddptop attach (rank {rank}): not measured: {e}\n")
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        return None
    return s


def _on_fully_shard(module: Any) -> None:
    """The script's fully_shard(module) returned (attach_fsdp's wrap)."""
    s = hooks.session()
    if s is not None:
        s.guard(s.watch_fsdp, module)


def _fsdp_patch_failed(why: str) -> None:
    s = hooks.session()
    if s is not None:
        s.log_once("fsdp_patch", "warn", f"FSDP2 modules not measured: cannot wrap fully_shard "
                   f"({why}); steps are still counted")


def start_zero_code() -> None:
    """Called by ddptop_bootstrap once torch is imported in a torchrun rank under ddptop."""
    if os.environ.get("DDPTOP_SOCKET"):
        _begin("zero_code")


def watch_ddp(ddp: DDP) -> None:
    """Explicit mode: measure `ddp` (connects first when the bootstrap has not)."""
    if not os.environ.get("DDPTOP_SOCKET") and _SESSION is None:
        return
    s = _begin("explicit")
    if s is not None and s.hooks_on:
        s.explicit_steps = True  # steps are the script's ddptop_worker.step() calls from now on
        s.guard(s.watch_ddp, ddp)


def explicit_step(samples: Any) -> None:
    s = _SESSION
    if s is not None and s.hooks_on:
        s.guard(s.explicit_step, None if samples is None else int(samples))
        s.maybe_fault()
