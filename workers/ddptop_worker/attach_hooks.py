"""The torch side of attach mode: the public global hooks and the few class-level wraps.

What is patched (docs/attach.md), once per process, all pass-through when no session is active:
- `torch.optim.optimizer.register_optimizer_step_pre_hook` / `..._post_hook` (public, global):
  a step is one optimizer step.
- `DistributedDataParallel.__init__` (wrapped): every DDP built gets per-instance forward hooks
  (batch size from the first input's leading dimension, forward marks) and, at its first forward,
  ddptop's timing comm hook (DDP's default all-reduce plus ready/done marks).
- `DistributedDataParallel.register_comm_hook` / `_register_builtin_comm_hook` (wrapped): a
  script's own comm hook wins; ddptop then times steps only.
- `DistributedSampler.set_epoch` (wrapped): epoch boundaries.
- `torch.distributed.destroy_process_group` (wrapped): never while the heartbeat thread reads
  the flight recorder (`inflight.guard_destroy`).
- `torch.compile` (wrapped): its first call registers the compile-time callbacks
  (attach_compile); the script's arguments and result are untouched.

Under torch.compile every hook runs eagerly: at the script's first `torch.compile` call the
hooks already registered are swapped for `torch.compiler.disable`d ones (`run_eagerly`), and
later ones are registered that way. Traced, their host clocks became guards that failed at
every step: dynamo recompiled until its recompile limit and ran the rest uneagerly slow.

Per-instance forward hooks rather than `register_module_forward_pre_hook`: a global module hook
takes every submodule call of the model off torch's hook-free fast path, and only the DDP
module's calls matter here.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Protocol

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data.distributed import DistributedSampler

from . import inflight, rendezvous
from .client import Client
from .timing import timed_allreduce_hook


class Session(Protocol):
    """What the hooks call on the attached run's session (`attach.Session` is one). Spelled out
    here so that this module does not import `attach`, which imports it (issue 49: no circles)."""

    hooks_on: bool
    client: Client

    def guard(self, fn: Callable[..., Any], *args: Any) -> Any: ...
    def maybe_fault(self) -> None: ...
    def record(self, ddp: DDP) -> Any: ...
    def before_ddp(self, ddp: DDP) -> None: ...
    def apply_ddp_knobs(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None: ...
    def ddp_init_done(self) -> None: ...
    def watch_ddp(self, ddp: DDP) -> None: ...
    def own_comm_hook(self, ddp: DDP, name: str) -> None: ...
    def on_forward_pre(self, module: DDP, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None: ...
    def on_forward_post(self, module: DDP) -> None: ...
    def on_opt_pre(self, opt: torch.optim.Optimizer) -> None: ...
    def on_opt_post(self, opt: torch.optim.Optimizer) -> None: ...
    def on_set_epoch(self, epoch: int) -> None: ...
    def on_compile_call(self) -> None: ...


_session: Session | None = None
_patched = False
_ORIG: dict[str, Callable[..., Any]] = {}


class HookState:
    """State of ddptop's comm hook on one DDP. `user` is set when the script registers its own
    hook after ddptop's (DDP allows one per module): from then on that hook runs instead."""

    def __init__(self, timer: Any) -> None:
        self.timer = timer
        self.user: tuple[object, Callable[..., Any]] | None = None


# No annotations: DDP's _check_comm_hook compares them with the real GradBucket / Future objects.
def dispatch_hook(state, bucket):  # type: ignore[no-untyped-def]
    user = state.user
    if user is not None:
        return user[1](user[0], bucket)
    if state.timer is None:  # released at exit (Session.release_torch): DDP's own all-reduce
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        return allreduce_hook(None, bucket)
    return timed_allreduce_hook(state.timer, bucket)


def set_session(s: Session | None) -> None:
    global _session
    _session = s


def session() -> Session | None:
    s = _session
    return s if s is not None and s.hooks_on else None


def install(s: Session) -> list[Any]:
    """Patch the classes (once per process) and register the global optimizer hooks; returns the
    removable handles."""
    global _patched
    set_session(s)
    if not _patched:
        _patch_classes()
        _patched = True
    from torch.optim.optimizer import (
        register_optimizer_step_post_hook,
        register_optimizer_step_pre_hook,
    )

    return [
        register_optimizer_step_pre_hook(hook(_opt_pre)),
        register_optimizer_step_post_hook(hook(_opt_post)),
    ]


_EAGER: dict[Callable[..., Any], Callable[..., Any]] = {}


def hook(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn`, or its dynamo-disabled twin once the script compiles (`run_eagerly`)."""
    return _EAGER.get(fn, fn)


def run_eagerly(modules: list[torch.nn.Module]) -> None:
    """The script calls torch.compile: ddptop's hooks must never be traced by dynamo. Swap the
    forward hooks on `modules` and the global optimizer hooks for `torch.compiler.disable`d
    twins (dynamo then calls them between graphs, with itself off inside)."""
    if not _EAGER:
        for fn in (forward_pre, forward_post, _opt_pre, _opt_post):
            _EAGER[fn] = torch.compiler.disable(fn, reason="ddptop attach: a measuring hook")
    from torch.optim import optimizer as optim_mod

    dicts: list[Any] = [
        getattr(optim_mod, "_global_optimizer_pre_hooks", {}),
        getattr(optim_mod, "_global_optimizer_post_hooks", {}),
    ]
    for m in modules:
        dicts += [m._forward_pre_hooks, m._forward_hooks]
    for d in dicts:
        for key, fn in list(d.items()):
            if fn in _EAGER:
                d[key] = _EAGER[fn]


def register_ddp_hook(ddp: DDP, state: HookState) -> None:
    """Register ddptop's comm hook with DDP's own (unwrapped) method."""
    _ORIG["register_comm_hook"](ddp, state, dispatch_hook)


def existing_comm_hook(ddp: DDP) -> str | None:
    """Name of a comm hook already on `ddp` (explicit mode: watch() after the script set one)."""
    hooks = getattr(ddp, "_comm_hooks", None) or []
    for hook, _state in hooks:
        if hook is not dispatch_hook:
            return str(getattr(hook, "__qualname__", repr(hook)))
    return None


# ---------------------------------------------------------------------------------- the hooks


def _opt_pre(opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
    s = session()
    if s is not None:
        s.guard(s.on_opt_pre, opt)


def _opt_post(opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
    s = session()
    if s is not None:
        s.guard(s.on_opt_post, opt)
        s.maybe_fault()  # outside the guard: an injected fault must reach the script


def forward_pre(module: DDP, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    s = session()
    if s is not None:
        s.guard(s.on_forward_pre, module, args, kwargs)


def forward_post(module: DDP, args: tuple[Any, ...], output: Any) -> None:
    s = session()
    if s is not None:
        s.guard(s.on_forward_post, module)


def leading_dim(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int | None:
    """The first input tensor's leading dimension (the batch size), looking one level into
    lists, tuples and dicts; None when no input is a tensor with a dimension."""
    for value in list(args) + list(kwargs.values()):
        items = (
            value.values()
            if isinstance(value, dict)
            else value
            if isinstance(value, (list, tuple))
            else [value]
        )
        for v in items:
            if isinstance(v, torch.Tensor) and v.dim() >= 1:
                return int(v.shape[0])
    return None


# ---------------------------------------------------------------------------------- class wraps


def _client() -> Any:
    s = session()
    return s.client if s is not None else None


def _patch_classes() -> None:
    _ORIG["init"] = DDP.__init__
    _ORIG["register_comm_hook"] = DDP.register_comm_hook
    _ORIG["register_builtin"] = DDP._register_builtin_comm_hook
    _ORIG["set_epoch"] = DistributedSampler.set_epoch

    orig_init = DDP.__init__

    @functools.wraps(orig_init)
    def __init__(self: DDP, *args: Any, **kwargs: Any) -> None:
        s = session()
        if s is None:
            orig_init(self, *args, **kwargs)
            return
        s.guard(s.before_ddp, self)
        s.guard(s.apply_ddp_knobs, args, kwargs)  # `ddptop tune` / presets: DDP's arguments
        try:
            orig_init(self, *args, **kwargs)
        finally:
            s.guard(s.ddp_init_done)
        s.guard(s.watch_ddp, self)

    orig_register = DDP.register_comm_hook

    @functools.wraps(orig_register)
    def register_comm_hook(self: DDP, state: object, hook: Callable[..., Any]) -> None:
        s = session()
        rec = s.record(self) if s is not None else None
        if s is None or rec is None or hook is dispatch_hook:
            orig_register(self, state, hook)
            return
        name = str(getattr(hook, "__qualname__", repr(hook)))
        if rec.hook_state is not None and rec.registered:
            # ddptop's hook is already in the reducer (DDP takes one): run the script's through it.
            self._check_comm_hook(hook)  # type: ignore[no-untyped-call]
            rec.hook_state.user = (state, hook)
            s.guard(s.own_comm_hook, self, name)
            return
        s.guard(s.own_comm_hook, self, name)
        orig_register(self, state, hook)

    orig_builtin = DDP._register_builtin_comm_hook

    @functools.wraps(orig_builtin)
    def _register_builtin_comm_hook(self: DDP, comm_hook_type: Any) -> None:
        s = session()
        if s is not None and s.record(self) is not None:
            s.guard(s.own_comm_hook, self, f"builtin {comm_hook_type}")
        orig_builtin(self, comm_hook_type)  # type: ignore[no-untyped-call]

    orig_set_epoch = DistributedSampler.set_epoch

    @functools.wraps(orig_set_epoch)
    def set_epoch(self: DistributedSampler[Any], epoch: int) -> None:
        orig_set_epoch(self, epoch)
        s = session()
        if s is not None:
            s.guard(s.on_set_epoch, int(epoch))

    orig_compile = torch.compile

    @functools.wraps(orig_compile)
    def compile_(*args: Any, **kwargs: Any) -> Any:
        s = session()
        if s is not None:
            s.guard(s.on_compile_call)
        return orig_compile(*args, **kwargs)

    _ORIG["compile"] = orig_compile
    torch.compile = compile_  # type: ignore[assignment]

    # The heartbeat reads the flight recorder from its own thread; the script's destroy must
    # not run in the middle of that read (inflight.guard_destroy).
    if not getattr(dist.destroy_process_group, "__ddptop_guarded__", False):
        _ORIG["destroy"] = dist.destroy_process_group
        dist.destroy_process_group = inflight.guard_destroy(dist.destroy_process_group)
    # Entering and leaving the script's init_process_group, said to ddptop: a rank that never
    # enters while its peers wait is named (rendezvous.py).
    if not getattr(dist.init_process_group, "__ddptop_wrapped__", False):
        _ORIG["init_process_group"] = dist.init_process_group
        dist.init_process_group = rendezvous.wrap_init(dist.init_process_group, _client)
    DDP.__init__ = __init__  # type: ignore[method-assign]
    DDP.register_comm_hook = register_comm_hook  # type: ignore[method-assign]
    DDP._register_builtin_comm_hook = _register_builtin_comm_hook  # type: ignore[method-assign]
    DistributedSampler.set_epoch = set_epoch  # type: ignore[method-assign]


def enable_kernel_timing(ddp: DDP) -> bool:
    """On NCCL, ask the process group to time its collectives (a start event before each kernel,
    `Work._get_duration()`), as ddptop's workers do: bucket starts are then measured, not
    inferred. The script's own collectives are timed too, which costs an event pair each."""
    if backend_of(ddp) != "nccl":
        return False
    try:
        ddp.process_group._enable_collectives_timing()  # type: ignore[attr-defined]
    except (AttributeError, RuntimeError):
        return False
    return True


def backend_of(ddp: DDP) -> str | None:
    try:
        return str(dist.get_backend(ddp.process_group))
    except Exception:  # noqa: BLE001 - informational only
        return None
